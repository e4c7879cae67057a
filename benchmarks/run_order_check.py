"""Is taso's run order ONNX Runtime's? The weights each file's nodes read, in both orders, side by side.

For each ONNX file: the weights (constant inputs of rank 2 or more, of at least ``--smallest`` bytes,
the largest per node) that its nodes read, in the order :func:`taso.cost.residency.run_order` walks
the graph as taso loads it, and in the order of the optimized model ONNX Runtime writes (it writes
the nodes in the order its sequential executor runs them). Names are compared by first appearance
(ONNX Runtime renames what it rewrites). Prints one line per file and the count that agree.

Run: python benchmarks/run_order_check.py ~/.cache/taso-ceiling/*.onnx [--smallest 32768]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import taso
from taso.cost.residency import graph_run_order, main_weight
from taso.ir import Graph


def onnx_runtime_order(model: onnx.ModelProto, smallest: int) -> list[str]:
    """The weights ONNX Runtime's nodes read, in the order it runs them: its optimized model is written in that order."""
    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        ran = onnx.load(options.optimized_model_filepath)
    sizes = {t.name: int(np.prod(t.dims)) * 4 for t in ran.graph.initializer if len(t.dims) >= 2}
    order = []
    for node in ran.graph.node:
        weights = [v for v in node.input if sizes.get(v, 0) >= smallest]
        if weights:
            order.append(max(weights, key=sizes.get))
    return order


def taso_order(graph: Graph, smallest: int) -> list[str]:
    """The weights taso's run order reads, by the same rule (rank 2 or more, at least ``smallest`` bytes, the largest per node)."""
    consts = graph.constant_values()
    order = []
    for node in graph_run_order(graph):
        weight = main_weight(node, lambda v: v in consts and graph.type(v).rank >= 2, lambda v: graph.type(v).concrete().nbytes, smallest)
        if weight:
            order.append(weight)
    return order


def first_seen(names: list[str]) -> list[int]:
    """The sequence with each name replaced by the order it first appears in (ONNX Runtime renames what it rewrites)."""
    seen: dict[str, int] = {}
    return [seen.setdefault(name, len(seen)) for name in names]


def letters(names: list[str]) -> str:
    """:func:`first_seen` for reading (past 26 weights the letters repeat; compare with first_seen)."""
    return "".join(chr(ord("A") + i % 26) for i in first_seen(names))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--smallest", type=int, default=32 << 10, help="bytes below which a constant is not a weight (default 32768)")
    args = parser.parse_args(argv)
    same = 0
    for path in args.files:
        model = onnx.load(str(path))
        theirs, ours = onnx_runtime_order(model, args.smallest), taso_order(taso.load_onnx(model), args.smallest)
        agree = first_seen(theirs) == first_seen(ours)
        same += agree
        print(f"{'same' if agree else 'DIFFERENT'} {path.name}: {len(theirs)} reads"
              + ("" if agree else f"\n  onnx runtime {letters(theirs)[:100]}\n  taso         {letters(ours)[:100]}"))
    print(f"{same}/{len(args.files)} files: the same weight-read order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
