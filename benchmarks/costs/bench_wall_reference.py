"""Does rescaling each round by a reference timed in it keep a wall-clock price steady on a noisy host?

``taso.cost.copies`` prices a node under ~30 us by the wall clock: 33 copies of it against one, in interleaved
rounds. On a cloud host a core runs 1.6-2.5x slower for tens of milliseconds at a time, whatever this machine
does, and a measurement that falls in such a stretch prices the node that much higher. Each round therefore also
times a reference (a chain of 65 Negs, :class:`taso.cost.copies.WallReference`) and is rescaled to the reference's
speed at calibration. This repeats the measurement of one node back to back for ``--seconds`` and prints, side by
side, the raw and the rescaled figures: median, smallest and largest over the median, and how many came out more
than 1.3x the median.

Run: python benchmarks/costs/bench_wall_reference.py [--seconds 60] [--width 128] [--op Add]
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

from taso.cost.copies import COPIES, WALL_CLOCK_ROUNDS, WALL_CLOCK_RUN_SECONDS, WallReference, copies_session
from taso.measure.timing import fastest_run, interleaved_samples
from taso.onnx.probes import with_copies

OUTLIER = 1.3


def _node_model(op: str, width: int) -> onnx.ModelProto:
    inputs = ["a", "b"] if op in ("Add", "Mul", "Sub") else ["a"]
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"])], "one",
                              [helper.make_tensor_value_info(v, TensorProto.FLOAT, [1, width]) for v in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def measure_once(proto: onnx.ModelProto, feeds: dict, reference: WallReference) -> tuple[float, float]:
    """One wall-clock measurement as the cost model makes it: (raw median, rescaled median) per copy, in seconds."""
    sessions = [copies_session(m, 1) for m in (proto, with_copies(proto, COPIES))]
    for session in sessions:
        for _ in range(3):
            session.run(None, feeds)
    measures = [functools.partial(fastest_run, s, feeds, 3, WALL_CLOCK_RUN_SECONDS) for s in sessions] + [reference.time]
    one, many, references = interleaved_samples(measures, WALL_CLOCK_ROUNDS)
    deltas = [(m - o) / (COPIES - 1) for o, m in zip(one, many)]
    return float(np.median(deltas)), float(np.median(reference.rescaled(deltas, references)))


def _summary(label: str, values: np.ndarray) -> str:
    median = float(np.median(values))
    far = int(np.sum(values > OUTLIER * median))
    return (f"| {label} | {median * 1e6:.3f} | {values.min() / median:.2f} | {values.max() / median:.2f} | {far} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--op", default="Add", choices=["Add", "Mul", "Sub", "Sigmoid", "Tanh", "Relu"])
    args = parser.parse_args(argv)
    proto = _node_model(args.op, args.width)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal((1, args.width)).astype(np.float32) for i in proto.graph.input}
    reference = WallReference(threads=1)
    reference.calibrate()
    rows, started = [], time.perf_counter()
    while time.perf_counter() - started < args.seconds:
        rows.append(measure_once(proto, feeds, reference))
    raw, rescaled = (np.array(column) for column in zip(*rows))
    print(f"{len(rows)} measurements of a [1, {args.width}] {args.op} over {args.seconds:.0f} s")
    print("| figures | median us | smallest / median | largest / median | over 1.3x the median |")
    print("|---|---:|---:|---:|---:|")
    print(_summary("raw (wall clock alone)", raw))
    print(_summary("rescaled by the reference", rescaled))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
