"""Verification of rules: the numeric pre-check, then a Z3 proof from the relevant axioms.

Each rule ends with one status (see :func:`verify_rule`), recorded with
``rule.with_status``. Many rules are verified in parallel processes, each with its own Z3.
"""

from __future__ import annotations

import functools
import gc
import multiprocessing
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import z3
from taso.specs import AXIOMS, Axiom, Unsupported
from taso.specs.nary import NARY_OPS, nary_axioms
from taso.specs.z3model import axiom_rewrites, axiom_symbols, render_axiom

from taso.errors import TasoError
from taso.rules import Rule

from . import DEFAULT_TIMEOUT_S
from .encode import encode_rule
from .numeric import SideMemo, counterexample
from .prove import prove

__all__ = ["Settings", "relevant_axioms", "verify_rule", "verify_rules"]


@dataclass(frozen=True)
class Settings:
    """How rules are verified.

    Attributes:
        timeout_s: Z3's time budget per rule (all its outputs together).
        precheck: run the NumPy check first (turn off only to test the prover alone).
        relevance: give Z3 only the axioms it can ever instantiate on the rule (see
            :func:`relevant_axioms`), rather than all of them.
        explain: record the axioms each proof used (the unsat core).
    """

    timeout_s: float = DEFAULT_TIMEOUT_S
    precheck: bool = True
    relevance: bool = True
    explain: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@functools.lru_cache(maxsize=4096)
def relevant_axioms(symbols: frozenset[tuple]) -> tuple[Axiom, ...]:
    """The axioms E-matching can ever instantiate on a rule that uses these op variants.

    An axiom fires when one of its trigger sides matches, and then creates the other side's
    op variants, on which more axioms may fire: the closure of that process from the rule's
    own variants is computed first, and the axioms entirely about reachable variants are
    returned. Z3 gets nothing it could never use. The candidates are the fixed axioms and the
    n-way laws (:mod:`taso.specs.nary`) of every concatenation or split arity above 2 the rule mentions.
    """
    candidates = list(AXIOMS)
    for n in nary_arities(symbols):
        candidates += nary_axioms(n)
    reach = set(symbols)
    changed = True
    while changed:
        changed = False
        for axiom in candidates:
            for needs, creates in axiom_rewrites(axiom):
                if needs <= reach and not creates <= reach:
                    reach |= creates
                    changed = True
    return tuple(a for a in candidates if axiom_symbols(a) <= reach)


def nary_arities(symbols: frozenset[tuple]) -> list[int]:
    """The arities above 2 of the concatenations and splits a rule mentions."""
    return sorted({(s[1] if s[0] == "concat" else s[2]) for s in symbols if s[0] in NARY_OPS} - {1, 2})


def _unknown(rule: Rule, reason: str, seconds: float = 0.0) -> Rule:
    return rule.with_status("unknown", {"reason": reason, "seconds": round(seconds, 4)})


def _attempts(symbols: frozenset[tuple], settings: Settings) -> list[tuple[list[Axiom], bool]]:
    """(axioms, assume) pairs to try in order: the most general proof first."""
    axioms = list(relevant_axioms(symbols)) if settings.relevance else list(AXIOMS) + [a for n in nary_arities(symbols) for a in nary_axioms(n)]
    return [(axioms, False), (axioms, True)]


def verify_rule(rule: Rule, settings: Settings = Settings()) -> Rule:
    """The rule with its status set.

    * "refuted": a side does not type-check, or the NumPy semantics shows the sides differ
      (the proof records the counterexample);
    * "proved": Z3 refuted source ≠ target for every mapped output (the proof records the
      time, the number of axioms given and, with ``settings.explain``, the axioms used). A
      proof that needed shape equalities the rule did not state (two input dimensions
      equal, as on the example shapes) adds them to the rule's constraints, which changes
      its id; the proof records the candidate's id;
    * "unknown": anything else, with the reason (timeout, unsupported op, not proved).
    """
    start = time.perf_counter()
    try:
        rule.validate()
    except TasoError as e:
        return rule.with_status("refuted", {"reason": f"ill-typed: {e}"})
    memo = SideMemo(rule)  # NOTE: both pre-checks and the encoding share the sides' graphs
    if settings.precheck:
        # NOTE: at the example shapes only: most wrong rules differ there, at two runs of the sides. The
        # search at other shapes waits until Z3 has not proved the rule (below): a candidate that holds
        # in float is seldom false, and the check after a proof already runs the sides at other shapes.
        found = counterexample(rule, trials=1, shapes=0, memo=memo)
        if found is not None:
            return _refuted(rule, found)
    verdict = _prover_verdict(rule, memo, settings, start)
    if verdict.status == "unknown" and settings.precheck and "counterexample" not in (verdict.proof or {}):
        found = counterexample(rule, trials=3, memo=memo)
        if found is not None:
            return _refuted(rule, found)
    return verdict


def _refuted(rule: Rule, found: dict) -> Rule:
    return rule.with_status("refuted", {"reason": "the sides differ on random inputs", "counterexample": found})


def _prover_verdict(rule: Rule, memo: SideMemo, settings: Settings, start: float) -> Rule:
    """The rule proved (checked after the proof at other shapes) or unknown, with Z3's reason."""
    try:
        encoding = encode_rule(rule, {side: memo.graph(side, None) for side in ("source", "target")})
        reason = "timeout"
        for axioms, assume in _attempts(encoding.symbols, settings):
            budget = settings.timeout_s - (time.perf_counter() - start)
            if budget <= 0:
                reason = "timeout"
                break
            outcome = prove(encoding, axioms, budget, settings.explain, assume)
            if outcome.proved:
                return _proved(rule, encoding, outcome, len(axioms), time.perf_counter() - start, memo)
            reason = outcome.reason
            if reason.endswith("timeout"):
                break
    except Unsupported as e:
        reason = f"unsupported: {e}"
    except z3.Z3Exception as e:
        # NOTE: a bug in an encoding must cost one rule, never the run; it is never a proof.
        reason = f"internal error: Z3 {e}"
    return _unknown(rule, reason, time.perf_counter() - start)


def _proved(rule: Rule, encoding, outcome, given: int, seconds: float, memo: SideMemo | None = None) -> Rule:
    proof: dict[str, Any] = {"prover": "z3", "seconds": round(seconds, 4), "axioms_given": given}
    if outcome.axioms_used is not None:
        proof["axioms"] = list(outcome.axioms_used)
    if outcome.assumed:
        proof["candidate"] = rule.id
        proof["constraints_added"] = [encoding.assumptions[i][0] for i in outcome.assumed]
        rule = replace(rule, constraints=rule.constraints + tuple(proof["constraints_added"]))
    # A proof from sound axioms holds wherever the constraints do. If the sides differ at some
    # such shape, an axiom is false (or the facts contradict each other): never call it proved.
    found = counterexample(rule, trials=2, seed=11, shapes=6, independent=True, memo=memo)
    if found is not None:
        return rule.with_status("unknown", {**proof, "reason": "Z3 proved it, but the sides differ at shapes its constraints allow: "
                                            "an axiom is false or the facts are contradictory", "counterexample": found})
    return rule.with_status("proved", proof)


# ---- many rules, in parallel ------------------------------------------------------------------------------


def _verify_json(job: tuple[dict, Settings]) -> dict:
    data, settings = job
    return verify_rule(Rule.from_json(data), settings).to_json()


def verify_rules(rules: Sequence[Rule], settings: Settings = Settings(), jobs: int = 1,
                 progress: Callable[[Iterable], Iterator] | None = None, on_result: Callable[[int, Rule], None] | None = None) -> list[Rule]:
    """Verifies rules in ``jobs`` processes; returns them in input order, each with its status.

    Args:
        rules: the candidates.
        settings: the verification settings.
        jobs: worker processes (1 verifies in this process).
        progress: wraps the stream of results (e.g. ``lambda it: tqdm(it, total=n)``).
        on_result: called with (position in ``rules``, verified rule) as soon as a rule is verified (a journal;
            a proof that adds shape constraints changes the rule's id, so the position says which candidate it was).
    """
    wrap = progress or (lambda it: it)
    record = on_result or (lambda index, rule: None)
    if jobs <= 1 or len(rules) <= 1:
        results = []
        for rule in wrap(verify_rule(r, settings) for r in rules):
            record(len(results), rule)
            results.append(rule)
        return results
    payload = ((r.to_json(), settings) for r in rules)  # made as the pool takes them: never all at once
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods:
        for axiom in AXIOMS:  # NOTE: rendered once here, inherited by every forked worker
            render_axiom(axiom)
            axiom_rewrites(axiom)
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    chunk = max(1, min(8, len(rules) // (jobs * 8)))
    results = []
    # NOTE: a forked worker's garbage collector would visit (and so copy) every object it inherited, the
    # candidates first; frozen, they stay shared pages (a depth-4 run: 113,035 candidates, about 2 GB in the parent).
    gc.freeze()
    try:
        with context.Pool(min(jobs, len(rules))) as pool:
            for data in wrap(pool.imap(_verify_json, payload, chunksize=chunk)):
                results.append(Rule.from_json(data))
                record(len(results) - 1, results[-1])
    finally:
        gc.unfreeze()
    return results
