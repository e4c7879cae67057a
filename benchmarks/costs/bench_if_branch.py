"""What a graph pays for running as a branch of a size-choosing file, on this CPU (issue 55).

A file that chooses by size runs each branch as a subgraph of an ``If`` (``taso.onnx.dispatch``). The choice itself
(Shape, Gather, Less, If) costs about 2 us, but ONNX Runtime plans no memory pattern for a subgraph: every value a
branch computes is allocated as it runs, where the main graph reuses a plan. A branch of many small kernels pays for
each, one fused kernel hardly at all: the graph alone with ``enable_mem_pattern`` off runs about as the branch does. The size guard times the written file, so this tax never
ships a slower file; it is why a size-choosing file of an unfused branch can lose to the single file it is built from.

Each model is timed alone and as both branches of a size-choosing file (the same graph either side of the threshold),
side by side in alternating rounds (1 thread, ENABLE_ALL) at each batch; outputs are checked equal first. It prints
alone time / branch time (below 1: the branch is slower), the same for the graph alone without a memory pattern (the
third session in the rounds; near 1: the pattern is what the branch misses) and the model's node count.

Run: python benchmarks/costs/bench_if_branch.py [--batches 1 128] [--rounds 9] [MODEL.onnx ...]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort

from taso.measure.timing import interleaved_times
from taso.onnx.dispatch import size_dispatch

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "symbolic")
FIXTURES = [os.path.join(DATA, f"{cell}_cell_loop.{exporter}.onnx") for cell in ("lstm", "gru") for exporter in ("torchscript", "dynamo")]


def feeds_at(model: onnx.ModelProto, batch: int) -> dict[str, np.ndarray]:
    """Random float inputs with every symbolic dim at ``batch``."""
    rng = np.random.default_rng(batch)
    return {value.name: rng.standard_normal([d.dim_value if d.HasField("dim_value") else batch for d in value.type.tensor_type.shape.dim],
                                            dtype=np.float32) for value in model.graph.input}


def batch_axis(model: onnx.ModelProto) -> tuple[str, int]:
    """The first graph input and the axis of its first symbolic dim (where the file chooses)."""
    for value in model.graph.input:
        for axis, d in enumerate(value.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                return value.name, axis
    raise SystemExit("the model has no symbolic dim to choose by")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=FIXTURES)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 128])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    print(f"alone time / time as a branch of a size-choosing file (alone without a memory pattern / branch), 1 thread, median of {args.rounds} rounds")
    print("| model | nodes | " + " | ".join(f"batch {b}" for b in args.batches) + " |")
    print("|---|---:|" + "---:|" * len(args.batches))
    for path in args.models:
        model = onnx.load(path)
        name, axis = batch_axis(model)
        branched = size_dispatch([model, model], name, axis, [8]).SerializeToString()
        alone = model.SerializeToString()
        ratios = []
        for batch in args.batches:
            feeds = feeds_at(model, batch)
            outs = [ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, feeds)[0] for m in (alone, branched)]
            if not np.array_equal(outs[0], outs[1]):
                raise SystemExit(f"{path} at batch {batch}: the branch differs from the model by {np.abs(outs[0] - outs[1]).max():.2e}")
            no_pattern = ort.SessionOptions()
            no_pattern.intra_op_num_threads, no_pattern.enable_mem_pattern = 1, False
            unplanned = ort.InferenceSession(alone, no_pattern, providers=["CPUExecutionProvider"])
            t_alone, t_branch, t_unplanned = interleaved_times([alone, branched, unplanned], feeds, rounds=args.rounds,
                                                               labels=["alone", "branch", "alone, no memory pattern"])
            ratios.append(f"{t_alone / t_branch:.2f}x ({t_unplanned / t_branch:.2f}x)")
        print(f"| {os.path.basename(path)} | {len(model.graph.node)} | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
