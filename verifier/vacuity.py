"""Vacuity check: the axioms and a rule's facts must not contradict each other.

A proof by refutation shows that ``axioms + facts + source != target`` is unsatisfiable.
If ``axioms + facts`` alone are already unsatisfiable, that "proof" says nothing: every
goal follows from a contradiction. One false axiom that changes shapes is enough (an
audit made Z3 prove ``matmul(x, matmul(y, z)) = sigmoid(matmul(x, matmul(y, z)))`` that
way). So for every rule, Z3 must *fail* to derive False from all the axioms and that
rule's facts; when it succeeds, the unsat core names the axioms to blame.

    python -m taso.verifier.vacuity [--library FILE] [--sample N] [--timeout 2] [-j 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import z3
from taso.specs import AXIOMS, Axiom

from taso.rules import Rule

from .batch import process_map, sample_evenly
from .encode import encode_rule
from .prove import _solver

__all__ = ["contradiction", "main"]


def contradiction(rule: Rule, axioms: Sequence[Axiom] = AXIOMS, timeout_s: float = 2.0) -> list[str] | None:
    """The axioms in an unsat core of ``axioms + rule's facts``, or None when Z3 derives no contradiction.

    Z3 running out of time or saturating counts as no contradiction found: that is the best a
    semi-decision procedure can say, and the same bound the proofs were given.
    """
    encoding = encode_rule(rule)
    solver = _solver(encoding, axioms, explain=True)
    solver.set(timeout=max(1, int(timeout_s * 1000)))
    if solver.check() != z3.unsat:
        return None
    return sorted({str(b).removeprefix("axiom ").split("#")[0] for b in solver.unsat_core() if str(b).startswith("axiom ")})


def _job(job: tuple[dict, float]) -> tuple[str, list[str] | None]:
    data, timeout_s = job
    rule = Rule.from_json(data)
    return rule.id, contradiction(rule, timeout_s=timeout_s)


def main(argv: Sequence[str] | None = None) -> int:
    """Checks every proved rule of a library; prints the contradictory ones; exit 1 if there is one."""
    from taso.errors import TasoError
    from taso.pipeline.library import DEFAULT_LIBRARY
    from taso.rules import Library

    parser = argparse.ArgumentParser(prog="python -m taso.verifier.vacuity", description=__doc__.splitlines()[0])
    parser.add_argument("--library", default=DEFAULT_LIBRARY, help="rule file (default: the shipped library)")
    parser.add_argument("--sample", type=int, default=0, help="check about N evenly spaced rules (default: all)")
    parser.add_argument("--timeout", type=float, default=2.0, help="Z3 seconds per rule (default 2)")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        rules = [r for r in Library.load(args.library).rules if r.status == "proved"]
    except TasoError as e:
        print(f"vacuity: error: {e}", file=sys.stderr)
        return 2
    rules = sample_evenly(rules, args.sample)
    start = time.perf_counter()
    results = process_map(_job, [(r.to_json(), args.timeout) for r in rules], args.jobs)
    bad = [(rule_id, core) for rule_id, core in results if core is not None]
    for rule_id, core in bad:
        print(f"CONTRADICTION {rule_id}: from the axioms {', '.join(core)}")
    print(f"{len(rules)} rules: {len(bad)} with contradictory facts; {time.perf_counter() - start:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
