"""Proof by refutation: assert the axioms, the ground facts and source ≠ target; expect unsat.

``unsat`` for every mapped output means proved. ``sat`` or ``unknown`` (a timeout, or
E-matching saturated without a contradiction) means *not proved*, never verified. With
``explain``, every axiom is a tracked assertion and the unsat core names the axioms the
proof used.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import z3
from taso.specs import Axiom
from taso.specs.z3model import axiom_symbols, closure_laws, render_axiom

from .encode import Encoding

__all__ = ["Outcome", "prove", "solver_settings"]

# E-matching only: model-based instantiation cannot prove anything E-matching cannot, and
# on false goals it searches for a model until the timeout instead of giving up. The cap
# on instances bounds a runaway instantiation more sharply than the timeout does.
_SOLVER_PARAMS = {"smt.mbqi": False, "smt.ematching": True, "smt.qi.max_instances": 200_000}


def solver_settings() -> dict[str, object]:
    """The Z3 settings the prover uses (recorded in library headers)."""
    return {"z3": z3.get_version_string(), **_SOLVER_PARAMS}


@dataclass(frozen=True)
class Outcome:
    """The result of one proof attempt.

    Attributes:
        proved: every mapped output was proved.
        reason: why not (Z3's reason, or which output failed); empty when proved.
        seconds: wall time spent in Z3.
        axioms_used: with ``explain``: the names in the unsat cores, in axiom order.
        assumed: indices of the encoding's assumptions the proof used.
    """

    proved: bool
    reason: str
    seconds: float
    axioms_used: tuple[str, ...] | None = None
    assumed: tuple[int, ...] = ()


def _axiom_solver(axioms: Sequence[Axiom], explain: bool) -> z3.Solver:
    solver = z3.Solver()
    for key, value in _SOLVER_PARAMS.items():
        solver.set(key, value)
    add = _adder(solver)
    for axiom in axioms:
        if explain:
            solver.assert_and_track(render_axiom(axiom), z3.Bool(f"axiom {axiom.name}"))
        else:
            add(render_axiom(axiom))
    return solver


_SHARED: OrderedDict[tuple, tuple[z3.Solver, int]] = OrderedDict()  # axiom set -> (its solver, rules it has served)
_SHARED_LIMIT = 16  # solvers kept per process
_SHARED_USES = 25  # rules one solver serves before a fresh one replaces it


def _shared_solver(axioms: Sequence[Axiom], explain: bool) -> z3.Solver:
    """A solver holding these axioms, kept for the next rules with the same axioms (each rule's own part is pushed and popped).

    NOTE: a popped scope does not give all its memory back (about 1 MB a depth-4 rule, measured), so a
    solver serves ``_SHARED_USES`` rules and is then replaced, and only the ``_SHARED_LIMIT`` last used are kept.
    """
    key = (tuple(a.name for a in axioms), explain)
    solver, uses = _SHARED.pop(key, (None, 0))
    if solver is None or uses >= _SHARED_USES:
        solver, uses = _axiom_solver(axioms, explain), 0
    _SHARED[key] = (solver, uses + 1)
    while len(_SHARED) > _SHARED_LIMIT:
        _SHARED.popitem(last=False)
    return solver


def _solver(encoding: Encoding, axioms: Sequence[Axiom], explain: bool) -> z3.Solver:
    """A fresh solver holding the axioms and the rule (what the vacuity check inspects)."""
    solver = _axiom_solver(axioms, explain)
    _add_rule(solver, encoding, axioms, explain)
    return solver


def _add_rule(solver: z3.Solver, encoding: Encoding, axioms: Sequence[Axiom], explain: bool) -> None:
    add = _adder(solver)
    for index, (name, instance) in enumerate(encoding.definitions):
        if explain:
            solver.assert_and_track(instance, z3.Bool(f"axiom {name}#{index}"))
        else:
            add(instance)
    for _, fact in encoding.facts:
        add(fact)
    for law in encoding.shape_laws:
        add(law)
    # NOTE: each goal's negation hides behind a literal assumed only while proving it: no push/pop,
    # which would cost a copy of the whole quantifier state per goal.
    for index, (_, _, goal) in enumerate(encoding.goals):
        add(z3.Implies(_goal_literal(index), z3.Not(goal)))
    symbols = set(encoding.symbols).union(*(axiom_symbols(a) for a in axioms))
    for law in closure_laws(frozenset(symbols)):
        add(law)


def _adder(solver: z3.Solver):
    """``solver.add`` of one formula, the same ``Z3_solver_assert`` call without z3py's per-call coercions (issue 27).

    ``add`` builds a Bool sort and compares each formula's sort with it in Python, about
    three times the cost of the assertion itself; a formula already a Boolean expression
    (or a ``ForAll``) of the solver's context goes straight to the C API, anything else
    through ``add`` as before. The solver receives the same assertions in the same order.
    """
    ctx = solver.ctx
    ref, handle = ctx.ref(), solver.solver
    exact = z3.BoolRef

    def add(formula) -> None:
        kind = type(formula)
        if (kind is exact or (kind is z3.QuantifierRef and formula.is_forall())) and formula.ctx is ctx:
            z3.Z3_solver_assert(ref, handle, formula.as_ast())
        else:
            solver.add(formula)

    return add


class _Failed(Exception):
    """A goal was not proved; the message says which and why."""


def _prove_goals(solver: z3.Solver, encoding: Encoding, literals: Sequence[z3.BoolRef], deadline: float) -> list[str]:
    """Proves every goal under the assumption ``literals``; returns the union of the unsat cores.

    Raises:
        _Failed: a goal is not proved (sat, unknown or out of time).
    """
    core: set[str] = set()
    for index, (source, target, _) in enumerate(encoding.goals):
        left = deadline - time.perf_counter()
        if left <= 0:
            raise _Failed("timeout")
        solver.set(timeout=max(1, int(left * 1000)))
        result = solver.check(_goal_literal(index), *literals)
        if result != z3.unsat:
            why = solver.reason_unknown() if result == z3.unknown else "Z3 found a model of the axioms where they differ"
            raise _Failed(f"output {source} = {target} not proved: {'timeout' if why in ('timeout', 'canceled') else why}")
        core.update(str(b) for b in solver.unsat_core())
    return sorted(core)


def _goal_literal(index: int) -> z3.BoolRef:
    return z3.Bool(f"goal {index}")


def _minimize(solver: z3.Solver, encoding: Encoding, literals: dict[int, z3.BoolRef], needed: set[int], deadline: float) -> set[int]:
    """Drops assumptions the proof can do without, trying value pins (``dim == 3``) before equalities of two dims."""
    order = sorted(needed, key=lambda i: (not isinstance(encoding.assumptions[i][0]["eq"][1], int), -i))
    for index in order:
        trial = needed - {index}
        try:
            _prove_goals(solver, encoding, [literals[i] for i in sorted(trial)], deadline)
        except _Failed:
            continue
        needed = trial
    return needed


def prove(encoding: Encoding, axioms: Sequence[Axiom], timeout_s: float, explain: bool = False, assume: bool = False) -> Outcome:
    """Tries to prove every goal of ``encoding`` from ``axioms`` within ``timeout_s`` seconds in all.

    With ``assume``, the encoding's assumptions are available too, each behind a literal of
    its own; the unsat cores say which ones the proof used, and that set is then shrunk to
    a minimal one (no assumption can be dropped), so a rule gains as few constraints as possible.

    The rule goes first to a solver that already holds these axioms, in a scope of its own
    (pushed, then popped): asserting the axioms again for every rule was a third of the
    prover's time. Z3's incremental mode instantiates quantifiers a little differently, so a
    rule it does not prove there (before the time is up) is tried again from a fresh solver,
    as every rule was before: nothing it proved is lost.
    """
    start = time.perf_counter()
    deadline = start + timeout_s
    solver = _shared_solver(axioms, explain)
    solver.push()
    try:
        outcome = _attempt(solver, encoding, axioms, explain, assume, deadline)
    finally:
        solver.pop()
    if not outcome.proved and not outcome.reason.endswith("timeout") and time.perf_counter() < deadline:
        outcome = _attempt(_axiom_solver(axioms, explain), encoding, axioms, explain, assume, deadline)
    return replace(outcome, seconds=time.perf_counter() - start)


def _attempt(solver: z3.Solver, encoding: Encoding, axioms: Sequence[Axiom], explain: bool, assume: bool, deadline: float) -> Outcome:
    """One proof attempt on a solver holding the axioms: the rule's definitions, facts and goals added, then every goal checked."""
    start = time.perf_counter()
    _add_rule(solver, encoding, axioms, explain)
    literals: dict[int, z3.BoolRef] = {}
    add = _adder(solver)
    if assume:
        for index, (_, formula) in enumerate(encoding.assumptions):
            literals[index] = z3.Bool(f"assume {index}")
            add(z3.Implies(literals[index], formula))
    try:
        core = _prove_goals(solver, encoding, list(literals.values()), deadline)
    except _Failed as e:
        return Outcome(False, str(e), time.perf_counter() - start)
    assumed = {int(c.removeprefix("assume ")) for c in core if c.startswith("assume ")}
    if assumed:
        assumed = _minimize(solver, encoding, literals, assumed, deadline)
    used = {c.removeprefix("axiom ").split("#")[0] for c in core if c.startswith("axiom ")}
    names = tuple(a.name for a in axioms if a.name in used) if explain else None
    return Outcome(True, "", time.perf_counter() - start, names, tuple(sorted(assumed)))
