"""Import + export of the largest light model, as a ratio to a plain onnx.load + onnx.save of it.

Both are timed side by side, interleaved, in one run; the ratio is the result (absolute
times on a shared machine are noise). Run: python benchmarks/end_to_end/bench_io.py [--repeat N]
"""

from __future__ import annotations

import argparse
import glob
import io
import os
import statistics
import time

import onnx

import taso


def _largest_light_model() -> str:
    paths = glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "*.onnx"))
    return max(paths, key=lambda p: len(onnx.load(p, load_external_data=False).graph.node))


def _plain(path: str) -> None:
    buffer = io.BytesIO()
    onnx.save(onnx.load(path), buffer)


def _taso(path: str) -> None:
    buffer = io.BytesIO()
    onnx.save(taso.export_onnx(taso.load_onnx(path), check=False), buffer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    path = _largest_light_model()
    times = {"plain": [], "taso": []}
    for _ in range(args.repeat):
        for name, fn in (("plain", _plain), ("taso", _taso)):
            start = time.perf_counter()
            fn(path)
            times[name].append(time.perf_counter() - start)
    plain, ours = statistics.median(times["plain"]), statistics.median(times["taso"])
    nodes = len(onnx.load(path).graph.node)
    print(f"model: {os.path.basename(path)} ({nodes} nodes)")
    print(f"taso import+export / onnx load+save: {ours / plain:.1f}x  (medians of {args.repeat} interleaved runs)")


if __name__ == "__main__":
    main()
