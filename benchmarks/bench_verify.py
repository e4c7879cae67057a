"""Verification throughput, with ratios measured side by side in one run.

    python benchmarks/bench_verify.py [CANDIDATES.json [--sample N]] [--repeat N] [--timeout S]

Verifies the same rules (an evenly spaced sample of a candidates file, or the hand-written
examples repeated N times) four ways and prints rules per second and two ratios:

* relevance filtering: Z3 given only the axioms about the rule's ops, versus every axiom
  (one process, prover only, so the ratio is Z3's alone);
* parallelism: the full pipeline (pre-check + proof) with -j 2 versus -j 1.
"""

from __future__ import annotations

import argparse
import time

from taso.rules import Library
from taso.verifier import Settings, verify_rules
from taso.verifier.examples import EXAMPLES


def _timed(rules, settings: Settings, jobs: int) -> tuple[float, int]:
    start = time.perf_counter()
    results = verify_rules(rules, settings, jobs)
    return time.perf_counter() - start, sum(r.status == "proved" for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("candidates", nargs="?", help="a rule file (default: the hand-written examples)")
    parser.add_argument("--sample", type=int, default=500, help="rules taken from the candidates file (default 500)")
    parser.add_argument("--repeat", type=int, default=5, help="copies of the examples (default 5)")
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args()
    if args.candidates:
        pool = Library.load(args.candidates).rules
        rules = pool[:: max(1, len(pool) // args.sample)][: args.sample]
    else:
        rules = EXAMPLES * args.repeat
    print(f"{len(rules)} rules ({f'sampled from {args.candidates}' if args.candidates else f'{len(EXAMPLES)} examples x {args.repeat}'})")
    rows = {
        "prover, relevant axioms, -j 1": (Settings(args.timeout, precheck=False), 1),
        "prover, all axioms,      -j 1": (Settings(args.timeout, precheck=False, relevance=False), 1),
        "pipeline,                -j 1": (Settings(args.timeout), 1),
        "pipeline,                -j 2": (Settings(args.timeout), 2),
    }
    times = {}
    for label, (settings, jobs) in rows.items():
        seconds, proved = _timed(rules, settings, jobs)
        times[label] = seconds
        print(f"  {label}: {seconds:7.2f} s  {len(rules) / seconds:7.1f} rules/s  {proved} proved")
    labels = list(rows)
    print(f"relevance filtering speedup: {times[labels[1]] / times[labels[0]]:.2f}x")
    print(f"-j 2 over -j 1 speedup:      {times[labels[2]] / times[labels[3]]:.2f}x")


if __name__ == "__main__":
    main()
