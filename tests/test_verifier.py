"""The verifier: hand-written rules are proved, wrong ones never are, and the CLI reports clearly.

The soundness guard is the mutation test: every hand-written rule is mutated (operands of a
non-commutative op swapped, a parameter changed, an operator dropped or duplicated, output
mappings swapped); every mutant the NumPy semantics shows to be wrong must fail
verification *with the NumPy pre-check turned off*, so the Z3 prover itself is tested.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator

import pytest
from taso.verifier.examples import EXAMPLES, example
from taso.verifier.numeric import counterexample
from taso.verifier.verify import Settings, verify_rule, verify_rules

from taso.cli import main as taso_main
from taso.errors import TasoError
from taso.ir import TensorType
from taso.ops import COMMUTATIVE, get
from taso.rules import Library, Rule, RuleInput, RuleNode

PROVER_ONLY = Settings(timeout_s=5.0, precheck=False)


@pytest.mark.parametrize("rule", EXAMPLES, ids=lambda r: r.name)
def test_hand_written_rule_is_proved_by_z3_alone(rule):
    verified = verify_rule(rule, PROVER_ONLY)
    assert verified.status == "proved", verified.proof
    assert verified.proof["seconds"] < 5.0


def test_proof_records_the_axioms_it_used_when_asked():
    verified = verify_rule(example("merge-qkv-matmuls"), Settings(explain=True))
    assert verified.proof["axioms"] == ["matmul-concat-columns", "split-concat-0", "split-concat-1"]


def test_proof_that_needs_equal_kernel_counts_adds_that_constraint():
    candidate = example("conv-distributes-over-add")
    verified = verify_rule(candidate, PROVER_ONLY)
    assert verified.status == "proved"
    assert verified.proof["constraints_added"] == [{"eq": [{"dim": ["w1", 0]}, {"dim": ["w2", 0]}]}]
    assert verified.proof["candidate"] == candidate.id and verified.id != candidate.id
    assert not verified.constraints_hold({"x": (1, 4, 6, 6), "w1": (1, 4, 3, 3), "w2": (8, 4, 3, 3)})


def test_shape_expressions_stay_symbolic_so_the_proof_needs_no_added_constraint():
    verified = verify_rule(example("merge-qkv-matmuls"), PROVER_ONLY)
    assert verified.status == "proved" and "constraints_added" not in verified.proof


def test_numerically_wrong_rule_is_refuted_with_a_counterexample():
    rule = example("relu-of-concat")
    wrong = dataclasses.replace(rule, target=(rule.target[0], RuleNode("sigmoid", {}, ("t0",), ("t1",))))
    verified = verify_rule(wrong)
    assert verified.status == "refuted"
    assert verified.proof["counterexample"]["source"] == "s2"


def test_ill_typed_rule_is_refuted():
    rule = example("assoc-matmul")
    wrong = dataclasses.replace(rule, target=(RuleNode("matmul", {}, ("x", "z"), ("t0",)), RuleNode("matmul", {}, ("t0", "y"), ("t1",))))
    assert verify_rule(wrong).status == "refuted"


def test_rule_with_an_unspecified_op_is_unknown_with_the_reason():
    x = RuleInput("x", "act", TensorType((2, 3)))
    rule = Rule((x,), (RuleNode("exp", {}, ("x",), ("s0",)), RuleNode("log", {}, ("s0",), ("s1",))), (), (("s1", "x"),))
    verified = verify_rule(rule, PROVER_ONLY)
    assert verified.status == "unknown" and "unsupported" in verified.proof["reason"] and "exp" in verified.proof["reason"]


def test_timeout_gives_unknown_never_proved():
    verified = verify_rule(example("enlarge-and-merge-convs"), Settings(timeout_s=1e-6, precheck=False))
    assert verified.status == "unknown" and "timeout" in verified.proof["reason"]


def test_parallel_verification_returns_the_serial_statuses_in_order():
    rules = EXAMPLES[:6]
    serial = verify_rules(rules, PROVER_ONLY, jobs=1)
    parallel = verify_rules(rules, PROVER_ONLY, jobs=2)
    assert [(r.id, r.status) for r in parallel] == [(r.id, r.status) for r in serial]


# ---- the mutation test ------------------------------------------------------------------------------------


def _nudged(value):
    """A different value of the same kind for a parameter (None when there is none)."""
    if isinstance(value, str):
        return {"none": "relu", "relu": "sigmoid", "sigmoid": "tanh", "tanh": "none"}.get(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value + 1 if value < 1 else value - 1
    if isinstance(value, tuple) and value:
        return value[::-1] if len(set(value)) > 1 else (value[0] + 1,) + value[1:]
    return None


def _with_side(rule: Rule, side: str, nodes: list[RuleNode], params=None) -> Rule:
    return dataclasses.replace(rule, **{side: tuple(nodes)}, params=tuple(rule.params if params is None else params))


def _rename_uses(nodes: list[RuleNode], old: str, new: str) -> list[RuleNode]:
    return [dataclasses.replace(n, inputs=tuple(new if v == old else v for v in n.inputs)) for n in nodes]


def mutants(rule: Rule) -> Iterator[tuple[str, Rule]]:
    """Every single mutation of a rule, with a label."""
    for side in ("source", "target"):
        nodes = list(getattr(rule, side))
        for i, node in enumerate(nodes):
            where = f"{side}[{i}] {node.op}"
            # swap the operands of a non-commutative operator
            if len(node.inputs) >= 2 and node.op not in COMMUTATIVE and node.inputs[0] != node.inputs[1]:
                swapped = dataclasses.replace(node, inputs=(node.inputs[1], node.inputs[0], *node.inputs[2:]))
                yield f"swap operands of {where}", _with_side(rule, side, nodes[:i] + [swapped] + nodes[i + 1 :])
            # change one parameter (a literal, or the shape expression that sets it)
            full = dict(get(node.op).make_params(**node.params))
            for name, value in full.items():
                exprs = [p for p in rule.params if p["side"] == side and int(p["node"]) == i and p["param"] == name]
                if exprs:
                    value = exprs[0]["value"]
                    if isinstance(value, list) and len(value) > 1:
                        params = [p if p is not exprs[0] else {**p, "value": value[::-1]} for p in rule.params]
                        yield f"reverse {name} of {where}", _with_side(rule, side, nodes, params)
                    continue
                new = _nudged(value)
                if new is not None and name != "dtype":
                    changed = dataclasses.replace(node, params={**node.params, name: new})
                    yield f"{name}={new} in {where}", _with_side(rule, side, nodes[:i] + [changed] + nodes[i + 1 :])
            # drop the operator: its consumers read its first input instead
            if node.inputs and len(node.outputs) == 1:
                rest = _rename_uses(nodes[:i] + nodes[i + 1 :], node.outputs[0], node.inputs[0])
                params = [{**p, "node": p["node"] - (p["node"] > i)} for p in rule.params if not (p["side"] == side and p["node"] == i)]
                outputs = tuple((node.inputs[0] if side == "source" and s == node.outputs[0] else s,
                                 node.inputs[0] if side == "target" and t == node.outputs[0] else t) for s, t in rule.outputs)
                yield f"drop {where}", dataclasses.replace(_with_side(rule, side, rest, params), outputs=outputs)
            # duplicate the operator: apply it once more to its own output
            if len(node.outputs) == 1 and node.inputs:
                again = dataclasses.replace(node, inputs=(node.outputs[0], *node.inputs[1:]), outputs=(node.outputs[0] + "_again",))
                later = _rename_uses(nodes[i + 1 :], node.outputs[0], node.outputs[0] + "_again")
                outputs = tuple((s + "_again" if side == "source" and s == node.outputs[0] else s,
                                 t + "_again" if side == "target" and t == node.outputs[0] else t) for s, t in rule.outputs)
                yield f"duplicate {where}", dataclasses.replace(_with_side(rule, side, nodes[: i + 1] + [again] + later), outputs=outputs)
    # swap two output mappings
    if len(rule.outputs) >= 2:
        (s0, t0), (s1, t1), *rest = rule.outputs
        yield "swap output mappings", dataclasses.replace(rule, outputs=((s0, t1), (s1, t0), *rest))


def _well_typed(rule: Rule) -> bool:
    try:
        rule.validate()
    except TasoError:
        return False
    return True


def _mutation_run(rules) -> tuple[dict[str, int], list[str]]:
    """Verifies every mutant of ``rules`` with the prover alone; counts them, lists wrong ones proved."""
    counts = {"tried": 0, "ill_typed": 0, "equivalent": 0, "rejected": 0}
    proved_wrong = []
    for rule in rules:
        for label, mutant in mutants(rule):
            counts["tried"] += 1
            if not _well_typed(mutant):
                counts["ill_typed"] += 1
                assert verify_rule(mutant, PROVER_ONLY).status == "refuted"
                continue
            if counterexample(mutant, trials=3, seed=7) is None:
                counts["equivalent"] += 1  # the NumPy semantics cannot tell it from the original: it may be proved
                continue
            if verify_rule(mutant, Settings(timeout_s=2.0, precheck=False)).status == "proved":
                proved_wrong.append(f"{rule.name or rule.id}: {label}: {mutant}")
            else:
                counts["rejected"] += 1
    return counts, proved_wrong


def _report(what: str, counts: dict[str, int], proved_wrong: list[str], capsys) -> None:
    with capsys.disabled():
        print(f"\nmutation test on {what}: {counts['tried']} mutants: {counts['ill_typed']} ill-typed (refuted), "
              f"{counts['equivalent']} numerically equivalent (skipped), {counts['rejected']} wrong and rejected by Z3 alone, "
              f"{len(proved_wrong)} wrong but proved")


def test_no_wrong_mutant_of_a_proved_rule_is_proved_by_z3(capsys):
    counts, proved_wrong = _mutation_run(EXAMPLES)
    _report(f"{len(EXAMPLES)} hand-written rules", counts, proved_wrong, capsys)
    assert not proved_wrong, "the prover proved wrong rules:\n" + "\n".join(proved_wrong)
    assert counts["rejected"] >= 40, "too few wrong, well-typed mutants to trust the test"


@functools.cache
def _generated(max_ops: int, ops: tuple[str, ...]):
    pipeline = pytest.importorskip("taso.generator.pipeline")
    settings = pytest.importorskip("taso.generator.settings")
    return pipeline.generate(settings.Settings(max_ops=max_ops, ops=ops)).library.rules


GENERATED_OPS = ("matmul", "conv2d", "add", "mul", "scalar_mul", "transpose", "relu", "concat", "split", "enlarge", "eye")


def test_no_wrong_mutant_of_a_generated_rule_is_proved_by_z3(capsys):
    rules = _generated(2, GENERATED_OPS)[::6]
    counts, proved_wrong = _mutation_run(rules)
    _report(f"{len(rules)} generated rules", counts, proved_wrong, capsys)
    assert not proved_wrong, "the prover proved wrong rules:\n" + "\n".join(proved_wrong)


# ---- the command line ---------------------------------------------------------------------------------------


@pytest.fixture
def candidates(tmp_path):
    wrong = dataclasses.replace(example("assoc-matmul"), target=(RuleNode("matmul", {}, ("x", "y"), ("t0",)), RuleNode("matmul", {}, ("t0", "z"), ("t1",)),
                                                                 RuleNode("relu", {}, ("t1",), ("t2",))), outputs=(("s1", "t2"),))
    path = tmp_path / "candidates.json"
    Library([*EXAMPLES[:4], wrong], {"generator": {"max_ops": 3}}).save(path)
    return path


def test_verify_writes_only_proved_rules_with_settings_and_counts(candidates, tmp_path, capsys):
    out = tmp_path / "library.json"
    assert taso_main(["verify", str(candidates), "-o", str(out), "-j", "2", "--timeout", "5", "--quiet"]) == 0
    library = Library.load(out)
    assert len(library) == 4 and all(r.status == "proved" for r in library)
    assert library.header["counts"] == {"candidates": 5, "proved": 4, "refuted": 1, "unknown": 0}
    assert library.header["verifier"]["timeout_s"] == 5 and library.header["verifier"]["jobs"] == 2
    assert library.header["generator"] == {"max_ops": 3}
    assert "4 proved" in capsys.readouterr().out


def test_verify_lists_the_rules_it_did_not_prove(candidates, tmp_path, capsys):
    taso_main(["verify", str(candidates), "-o", str(tmp_path / "library.json")])
    out = capsys.readouterr().out
    assert "refuted" in out and "relu" in out and "differ" in out


def test_explain_prints_the_axioms_of_the_proof(candidates, capsys):
    assert taso_main(["verify", str(candidates), "--explain", "merge-qkv-matmuls"]) == 0
    out = capsys.readouterr().out
    assert "matmul-concat-columns" in out and "split-concat-0" in out


@pytest.mark.parametrize("setup, args, message", [
    (None, ["missing.json", "-o", "out.json"], "no such file"),
    ("{not json", ["bad.json", "-o", "out.json"], "not valid JSON"),
    ("ok", ["good.json", "-o", "no/such/dir/out.json"], "cannot write"),
    ("ok", ["good.json"], "--output is required"),
    ("ok", ["good.json", "--explain", "r-0000000000"], "no rule"),
])
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, monkeypatch, capsys, setup, args, message):
    monkeypatch.chdir(tmp_path)
    if setup == "ok":
        Library(EXAMPLES[:1]).save(tmp_path / "good.json")
    elif setup is not None:
        (tmp_path / "bad.json").write_text(setup)
    assert taso_main(["verify", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_library_file_roundtrips_through_json(candidates, tmp_path):
    out = tmp_path / "library.json"
    taso_main(["verify", str(candidates), "-o", str(out), "--quiet"])
    data = json.loads(out.read_text())
    assert data["format"] == "taso-rules" and all(r["proof"]["prover"] == "z3" for r in data["rules"])


# ---- generated candidates --------------------------------------------------------------------------------


def test_generated_depth_2_candidates_are_all_proved_never_unknown(capsys):
    results = verify_rules(_generated(2, GENERATED_OPS), Settings(timeout_s=10.0), jobs=1)
    unknown = [f"{r.id}: {r.proof['reason']}: {r}" for r in results if r.status == "unknown"]
    with capsys.disabled():
        print(f"\ngenerated depth-2 candidates: {len(results)}, proved {sum(r.status == 'proved' for r in results)}, unknown {len(unknown)}")
    assert len(results) >= 20 and not unknown, "\n".join(unknown)
    assert all(r.status == "proved" for r in results)


def _proofless(library: Library) -> list[dict]:
    """The rules without their proofs' timings (which differ between runs)."""
    rules = [r.to_json() for r in library]
    for data in rules:
        data.get("proof", {}).pop("seconds", None)
    return rules


def test_a_killed_verify_resumes_from_its_journal_and_verifies_only_the_rest(candidates, tmp_path, monkeypatch, capsys):
    from taso.verifier import verify as verify_module

    fresh = tmp_path / "fresh.json"
    assert taso_main(["verify", str(candidates), "-o", str(fresh), "--quiet"]) == 0
    assert not (tmp_path / "fresh.json.journal").exists(), "a finished run leaves no journal"
    real, calls = verify_module.verify_rule, []

    def killed_at_the_fourth(rule, settings):
        calls.append(rule.id)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(rule, settings)

    out = tmp_path / "library.json"
    monkeypatch.setattr(verify_module, "verify_rule", killed_at_the_fourth)
    assert taso_main(["verify", str(candidates), "-o", str(out), "--quiet"]) != 0
    assert not out.exists() and (tmp_path / "library.json.journal").exists()
    calls.clear()
    assert taso_main(["verify", str(candidates), "-o", str(out), "--quiet", "--resume"]) == 0
    assert len(calls) == 2, "the three rules verified before the kill are not verified again"
    assert _proofless(Library.load(out)) == _proofless(Library.load(fresh))
    assert "3 rules reused" in capsys.readouterr().out


def test_verify_resume_refuses_a_missing_journal_or_other_settings(candidates, tmp_path, capsys):
    out = tmp_path / "library.json"
    assert taso_main(["verify", str(candidates), "-o", str(out), "--resume"]) == 2
    assert "no journal" in capsys.readouterr().err
    (tmp_path / "library.json.journal").write_text('{"format": "taso-verify-journal", "taso": "0", "settings": {}}\n')
    assert taso_main(["verify", str(candidates), "-o", str(out), "--resume", "--timeout", "3"]) == 2
    assert "another taso version or with other settings" in capsys.readouterr().err
