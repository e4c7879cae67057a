"""A cold read's penalty three ways, side by side: in a chain of products, and by the cost model's two probes.

The residency model (``taso.cost.residency``) adds to a product's warm price what a read of its weight costs after
other weights passed through the caches. For products ``[1, K] x [K, N]`` this prints, per shape:

* in a graph: chains of ``STEPS`` steps ``h -> Tanh(Slice(Gemm(h, W_{i % 2}, b)))`` reading two weights in turn,
  against the same chain reading one, per step (the median over ``--series`` interleaved series): what a read
  after the other weight costs where a graph alternates two weights, as an unrolled GRU does;
* the probe for reads at the L2's scale (``taso.cost.copies.cold_read_penalty``): copies of the node cycling over two
  weights of its own against copies reading one, by the wall clock;
* the profiled pairs (``taso.cost.ort_cpu.profile_cold_penalty``, the median of three pairs of sessions): the node
  after products over the bytes between reads (to the nearest power of two), against the node after none;

each probe ``--tries`` times, with its median over the chain's and the largest over the smallest try.

Run: python benchmarks/costs/bench_cycle_probe.py [--shapes 256x768 256x1024 128x384 512x1536] [--series 5] [--tries 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from taso.cost import CostCache
from taso.cost.ort_cpu import OrtCpuCost
from taso.measure.timing import interleaved_times
from taso.onnx import load_onnx

STEPS = 64


def _model(k: int, n: int, weights: int, steps: int | None) -> bytes:
    """One product ``x W + b`` (``steps`` None), or a chain of ``steps`` of them cycling over ``weights`` weights."""
    rng = np.random.default_rng(0)
    inits = []
    for j in range(weights):
        inits += [numpy_helper.from_array((rng.standard_normal((k, n)) * 0.05).astype(np.float32), f"W{j}"),
                  numpy_helper.from_array((rng.standard_normal(n) * 0.05).astype(np.float32), f"b{j}")]
    if steps is None:
        nodes, out, width = [helper.make_node("Gemm", ["x", "W0", "b0"], ["y"])], "y", n
    else:
        inits += [numpy_helper.from_array(np.array([v], np.int64), name) for v, name in ((0, "start"), (k, "end"), (1, "axis"))]
        nodes, h = [], "x"
        for i in range(steps):
            j = i % weights
            nodes += [helper.make_node("Gemm", [h, f"W{j}", f"b{j}"], [f"g{i}"]),
                      helper.make_node("Slice", [f"g{i}", "start", "end", "axis"], [f"s{i}"]),
                      helper.make_node("Tanh", [f"s{i}"], [f"h{i}"])]
            h = f"h{i}"
        out, width = h, k
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def chain_penalty(k: int, n: int, series: int) -> float:
    """Seconds a read after the other weight adds in a chain reading two weights in turn (median over series)."""
    models = [_model(k, n, 1, STEPS), _model(k, n, 2, STEPS)]
    feeds = {"x": np.ones((1, k), np.float32)}
    return statistics.median((two - one) / STEPS for one, two in (interleaved_times(models, feeds, 1, rounds=7) for _ in range(series)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["256x768", "256x1024", "128x384", "512x1536"], help="KxN of the weight")
    parser.add_argument("--series", type=int, default=5)
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args(argv)
    cost = OrtCpuCost(threads=1, cache=CostCache(tempfile.mkdtemp(prefix="taso-cycle-probe-")))
    print("| product | weight | in a chain (us) | own-weight copies (us) | / chain | spread | profiled pairs (us) | / chain | spread |")
    print("|---|---:|---:|---|---:|---:|---|---:|---:|")
    for shape in args.shapes:
        k, n = (int(d) for d in shape.split("x"))
        graph = load_onnx(onnx.load_model_from_string(_model(k, n, 1, None)), {})
        node, consts = next(nd for nd in graph.nodes if nd.op.name == "matmul"), graph.constant_values()
        own = k * n * 4
        evicted = cost.caches.eviction(own, own) or 1 << round(np.log2(own))  # what a graph reading two such weights is priced at
        chain = chain_penalty(k, n, args.series)
        probes = []
        for cycle in (2, None):
            tries = [cost.cold_penalty(node, graph, consts, evicted, cycle)[0] for _ in range(args.tries)]
            middle = statistics.median(tries)
            spread = max(tries) / min(tries) if min(tries) > 0 else float("inf")
            probes.append(f"{' / '.join(f'{t * 1e6:.1f}' for t in tries)} | {middle / chain:.2f} | {spread:.2f}")
        print(f"| [1,{k}]x[{k},{n}] | {own >> 10} KB | {chain * 1e6:.1f} | {probes[0]} | {probes[1]} |", flush=True)
    cost.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
