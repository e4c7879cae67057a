"""Measuring a node that reads a large weight: the weight handed to ONNX Runtime in place against copied into the model.

``taso.cost.in_place`` hands a measured node's weights of 16 MB or more to the session as the
arrays themselves; before, each was copied into the one-node model, its bytes, the profiler's
reloaded copy, its bytes again and the session. For each table size, a Gather of 64 rows from a
``[rows, 768]`` float32 table is measured by ``OrtCpuCost.fresh`` both ways, each in a fresh
process (so each peak is its own), the two ways alternating over ``--rounds``: wall seconds of
the measurement and the process's peak resident memory above what it held before measuring.
Prints, per size, the median of each and the ratio copied / in place.

Run: python benchmarks/costs/bench_in_place.py [--rows 20000 50257 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_CHILD = r"""
import json, sys, time
import numpy as np
import taso.cost.in_place as in_place
from taso.cost import make_cost_model
from taso.ir import Graph, Node, TensorType
from taso import ops

rows, mode = int(sys.argv[1]), sys.argv[2]
if mode == "copied":
    in_place.IN_PLACE_BYTES = 1 << 62  # nothing is large enough: every weight copied, as before
table = np.random.default_rng(0).standard_normal((rows, 768)).astype(np.float32)
gather = ops.get("gather")
graph = Graph({"i": TensorType((64,), "int64")}, {"table": table},
              [Node(gather, gather.make_params(axis=0), ("table", "i"), ("y",), "y")], ["y"])
model = make_cost_model("ort-cpu")
model.fresh(graph.nodes[0], graph, graph.constant_values())  # calibration and imports, outside what is timed
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
held = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmRSS:"))) * 1024
start = time.perf_counter()
model.fresh(graph.nodes[0], graph, graph.constant_values())
seconds = time.perf_counter() - start
peak = int(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:"))) * 1024
print(json.dumps({"seconds": seconds, "extra_bytes": peak - held}))
"""


def _run(rows: int, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(rows), mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[20000, 50257, 100000], help="table rows (768 float32 columns each)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print("| table MB | measuring s, copied / in place | ratio | extra peak MB, copied / in place | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for rows in args.rows:
        runs: dict[str, list[dict]] = {"copied": [], "in place": []}
        for k in range(args.rounds):
            for mode in (("copied", "in place") if k % 2 == 0 else ("in place", "copied")):
                runs[mode].append(_run(rows, mode.replace(" ", "-")))
        secs = {m: statistics.median(r["seconds"] for r in rs) for m, rs in runs.items()}
        extra = {m: statistics.median(r["extra_bytes"] for r in rs) / 2**20 for m, rs in runs.items()}
        print(f"| {rows * 768 * 4 / 2**20:.0f} | {secs['copied']:.2f} / {secs['in place']:.2f} | {secs['copied'] / secs['in place']:.2f}x | "
              f"{extra['copied']:.0f} / {extra['in place']:.0f} | {extra['copied'] / max(extra['in place'], 1):.1f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
