"""Recurrent cells over a sequence: ONNX's LSTM and GRU, in the form torch's cells define them.

An unrolled ``nn.LSTMCell`` / ``nn.GRUCell`` loop runs a dozen small kernels a step; ONNX Runtime's LSTM and GRU kernels
run the whole sequence in one (1.9-2.2x the loop at batch 1 on a 2-vCPU EPYC, hidden 256, 24 steps:
``benchmarks/costs/bench_rnn_kernels.py``). taso's ops take the cell's own weights as the exporters leave them, the
products' right operands ``[input, gates * hidden]`` and ``[hidden, gates * hidden]`` and their biases, in torch's gate
order (LSTM: input, forget, cell, output; GRU: reset, update, new), so that a rule from a cell's written-out form names
the weights it reads; the exporter reorders them into ONNX's layout (LSTM: i, o, f, c; GRU: z, r, h), which ONNX
Runtime folds at load. Both return the last hidden state (and the LSTM its last cell state), ``[batch, hidden]``: what
a loop over the steps hands on.

The steps' inputs come stacked along the rows, ``[steps * batch, input]``: a sequence two cells extend is then a
concatenation along axis 0 of what each step reads (``specs/recurrent.py`` states the rules' laws that way), and the
steps are the rows over the state's batch.

    lstm(x [steps * batch, input], h [batch, hidden], c [batch, hidden], wi, bi, wh, bh) -> (h_last, c_last)
    gru(x [steps * batch, input], h [batch, hidden], wi, bi, wh, bh) -> h_last
"""

from __future__ import annotations

import numpy as np

from ..ir import TensorType
from .base import OnnxMapping, define, require

LSTM_GATES, GRU_GATES = 4, 3
_LSTM_TO_ONNX = (0, 3, 1, 2)  # ONNX's i, o, f, c from torch's i, f, g, o
_GRU_TO_ONNX = (1, 0, 2)  # ONNX's z, r, h from torch's r, z, n


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def _cell_shape(gates: int, states: int):
    def shape(types, p) -> list[TensorType]:
        x, state = types[0], types[1]
        weights = types[1 + states:]
        require(x.rank == 2 and state.rank == 2, f"a recurrent cell needs x [steps * batch, input] and states [batch, hidden], got {x.shape} and {state.shape}")
        hidden = state.shape[1]
        wi, bi, wh, bh = weights
        require(all(t.dtype == x.dtype for t in types), "a recurrent cell's inputs must share one dtype")
        require(steps_of(x.shape[0], state.shape[0]) is not None, f"x's {x.shape[0]} rows are not steps of the state's batch {state.shape[0]}")
        require(x.shape[1] == wi.shape[0], f"x's {x.shape[1]} features are not the input weight's {wi.shape[0]} rows")
        require(all(t.shape == state.shape for t in types[1:1 + states]), "the cell's states must have one shape")
        require(wi.shape == (x.shape[1], gates * hidden) and wh.shape == (hidden, gates * hidden),
                f"weights {wi.shape} and {wh.shape} are not [input, {gates} * hidden] and [hidden, {gates} * hidden]")
        require(bi.shape == bh.shape == (gates * hidden,), f"biases {bi.shape} and {bh.shape} are not [{gates} * hidden]")
        return [state] * states if states > 1 else state
    return shape


def steps_of(rows, batch) -> int | None:
    """How many steps ``rows`` stacked rows hold at ``batch``: a whole number of batches, at least one (symbolic dims
    alike: ``24 * batch`` rows hold 24 steps), else None."""
    if int(batch) <= 0 or int(rows) % int(batch):
        return None
    steps = int(rows) // int(batch)
    return steps if steps >= 1 and rows == steps * batch else None


def _steps(x: np.ndarray, batch: int):
    return x.reshape(-1, batch, x.shape[1])


def _lstm(xs, p):
    x, h, c, wi, bi, wh, bh = xs
    for step in _steps(x, h.shape[0]):
        i, f, g, o = np.split(step @ wi + bi + (h @ wh + bh), LSTM_GATES, axis=1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    return [h.astype(x.dtype), c.astype(x.dtype)]


def _gru(xs, p):
    x, h, wi, bi, wh, bh = xs
    for step in _steps(x, h.shape[0]):
        ir, iz, in_ = np.split(step @ wi + bi, GRU_GATES, axis=1)
        hr, hz, hn = np.split(h @ wh + bh, GRU_GATES, axis=1)
        r, z = _sigmoid(ir + hr), _sigmoid(iz + hz)
        n = np.tanh(in_ + r * hn)
        h = (1 - z) * n + z * h
    return h.astype(x.dtype)


def _torch_cell(kernel: str, states: int):
    """torch's own sequence kernel (``torch.lstm`` / ``torch.gru``: cuDNN's on a GPU, the kernel a deployment runs),
    which takes the weights transposed, ``[gates * hidden, rows]``, in the gate order taso's ops already use."""
    def run(rt, xs, p):
        x, initial, (wi, bi, wh, bh) = xs[0], xs[1:1 + states], xs[1 + states:]
        batch = initial[0].shape[0]
        sequence = x.reshape(-1, batch, x.shape[1])
        hx = [s.unsqueeze(0) for s in initial]
        weights = [wi.t().contiguous(), wh.t().contiguous(), bi, bh]
        out = getattr(rt.torch, kernel)(sequence, tuple(hx) if states > 1 else hx[0], weights, True, 1, 0.0, False, False, False)
        last = [state.squeeze(0) for state in out[1:]]
        return last if states > 1 else last[0]
    return run


def _onnx_weights(ctx, weight: str, gates: int, order: tuple[int, ...]) -> str:
    """``[rows, gates * hidden]`` in torch's gate order as ONNX's ``[1, gates * hidden, rows]`` in its own."""
    rows, width = ctx.type(weight).shape
    blocks = [ctx.fresh(f"{weight}_gate") for _ in range(gates)]
    ctx.emit("Split", [weight, ctx.const(np.full(gates, width // gates, np.int64))] if ctx.opset >= 13 else [weight], blocks, axis=1,
             **({} if ctx.opset >= 13 else {"split": [width // gates] * gates}))
    reordered, transposed, out = ctx.fresh(f"{weight}_onnx_order"), ctx.fresh(f"{weight}_transposed"), ctx.fresh(f"{weight}_onnx")
    ctx.emit("Concat", [blocks[k] for k in order], [reordered], axis=1)
    ctx.emit("Transpose", [reordered], [transposed], perm=[1, 0])
    ctx.emit("Reshape", [transposed, ctx.const(np.asarray([1, width, rows], np.int64))], [out])
    return out


def _onnx_biases(ctx, bi: str, bh: str, gates: int, order: tuple[int, ...]) -> str:
    """The two biases as ONNX's ``[1, 2 * gates * hidden]``, each in ONNX's gate order."""
    width = ctx.type(bi).shape[0]
    parts = []
    for bias in (bi, bh):
        blocks = [ctx.fresh(f"{bias}_gate") for _ in range(gates)]
        ctx.emit("Split", [bias, ctx.const(np.full(gates, width // gates, np.int64))] if ctx.opset >= 13 else [bias], blocks, axis=0,
                 **({} if ctx.opset >= 13 else {"split": [width // gates] * gates}))
        parts += [blocks[k] for k in order]
    joined, out = ctx.fresh(f"{bi}_onnx"), ctx.fresh(f"{bi}_onnx_row")
    ctx.emit("Concat", parts, [joined], axis=0)
    ctx.emit("Reshape", [joined, ctx.const(np.asarray([1, 2 * width], np.int64))], [out])
    return out


def _one_direction(ctx, state: str) -> str:
    """``[batch, hidden]`` as ``[1, batch, hidden]`` (ONNX's states carry a direction axis)."""
    out = ctx.fresh(f"{state}_directions")
    ctx.emit("Reshape", [state, ctx.const(np.asarray([1, -1, ctx.type(state).shape[1]], np.int64))], [out])
    return out


def _export_cell(ctx, node, op_type: str, gates: int, order: tuple[int, ...], **attrs) -> None:
    states = len(node.outputs)
    x, initial, (wi, bi, wh, bh) = node.inputs[0], node.inputs[1:1 + states], node.inputs[1 + states:]
    hidden = ctx.type(initial[0]).shape[1]
    sequence = ctx.fresh(f"{x}_steps")  # [steps, batch, input], the batch read from the state
    batch = ctx.dim_tensor(ctx.type(initial[0]).shape[0])
    target = ctx.fresh(f"{x}_steps_shape")
    ctx.emit("Concat", [ctx.const(np.asarray([-1], np.int64)), batch, ctx.const(np.asarray([ctx.type(x).shape[1]], np.int64))], [target], axis=0)
    ctx.emit("Reshape", [x, target], [sequence])
    inputs = [sequence, _onnx_weights(ctx, wi, gates, order), _onnx_weights(ctx, wh, gates, order), _onnx_biases(ctx, bi, bh, gates, order), ""]
    inputs += [_one_direction(ctx, s) for s in initial]
    last = [ctx.fresh(f"{out}_directions") for out in node.outputs]
    ctx.emit(op_type, inputs, ["", *last], hidden_size=int(hidden), **attrs)
    for directions, out in zip(last, node.outputs):
        ctx.emit("Reshape", [directions, ctx.const(np.asarray([-1, hidden], np.int64))], [out])


lstm = define(
    "lstm",
    arity=7,
    shape=_cell_shape(LSTM_GATES, 2),
    numpy=_lstm,
    onnx=OnnxMapping((), None, lambda ctx, n: _export_cell(ctx, n, "LSTM", LSTM_GATES, _LSTM_TO_ONNX)),
    groups=("recurrent", "multi_output"),
    torch=_torch_cell("lstm", 2),
    doc="nn.LSTMCell over the steps of x [steps, batch, input] from states h, c: the last (h, c); weights in torch's gate order",
)

gru = define(
    "gru",
    arity=6,
    shape=_cell_shape(GRU_GATES, 1),
    numpy=_gru,
    onnx=OnnxMapping((), None, lambda ctx, n: _export_cell(ctx, n, "GRU", GRU_GATES, _GRU_TO_ONNX, linear_before_reset=1)),
    groups=("recurrent",),
    torch=_torch_cell("gru", 1),
    doc="nn.GRUCell over the steps of x [steps, batch, input] from state h: the last h; weights in torch's gate order",
)

__all__ = ["lstm", "gru", "LSTM_GATES", "GRU_GATES"]
