"""What a product's price misses in a graph whose weights do not fit in cache: the same kernel, warm and cold.

``taso.cost.ort_cpu`` measures each node alone, run after run, so a product's weight stays in the
core's cache between runs. In an unrolled recurrent cell each weight is read once per step with
every other weight read in between: NasRNN's input reads 16 MB of weights per step (16 weights
of 1 MB), more than this machine's 1 MB L2, and ``bench_pricing.py`` finds its per-node prices
sum to half its measured time. This times the product ``[1, H] x [H, K]`` (a constant weight,
NasRNN's shape by default) with ONNX Runtime's profiler (its kernel time only, as the cost model
does) three ways in one process: warm (as priced), and after a kernel that streams ``--l2-bytes``
(8 MB: evicts the core's cache, not the shared L3) or ``--dram-bytes`` (64 MB: evicts L3 as well)
through the cache before each run. It prints each state's median kernel time and its ratio to warm.

Run: python benchmarks/bench_weight_residency.py [--hidden 512 --out 512] [--threads 1] [--runs 300]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from taso.timing import session_options

TARGET = "target"


def product_model(hidden: int, out: int, evict_floats: int) -> bytes:
    """``x @ W``; with ``evict_floats``, ``x`` first waits on a Neg over that many floats (its result times zero is added
    to ``x``), so the eviction runs before the product in every run."""
    rng = np.random.default_rng(0)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, hidden])]
    weights = [numpy_helper.from_array(rng.standard_normal((hidden, out)).astype(np.float32), "W")]
    nodes, x = [], "x"
    if evict_floats:
        inputs.append(helper.make_tensor_value_info("E", TensorProto.FLOAT, [evict_floats]))
        weights += [numpy_helper.from_array(np.array([0], np.int64), "start"), numpy_helper.from_array(np.array([1], np.int64), "end"),
                    numpy_helper.from_array(np.zeros(1, np.float32), "zero")]
        nodes += [helper.make_node("Neg", ["E"], ["streamed"], name="evict"),
                  helper.make_node("Slice", ["streamed", "start", "end"], ["first"], name="evict_first"),
                  helper.make_node("Mul", ["first", "zero"], ["nothing"], name="evict_zero"),
                  helper.make_node("Add", ["x", "nothing"], ["x_after"], name="evict_wait")]
        x = "x_after"
    nodes.append(helper.make_node("MatMul", [x, "W"], ["y"], name=TARGET))
    graph = helper.make_graph(nodes, "product", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def product_kernel_us(model: bytes, feeds: dict, threads: int, runs: int) -> float:
    """The product's median profiled kernel time over ``runs`` runs (the first tenth skipped)."""
    options = session_options(threads)
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        options.profile_file_prefix = os.path.join(tmp, "profile")
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            session.run(None, feeds)
        with open(session.end_profiling(), encoding="utf-8") as f:
            events = json.load(f)
    times = [e["dur"] for e in events if e.get("cat") == "Node" and e["name"] == f"{TARGET}_kernel_time"]
    return float(np.median(times[runs // 10:]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--out", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--l2-bytes", type=int, default=8 << 20)
    parser.add_argument("--dram-bytes", type=int, default=64 << 20)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, args.hidden)).astype(np.float32)
    weight_kb = args.hidden * args.out * 4 / 1024
    print(f"[1, {args.hidden}] x [{args.hidden}, {args.out}] (weight {weight_kb:.0f} KB), {args.threads} thread(s), profiled kernel time:")
    warm = None
    for label, nbytes in (("warm (as priced)", 0), (f"after streaming {args.l2_bytes >> 20} MB", args.l2_bytes),
                          (f"after streaming {args.dram_bytes >> 20} MB", args.dram_bytes)):
        floats = nbytes // 4
        feeds = {"x": x, **({"E": rng.standard_normal(floats).astype(np.float32)} if floats else {})}
        us = product_kernel_us(product_model(args.hidden, args.out, floats), feeds, args.threads, args.runs)
        warm = warm or us
        print(f"  {label:28s} {us:6.1f} us  ({us / warm:.2f}x warm)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
