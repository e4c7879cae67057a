"""Unrolled recurrent cells and their hand-merged ceilings: the files of the cell-ceiling benchmark
(benchmarks/end_to_end/bench_cell_ceiling.py) and its tests.

The *original* is :mod:`taso.models.symbolic_exports`' LSTMCell or GRUCell loop unrolled over ``steps`` (seeded,
eval mode). Its *ceiling* is the merge taso's k-ary rules aim at, done by hand in PyTorch with the cell's own
weights: the input projections of all steps as one product. :func:`prepare` exports both and asserts them equal on
ONNX Runtime.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn
from torch.nn import functional as F

from . import symbolic_exports as se

CELLS = ("lstm", "gru")
CHECK_BATCHES = (1, 3)  # the ceiling must equal the original at these batch sizes
RTOL = 1e-4


class MergedCellLoop(nn.Module):
    """The same cell unrolled over ``steps``, with the input projections of all steps merged by hand into one
    product: ``x.reshape(batch * steps, hidden) @ W_ih^T + b_ih``, then per step only ``h @ W_hh^T + b_hh`` and the
    gate arithmetic of ``nn.LSTMCell`` / ``nn.GRUCell``. The weights are the given cell's (state dict copied)."""

    def __init__(self, cell: nn.Module, hidden: int, steps: int, lstm: bool):
        super().__init__()
        self.cell = (nn.LSTMCell if lstm else nn.GRUCell)(cell.input_size, hidden)
        self.cell.load_state_dict(cell.state_dict())
        self.hidden, self.steps, self.lstm = hidden, steps, lstm
        self.inputs, self.gates = cell.input_size, (4 if lstm else 3) * hidden  # Python ints: traced shapes stay static but batch
        self.split_sizes = [hidden] * (4 if lstm else 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cell, steps = self.cell, self.steps
        merged = F.linear(x.reshape(-1, self.inputs), cell.weight_ih, cell.bias_ih)  # [batch * steps, gates]: all steps at once
        projected = merged.reshape(-1, steps, self.gates)  # [batch, steps, gates]
        h = x.new_zeros(x.shape[0], self.hidden)
        c = x.new_zeros(x.shape[0], self.hidden)
        for t in range(steps):
            gi = projected[:, t]
            gh = F.linear(h, cell.weight_hh, cell.bias_hh)
            # split with explicit sizes, not chunk: the TorchScript exporter writes chunk on a traced shape as
            # Shape/Div/Slice arithmetic, which would slow the ceiling down
            if self.lstm:  # ATen's lstm_cell: gates i, f, g, o
                i, f, g, o = torch.split(gi + gh, self.split_sizes, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
            else:  # ATen's gru_cell: gates r, z, n; h' = n + z * (h - n) (= (1 - z) * n + z * h)
                ir, iz, in_ = torch.split(gi, self.split_sizes, 1)
                hr, hz, hn = torch.split(gh, self.split_sizes, 1)
                r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
                n = torch.tanh(in_ + r * hn)
                h = n + z * (h - n)
        return h


def original_spec(cell: str, hidden: int, steps: int) -> se.Spec:
    """symbolic_exports' unrolled cell (seeded, eval mode): the file taso is given."""
    torch.manual_seed(se.SEED)
    spec = (se.lstm_cell_loop if cell == "lstm" else se.gru_cell_loop)(hidden, steps)
    spec.module.eval()
    return spec


def ceiling_spec(original: se.Spec) -> se.Spec:
    """The hand-merged version of ``original`` (same weights, same input and symbolic batch)."""
    loop = original.module
    merged = MergedCellLoop(loop.cell, loop.hidden, loop.steps, loop.lstm).eval()
    return se.Spec(merged, dict(original.inputs), dict(original.symbolic))


def export(name: str, spec: se.Spec, exporter: str, out_dir: Path, redo: bool = False) -> Path:
    """``out_dir/NAME.EXPORTER.onnx`` through symbolic_exports' exporter (reused when already there unless ``redo``)."""
    path = out_dir / f"{name}.{exporter}.onnx"
    if path.exists() and not redo:
        return path
    result, _ = se.export_one(name, lambda: spec, exporter, out_dir)
    if result.path is None:
        raise RuntimeError(f"{result.name}: {result.error}")
    return result.path


def input_weight(model: onnx.ModelProto, weight: np.ndarray) -> set[str]:
    """Names of the values holding ``weight`` or its transpose: initializers and Constants with those values, and
    Transposes / Identities of them."""
    values = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = onnx.numpy_helper.to_array(node.attribute[0].t)
    names = {n for n, v in values.items() if (v.shape == weight.shape and np.array_equal(v, weight))
             or (v.shape == weight.T.shape and np.array_equal(v, weight.T))}
    for node in model.graph.node:  # graph order is topological
        if node.op_type in ("Transpose", "Identity") and node.input and node.input[0] in names:
            names.add(node.output[0])
    return names


def input_projections(model: onnx.ModelProto, weight: np.ndarray) -> int:
    """How many MatMul/Gemm nodes multiply by the input weight (their second input): ``steps`` unrolled, 1 merged."""
    names = input_weight(model, weight)
    return sum(1 for n in model.graph.node if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in names)


def session(path: Path):
    """One ONNX Runtime CPU session with one thread."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def max_relative_difference(original: Path, ceiling: Path, hidden: int, steps: int, batches=CHECK_BATCHES, seed: int = 1) -> float:
    """The largest |ceiling - original| / max(1, max|original|) on ONNX Runtime over random inputs at ``batches``."""
    rng = np.random.default_rng(seed)
    a, b = session(original), session(ceiling)
    worst = 0.0
    for batch in batches:
        feeds = {"x": rng.standard_normal((batch, steps, hidden)).astype(np.float32)}
        want, got = a.run(None, feeds)[0], b.run(None, feeds)[0]
        if want.shape != got.shape:
            return math.inf
        worst = max(worst, float(np.max(np.abs(got - want))) / max(1.0, float(np.max(np.abs(want)))))
    return worst


def prepare(cell: str, hidden: int, steps: int, exporter: str, out_dir: Path, redo: bool = False) -> tuple[Path, Path]:
    """The original and the ceiling exported, the ceiling asserted equal to the original on ONNX Runtime."""
    original = original_spec(cell, hidden, steps)
    name = f"{cell}_h{hidden}_s{steps}"
    with torch.no_grad():
        path_original = export(name, original, exporter, out_dir, redo)
        path_ceiling = export(f"{name}_ceiling", ceiling_spec(original), exporter, out_dir, redo)
    difference = max_relative_difference(path_original, path_ceiling, hidden, steps)
    assert difference <= RTOL, f"{path_ceiling.name} differs from {path_original.name}: {difference:.2e} relative > {RTOL}"
    return path_original, path_ceiling
