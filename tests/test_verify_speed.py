"""The verifier's fast paths (issue 27) against the slow definitions they replace.

:class:`~taso.verifier.numeric.SideMemo` answers the pre-check's shape questions without IR
graphs and builds each side's graph once per shape assignment; the prover keeps its set-up
(solver parameters, rendered axioms, ground facts) between rules. Each must give exactly
what the definition gives: the same shapes accepted, the same graphs, the same
counterexamples, the same solver assertions. Nothing here is timed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from taso.verifier import numeric
from taso.verifier.examples import EXAMPLES
from taso.verifier.numeric import DIM_CHOICES, SideMemo, _fits, _perturbed_shapes, _renamed_shapes, close, counterexample
from test_verifier import mutants

from taso.errors import TasoError
from taso.rules import Library, Rule

# ---- the slow definitions, as the pre-check was before issue 27 ----------------------------------------------


def _run_slow(graph, feeds):
    env = dict(feeds)
    for node in graph.topological_order():
        env.update(zip(node.outputs, node.op.evaluate([env[v] for v in node.inputs], node.params)))
    return env


def _close_slow(a, b, rtol):
    if a.shape != b.shape:
        return False
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    same_special = (a == b) | (np.isnan(a) & np.isnan(b))
    finite_b = b[np.isfinite(b)]
    scale = max(float(np.max(np.abs(finite_b))) if finite_b.size else 0.0, 1.0)
    with np.errstate(invalid="ignore"):
        near = np.abs(a - b) <= rtol * scale + rtol * np.abs(np.nan_to_num(b, posinf=0.0, neginf=0.0))
    return bool(np.all(same_special | near))


def _renamed_shapes_slow(rule, rng):
    sizes = sorted({d for i in rule.inputs for d in i.type.shape if d != 1})
    new = {d: int(rng.choice(DIM_CHOICES[1:])) if rng.random() < 0.6 else d for d in sizes}
    new[1] = 1
    return {i.name: tuple(new[d] for d in i.type.shape) for i in rule.inputs}


def _perturbed_shapes_slow(rule, rng):
    return {i.name: tuple(int(rng.choice(DIM_CHOICES)) if rng.random() < 0.3 else d for d in i.type.shape) for i in rule.inputs}


def _random_shapes_slow(rule, rng, count, tries=60, independent=True):
    found = []
    for attempt in range(tries):
        shapes = (_perturbed_shapes_slow if independent and attempt % 2 else _renamed_shapes_slow)(rule, rng)
        if shapes not in found and _fits(rule, shapes):
            found.append(shapes)
            if len(found) == count:
                break
    return found


def _counterexample_slow(rule, trials=2, seed=0, rtol=1e-3, shapes=4, independent=False):
    rng = np.random.default_rng(seed)
    for at in [None, *_random_shapes_slow(rule, rng, shapes, independent=independent)]:
        source, target = rule.side_graph("source", at), rule.side_graph("target", at)
        for trial in range(trials):
            feeds = numeric._feeds(rule, np.random.default_rng(seed + trial), at)
            with np.errstate(all="ignore"):
                got, want = _run_slow(source, feeds), _run_slow(target, feeds)
            for s, t in rule.outputs:
                a, b = np.asarray(got[s], np.float64), np.asarray(want[t], np.float64)
                if not _close_slow(a, b, rtol):
                    diff = float(np.nanmax(np.abs(a - b))) if a.shape == b.shape and a.size else float("inf")
                    return {"seed": seed + trial, "shapes": {k: list(v) for k, v in (at or {}).items()}, "source": s, "target": t, "max_abs_diff": diff}
    return None


# ---- the rules ----------------------------------------------------------------------------------------------


@functools.cache
def _library_sample() -> tuple[Rule, ...]:
    rules = Library.load(Path(__file__).resolve().parents[1] / "taso" / "data" / "library.jsonl.gz").rules
    return tuple(rules[:: max(1, len(rules) // 120)])


def _well_typed(rule: Rule) -> bool:
    try:
        rule.validate()
    except TasoError:
        return False
    return True


@functools.cache
def _mutant_sample() -> tuple[Rule, ...]:
    """Wrong rules (most refuted by the pre-check), ill-typed ones among them."""
    out = []
    for rule in [*EXAMPLES, *_library_sample()[::4]]:
        out.extend(m for _, m in list(mutants(rule))[::3])
    return tuple(out)


def _graph_view(graph) -> tuple:
    return (dict(graph.inputs), [(n.op.name, n.params, n.inputs, n.outputs, n.name) for n in graph.nodes],
            list(graph.types.items()), graph.outputs, graph.meta)


def _drawn(rule: Rule, seed: int, count: int = 40) -> list[Mapping[str, tuple[int, ...]]]:
    rng = np.random.default_rng(seed)
    return [(_perturbed_shapes if k % 2 else _renamed_shapes)(rule, rng) for k in range(count)]


# ---- the tests -----------------------------------------------------------------------------------------------


def test_the_samples_hold_what_the_tests_need():
    library, wrong = _library_sample(), _mutant_sample()
    assert len(library) >= 100 and sum(bool(r.constraints) for r in library) >= 50 and sum(bool(r.params) for r in library) >= 10
    assert sum(not _well_typed(m) for m in wrong) >= 10
    assert sum(_counterexample_slow(m, trials=3) is not None for m in wrong if _well_typed(m)) >= 50


@pytest.mark.parametrize("which", ["library", "mutants"])
def test_memo_fits_and_graphs_equal_side_graph_at_every_drawn_shape(which):
    rules, draws = (_library_sample(), 40) if which == "library" else (_mutant_sample()[::2], 16)
    accepted = rejected = 0
    for rule in rules:
        memo = SideMemo(rule)
        for shapes in _drawn(rule, seed=len(rule.source) * 7 + len(rule.target), count=draws):
            fits = memo.fits(rule, shapes)
            assert fits == _fits(rule, shapes), (rule.id, shapes)
            accepted += fits
            rejected += not fits
            for side in ("source", "target"):
                try:
                    slow = rule.side_graph(side, shapes)
                except TasoError as e:
                    with pytest.raises(type(e)):
                        memo.graph(side, shapes)
                    continue
                assert _graph_view(memo.graph(side, shapes)) == _graph_view(slow), (rule.id, side, shapes)
    assert accepted >= 50 and rejected >= 50


def test_memo_serves_the_rule_after_a_proof_adds_constraints_and_checks_them():
    checked = 0
    for rule in _library_sample():
        if not rule.constraints:
            continue
        memo = SideMemo(rule)
        stricter = dataclasses.replace(rule, constraints=rule.constraints + ({"eq": [{"dim": [rule.inputs[0].name, 0]}, 2]},))
        assert memo.serves(stricter)
        for shapes in _drawn(rule, seed=3, count=20):
            assert memo.fits(stricter, shapes) == _fits(stricter, shapes)
            assert memo.fits(rule, shapes) == _fits(rule, shapes)
            checked += 1
    assert checked >= 500
    other = dataclasses.replace(EXAMPLES[0], source=EXAMPLES[1].source)
    assert not SideMemo(EXAMPLES[0]).serves(other)


@pytest.mark.parametrize("which", ["library", "mutants"])
def test_counterexample_with_the_memo_equals_the_slow_definition(which):
    rules = _library_sample() if which == "library" else _mutant_sample()[::2]
    found = 0
    for rule in rules:
        memo = SideMemo(rule)
        for kwargs in ({"trials": 3}, {"trials": 2, "seed": 11, "shapes": 6, "independent": True}):
            try:
                want = _counterexample_slow(rule, **kwargs)
            except TasoError as e:
                with pytest.raises(type(e)):
                    counterexample(rule, memo=memo, **kwargs)
                continue
            got = counterexample(rule, memo=memo, **kwargs)
            assert got == want, (rule.id, kwargs)
            assert counterexample(rule, **kwargs) == want
            found += got is not None
    if which == "mutants":
        assert found >= 50


def test_shape_draws_are_the_slow_definitions_draws_from_the_same_stream():
    for rule in [*EXAMPLES, *_library_sample()[::3]]:
        for seed in range(12):
            fast, slow = np.random.default_rng(seed), np.random.default_rng(seed)
            for k in range(8):
                if k % 2:
                    got, want = _perturbed_shapes(rule, fast), _perturbed_shapes_slow(rule, slow)
                else:
                    got, want = _renamed_shapes(rule, fast), _renamed_shapes_slow(rule, slow)
                assert got == want and all(type(d) is int for v in got.values() for d in v), (rule.id, seed, k)
            assert fast.random() == slow.random()  # the same draws consumed


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_close_equals_the_slow_definition_on_special_and_ordinary_values():
    rng = np.random.default_rng(5)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308, -1e308, 1e-320, 1.0])
    cases = 0
    for trial in range(3000):
        shape = tuple(rng.integers(0, 4, size=int(rng.integers(0, 3))))
        b = rng.standard_normal(shape) * 10.0 ** int(rng.integers(-3, 4))
        kind = trial % 5
        if kind == 0:
            a = b.copy()
        elif kind == 1:
            a = b + rng.standard_normal(shape) * 10.0 ** int(rng.integers(-8, 1))
        elif kind == 2:
            a = b * (1 + rng.choice([0.0, 1e-4, 1e-3, 2e-3], size=shape))
        else:
            a = b + rng.standard_normal(shape)
            if a.size:
                for array in (a, b) if kind == 4 else (a,):
                    array.flat[int(rng.integers(0, array.size))] = rng.choice(specials)
        for x, y in ((a, b), (b, a), (a.astype(np.float32), b)):
            for rtol in (1e-3, 0.0, 1e-6, -1e-3):
                assert close(x, y, rtol) == _close_slow(x, y, rtol), (x, y, rtol)
                cases += 1
    assert close(np.zeros(3), np.zeros(4), 1e-3) is False
    assert cases >= 30000


# ---- the prover's set-up -----------------------------------------------------------------------------------


def _solver_slow(encoding, axioms, explain):
    """``prove._solver`` before issue 27: every formula through ``solver.add``."""
    import z3
    from taso.specs.z3model import axiom_symbols, closure_laws, render_axiom
    from taso.verifier.prove import _SOLVER_PARAMS, _goal_literal

    solver = z3.Solver()
    for key, value in _SOLVER_PARAMS.items():
        solver.set(key, value)
    for axiom in axioms:
        if explain:
            solver.assert_and_track(render_axiom(axiom), z3.Bool(f"axiom {axiom.name}"))
        else:
            solver.add(render_axiom(axiom))
    for index, (name, instance) in enumerate(encoding.definitions):
        if explain:
            solver.assert_and_track(instance, z3.Bool(f"axiom {name}#{index}"))
        else:
            solver.add(instance)
    for _, fact in encoding.facts:
        solver.add(fact)
    solver.add(*encoding.shape_laws)
    for index, (_, _, goal) in enumerate(encoding.goals):
        solver.add(z3.Implies(_goal_literal(index), z3.Not(goal)))
    symbols = set(encoding.symbols).union(*(axiom_symbols(a) for a in axioms))
    solver.add(*closure_laws(frozenset(symbols)))
    return solver


def _encodable(rules):
    from taso.specs import Unsupported
    from taso.verifier.encode import encode_rule

    for rule in rules:
        if not _well_typed(rule):
            continue
        try:
            yield rule, encode_rule(rule)
        except Unsupported:
            continue


def _ids(formulas) -> list[int]:
    return [f.get_id() for f in formulas]


def test_the_solver_gets_the_slow_definitions_assertions_in_its_order():
    from taso.verifier import prove
    from taso.verifier.verify import Settings, _attempts

    compared = 0
    for rule, encoding in _encodable([*EXAMPLES, *_library_sample()[::2], *_mutant_sample()[::5]]):
        axioms = _attempts(encoding.symbols, Settings())[0][0]
        for explain in (False, True):
            fast, slow = prove._solver(encoding, axioms, explain), _solver_slow(encoding, axioms, explain)
            assert _ids(fast.assertions()) == _ids(slow.assertions()), rule.id
            compared += 1
    assert compared >= 100


def test_the_prover_adds_assumptions_as_before():
    import z3
    from taso.verifier import prove
    from taso.verifier.verify import Settings, _attempts

    checked = 0
    for rule, encoding in _encodable(_library_sample()[::3]):
        if not encoding.assumptions:
            continue
        solver = z3.Solver()
        add = prove._adder(solver)
        for index, (_, formula) in enumerate(encoding.assumptions):
            add(z3.Implies(z3.Bool(f"assume {index}"), formula))
        slow = z3.Solver()
        for index, (_, formula) in enumerate(encoding.assumptions):
            slow.add(z3.Implies(z3.Bool(f"assume {index}"), formula))
        assert _ids(solver.assertions()) == _ids(slow.assertions())
        checked += 1
        outcome = prove.prove(encoding, _attempts(encoding.symbols, Settings())[0][0], 10.0, assume=True)
        assert outcome.proved, (rule.id, outcome.reason)
    assert checked >= 10
    other = z3.Solver()
    prove._adder(other)(True)  # not a Z3 formula: through solver.add, as before
    assert _ids(other.assertions()) == _ids([z3.BoolVal(True)])


def test_encodings_from_the_memos_equal_fresh_ones():
    from taso.verifier import encode

    rules = [rule for rule, _ in _encodable([*EXAMPLES, *_library_sample()])]
    warm = [encode.encode_rule(rule) for rule in rules]
    encode._LAWS.clear()
    encode._INPUT_FACTS.clear()
    for rule, known in zip(rules, warm):
        for fresh in (encode.encode_rule(rule, {side: rule.side_graph(side) for side in ("source", "target")}), encode.encode_rule(rule)):
            assert [label for label, _ in fresh.facts] == [label for label, _ in known.facts]
            assert _ids(f for _, f in fresh.facts) == _ids(f for _, f in known.facts), rule.id
            assert _ids(fresh.shape_laws) == _ids(known.shape_laws), rule.id
            assert [(n, f.get_id()) for n, f in fresh.definitions] == [(n, f.get_id()) for n, f in known.definitions]
            assert [(s, t, g.get_id()) for s, t, g in fresh.goals] == [(s, t, g.get_id()) for s, t, g in known.goals]
            assert fresh.symbols == known.symbols
        encode._LAWS.clear()
        encode._INPUT_FACTS.clear()
    assert len(rules) >= 100


# ---- one solver per axiom set, and the shape search after Z3 (second round) -----------------------------------


def test_rules_share_a_solver_per_axiom_set_and_leave_it_as_they_found_it():
    from taso.verifier import prove
    from taso.verifier.verify import Settings, _attempts

    pairs = list(_encodable(EXAMPLES))[:6]
    for rule, encoding in pairs:
        axioms = _attempts(encoding.symbols, Settings())[0][0]
        solver = prove._shared_solver(axioms, False)
        before = _ids(solver.assertions())
        outcome = prove.prove(encoding, axioms, 10.0)
        assert outcome.proved, (rule.id, outcome.reason)
        assert prove._shared_solver(axioms, False) is solver, "the same axioms get the same solver"
        assert solver.num_scopes() == 0 and _ids(solver.assertions()) == before, "the rule's scope is popped"


def test_a_rule_the_shared_solver_does_not_prove_is_tried_again_from_a_fresh_solver(monkeypatch):
    from taso.verifier import prove
    from taso.verifier.verify import Settings, _attempts

    rule, encoding = next(_encodable(EXAMPLES))
    axioms = _attempts(encoding.symbols, Settings())[0][0]
    shared = prove._shared_solver(axioms, False)
    attempts = []
    real = prove._attempt

    def first_fails(solver, *args):
        attempts.append(solver is shared)
        return prove.Outcome(False, "output s = t not proved: (incomplete quantifiers)", 0.0) if len(attempts) == 1 else real(solver, *args)

    monkeypatch.setattr(prove, "_attempt", first_fails)
    assert prove.prove(encoding, axioms, 10.0).proved
    assert attempts == [True, False], "the shared solver first, then a fresh one"
    attempts.clear()
    monkeypatch.setattr(prove, "_attempt", lambda solver, *args: attempts.append(solver) or prove.Outcome(False, "output s = t not proved: timeout", 0.0))
    assert not prove.prove(encoding, axioms, 10.0).proved and len(attempts) == 1, "no second attempt once the time is up"


def test_a_wrong_rule_is_refuted_with_the_counterexample_the_full_precheck_finds():
    from taso.verifier.verify import Settings, verify_rule

    refuted = 0
    for mutant in _mutant_sample():
        verified = verify_rule(mutant, Settings(timeout_s=2.0))
        if verified.status == "refuted" and "counterexample" in verified.proof:
            found = verified.proof["counterexample"]
            at_examples = counterexample(mutant, trials=1, shapes=0)
            assert found == (at_examples or counterexample(mutant, trials=3)), mutant.id
            refuted += 1
    assert refuted >= 20


def test_random_shapes_for_no_shapes_draws_none():
    rule = EXAMPLES[0]
    assert numeric.random_shapes(rule, np.random.default_rng(0), 0) == []
