"""Is taso's run order ONNX Runtime's? The weights each file's nodes read, in both orders, side by side.

For each ONNX file: the weights (constant inputs of rank 2 or more, of at least ``--smallest`` bytes,
the largest per node) that its nodes read, in the order :func:`taso.cost.residency.run_order` walks
the graph as taso loads it, and in the order of the optimized model ONNX Runtime writes (it writes
the nodes in the order its sequential executor runs them). Names are compared by first appearance
(ONNX Runtime renames what it rewrites). Prints one line per file and the count that agree.

It also reads the order ONNX Runtime runs taso's plain re-export of the file in (what taso writes when it
changes nothing; the run order prices every graph taso may write): "file = re-export" says whether writing
the file back kept its order. With ``--time``, the file and its re-export are timed in one interleaved run
(batch 1, 1 thread): file time / re-export time.

Run: python benchmarks/costs/run_order_check.py ~/.cache/taso-ceiling/*.onnx [--smallest 32768] [--time]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx

import taso
from taso.cost.ort_fusions import first_seen
from taso.cost.ort_fusions import onnx_runtime_weight_order as onnx_runtime_order
from taso.cost.ort_fusions import weight_order as taso_order
from taso.measure.timing import interleaved_times


def letters(names: list[str]) -> str:
    """:func:`first_seen` for reading (past 26 weights the letters repeat; compare with first_seen)."""
    return "".join(chr(ord("A") + i % 26) for i in first_seen(names))


def _time_ratio(model: onnx.ModelProto, reexport: onnx.ModelProto, rounds: int = 5) -> float:
    """The file's time over its re-export's, interleaved (batch 1: a symbolic dim at 1)."""
    rng = np.random.default_rng(0)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {x.name: rng.standard_normal([d.dim_value or 1 for d in x.type.tensor_type.shape.dim]).astype(np.float32)
             for x in model.graph.input if x.name not in initializers}
    file_time, reexport_time = interleaved_times([model.SerializeToString(), reexport.SerializeToString()], feeds, 1, rounds)
    return file_time / reexport_time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--smallest", type=int, default=32 << 10, help="bytes below which a constant is not a weight (default 32768)")
    parser.add_argument("--time", action="store_true", help="also time each file against its re-export")
    args = parser.parse_args(argv)
    same = kept = 0
    for path in args.files:
        model = onnx.load(str(path))
        graph = taso.load_onnx(model)
        reexport = taso.export_onnx(graph)
        theirs, ours = onnx_runtime_order(model, args.smallest), taso_order(graph, args.smallest)
        rewritten = onnx_runtime_order(reexport, args.smallest)
        agree, unchanged = first_seen(rewritten) == first_seen(ours), first_seen(theirs) == first_seen(rewritten)
        same += agree
        kept += unchanged
        timed = f", file / re-export time {_time_ratio(model, reexport):.2f}x" if args.time else ""
        print(f"{'same' if agree else 'DIFFERENT'} {path.name}: {len(theirs)} reads, file = re-export: {unchanged}{timed}"
              + ("" if agree and unchanged else f"\n  onnx runtime, file      {letters(theirs)[:100]}\n  onnx runtime, re-export "
                 f"{letters(rewritten)[:100]}\n  taso                    {letters(ours)[:100]}"))
    print(f"{same}/{len(args.files)} files: taso's order is ONNX Runtime's for the re-export; {kept}/{len(args.files)}: "
          "the re-export runs in the file's order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
