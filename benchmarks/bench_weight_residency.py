"""Does the weight-residency price match a graph? A chain of products reading several weights in turn, measured and priced.

``taso.cost.ort_cpu`` times each node alone, run after run, so its weight is warm; in a graph other
weights pass through the cache between two reads of one (``taso.cost.residency``), and the cost
model adds to each such read what the node measured after that many bytes were read through the
caches (``profile_cold_penalty``). This builds chains of 64 products ``x @ W_i`` (square, hidden
``H``), cycling over ``m`` distinct weights, times each chain on ONNX Runtime (interleaved, one
process) and prints, per product:

* measured: the chain's time per product minus the one-weight chain's (the in-graph penalty);
* priced: what the cost model adds per product for the same graph (its residency term);
* their ratio.

The first run measures the penalties into a scratch cost cache (``--cache``, default a temporary one).

Run: python benchmarks/bench_weight_residency.py [--hidden 256 512 768] [--weights 1 2 4 8 16] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from _cost import ort_cpu_cost
from taso.onnx import load_onnx
from taso.timing import interleaved_times

STEPS = 64


def chain_model(hidden: int, weights: int, steps: int = STEPS) -> bytes:
    """``steps`` products in a chain, the i-th reading weight ``i mod weights``."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32), f"W{i}")
             for i in range(weights)]
    nodes, x = [], "x"
    for i in range(steps):
        nodes.append(helper.make_node("MatMul", [x, f"W{i % weights}"], [f"y{i}"]))
        x = f"y{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, hidden])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 512, 768])
    parser.add_argument("--weights", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cache", help="cost cache directory (default: a temporary one)")
    args = parser.parse_args(argv)
    with ort_cpu_cost(args.threads, args.cache) as model:
        print(f"chains of {STEPS} products [1, H] x [H, H], {args.threads} thread(s); per product, beyond the one-weight chain:")
        print("| H | weights | weight MB | between reads MB | measured us | priced us | priced / measured |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for hidden in args.hidden:
            counts = [1, *(m for m in args.weights if m > 1)]
            models = [chain_model(hidden, m) for m in counts]
            feeds = {"x": np.ones((1, hidden), np.float32)}
            seconds = interleaved_times(models, feeds, threads=args.threads, rounds=args.rounds)
            for m, model_bytes, t in zip(counts[1:], models[1:], seconds[1:]):
                measured = (t - seconds[0]) / STEPS
                priced = model._parent_reads(load_onnx(onnx.load_model_from_string(model_bytes)))[1] / STEPS
                weight = hidden * hidden * 4
                ratio = f"{priced / measured:.2f}" if measured > 0.5e-6 else "-"
                print(f"| {hidden} | {m} | {weight / 2**20:.2f} | {(m - 1) * weight / 2**20:.2f} | {measured * 1e6:.1f} | "
                      f"{priced * 1e6:.1f} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
