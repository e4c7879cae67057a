"""Verification throughput, with ratios measured side by side in one run.

    python benchmarks/bench_verify.py [CANDIDATES.json [--sample N]] [--repeat N] [--timeout S]
    python benchmarks/bench_verify.py --before [CANDIDATES.json] [--sample N [--head]] [--mutants] [--rounds N]

With ``--before`` (issue 27): the verifier now against the verifier as it was at ``BEFORE``
(``verifier/{numeric,encode,prove,verify}.py`` read from git and imported beside the
current ones), one process each, on the same rules: an evenly spaced sample of a
candidates file (or its first ``--sample`` rules, with ``--head``), or of the shipped library (``taso/data/library.jsonl.gz``, its rules made
candidates again); with ``--mutants``, single mutations of those rules (the mutation test's,
mostly refuted). Both verify every rule once untimed (so that both see the same
per-process Z3 state: functions created, laws cached), then ``--rounds`` timed rounds in
alternating order. Every round's results must equal, rule by rule, the first new round's
(status, reason, counterexample, proof; only the proofs' timings are dropped); the ratio
printed is the median wall time before / now, with each side's rules per second.

Verifies the same rules (an evenly spaced sample of a candidates file, or the hand-written
examples repeated N times) four ways and prints rules per second and two ratios:

* relevance filtering: Z3 given only the axioms about the rule's ops, versus every axiom
  (one process, prover only, so the ratio is Z3's alone);
* parallelism: the full pipeline (pre-check + proof) with -j 2 versus -j 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _before import modules_at  # noqa: E402 - a sibling script, not a package

from taso.rules import Library  # noqa: E402
from taso.verifier import Settings, verify_rules  # noqa: E402
from taso.verifier.examples import EXAMPLES  # noqa: E402

BEFORE = "df307ca44074cde86f0d068f5ed9d5b95feb9920"  # the verifier before issue 27's memoised pre-check and prover set-up
_MODULES = ("numeric", "encode", "prove", "verify")  # in import order: each imports only earlier ones


def before_verifier(commit: str = BEFORE):
    """``verifier/verify.py`` at ``commit`` as a module, its relative imports of numeric, encode and prove also read from there."""
    return modules_at(commit, "verifier", "taso.verifier", _MODULES)["verify"]


def _comparable(rule) -> dict:
    """A verified rule as JSON without its proof's timing."""
    data = rule.to_json()
    data.get("proof", {}).pop("seconds", None)
    return data


def _before_sample(args) -> list:
    if args.candidates:
        pool = Library.load(args.candidates, check_digest=False).rules
    else:
        pool = [dataclasses.replace(r, status="candidate", proof=None) for r in Library.load(ROOT / "taso" / "data" / "library.jsonl.gz").rules]
    rules = pool[: args.sample] if args.head else pool[:: max(1, len(pool) // args.sample)][: args.sample]
    if args.mutants:
        sys.path.insert(0, str(ROOT / "tests"))
        from test_verifier import mutants  # the mutation test's single mutations: mostly wrong rules, some ill-typed

        rules = [m for rule in rules for _, m in list(mutants(rule))[::4]][: args.sample]
    return rules


def compare_before(args) -> None:
    from taso.verifier import verify as now

    before = before_verifier(args.commit)
    rules = _before_sample(args)
    sides = {"before": (before.verify_rule, before.Settings(args.timeout)), "now": (now.verify_rule, now.Settings(args.timeout))}
    print(f"{len(rules)} {'mutants of ' if args.mutants else ''}rules ({'the first' if args.head else 'sampled'} from "
          f"{args.candidates or 'the shipped library'}), "
          f"before = {args.commit[:7]}, {args.rounds} rounds")

    def run(which: str) -> tuple[float, list[dict]]:
        verify_rule, settings = sides[which]
        start = time.perf_counter()
        results = [verify_rule(rule, settings) for rule in rules]
        return time.perf_counter() - start, [_comparable(r) for r in results]

    for which in sides:  # untimed: both see the same Z3 functions and cached laws from here on
        run(which)
    times: dict[str, list[float]] = {which: [] for which in sides}
    reference = None
    for round_ in range(args.rounds):
        for which in (("before", "now") if round_ % 2 == 0 else ("now", "before")):
            seconds, results = run(which)
            times[which].append(seconds)
            reference = reference or results
            differ = [i for i, (a, b) in enumerate(zip(results, reference)) if a != b]
            if differ:
                raise SystemExit(f"round {round_}, {which}: {len(differ)} rules verified differently, first {rules[differ[0]].id}:\n"
                                 f"  {results[differ[0]]}\n  {reference[differ[0]]}")
    counts = {s: sum(r["status"] == s for r in reference) for s in ("proved", "refuted", "unknown")}
    print(f"  verdicts and proofs identical in every round: {counts}")
    for which in sides:
        median = statistics.median(times[which])
        print(f"  {which:6}: median {median:7.2f} s  {len(rules) / median:7.1f} rules/s  (rounds: {', '.join(f'{t:.2f}' for t in times[which])})")
    print(f"ratio before / now (median wall time): {statistics.median(times['before']) / statistics.median(times['now']):.2f}x")


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
    parser.add_argument("--before", action="store_true", help=f"compare the verifier now with the one at {BEFORE[:7]} (issue 27)")
    parser.add_argument("--commit", default=BEFORE, help=f"with --before: the earlier verifier's commit (default {BEFORE[:7]})")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each side with --before (default 3)")
    parser.add_argument("--mutants", action="store_true", help="with --before: single mutations of the sampled rules instead "
                        "(wrong or ill-typed rules mostly: refutations compared too), at most --sample of them")
    parser.add_argument("--head", action="store_true", help="with --before: the first --sample rules rather than an evenly spaced sample")
    args = parser.parse_args()
    if args.before:
        if "--sample" not in sys.argv:
            args.sample = 200
        compare_before(args)
        return
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
