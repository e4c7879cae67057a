"""Verification throughput, with ratios measured side by side in one run.

    python benchmarks/generator/bench_verify.py [CANDIDATES.json [--sample N]] [--repeat N] [--timeout S]
    python benchmarks/generator/bench_verify.py --before [CANDIDATES.json] [--sample N [--head]] [--mutants] [--rounds N] [--series N]

With ``--before`` (issue 27): the verifier now against the verifier at ``BEFORE`` (``--commit``), each run as its
own commit: every measurement is a fresh process on that commit's code (:mod:`common.commits`), the two sides
alternating ``--series`` times (before first, then now first, ...). Each side takes the same rules: an evenly spaced
sample of a candidates file (or its first ``--sample`` rules, with ``--head``), or of the current checkout's shipped
library (``taso/data/library.jsonl.gz``, its rules made candidates again), loaded with that side's code; with
``--mutants``, single mutations of those rules (the mutation test's ``mutants`` of that side's
``tests/test_verifier.py``, mostly refuted). A side verifies every rule once untimed (Z3 functions created, laws
cached), then ``--rounds`` timed rounds; every round's results must equal, rule by rule, its process's first timed
round's (status, reason, counterexample, proof; only the proofs' timings are dropped). The two sides' rules and
results are compared by digests (sha256 of each rule's JSON): both commits verify alike, so on the same rules the
results must be the same too, and the script fails when they are not. The ratio printed is the median wall time of a
round, before / now, with each side's rules per second.

Without ``--before``, in this process on the current code only: verifies the same rules (an evenly spaced sample of a
candidates file, or the hand-written examples repeated N times) four ways and prints rules per second and two ratios:

* relevance filtering: Z3 given only the axioms about the rule's ops, versus every axiom
  (one process, prover only, so the ratio is Z3's alone);
* parallelism: the full pipeline (pre-check + proof) with -j 2 versus -j 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from common import commits  # noqa: E402

BEFORE = "df307ca44074cde86f0d068f5ed9d5b95feb9920"  # the verifier before issue 27's memoised pre-check and prover set-up
LIBRARY = commits.ROOT / "taso" / "data" / "library.jsonl.gz"  # one rules file for both sides


def comparable(rule) -> str:
    """A verified rule as canonical JSON text without its proof's timing."""
    data = rule.to_json()
    (data.get("proof") or {}).pop("seconds", None)
    return json.dumps(data, sort_keys=True, default=repr)


def sha(texts) -> str:
    h = hashlib.sha256()
    for text in texts:
        h.update(text.encode())
        h.update(b"\n")
    return h.hexdigest()


def before_sample(candidates: str | None, sample: int, head: bool, mutants: bool) -> list:
    """The rules a ``--before`` side verifies, loaded and (with ``mutants``) mutated with this tree's code."""
    import dataclasses

    import taso
    from taso.rules import Library

    if candidates:
        pool = Library.load(candidates, check_digest=False).rules
    else:
        pool = [dataclasses.replace(r, status="candidate", proof=None) for r in Library.load(LIBRARY).rules]
    rules = pool[:sample] if head else pool[:: max(1, len(pool) // sample)][:sample]
    if mutants:
        sys.path.insert(0, str(Path(taso.__file__).resolve().parents[1] / "tests"))  # this tree's tests
        from test_verifier import mutants as mutations  # the mutation test's single mutations: mostly wrong rules, some ill-typed

        rules = [m for rule in rules for _, m in list(mutations(rule))[::4]][:sample]
    return rules


def worker(candidates: str | None, sample: int, head: bool, mutants: bool, timeout: float, rounds: int) -> dict:
    """This tree's verifier on the sample: each timed round's seconds, the rules' and results' digests, the verdicts."""
    verify = commits.first_module("taso.verifier.verify")
    rules = before_sample(candidates, sample, head, mutants)
    settings = verify.Settings(timeout)

    def run() -> tuple[float, list[str]]:
        start = time.perf_counter()
        results = [verify.verify_rule(rule, settings) for rule in rules]
        return time.perf_counter() - start, [comparable(r) for r in results]

    run()  # untimed: Z3 functions created, laws cached
    seconds, reference = [], None
    for round_ in range(rounds):
        elapsed, results = run()
        seconds.append(elapsed)
        reference = reference or results
        differ = [i for i, (a, b) in enumerate(zip(results, reference)) if a != b]
        if differ:
            raise SystemExit(f"round {round_}: {len(differ)} rules verified differently, first {rules[differ[0]].id}:\n"
                             f"  {results[differ[0]]}\n  {reference[differ[0]]}")
    statuses = [json.loads(r)["status"] for r in reference]
    return {"seconds": seconds, "rules": sha(comparable(r) for r in rules), "results": sha(reference),
            "each": [sha([r])[:16] for r in reference], "ids": [r.id for r in rules],
            "counts": {s: statuses.count(s) for s in ("proved", "refuted", "unknown")}}


def compare_before(args) -> int:
    trees = commits.sides(args.commit)
    candidates = str(Path(args.candidates).resolve()) if args.candidates else None
    forwarded = ["--sample", str(args.sample), "--timeout", str(args.timeout), "--rounds", str(args.rounds)]
    forwarded += ([candidates] if candidates else []) + (["--head"] if args.head else []) + (["--mutants"] if args.mutants else [])
    runs = commits.alternating_runs(__file__, trees, forwarded, args.series)
    b, n = runs["before"][0], runs["now"][0]
    print(f"{len(n['ids'])} {'mutants of ' if args.mutants else ''}rules ({'the first' if args.head else 'sampled'} from "
          f"{args.candidates or 'the shipped library'}), before = {args.commit[:7]}, {args.series} processes per side x "
          f"{args.rounds} timed rounds")
    same_rules = len({run["rules"] for side in runs for run in runs[side]}) == 1
    same_results = len({run["results"] for side in runs for run in runs[side]}) == 1
    print("| side | median round (s) | rules/s | proved, refuted, unknown | rounds (s) |")
    print("|---|---:|---:|---|---|")
    medians = {}
    for side, side_runs in runs.items():
        seconds = [s for run in side_runs for s in run["seconds"]]
        medians[side] = statistics.median(seconds)
        c = side_runs[0]["counts"]
        print(f"| {side} ({args.commit[:7] if side == 'before' else 'this checkout'}) | {medians[side]:.2f} | "
              f"{len(side_runs[0]['ids']) / medians[side]:.1f} | {c['proved']}, {c['refuted']}, {c['unknown']} | "
              f"{', '.join(f'{s:.2f}' for s in seconds)} |")
    print(f"ratio before / now (median wall time): {medians['before'] / medians['now']:.2f}x")
    print(f"same rules both sides: {'yes' if same_rules else 'NO'}; verdicts and proofs identical in every process: "
          f"{'yes' if same_results else 'NO'}")
    if same_rules and not same_results:
        differ = [i for i, (x, y) in enumerate(zip(b["each"], n["each"])) if x != y]
        print(f"DIFFERENT results on the same rules: {len(differ)} rules, first {n['ids'][differ[0]] if differ else '?'}",
              file=sys.stderr)
        return 1
    return 0


def timed(rules, settings, jobs: int) -> tuple[float, int]:
    from taso.verifier import verify_rules

    start = time.perf_counter()
    results = verify_rules(rules, settings, jobs)
    return time.perf_counter() - start, sum(r.status == "proved" for r in results)


def compare_settings(args) -> int:
    """The modes without ``--before``: four configurations of the current verifier, in this process."""
    from taso.verifier import Settings
    from taso.verifier.examples import EXAMPLES

    from taso.rules import Library

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
        seconds, proved = timed(rules, settings, jobs)
        times[label] = seconds
        print(f"  {label}: {seconds:7.2f} s  {len(rules) / seconds:7.1f} rules/s  {proved} proved")
    labels = list(rows)
    print(f"relevance filtering speedup: {times[labels[1]] / times[labels[0]]:.2f}x")
    print(f"-j 2 over -j 1 speedup:      {times[labels[2]] / times[labels[3]]:.2f}x")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("candidates", nargs="?", help="a rule file (default: the hand-written examples)")
    parser.add_argument("--sample", type=int, default=500, help="rules taken from the candidates file (default 500; 200 with --before)")
    parser.add_argument("--repeat", type=int, default=5, help="copies of the examples (default 5)")
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--before", action="store_true", help=f"compare the verifier now with the one at {BEFORE[:7]} (issue 27)")
    parser.add_argument("--commit", default=BEFORE, help=f"with --before: the earlier verifier's commit (default {BEFORE[:7]})")
    parser.add_argument("--rounds", type=int, default=3, help="with --before: timed rounds in each process (default 3)")
    parser.add_argument("--series", type=int, default=2, help="with --before: processes per side, alternating (default 2)")
    parser.add_argument("--mutants", action="store_true", help="with --before: single mutations of the sampled rules instead "
                        "(wrong or ill-typed rules mostly: refutations compared too), at most --sample of them")
    parser.add_argument("--head", action="store_true", help="with --before: the first --sample rules rather than an evenly spaced sample")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.candidates, args.sample, args.head, args.mutants, args.timeout, args.rounds)))
        return 0
    if args.before:
        if "--sample" not in sys.argv:
            args.sample = 200
        return compare_before(args)
    return compare_settings(args)


if __name__ == "__main__":
    commits.mount_from_argv()  # a worker runs the tree it was given
    sys.exit(main())
