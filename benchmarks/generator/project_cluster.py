"""Projects a generator run onto a larger machine or Ray cluster from its measured shards.

    python benchmarks/generator/project_cluster.py RUN_DIR [--cpus 64 ...]

A run directory (``taso generate --run-dir``) holds one file per shard of the enumeration,
each with the graphs it held, the seconds its worker took and the worker's peak memory.
The projection schedules those measured shards on N CPUs, longest first (LPT, within 4/3
of the best schedule), and prints per N: the enumeration's projected wall time, the
largest shard (the floor no cluster goes below: plan more shards with ``--shards`` to lower
it) and memory per worker. It projects the enumeration only, the part that grows with the
number of graphs; the stages after it grow with the candidates.
"""

from __future__ import annotations

import argparse
import glob
import heapq
import json
import os
import statistics
import sys


def _shards(run_dir: str) -> list[dict]:
    """The header line of every finished enumeration shard (graphs per depth, seconds, worker peak)."""
    found = []
    for path in sorted(glob.glob(os.path.join(run_dir, "graphs-*.shard"))):
        with open(path, "rb") as f:
            head = json.loads(f.readline())
        found.append({"id": head["shard"], "graphs": sum(head["per_depth"]), "seconds": head["seconds"],
                      "peak": head.get("worker_peak_bytes"), "bytes": os.path.getsize(path)})
    return found


def _makespan(seconds: list[float], cpus: int) -> float:
    """Longest-processing-time-first schedule of the shards on ``cpus`` workers: the last one's finish time."""
    loads = [0.0] * cpus
    heapq.heapify(loads)
    for s in sorted(seconds, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + s)
    return max(loads)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--cpus", type=int, nargs="+", default=[2, 16, 64])
    args = parser.parse_args(argv)
    shards = _shards(args.run_dir)
    if not shards:
        print(f"{args.run_dir}: no finished enumeration shards (graphs-*.shard)", file=sys.stderr)
        return 2
    seconds = [s["seconds"] for s in shards]
    graphs = sum(s["graphs"] for s in shards)
    peaks = [s["peak"] for s in shards if s["peak"]]
    print(f"{len(shards)} shards, {graphs:,} graphs, {sum(seconds):,.0f} worker-seconds "
          f"({graphs / sum(seconds):,.0f} graphs/s per process); largest shard {max(seconds):.1f} s, median "
          f"{statistics.median(seconds):.1f} s; spilled {sum(s['bytes'] for s in shards) / 2**30:.2f} GiB")
    if peaks:
        print(f"worker peak memory: median {statistics.median(peaks) / 2**20:,.0f} MiB, max {max(peaks) / 2**20:,.0f} MiB")
    print("| CPUs | projected enumeration | shard-bound floor | efficiency |")
    print("|---|---|---|---|")
    for cpus in args.cpus:
        span = _makespan(seconds, cpus)
        print(f"| {cpus} | {span:,.1f} s | {max(seconds):.1f} s | {sum(seconds) / (cpus * span):.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
