"""`taso generate` throughput: graphs per second and wall time, as ratios measured side by side.

Two comparisons, each timed in the same run (absolute times on a shared machine are noise):

* parallel: the whole generator (enumeration to rules) with -j 1 and -j N, per depth;
* memo: the enumeration alone, with the exact evaluations memoised (as shipped) and with
  every new operator evaluated again (``cache_limit=0``), single process.

A calibration runs first: the same pure-Python loop in 1 and in N processes. Its ratio is
the parallel speed-up the machine offers right now (other processes compete for cores), the
ceiling for the generator's.

Job counts are interleaved over ``--repeat`` rounds and medians compared, so load from
other processes hits all of them alike.

Run: python benchmarks/generator/bench_generate.py [--depths 2,3] [--jobs 1,2] [--ops taso] [--repeat 1] [--memo-depth 2]
The depth-3 run over TASO's op set takes minutes per job count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from common.machine import available_speedup  # noqa: E402
from taso.generator import Settings, generate, parse_ops
from taso.generator.enumerate import Enumerator


def _walk_all(settings: Settings, cache_limit: int) -> tuple[int, float]:
    """Enumerates every graph in this process; returns (graphs, seconds)."""
    enumerator = Enumerator(settings, cache_limit)
    count = 0

    def visit(key, ops, last, outputs):
        nonlocal count
        count += 1

    start = time.perf_counter()
    for root in enumerator.roots():
        enumerator.walk(root, visit)
    return count, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depths", default="2,3", help="comma-separated max-ops values (default: 2,3)")
    parser.add_argument("--jobs", default="1,2", help="comma-separated worker counts; ratios are to the first (default: 1,2)")
    parser.add_argument("--ops", default=None, help="op set, as for taso generate --ops (default: TASO's)")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds per depth; medians are compared (default: 1)")
    parser.add_argument("--memo-depth", type=int, default=2, help="depth of the memo comparison; 0 skips it (default: 2)")
    args = parser.parse_args()
    ops = parse_ops(args.ops)
    jobs = [int(j) for j in args.jobs.split(",")]

    print(f"op set: {', '.join(ops)}")
    print(f"calibration: {max(jobs)} processes run a pure-Python loop {available_speedup(max(jobs)):.2f}x as fast as one")
    print("| max ops | -j | graphs | candidates | rules | wall s | graphs/s | speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for depth in (int(d) for d in args.depths.split(",")):
        walls: dict[int, list[float]] = {j: [] for j in jobs}
        for _ in range(args.repeat):
            for j in jobs:
                start = time.perf_counter()
                result = generate(Settings(max_ops=depth, ops=ops), jobs=j)
                walls[j].append(time.perf_counter() - start)
        base = statistics.median(walls[jobs[0]])
        for j in jobs:
            wall, graphs = statistics.median(walls[j]), result.counts["graphs"]
            print(f"| {depth} | {j} | {graphs:,} | {result.counts['candidates']:,} | {result.counts['rules']:,} | "
                  f"{wall:.1f} | {graphs / wall:,.0f} | {base / wall:.2f}x |", flush=True)

    if args.memo_depth:
        settings = Settings(max_ops=args.memo_depth, ops=ops)
        memo_graphs, memo = _walk_all(settings, cache_limit=200_000)
        plain_graphs, plain = _walk_all(settings, cache_limit=0)
        assert memo_graphs == plain_graphs
        print(f"\nenumeration at depth {args.memo_depth}, one process: memoised exact evaluation {memo:.1f} s, "
              f"evaluating every new operator {plain:.1f} s: memo speed-up {plain / memo:.2f}x ({memo_graphs:,} graphs)")


if __name__ == "__main__":
    main()
