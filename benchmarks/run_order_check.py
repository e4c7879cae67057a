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
from taso.cost.residency import main_weight, run_order


def onnx_runtime_order(path: Path, smallest: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.log_severity_level = 3
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        ran = onnx.load(options.optimized_model_filepath)
    sizes = {t.name: int(np.prod(t.dims)) * 4 for t in ran.graph.initializer if len(t.dims) >= 2}
    order = []
    for node in ran.graph.node:
        weights = [v for v in node.input if sizes.get(v, 0) >= smallest]
        if weights:
            order.append(max(weights, key=sizes.get))
    return order


def taso_order(path: Path, smallest: int) -> list[str]:
    graph = taso.load_onnx(onnx.load(str(path)))
    consts = graph.constant_values()
    running = [n for n in graph.topological_order() if not all(o in consts for o in n.outputs)]
    order = []
    for node in run_order(running, graph.producer):
        weight = main_weight(node, lambda v: v in consts and graph.type(v).rank >= 2, lambda v: graph.type(v).concrete().nbytes, smallest)
        if weight:
            order.append(weight)
    return order


def letters(names: list[str]) -> str:
    seen: dict[str, str] = {}
    return "".join(seen.setdefault(name, chr(ord("A") + len(seen) % 26)) for name in names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--smallest", type=int, default=32 << 10, help="bytes below which a constant is not a weight (default 32768)")
    args = parser.parse_args(argv)
    same = 0
    for path in args.files:
        theirs, ours = letters(onnx_runtime_order(path, args.smallest)), letters(taso_order(path, args.smallest))
        same += theirs == ours
        print(f"{'same' if theirs == ours else 'DIFFERENT'} {path.name}: {len(theirs)} reads"
              + ("" if theirs == ours else f"\n  onnx runtime {theirs[:100]}\n  taso         {ours[:100]}"))
    print(f"{same}/{len(args.files)} files: the same weight-read order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
