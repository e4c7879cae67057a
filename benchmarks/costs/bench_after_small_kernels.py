"""A large product after many small kernels: what a per-node price, timed after a large reference kernel, misses.

taso's merge of an unrolled LSTMCell (hidden 256, 16 steps) leaves one ``[16, 256] x [256, 1024]`` Gemm at the
start of each run, after the previous run's 16 steps of small kernels. ONNX Runtime's profile gives it 125-137 us
in that file, 79 us cut out of it with what feeds it, 65 us priced (docs/measured.md, session 22). Its weight's
residency is not the cause (16 reads of another 1 MB weight before it: 83 us). This times the same product in one
session after ``k`` small kernels that touch 1 KB each (a chain of Sigmoids on ``[1, 256]``) or after ``k`` small
products (``[1, 256] x [256, 256]``), the product waiting on the chain, and prints its median kernel time beside
``k = 0`` in the same process.

``--shape M K N`` times another product: the GRU's merge at hidden 256 is ``16 256 768``, and whether its
product pays what the LSTM's does tells a penalty for the position apart from one for the shape.

Run: python benchmarks/costs/bench_after_small_kernels.py [--counts 0 20 50 100 200] [--runs 150] [--shape 16 256 1024]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from taso.onnx import probes

LSTM_H256_MERGE = (16, 256, 1024)


def product_after(k: int, small: str, runs: int, shape: tuple[int, int, int] = LSTM_H256_MERGE) -> float:
    """The median kernel microseconds of the ``[M, K] x [K, N]`` Gemm after ``k`` small kernels in every run."""
    M, K, N = shape
    rng = np.random.default_rng(0)
    graph = helper.make_graph([], "after_small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K]),
                                                   helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(rng.standard_normal((K, N)).astype(np.float32), "w"),
                               numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b"),
                               numpy_helper.from_array((rng.standard_normal((K, K)) / 16).astype(np.float32), "small_w")])
    previous = "s"
    for i in range(k):
        node = helper.make_node("Sigmoid", [previous], [f"s{i}"]) if small == "sigmoid" else helper.make_node("MatMul", [previous, "small_w"], [f"s{i}"])
        graph.node.append(node)
        previous = f"s{i}"
    x = probes.waiting_on(graph, "x", TensorProto.FLOAT, previous, "small")  # the product runs after the chain
    graph.node.append(helper.make_node("Gemm", [x, "w", "b"], ["y"], name="product"))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = tempfile.mkdtemp() + "/profile"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"x": rng.standard_normal((M, K)).astype(np.float32), "s": np.ones((1, K), np.float32)}
    for _ in range(runs):
        session.run(None, feeds)
    with open(session.end_profiling(), encoding="utf-8") as f:
        events = json.load(f)
    times = [e["dur"] for e in events if e.get("cat") == "Node" and e["name"] == "product_kernel_time"]
    return float(np.median(times[len(times) // 3:]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", nargs="+", type=int, default=[0, 20, 50, 100, 200])
    parser.add_argument("--runs", type=int, default=150)
    parser.add_argument("--shape", nargs=3, type=int, default=list(LSTM_H256_MERGE), metavar=("M", "K", "N"))
    args = parser.parse_args(argv)
    M, K, N = shape = tuple(args.shape)
    print(f"[{M}, {K}] x [{K}, {N}] Gemm, 1 thread: median kernel us after k small kernels in the same run (ratio to k = 0)")
    print(f"| k | after Sigmoids on [1, {K}] | after [1, {K}] x [{K}, {K}] products |")
    print("|---:|---:|---:|")
    base = {small: product_after(0, small, args.runs, shape) for small in ("sigmoid", "product")}
    for k in args.counts:
        cells = []
        for small in ("sigmoid", "product"):
            us = base[small] if k == 0 else product_after(k, small, args.runs, shape)
            cells.append(f"{us:.0f} ({us / base[small]:.2f})")
        print(f"| {k} | {cells[0]} | {cells[1]} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
