"""How much machine load moves measured operator costs, raw versus load-normalized.

    python benchmarks/costs/bench_cost.py [--hogs 2] [--model vgg19]

Times the distinct convolutions, ReLUs and poolings of a zoo model twice on ONNX Runtime
(1 thread): on the machine as it is, then while ``--hogs`` processes spin on the CPU. For each
node it prints how far the loaded timing strays from the quiet one, for the raw wall-clock
median (``taso.measure.timing.median_run``) and for the profiled kernel time rescaled by the reference kernel
run beside it (``OrtCpuCost.time_model``, what the ``ort-cpu`` cost model caches). The
closer to 1.00x, the less a cost cached under one load misleads a search run under another.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys

from taso.models import build

from taso.cost.ort_cpu import OrtCpuCost
from taso.ir import Graph, GraphMeta
from taso.measure.inputs import random_array
from taso.measure.timing import median_run, open_session
from taso.onnx import load_onnx, to_onnx_model


def _spin() -> None:
    while True:
        pass


def _sessions(model: str, limit: int) -> list[tuple[str, bytes, dict]]:
    import numpy as np

    graph = load_onnx(build(model))
    consts, rng, seen, out = graph.constant_values(), np.random.default_rng(0), set(), []
    for node in graph.nodes:
        key = (node.op.name, node.params.canonical(), tuple(str(graph.type(v)) for v in node.inputs))
        if node.op.name not in ("conv2d", "relu", "max_pool2d") or key in seen:
            continue
        seen.add(key)
        inputs = {v: graph.type(v) for v in node.inputs if v not in consts}
        weights = {v: random_array(graph.type(v), rng) for v in node.inputs if v in consts}
        single = Graph(inputs, weights, [node], list(node.outputs), meta=GraphMeta(opset=17, output_names=tuple(node.outputs)))
        out.append((f"{node.op.name} {str(graph.type(node.inputs[0]))}", to_onnx_model(single, check=False).SerializeToString(),
                    {v: random_array(t, rng) for v, t in inputs.items()}))
        if len(out) == limit:
            break
    return out


def _measure(models, cost: OrtCpuCost) -> list[tuple[float, float]]:
    """(raw wall-clock seconds, load-normalized kernel seconds) per model."""
    rows = []
    for _, model, feeds in models:
        rows.append((median_run(open_session(model, 1), feeds, min_seconds=0.1), cost.time_model(model, feeds)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hogs", type=int, default=2, help="spinning processes during the loaded pass (default 2)")
    parser.add_argument("--model", default="vgg19", help="zoo model whose nodes are timed (default vgg19)")
    parser.add_argument("--nodes", type=int, default=8, help="distinct nodes timed (default 8)")
    args = parser.parse_args()
    sessions = _sessions(args.model, args.nodes)
    cost = OrtCpuCost(threads=1)
    cost.calibrate()
    quiet = _measure(sessions, cost)
    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    try:
        loaded = _measure(sessions, cost)
    finally:
        for hog in hogs:
            hog.terminate()
    print(f"{'node':<40} {'raw loaded/quiet':>17} {'normalized loaded/quiet':>24}")
    raw_drift, norm_drift = [], []
    for (label, _, _), (q_raw, q_norm), (l_raw, l_norm) in zip(sessions, quiet, loaded):
        raw_drift.append(l_raw / q_raw)
        norm_drift.append(l_norm / q_norm)
        print(f"{label:<40} {raw_drift[-1]:>16.2f}x {norm_drift[-1]:>23.2f}x")
    spread = lambda xs: max(abs(x - 1) for x in xs)  # noqa: E731
    print(f"median drift: raw {statistics.median(raw_drift):.2f}x, normalized {statistics.median(norm_drift):.2f}x; "
          f"worst |drift - 1|: raw {spread(raw_drift):.2f}, normalized {spread(norm_drift):.2f}")


if __name__ == "__main__":
    sys.exit(main())
