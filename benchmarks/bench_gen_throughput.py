"""Enumeration throughput per process (issue 27): the enumerator now vs as it was before issue 27's step tables.

Both run the first pass of ``taso generate`` in one process, as a worker does
(``generator.parallel.walk_rows``): every graph's key, and every graph packed into a row
(depth <= 3 keeps them all). The *before* enumerator is ``generator/enumerate.py`` read from
git at ``BEFORE`` (the revision before issue 27's enumeration work) and imported beside the
current one; it visits one graph at a time and each is packed by ``Packer.pack``, as the
worker did then. The two walk the same sample of first operators of TASO's operator set,
alternating.

*Before* also visited renamings: last-level graphs whose inputs leave a gap in their class
(x2 without x1), which the enumerator means to skip and now does. So the check is: *now*'s
keys and rows equal, byte for byte and in order, *before*'s restricted to graphs whose inputs
form prefixes (the restriction is applied after timing). The printed ratio is the wall time
of the same sample, before / now (medians over ``--repeat`` rounds), with each side's own
graphs per second.

Run: python benchmarks/bench_gen_throughput.py [--max-ops 3] [--every 80] [--repeat 1]
     (--max-ops 2 --every 1 walks every root at depth 2.)
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from taso.generator import Settings  # noqa: E402
from taso.generator import enumerate as enumeration  # noqa: E402
from taso.generator import parallel  # noqa: E402
from taso.generator.shards import Shard  # noqa: E402
from taso.generator.steps import prefix_masks  # noqa: E402

BEFORE = "eb0ee3710809363d1717229cfdef3c4d85d17af8"  # generator/enumerate.py before issue 27's step tables


def before_module():
    """``generator/enumerate.py`` at ``BEFORE``, imported as a module of ``taso.generator`` (its relative imports resolve there)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:generator/enumerate.py"], check=True, capture_output=True,
                            text=True).stdout
    name = "taso.generator._enumerate_before"
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "taso.generator"
    sys.modules[name] = module
    exec(compile(source, f"{BEFORE[:7]}:generator/enumerate.py", "exec"), module.__dict__)
    return module


def first_pass_before(module, settings: Settings, every: int) -> tuple[float, array, bytes]:
    """Seconds, keys and packed rows of the sampled roots, one graph at a time (the worker before issue 27)."""
    enumerator = module.Enumerator(settings)
    pack = parallel._packer(enumerator).pack
    keys, rows = array("q"), bytearray()

    def visit(key, ops, last, outputs):
        keys.append(key)
        rows.extend(pack(ops, last, outputs))

    start = time.perf_counter()
    for root in enumerator.roots()[::every]:
        enumerator.walk(root, visit)
    return time.perf_counter() - start, keys, bytes(rows)


def prefix_rows(packer: parallel.Packer, rows: bytes, pool_size: int, class_starts: int) -> np.ndarray:
    """Which packed graphs read, in every class, a prefix of its pool tensors."""
    table = np.frombuffer(rows, dtype=packer.dtype).reshape(-1, packer.width)
    args = table[:, : packer.slot * packer.max_ops].reshape(len(table), packer.max_ops, packer.slot)[:, :, 3:].astype(np.int64)
    bits = np.where((args >= 0) & (args < pool_size), np.left_shift(1, np.clip(args, 0, 62)), 0)
    return prefix_masks(np.bitwise_or.reduce(bits.reshape(len(table), -1), axis=1), class_starts)


def first_pass_now(settings: Settings, every: int) -> tuple[float, array, bytes]:
    """Seconds, keys and packed rows of the sampled roots, as the worker runs them now."""
    parallel._init_worker(settings)
    keys, rows = array("q"), bytearray()
    start = time.perf_counter()
    for index, root in enumerate(parallel._WORKER.roots()[::every]):
        root_keys, root_rows, _ = parallel.walk_rows(parallel._WORKER, root, Shard("sample", index), keep=True)
        keys.extend(root_keys)
        rows.extend(root_rows)
    return time.perf_counter() - start, keys, bytes(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-ops", type=int, default=3)
    parser.add_argument("--every", type=int, default=80, help="walk roots 0, every, 2*every, ... (default: 80)")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    settings = Settings(max_ops=args.max_ops)
    module = before_module()
    assert module.Enumerator is not enumeration.Enumerator
    seconds: dict[str, list[float]] = {"before": [], "now": []}
    results = {}
    for _ in range(args.repeat):
        elapsed, *results["before"] = first_pass_before(module, settings, args.every)
        seconds["before"].append(elapsed)
        elapsed, *results["now"] = first_pass_now(settings, args.every)
        seconds["now"].append(elapsed)
    worker = parallel._WORKER
    keys, rows = results["before"]
    kept = prefix_rows(parallel._PACKER, rows, len(worker.pool), worker._class_starts)
    width = parallel._PACKER.width * np.dtype(parallel._PACKER.dtype).itemsize
    expected_rows = np.frombuffer(rows, dtype=np.uint8).reshape(-1, width)[kept].tobytes()
    if list(np.asarray(keys)[kept]) != list(results["now"][0]) or expected_rows != results["now"][1]:
        print("DIFFERENT keys or rows: the enumeration changed beyond dropping renamings", file=sys.stderr)
        return 1
    graphs_before, graphs_now = len(keys), len(results["now"][0])
    before, now = statistics.median(seconds["before"]), statistics.median(seconds["now"])
    print(f"every {args.every}th root at --max-ops {args.max_ops}: before {graphs_before:,} graphs, now {graphs_now:,} "
          f"(before's graphs whose inputs form prefixes: the same keys and packed rows, in order)")
    print(f"before issue 27 ({BEFORE[:7]}): {before:.2f} s, {graphs_before / before:,.0f} graphs/s; "
          f"now: {now:.2f} s, {graphs_now / now:,.0f} graphs/s; wall time {before / now:.2f}x less "
          f"(medians of {args.repeat}, one process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
