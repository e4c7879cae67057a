"""Are small nodes priced at what they cost inside a graph? Chains of a step, priced and timed.

An unrolled cell is hundreds of microsecond-sized nodes (Split, Add, Mul, Sigmoid) around a few
products; ``bench_pricing.py`` found their per-node prices summing to 1.4-2.5x the measured run
of an unrolled GRU (hidden 128), which pulls every predicted speedup toward 1. This builds, per
step kind, a chain of ``--steps`` copies of the step (each reading the last one's output) and a
chain of one, and prints per step:

* measured: the two chains' wall-clock difference over ``steps - 1`` (ONNX Runtime ENABLE_ALL,
  interleaved, no profiler): what a step adds to a running graph;
* priced: taso's ``ort-cpu`` graph cost of the two chains, the same difference;
* their ratio.

The first run measures into a scratch cost cache (``--cache``, default a temporary one).

Run: python benchmarks/costs/bench_small_nodes.py [--steps 65] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from common.cost import ort_cpu_cost  # noqa: E402

from taso.measure.timing import interleaved_times
from taso.onnx import load_onnx

WIDTH = 384
Step = Callable[[list, str, int], str]  # (nodes, input value, index) -> output value


def _split_concat(nodes: list, x: str, i: int) -> str:
    parts = [f"p{i}_{j}" for j in range(3)]
    nodes += [helper.make_node("Split", [x, "sizes"], parts, axis=1), helper.make_node("Concat", parts, [f"y{i}"], axis=1)]
    return f"y{i}"


def _add_neg(nodes: list, x: str, i: int) -> str:
    nodes += [helper.make_node("Add", [x, "c"], [f"a{i}"]), helper.make_node("Neg", [f"a{i}"], [f"y{i}"])]
    return f"y{i}"


def _sigmoid_tanh(nodes: list, x: str, i: int) -> str:
    nodes += [helper.make_node("Sigmoid", [x], [f"a{i}"]), helper.make_node("Tanh", [f"a{i}"], [f"y{i}"])]
    return f"y{i}"


def _gate(nodes: list, x: str, i: int) -> str:
    """A GRU's gate arithmetic: (1 - z) * n + z * h, with z = sigmoid(x), n = tanh(x), h = x."""
    nodes += [helper.make_node("Sigmoid", [x], [f"z{i}"]), helper.make_node("Tanh", [x], [f"n{i}"]),
              helper.make_node("Sub", ["one", f"z{i}"], [f"r{i}"]), helper.make_node("Mul", [f"r{i}", f"n{i}"], [f"a{i}"]),
              helper.make_node("Mul", [f"z{i}", x], [f"b{i}"]), helper.make_node("Add", [f"a{i}", f"b{i}"], [f"y{i}"])]
    return f"y{i}"


def _product_tanh(nodes: list, x: str, i: int) -> str:
    nodes += [helper.make_node("MatMul", [x, "W"], [f"m{i}"]), helper.make_node("Tanh", [f"m{i}"], [f"y{i}"])]
    return f"y{i}"


STEPS: dict[str, Step] = {"split3+concat": _split_concat, "add+neg": _add_neg, "sigmoid+tanh": _sigmoid_tanh,
                          "gru gate (6 nodes)": _gate, "matmul 384x384+tanh": _product_tanh}


def chain(step: Step, count: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.full(3, WIDTH // 3, np.int64), "sizes"), numpy_helper.from_array(np.ones((1, WIDTH), np.float32), "c"),
             numpy_helper.from_array(np.ones(1, np.float32), "one"),
             numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32), "W")]
    nodes, x = [], "x"
    for i in range(count):
        x = step(nodes, x, i)
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, WIDTH])],
                              [t for t in inits if any(t.name in n.input for n in nodes)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=65)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cache", help="cost cache directory (default: a temporary one)")
    args = parser.parse_args(argv)
    with ort_cpu_cost(args.threads, args.cache) as model:
        print(f"chains of {args.steps} steps against 1, [1, {WIDTH}] float32, {args.threads} thread(s); per step:")
        print("| step | measured us | priced us | priced / measured |")
        print("|---|---:|---:|---:|")
        ratios = []
        for name, step in STEPS.items():
            short, long = chain(step, 1), chain(step, args.steps)
            seconds = interleaved_times([short.SerializeToString(), long.SerializeToString()], {"x": np.ones((1, WIDTH), np.float32)},
                                        threads=args.threads, rounds=args.rounds)
            measured = (seconds[1] - seconds[0]) / (args.steps - 1)
            priced = (model.graph_cost(load_onnx(long)) - model.graph_cost(load_onnx(short))) / (args.steps - 1)
            ratios.append(priced / measured)
            print(f"| {name} | {measured * 1e6:.2f} | {priced * 1e6:.2f} | {priced / measured:.2f} |", flush=True)
        print(f"geometric mean priced / measured: {float(np.exp(np.mean(np.log(ratios)))):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
