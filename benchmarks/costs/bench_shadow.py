"""What single-threaded work costs right after a product the thread pool splits, at 1 thread and at more, side by side.

At 2 threads on a 2-vCPU cloud machine, the single-threaded nodes right after a product MLAS splits over the threads
ran up to twice their price, for their first ~12-40 us (docs/measured.md, session 29: priced as a calibrated
"shadow", then taken out: on the ceiling benchmark it compressed every prediction toward 1 and was not measured a
net gain). This times, in one interleaved series per thread count, 64-step chains of ``[1, k] x [k, n]^T`` products, each reading the
last one's first ``k`` columns through a Slice and ``gap + 1`` Tanhs, for each ``--gaps`` value, beside a chain of 64 Tanhs
alone. It prints the time per step, what a Tanh after a product costs
(the step's growth from gap 0, per Tanh), the same at 1 thread.

Run: python benchmarks/costs/bench_shadow.py [--shape 256x768] [--gaps 0 1 2 4 8 16 64] [--threads 2] [--rounds 9]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from taso.measure.timing import interleaved_times

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from costs.bench_alternating_reads import STEPS, product_chain  # noqa: E402 - a sibling script, not a package


def _tanhs(k: int) -> bytes:
    nodes = [helper.make_node("Tanh", [f"t{j}"], [f"t{j + 1}"]) for j in range(STEPS)]
    graph = helper.make_graph(nodes, "tanhs", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info(f"t{STEPS}", TensorProto.FLOAT, [1, k])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def per_step(threads: int, k: int, n: int, gaps: list[int], rounds: int) -> dict[str, float]:
    """Microseconds per step (per product, per Tanh) of each model, one interleaved series."""
    models = {**{f"gap {g}": product_chain(k, n, False, g) for g in gaps}, "Tanhs alone": _tanhs(k)}
    feeds = {"x": np.random.default_rng(1).standard_normal((1, k)).astype(np.float32) * 0.1,
             "t0": np.random.default_rng(2).standard_normal((1, k)).astype(np.float32)}
    seconds = interleaved_times(list(models.values()), feeds, threads, rounds, labels=list(models))  # each takes its own feed
    return {label: s * 1e6 / STEPS for label, s in zip(models, seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="256x768", help="k x n of the product (default 256x768)")
    parser.add_argument("--gaps", nargs="+", type=int, default=[0, 1, 2, 4, 8, 16, 64])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    k, n = (int(v) for v in args.shape.split("x"))
    rows = {threads: per_step(threads, k, n, args.gaps, args.rounds) for threads in (1, args.threads)}
    labels = list(rows[1])
    print(f"per step, us (64 steps; product [1,{k}] x [{k},{n}]^T)")
    print("| threads | " + " | ".join(labels) + " |")
    print("|---|" + "---:|" * len(labels))
    for threads, row in rows.items():
        print(f"| {threads} | " + " | ".join(f"{row[label]:.2f}" for label in labels) + " |")
    print()
    print("a Tanh after a product, us (the step's growth from gap 0, per Tanh):")
    for g in (g for g in args.gaps if g):
        at = {t: (row[f"gap {g}"] - row["gap 0"]) / g for t, row in rows.items()}
        print(f"  gap {g:3d}: 1 thread {at[1]:.3f}, {args.threads} threads {at[args.threads]:.3f} ({at[args.threads] / at[1]:.2f}x)")


if __name__ == "__main__":
    main()
