"""A second series of one `taso bench --runtime torch` result: the input and the model taso kept, timed again side by
side on the torch runtime in a fresh process (no search), as the device run's second series.

    python benchmarks/gpu/retime.py MODEL KEPT.onnx --out retime.json [--rounds 7]

MODEL is what `taso bench` was given (a zoo name or an .onnx file), KEPT.onnx the file it wrote beside its results.
Both are checked equal on the runtime first. Writes {"speedup", "ms", "timing"}.
"""

from __future__ import annotations

import argparse
import json
import sys

import taso
from taso.bench.rows import load_model
from taso.measure.inputs import random_inputs
from taso.measure.outputs import compare_outputs
from taso.measure.torch_runtime import Replay, TorchGraph, default_device, interleaved_replay_times
from taso.onnx.files import write_text_atomically


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("kept")
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    device = default_device()
    _, model, _ = load_model(args.model, 1)
    original, kept = taso.load_onnx(model), taso.load_onnx(args.kept)
    feeds = random_inputs(original)
    graphs = [TorchGraph(original, device), TorchGraph(kept, device)]
    want, got = (g.run_host(feeds) for g in graphs)
    comparison = compare_outputs(want, dict(zip(want, got.values())))
    if not comparison.ok:
        print(f"{args.kept}: differs from {args.model} on the torch runtime: {comparison.describe()}", file=sys.stderr)
        return 3
    replays = [Replay(g, feeds) for g in graphs]
    before, after = interleaved_replay_times(replays, args.rounds)
    result = {"speedup": before / after, "ms": {"torch_original": before * 1e3, "torch_taso": after * 1e3},
              "timing": ", ".join(sorted({r.timing for r in replays}))}
    write_text_atomically(args.out, json.dumps(result, indent=1))
    print(f"{args.model}: {result['speedup']:.3f}x ({result['timing']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
