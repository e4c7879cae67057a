"""What does a product pay when its weight alternates with another that fits the L2 beside it, and who measures it?

An unrolled GRU runs its input and recurrent products in turn, each reading its own weight (two 192 KB weights at
hidden 128, 384 KB in a 512 KB L2). The residency model (``taso.cost.residency``) prices such reads warm, and the
GRU h128 inputs are priced about 10% under their measured time where the LSTM's, whose products do not alternate, are
not (docs/measured.md, session 28). Three measurements of that alternation, side by side for each ``k x n`` weight:

* **chain**: 64 products ``[1, k] x [k, n]^T``, each reading the last one's output through a Slice and a Tanh,
  alternating two weights against reading one (fresh-session series): per product, and the ratio;
* **copies**: what ``taso.cost.copies.cold_read_penalty`` measures (copies of the one-node product cycling over two
  weights against copies reading one): per read;
* **file** (with ``--file NAME``, a ``bench_cell_ceiling.py`` file in ``~/.cache/taso-ceiling``): the file against a
  copy whose products that read its other same-shaped weight read the first one instead (same kernels, same data
  flow, same run order): per step, and the ratio.

Run: python benchmarks/costs/bench_alternating_reads.py [--shapes 128x384 256x768] [--file gru_h128_s64.torchscript ...]
     [--series 5] [--gap 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from taso.cost.copies import WallReference, cold_read_penalty
from taso.measure.timing import fresh_session_series

CEILING = Path.home() / ".cache" / "taso-ceiling"
STEPS = 64


def _weights(k: int, n: int) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    return [numpy_helper.from_array((rng.standard_normal((n, k)) * 0.05).astype(np.float32), f"W{i}") for i in range(2)]


def product_chain(k: int, n: int, alternate: bool, gap: int) -> bytes:
    """``STEPS`` products, each reading the last one's output (its first ``k`` columns, then ``gap + 1`` Tanhs)."""
    bounds = [numpy_helper.from_array(np.array([v], np.int64), name) for v, name in ((0, "start"), (k, "end"), (1, "axis"))]
    nodes, previous = [], "x"
    for i in range(STEPS):
        weight = f"W{i % 2}" if alternate else "W0"
        nodes += [helper.make_node("Gemm", [previous, weight], [f"g{i}"], transB=1),
                  helper.make_node("Slice", [f"g{i}", "start", "end", "axis"], [f"s{i}_0"])]
        nodes += [helper.make_node("Tanh", [f"s{i}_{j}"], [f"s{i}_{j + 1}"]) for j in range(gap + 1)]
        previous = f"s{i}_{gap + 1}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, k])], _weights(k, n) + bounds)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def one_product(k: int, n: int) -> bytes:
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "W0"], ["y"], transB=1)], "one",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], _weights(k, n)[:1])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def one_weight_variant(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """The model with every product reading the first of two same-shaped weights, and how many products read the other."""
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    products = [n for n in model.graph.node if n.op_type in ("Gemm", "MatMul") and len(n.input) > 1 and n.input[1] in weights]
    names = sorted({n.input[1] for n in products})
    pair = next(((a, b) for i, a in enumerate(names) for b in names[i + 1:] if weights[a] == weights[b]), None)
    if pair is None:
        raise SystemExit("no two product weights of one shape in the file")
    variant = onnx.ModelProto()
    variant.CopyFrom(model)
    moved = 0
    for node in variant.graph.node:
        if node.op_type in ("Gemm", "MatMul") and len(node.input) > 1 and node.input[1] == pair[1]:
            node.input[1], moved = pair[0], moved + 1
    return variant, moved


def _series_difference(models: list[bytes], feeds: dict, series: int, per: int, threads: int) -> tuple[float, float]:
    """(median ratio first / second, median difference per ``per``, seconds) over fresh-session series."""
    timed = fresh_session_series(models, feeds, threads, 9, series)
    return statistics.median(t[0] / t[1] for t in timed), statistics.median((t[0] - t[1]) / per for t in timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=["128x384", "256x768"], help="KxN: a [N, K] weight")
    parser.add_argument("--file", nargs="*", default=[], help="bench_cell_ceiling.py files (NAME, without .onnx)")
    parser.add_argument("--series", type=int, default=5)
    parser.add_argument("--gap", type=int, default=8, help="Tanhs between products beyond the first")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    reference = WallReference(args.threads)
    print(f"{'weight':>9s} {'KB':>5s} {'chain ratio':>11s} {'chain us/product':>16s} {'copies us/read':>14s}")
    for shape in args.shapes:
        k, n = (int(v) for v in shape.split("x"))
        feeds = {"x": np.random.default_rng(1).standard_normal((1, k)).astype(np.float32)}
        ratio, per_product = _series_difference([product_chain(k, n, True, args.gap), product_chain(k, n, False, args.gap)],
                                                feeds, args.series, STEPS, args.threads)
        copies, _ = cold_read_penalty(one_product(k, n), feeds, args.threads, "W0", 2, reference=reference)
        print(f"{shape:>9s} {k * n * 4 >> 10:5d} {ratio:11.3f} {per_product * 1e6:16.3f} {copies * 1e6:14.3f}")
    for name in args.file:
        model = onnx.load(str(CEILING / f"{name}.onnx"))
        variant, moved = one_weight_variant(model)
        dims = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
        feeds = {model.graph.input[0].name: np.random.default_rng(1).standard_normal(dims).astype(np.float32)}
        ratio, per_read = _series_difference([model.SerializeToString(), variant.SerializeToString()], feeds, args.series, moved, args.threads)
        print(f"{name}: the file / one weight {ratio:.3f}, {per_read * 1e6:.3f} us for each of its {moved} reads of the other weight")


if __name__ == "__main__":
    main()
