"""ONNX's fused LSTM and GRU kernels against the unrolled cell loop they would replace, on this CPU (issue 55).

The corpus's ``lstm_cell_steps`` / ``gru_cell_steps`` (``nn.LSTMCell`` / ``nn.GRUCell`` unrolled over the steps of a
steps-first input ``[steps, batch, hidden]``, TorchScript) beside ``nn.LSTM`` / ``nn.GRU`` with the same weights, which
the exporter writes as one ONNX ``LSTM`` / ``GRU`` node over the whole sequence. Both return the last hidden state;
their outputs are checked equal, then they are timed side by side in alternating rounds (1 thread, ENABLE_ALL) at each
batch.

It prints loop time / fused time per batch (above 1: the fused kernel is faster), the median of the rounds. This is
the kernel the size-choosing file's small-batch branch runs since the proved rules ``lstm-cell-start`` /
``-extend`` (and GRU's) write it; before them the best graph taso reached, the loop's input projections merged, read
1.32-1.44x at batch 1 (docs/measured.md, "Session 44").

Run: python benchmarks/costs/bench_rnn_kernels.py [--hidden 256] [--steps 24] [--batches 1 8 32 128] [--rounds 9]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from taso.models.symbolic_exports import CellLoop
from taso.measure.timing import interleaved_times


class LastHidden(nn.Module):
    """``nn.LSTM`` / ``nn.GRU`` over a steps-first input; returns the last hidden state ``[batch, hidden]``."""

    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = self.rnn(x)[1]
        return (state[0] if isinstance(state, tuple) else state)[0]


def pair(kind: str, hidden: int, steps: int) -> tuple[nn.Module, nn.Module]:
    """The cell loop and the sequence module of ``kind`` ("lstm" or "gru"), sharing one set of weights."""
    torch.manual_seed(0)
    rnn, cell = (nn.LSTM(hidden, hidden), nn.LSTMCell(hidden, hidden)) if kind == "lstm" else (nn.GRU(hidden, hidden), nn.GRUCell(hidden, hidden))
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(cell, name).data = getattr(rnn, f"{name}_l0").data
    return CellLoop(cell, hidden, steps, lstm=kind == "lstm", steps_first=True).eval(), LastHidden(rnn).eval()


def export(module: nn.Module, path: Path, hidden: int, steps: int) -> str:
    torch.onnx.export(module, (torch.randn(steps, 2, hidden),), str(path), input_names=["x"], output_names=["h"],
                      dynamic_axes={"x": {1: "batch"}}, dynamo=False, opset_version=17)
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        print(f"hidden {args.hidden}, {args.steps} steps, 1 thread; loop time / fused time, median of {args.rounds} rounds")
        print("| cell | " + " | ".join(f"batch {b}" for b in args.batches) + " |")
        print("|---|" + "---|" * len(args.batches))
        for kind in ("lstm", "gru"):
            loop, fused = pair(kind, args.hidden, args.steps)
            paths = [export(m, Path(tmp) / f"{kind}_{tag}.onnx", args.hidden, args.steps) for m, tag in ((loop, "loop"), (fused, "fused"))]
            ops = {n.op_type for n in onnx.load(paths[1]).graph.node}
            if kind.upper() not in ops:
                raise SystemExit(f"the exporter did not write one {kind.upper()} node for nn.{kind.upper()} (it wrote {sorted(ops)})")
            ratios = []
            for batch in args.batches:
                feeds = {"x": np.random.default_rng(batch).standard_normal((args.steps, batch, args.hidden), dtype=np.float32)}
                outs = [ort.InferenceSession(p, providers=["CPUExecutionProvider"]).run(None, feeds)[0] for p in paths]
                if not np.allclose(outs[0], outs[1], atol=1e-5):
                    raise SystemExit(f"{kind} at batch {batch}: the loop and the fused kernel differ by {np.abs(outs[0] - outs[1]).max():.2e}")
                t_loop, t_fused = interleaved_times(paths, feeds, rounds=args.rounds, labels=["loop", "fused"])
                ratios.append(f"{t_loop / t_fused:.2f}x")
            print(f"| {kind.upper()}Cell loop vs ONNX {kind.upper()} | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
