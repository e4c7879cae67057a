"""What a weight read costs after other weights passed through the caches: in a graph, and as the probe measures it.

``taso.cost.cold_reads.profile_cold_penalty`` prices a read by timing the node after ``E`` bytes were read
through the caches. Two ways it measured that before (below) read a fraction of what a graph pays on
this machine. This prints, for products ``[1, K] x [K, N]`` of an 8 MB weight (the
weight as B, which ONNX Runtime pre-packs, and transposed as A, which it does not):

* in a graph: the median kernel time of each of ``k`` such products with weights of their own, run after
  run (``k - 1`` weights, ``8 (k - 1)`` MB, between two reads of each), minus the one-product graph's;
* the first probe: (cold - warm copy) in evicting runs minus the same in resting runs, alternated, the eviction a
  ReduceMax over a fed buffer of ``E`` bytes;
* the second (session 22): the copy in a block of runs that each read the buffer, against a block that reads 4 bytes;
* the probe as it is (``profile_cold_penalty``): the node after products over ``E`` bytes of weights of their own, in
  every run, against the node after none.

Run: python benchmarks/costs/bench_cold_probe.py [--sizes 8 16 32]   (MB read between two reads of the weight)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from taso.cost import cold_reads, profiling
from taso.onnx import probes

K, N = 512, 4096  # an 8 MB weight
RUNS = 40


def _product_graph(k: int, transposed: bool) -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(0)
    x_shape = (K, 1) if transposed else (1, K)
    weights = [numpy_helper.from_array(rng.standard_normal((N, K) if transposed else (K, N)).astype(np.float32), f"w{i}") for i in range(k)]
    nodes = [helper.make_node("MatMul", [f"w{i}", "x"] if transposed else ["x", f"w{i}"], [f"y{i}"], name=f"product{i}") for i in range(k)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(k)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {"x": rng.standard_normal(x_shape).astype(np.float32)}


def _profiled(model: bytes, runs: list[dict]) -> list[dict]:
    """ONNX Runtime's profile events of one session (1 thread) run once on each feeds of ``runs``."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = tempfile.mkdtemp() + "/profile"
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    for feeds in runs:
        session.run(None, feeds)
    with open(session.end_profiling(), encoding="utf-8") as f:
        return json.load(f)


def in_graph_us(k: int, transposed: bool) -> float:
    """The median kernel time of the products of a ``k``-product graph, run after run."""
    model, feeds = _product_graph(k, transposed)
    events = _profiled(model.SerializeToString(), [feeds] * RUNS)
    kernels = [e["dur"] for e in events if e.get("cat") == "Node" and e["name"].startswith("product") and e["name"].endswith("_kernel_time")]
    return float(np.median(kernels[-(RUNS // 2) * k:]))


def alternating_probe_us(model: bytes, feeds: dict, evict_bytes: int, runs: int = 60) -> float:
    """The probe before session 22: per pair of runs, (cold - warm copy) evicting minus (cold - warm copy) resting,
    evicting and resting runs alternated in one session."""
    pair = probes.cold_then_warm(onnx.load_model_from_string(model))
    alternating = ({**feeds, f"{probes.EVICT}_x": np.ones(evict_bytes // 4, np.float32)}, {**feeds, f"{probes.EVICT}_x": np.ones(1, np.float32)})
    events = _profiled(pair.SerializeToString(), [alternating[i % 2] for i in range(runs)])
    skip = 4  # warm-up runs, an even number: the first timed run evicts
    times = profiling.role_times(events, skip, roles=(probes.COLD, probes.WARM))
    slower = [cold - warm for cold, warm in zip(times[probes.COLD], times[probes.WARM])]
    return float(np.median([e - r for e, r in zip(slower[0::2], slower[1::2])])) * 1e6


def buffer_probe_us(model: bytes, feeds: dict, evict_bytes: int, runs: int = 20) -> float:
    """The second probe: the copy after a ReduceMax over a fed buffer, a block of runs that each read ``evict_bytes``
    against a block before it that reads 4."""
    pair = probes.cold_then_warm(onnx.load_model_from_string(model))
    resting = {**feeds, f"{probes.EVICT}_x": np.ones(1, np.float32)}
    evicting = {**feeds, f"{probes.EVICT}_x": np.ones(evict_bytes // 4, np.float32)}
    events = _profiled(pair.SerializeToString(), [resting] * runs + [evicting] * runs)
    cold = profiling.role_times(events, 0, roles=(probes.COLD,))[probes.COLD]
    skip = profiling.WARM_UP_RUNS
    return float(np.median(cold[runs + skip:]) - np.median(cold[skip:runs])) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=int, default=[8, 16, 32], help="MB between two reads (default 8 16 32)")
    args = parser.parse_args(argv)
    print(f"products [1, {K}] x [{K}, {N}] (8 MB weight), 1 thread; microseconds beyond the weight read alone")
    print("| weight | MB between reads | in a graph | first probe (alternating, cold - warm copy) | second (a buffer read every run) "
          "| as it is (products every run) |")
    print("|---|---:|---:|---:|---:|---:|")
    for transposed in (False, True):
        alone = in_graph_us(1, transposed)
        model, feeds = _product_graph(1, transposed)
        raw = model.SerializeToString()
        for mb in args.sizes:
            graph = in_graph_us(mb // 8 + 1, transposed) - alone
            first = alternating_probe_us(raw, feeds, mb << 20)
            second = buffer_probe_us(raw, feeds, mb << 20)
            now = float(np.median(cold_reads.profile_cold_penalty(raw, feeds, 1, mb << 20))) * 1e6
            label = "A (transposed, not pre-packed)" if transposed else "B (pre-packed)"
            print(f"| {label} | {mb} | {graph:.0f} | {first:.0f} | {second:.0f} | {now:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
