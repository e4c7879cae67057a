"""Does the weight-residency price match a graph? A chain of products reading several weights in turn, measured and priced.

``taso.cost.ort_cpu`` times each node alone, run after run, so its weight is warm; in a graph other
weights pass through the cache between two reads of one (``taso.cost.residency``), and the cost
model adds to each such read what the node measured after that many bytes were read through the
caches (``profile_cold_penalty``). This builds chains of 64 products ``x @ W_i`` (square, hidden
``H``), cycling over ``m`` distinct weights, times each chain on ONNX Runtime (interleaved, one
process) and prints, per product:

* measured: the chain's time per product minus the one-weight chain's (the in-graph penalty);
* priced: what the cost model adds per product for the same graph (its residency term);
* their ratio;
* two orders: the penalty measured the way a cost model could measure it for one node, by the wall clock:
  ``K`` steps, each a reduction over its own buffer of the bytes read between two reads of the weight and
  a product, in two orders — each reduction right before its product (every product cold) and all
  products first (one cold a run); the same kernels, so the difference is ``K - 1`` cold reads
  (:func:`two_orders_models`).

The first run measures the penalties into a scratch cost cache (``--cache``, default a temporary one).

Run: python benchmarks/costs/bench_weight_residency.py [--hidden 256 512 768] [--weights 1 2 4 8 16] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from common.cost import ort_cpu_cost  # noqa: E402

from taso.measure.timing import interleaved_times
from taso.onnx import load_onnx

STEPS = 64
ORDER_STEPS = 9


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


def two_orders_models(hidden: int, between: int, steps: int = ORDER_STEPS) -> tuple[bytes, bytes]:
    """(interleaved, grouped): ``steps`` products ``y_i = (y_{i-1} + r_i) @ W`` on one weight, each ``r_i`` a ReduceMax
    of its own input ``B_i`` of ``between`` bytes. Interleaved: ``r_i`` is that reduction, so it runs right before
    its product. Grouped: the products add a zero constant instead and the reductions are outputs of their own,
    listed first in the file, so ONNX Runtime's walk (the last node that nothing reads first) runs the products,
    then the reductions. The same kernels in both."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32), "W"),
             numpy_helper.from_array(np.zeros((1, 1), np.float32), "zero")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, hidden])]
    inputs += [helper.make_tensor_value_info(f"B{i}", TensorProto.FLOAT, [max(between // 4, 1)]) for i in range(steps)]
    built = []
    for interleaved in (True, False):
        reductions = [helper.make_node("ReduceMax", [f"B{i}"], [f"r{i}"], keepdims=1) for i in range(steps)]
        shaped = [helper.make_node("Reshape", [f"r{i}", "one_by_one"], [f"s{i}"]) for i in range(steps)]
        chain, y = [], "x"
        for i in range(steps):
            chain += [helper.make_node("Add", [y, f"s{i}" if interleaved else "zero"], [f"a{i}"]), helper.make_node("MatMul", [f"a{i}", "W"], [f"y{i}"])]
            y = f"y{i}"
        nodes = [n for pair in zip(reductions, shaped) for n in pair] + chain
        outputs = [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, hidden])]
        if not interleaved:
            outputs += [helper.make_tensor_value_info(f"s{i}", TensorProto.FLOAT, [1, 1]) for i in range(steps)]
        shape = numpy_helper.from_array(np.array([1, 1], np.int64), "one_by_one")
        graph = helper.make_graph(nodes, "two_orders", inputs, outputs, [*inits, shape])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        built.append(model.SerializeToString())
    return built[0], built[1]


def two_orders_penalty(hidden: int, between: int, threads: int, rounds: int) -> float:
    """Seconds a product's cold read costs, from the two orders of :func:`two_orders_models`."""
    interleaved, grouped = two_orders_models(hidden, between)
    rng = np.random.default_rng(1)
    feeds = {"x": np.ones((1, hidden), np.float32), **{f"B{i}": rng.standard_normal(max(between // 4, 1)).astype(np.float32) for i in range(ORDER_STEPS)}}
    cold, warm = interleaved_times([interleaved, grouped], feeds, threads=threads, rounds=rounds)
    return (cold - warm) / (ORDER_STEPS - 1)


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
        print("| H | weights | weight MB | between reads MB | measured us | priced us | priced / measured | two orders us | two orders / measured |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for hidden in args.hidden:
            counts = [1, *(m for m in args.weights if m > 1)]
            models = [chain_model(hidden, m) for m in counts]
            feeds = {"x": np.ones((1, hidden), np.float32)}
            seconds = interleaved_times(models, feeds, threads=args.threads, rounds=args.rounds)
            for m, model_bytes, t in zip(counts[1:], models[1:], seconds[1:]):
                measured = (t - seconds[0]) / STEPS
                priced = model.parent_reads(load_onnx(onnx.load_model_from_string(model_bytes)))[1] / STEPS
                weight = hidden * hidden * 4
                ratio = f"{priced / measured:.2f}" if measured > 0.5e-6 else "-"
                orders = two_orders_penalty(hidden, (m - 1) * weight, args.threads, args.rounds)
                orders_ratio = f"{orders / measured:.2f}" if measured > 0.5e-6 else "-"
                print(f"| {hidden} | {m} | {weight / 2**20:.2f} | {(m - 1) * weight / 2**20:.2f} | {measured * 1e6:.1f} | "
                      f"{priced * 1e6:.1f} | {ratio} | {orders * 1e6:.1f} | {orders_ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
