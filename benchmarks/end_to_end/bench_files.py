"""Any ONNX files timed against the first, side by side: the median of interleaved series each in fresh sessions.

What the end-to-end guard measures, for files taso did not necessarily write (a graph from an experiment, a
simplifier's output, two engines' outputs): ``input time / file time`` per file, 1 thread, ONNX Runtime at
ENABLE_ALL, each ratio the median of ``--series`` series (:func:`taso.measure.timing.fresh_session_speedups`: a pair of
sessions can run a model 10-40% apart from the next pair). Inputs are drawn at random from the first file (a
symbolic dim given by ``--input-shape``).

Run: python benchmarks/end_to_end/bench_files.py INPUT.onnx OTHER.onnx [MORE.onnx ...] [--series 3] [--rounds 5] [--input-shape x=1,128]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from taso.models import corpus

from taso.measure.inputs import random_input_sets
from taso.measure.timing import fresh_session_speedups  # noqa: E402
from taso.onnx import read_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="the first is the reference")
    parser.add_argument("--series", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...", help="an input's shape (symbolic dims)")
    args = parser.parse_args()
    if len(args.files) < 2:
        parser.error("give the reference and at least one file to time against it")
    try:
        shapes = {name: [int(d) for d in dims.split(",")] for name, dims in (item.split("=", 1) for item in args.input_shape)}
    except ValueError:
        parser.error("--input-shape takes NAME=D0,D1,... with whole numbers")
    feeds = random_input_sets(corpus.with_static_inputs(read_model(args.files[0], external_data=False), shapes), (0,))[0]
    seconds, speedups = fresh_session_speedups(args.files, feeds, args.threads, args.rounds, args.series)
    print(f"{args.files[0]}: {seconds * 1e3:.3f} ms a run (median of {args.series} series)")
    for path, speedup in zip(args.files[1:], speedups[1:]):
        print(f"{speedup:.3f}x  {path}")


if __name__ == "__main__":
    main()
