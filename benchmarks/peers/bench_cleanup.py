"""Clean-up and constant folding against the graph simplifiers, side by side on the same files (issue 22).

For each file: taso's import (``load_onnx``, which folds small constant nodes), its clean-up
(:func:`taso.search.cleanup.clean_up`) and its export-time folding (:func:`taso.onnx.folded_weights`:
the weight-only subgraphs evaluated into initializers), beside ``onnxslim.slim`` and
``onnxsim.simplify`` on the same model. Each is timed once per round, the rounds interleaved,
the median kept; the ratio printed is (clean-up + folding) / each peer's whole run (below 1:
taso's clean-up is cheaper than the peer), with the nodes and steps clean-up removed.

Run: python benchmarks/peers/bench_cleanup.py FILE.onnx ... [--rounds 3]
     (BERT-base: python -m taso.models.symbolic_exports DIR --only bert_base, then DIR/bert_base.*.onnx;
      the corpus transformers: python -m taso.models.corpus build, then ~/.cache/taso-corpus/torch-*/transformer_decoder.onnx)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from pathlib import Path

import onnx

from taso.onnx import folded_weights, folding_plan, load_onnx
from taso.search.cleanup import clean_up


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _peer(name: str, model: onnx.ModelProto):
    """A thunk running the peer on a copy of the model (they may edit it in place); None when it is not installed."""
    try:
        module = __import__(name)
    except ImportError:
        return None

    def run():
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return module.slim(copy) if name == "onnxslim" else module.simplify(copy)

    return run


def bench_file(path: Path, rounds: int) -> str:
    model = onnx.load(str(path))
    graph = load_onnx(model)
    cleaned, report = clean_up(graph)
    plan = folding_plan(cleaned)
    stages = {"import": lambda: load_onnx(model), "clean-up": lambda: clean_up(graph), "folding": lambda: folded_weights(cleaned)}
    stages.update({name: run for name in ("onnxslim", "onnxsim") if (run := _peer(name, model)) is not None})
    samples: dict[str, list[float]] = {name: [] for name in stages}
    for r in range(rounds):
        names = list(stages)
        for name in names[r % len(names):] + names[: r % len(names)]:  # a rotating order
            samples[name].append(_seconds(stages[name]))
    median = {name: statistics.median(s) for name, s in samples.items()}
    taso = median["clean-up"] + median["folding"]
    peers = ", ".join(f"{taso / median[p]:.3f}x of {p}'s run ({median[p]:.2f} s)" for p in ("onnxslim", "onnxsim") if p in median)
    return (f"{path.name}: {path.stat().st_size / 1e6:.0f} MB, {len(graph)} nodes; import {median['import']:.2f} s; "
            f"clean-up {median['clean-up']:.3f} s + folding {median['folding']:.3f} s = {taso:.3f} s, {peers}\n"
            f"  clean-up: {report.describe()}\n  folding: {plan.describe()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    for path in args.files:
        print(bench_file(path, args.rounds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
