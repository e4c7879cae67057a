"""Enumeration throughput: candidate steps from each argument's possible shapes vs binding every shape tuple (issue 27).

The enumerator builds each graph's next operators from the shapes present. Binding every
(variant, shape tuple) over them was most of the time at depth 3 (1.9 M tuples bound after
three roots, nearly all refused by a policy or by an argument rule that takes pool tensors
only). Both ways walk the same roots of the default operator set, alternating, and must visit
the same graphs (same keys, same order); the ratio of their graphs per second is printed.

Run: python benchmarks/generator/bench_enumerate.py [--roots 6] [--max-ops 3] [--repeat 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from taso.generator import Settings  # noqa: E402
from taso.generator import enumerate as enumeration  # noqa: E402


def walk(settings: Settings, roots: int, prefilter: bool) -> tuple[float, list[int]]:
    """Seconds to walk the first ``roots`` roots, and the keys of the graphs visited, in order."""
    enumerator = enumeration.Enumerator(settings, prefilter_shapes=prefilter)
    keys: list[int] = []
    start = time.perf_counter()
    for root in enumerator.roots()[:roots]:
        enumerator.walk(root, lambda key, ops, last, outputs: keys.append(key))
    return time.perf_counter() - start, keys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roots", type=int, default=6)
    parser.add_argument("--max-ops", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    settings = Settings(max_ops=args.max_ops)
    seconds: dict[bool, list[float]] = {True: [], False: []}
    visited: dict[bool, list[int]] = {}
    for _ in range(args.repeat):
        for prefilter in (False, True):
            elapsed, keys = walk(settings, args.roots, prefilter)
            seconds[prefilter].append(elapsed)
            visited[prefilter] = keys
    if visited[True] != visited[False]:
        print("DIFFERENT graphs visited: the prefilter changed the enumeration", file=sys.stderr)
        return 1
    graphs = len(visited[True])
    before, after = statistics.median(seconds[False]), statistics.median(seconds[True])
    print(f"{graphs} graphs from {args.roots} roots at --max-ops {args.max_ops}, the same keys in the same order")
    print(f"every shape tuple bound: {graphs / before:,.0f} graphs/s; possible shapes only: {graphs / after:,.0f} graphs/s; "
          f"{before / after:.2f}x (medians of {args.repeat}, alternating)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
