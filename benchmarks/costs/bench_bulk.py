"""Measuring in bulk against measuring alone: distinct nodes measured per second, side by side, and whether the two agree.

    python benchmarks/costs/bench_bulk.py [--models lstm-ts,gru-ts,nasrnn,squeezenet] [--rounds 2] [--threads 1]

For each model, the distinct nodes the search would measure in bulk (computed inputs, at most ``BULK_BYTES`` of
tensors) are measured both ways from empty tables, in alternating order each round: alone, as a cold search does
node by node (``OrtCpuCost.fresh``), and in bulk (``OrtCpuCost.measure_ahead``: ``taso.cost.bulk``). Both tables share
one calibration, so their figures are comparable. It prints each side's nodes per second and their ratio, and how
many of the bulk entries agree with their entries alone within the two entries' noise bands (``taso.cost.cache.agrees``,
the test the spot-check applies), with the median of bulk over alone. The ratios are the result.

The LSTMCell and GRUCell loops are exported by ``python -m taso.models.symbolic_exports DIR --only lstm_cell_steps
gru_cell_steps`` (``--exports DIR``) and measured at batch 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from taso.models import build

from taso.cost.cache import CostCache, agrees
from taso.cost.model import node_key
from taso.cost.ort_cpu import OrtCpuCost
from taso.ir import Graph, Node
from taso.onnx import load_onnx

_EXPORTS = {"lstm-ts": "lstm_cell_steps.torchscript.onnx", "lstm-dynamo": "lstm_cell_steps.dynamo.onnx",
            "gru-ts": "gru_cell_steps.torchscript.onnx", "gru-dynamo": "gru_cell_steps.dynamo.onnx"}


def _graph(name: str, exports: str) -> Graph:
    if name in _EXPORTS:
        return load_onnx(os.path.join(exports, _EXPORTS[name]), input_shapes={"x": [24, 1, 256]})
    return load_onnx(build(name))


def _measured_in_bulk(graph: Graph) -> dict[str, Node]:
    """The distinct nodes ``measure_ahead`` takes, by key."""
    consts, nodes = graph.constant_values(), {}
    for node in graph.nodes:
        if not OrtCpuCost.measured_in_bulk(node, graph, consts):
            continue
        nodes.setdefault(node_key(node, graph, consts), node)
    return nodes


def _fresh_model(directory: str, calibrated: OrtCpuCost | None, threads: int) -> OrtCpuCost:
    model = OrtCpuCost(threads, CostCache(os.path.join(directory, f"{time.perf_counter_ns()}.json")))
    if calibrated is None:
        model.calibrate()
        model.wall_reference()
    else:
        model.calibrated_as(calibrated)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="lstm-ts,gru-ts,nasrnn,squeezenet")
    parser.add_argument("--exports", default="/tmp/se", help="where symbolic_exports wrote the LSTM and GRU loops")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="taso-bench-bulk-")
    calibrated = _fresh_model(directory, None, args.threads)
    print(f"{'model':12} {'nodes':>5} {'alone/s':>8} {'bulk/s':>8} {'ratio':>6} {'agree':>7} {'bulk/alone':>10}")
    for name in args.models.split(","):
        graph = _graph(name, args.exports)
        nodes = _measured_in_bulk(graph)
        consts = graph.constant_values()
        alone_s, bulk_s, agreeing, ratios = [], [], 0, []
        for round_ in range(args.rounds):
            sides = ["alone", "bulk"] if round_ % 2 == 0 else ["bulk", "alone"]
            results = {}
            for side in sides:
                model = _fresh_model(directory, calibrated, args.threads)
                started = time.perf_counter()
                if side == "alone":
                    results[side] = {key: model.fresh(node, graph, consts) for key, node in nodes.items()}
                else:
                    model.measure_ahead((node, graph, consts) for node in nodes.values())
                    table = model.cache.table(model.fingerprint)
                    results[side] = {key: (table[key], model.cache.entry(model.fingerprint, key).band) for key in nodes}
                (alone_s if side == "alone" else bulk_s).append(time.perf_counter() - started)
            for key in nodes:
                (a, band_a), (b, band_b) = results["alone"][key], results["bulk"][key]
                agreeing += agrees(a, band_a, b, band_b)
                if a > 0:
                    ratios.append(b / a)
        n = len(nodes)
        alone, bulk = n / statistics.median(alone_s), n / statistics.median(bulk_s)
        print(f"{name:12} {n:5d} {alone:8.1f} {bulk:8.1f} {bulk / alone:5.2f}x {agreeing:3d}/{n * args.rounds:<3d} "
              f"{statistics.median(ratios):9.2f}x")


if __name__ == "__main__":
    main()
