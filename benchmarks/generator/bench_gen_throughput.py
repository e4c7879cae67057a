"""Enumeration throughput per process (issue 27): this commit's enumerator against BEFORE's, each run as its own commit.

Each side is a fresh process on its commit's code (:mod:`common.commits`) that runs the first pass of ``taso
generate`` on the same sample of first operators of TASO's operator set (every ``--every``-th root at
``--max-ops``), as a worker of that commit does: every graph's key, and every graph packed into a row (depth <= 3
keeps them all). *Before* (``BEFORE``, the revision before issue 27's step tables) visits one graph at a time and
packs each with its ``Packer.pack`` (the packer of its ``Workers``), as its worker did; *now* calls
``generator.parallel.walk_rows`` on each root (given a fresh ``Enumerator``, it builds its packer once per root).
Each process times ``--repeat`` rounds, each with a fresh enumerator, and the two sides' processes alternate
``--series`` times (before first, then now first, ...).

*Before* also visited renamings: last-level graphs whose inputs leave a gap in their class (x2 without x1), which
the enumerator means to skip and now does. So the check is: *now*'s keys and rows equal, byte for byte and in order,
*before*'s restricted to graphs whose inputs form prefixes (each worker applies the restriction after timing and
returns a sha256 of its keys and rows; the script fails when they differ). The printed ratio is the wall time of
the same sample, before / now (medians over every round of every process), with each side's own graphs per second.

Run: python benchmarks/generator/bench_gen_throughput.py [--max-ops 3] [--every 80] [--repeat 1] [--series 2]
     (--max-ops 2 --every 1 walks every root at depth 2.)
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

BEFORE = "eb0ee3710809363d1717229cfdef3c4d85d17af8"  # generator/enumerate.py before issue 27's step tables


def first_pass_before(settings, every: int):
    """Seconds, keys and packed rows of the sampled roots, one graph at a time (the worker before issue 27), and the packer."""
    from array import array

    from taso.generator.enumerate import Enumerator
    from taso.generator.parallel import Workers

    with Workers(settings, 1) as workers:  # its packer, as its worker built it for these settings
        packer = workers.packer
    enumerator = Enumerator(settings)
    pack = packer.pack
    keys, rows = array("q"), bytearray()

    def visit(key, ops, last, outputs):
        keys.append(key)
        rows.extend(pack(ops, last, outputs))

    start = time.perf_counter()
    for root in enumerator.roots()[::every]:
        enumerator.walk(root, visit)
    return time.perf_counter() - start, keys, bytes(rows), packer, enumerator


def first_pass_now(settings, every: int):
    """Seconds, keys and packed rows of the sampled roots, each root's graphs by ``walk_rows`` as the worker runs them now."""
    from array import array

    from taso.generator.enumerate import Enumerator
    from taso.generator.parallel import Workers, walk_rows
    from taso.generator.shards import Shard

    with Workers(settings, 1) as workers:  # the packer of the rows' layout (walk_rows builds its own alike)
        packer = workers.packer
    enumerator = Enumerator(settings)
    keys, rows = array("q"), bytearray()
    start = time.perf_counter()
    roots = enumerator.roots()
    for index in range(0, len(roots), every):
        root_keys, root_rows, _ = walk_rows(enumerator, roots[index], Shard(f"r{index:05d}", index), keep=True)
        keys.extend(root_keys)
        rows.extend(root_rows)
    return time.perf_counter() - start, keys, bytes(rows), packer, enumerator


def prefix_rows(packer, rows: bytes, pool):
    """Which packed graphs read, in every class of ``pool``, a prefix of its tensors (x1; x1 and x2; ...), i.e. leave no gap."""
    import numpy as np

    table = np.frombuffer(rows, dtype=packer.dtype).reshape(-1, packer.width)
    args = table[:, : packer.slot * packer.max_ops].reshape(len(table), packer.max_ops, packer.slot)[:, :, 3:].astype(np.int64)
    bits = np.where((args >= 0) & (args < len(pool)), np.left_shift(1, np.clip(args, 0, 62)), 0)
    masks = np.bitwise_or.reduce(bits.reshape(len(table), -1), axis=1)
    class_starts = sum(1 << start for start, _ in pool.class_spans)
    # a gap: a set bit that is not a class's first whose lower neighbour is clear
    return ((masks & ~class_starts) >> 1) & ~masks == 0


def worker(side: str, max_ops: int, every: int, repeat: int) -> dict:
    """This tree's first pass on the sample, ``repeat`` rounds: seconds of each, the graphs, and a digest of the keys and
    rows of the graphs whose inputs form prefixes (all of them, where the enumerator skips renamings)."""
    import numpy as np
    from taso.generator import Settings

    settings = Settings(max_ops=max_ops)
    first_pass = first_pass_before if side == "before" else first_pass_now
    seconds = []
    for _ in range(repeat):
        elapsed, keys, rows, packer, enumerator = first_pass(settings, every)
        seconds.append(elapsed)
    kept = prefix_rows(packer, rows, enumerator.pool)
    width = packer.width * np.dtype(packer.dtype).itemsize
    digest = hashlib.sha256(np.asarray(keys, dtype="<i8")[kept].tobytes())
    digest.update(np.frombuffer(rows, dtype=np.uint8).reshape(-1, width)[kept].tobytes())
    return {"seconds": seconds, "graphs": len(keys), "prefix_graphs": int(kept.sum()), "roots": len(enumerator.roots()[::every]),
            "digest": digest.hexdigest()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-ops", type=int, default=3)
    parser.add_argument("--every", type=int, default=80, help="walk roots 0, every, 2*every, ... (default: 80)")
    parser.add_argument("--repeat", type=int, default=1, help="timed rounds in each process (default 1)")
    parser.add_argument("--series", type=int, default=2, help="processes per side, alternating (default 2)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--side", choices=["before", "now"], help=argparse.SUPPRESS)  # the worker's way of walking
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.side, args.max_ops, args.every, args.repeat)))
        return 0
    trees = commits.sides(BEFORE)
    forwarded = {side: ["--side", side, "--max-ops", str(args.max_ops), "--every", str(args.every), "--repeat", str(args.repeat)] for side in trees}
    runs = commits.alternating_runs(__file__, trees, forwarded, args.series)
    b, n = runs["before"][0], runs["now"][0]
    same = len({run["digest"] for side in runs for run in runs[side]}) == 1 and n["graphs"] == n["prefix_graphs"]
    seconds = {side: statistics.median(s for run in runs[side] for s in run["seconds"]) for side in runs}
    print(f"every {args.every}th root at --max-ops {args.max_ops} ({n['roots']} roots now, {b['roots']} before), "
          f"before = {BEFORE[:7]}; medians of {args.repeat} rounds x {args.series} processes per side, alternating")
    print("| side | graphs | graphs, inputs forming prefixes | seconds | graphs/s |")
    print("|---|---:|---:|---:|---:|")
    for side, run in (("before", b), ("now", n)):
        print(f"| {side} ({BEFORE[:7] if side == 'before' else 'this checkout'}) | {run['graphs']:,} | {run['prefix_graphs']:,} | "
              f"{seconds[side]:.2f} | {run['graphs'] / seconds[side]:,.0f} |")
    print(f"wall time before / now: {seconds['before'] / seconds['now']:.2f}x less; now's keys and packed rows equal before's graphs "
          f"whose inputs form prefixes, in order: {'yes' if same else 'NO'}")
    if not same:
        print("DIFFERENT keys or rows: the enumeration changed beyond dropping renamings", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    commits.mount_from_argv()  # a worker runs the tree it was given
    sys.exit(main())
