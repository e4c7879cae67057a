"""Normalisations and reductions: batch norm (inference), layer norm, softmax, reduce mean/sum."""

from __future__ import annotations

import numpy as np

from ..ir import TensorType
from .base import OnnxMapping, Param, as_array, define, normalize_axis, require, same_type


def _batch_norm_shape(types, p) -> TensorType:
    x = types[0]
    require(x.rank >= 2, f"batch_norm: needs rank >= 2, got {x.shape}")
    for t in types[1:]:
        require(t.shape == (x.shape[1],), f"batch_norm: per-channel tensors must have shape ({x.shape[1]},), got {t.shape}")
    return x


def _batch_norm(xs, p):
    x, scale, bias, mean, var = xs
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + p["epsilon"])
    y = (x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)
    return y.astype(x.dtype)


def _import_batch_norm(ctx) -> bool:
    if len([o for o in ctx.outputs if o]) != 1 or ctx.attr("training_mode", 0) or ctx.attr_names - {"epsilon", "momentum", "training_mode", "spatial", "is_test"}:
        return False
    if ctx.attr("spatial", 1) != 1:
        return False
    ctx.emit(batch_norm, list(ctx.inputs[:5]), ctx.outputs[:1], epsilon=float(ctx.attr("epsilon", 1e-5)))
    return True


batch_norm = define(
    "batch_norm",
    arity=5,
    params=[Param("epsilon", "float", 1e-5)],
    shape=_batch_norm_shape,
    numpy=_batch_norm,
    onnx=OnnxMapping(("BatchNormalization",), _import_batch_norm,
                     lambda ctx, n: ctx.emit("BatchNormalization", list(n.inputs), list(n.outputs), epsilon=n.params["epsilon"])),
    groups=("normalization", "has_weights"),
    doc="inference batch normalisation: (x - mean) / sqrt(var + eps) * scale + bias, per channel",
)


def _layer_norm_shape(types, p) -> list[TensorType]:
    x = types[0]
    axis = normalize_axis(p["axis"], x.rank)
    for t in types[1:]:
        require(np.broadcast_shapes(t.shape, x.shape[axis:]) == x.shape[axis:], f"layer_norm: {t.shape} does not broadcast to {x.shape[axis:]}")
    stats = TensorType(x.shape[:axis] + (1,) * (x.rank - axis), "float32")
    return [x, stats, stats] if p["stats"] else [x]


def _layer_norm(xs, p):
    x = xs[0]
    axes = tuple(range(normalize_axis(p["axis"], x.ndim), x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    inv_std = 1 / np.sqrt(var + p["epsilon"])
    y = (x64 - mean) * inv_std * xs[1]
    if len(xs) == 3:
        y = y + xs[2]
    y = y.astype(x.dtype)
    return [y, mean.astype(np.float32), inv_std.astype(np.float32)] if p["stats"] else [y]


def _import_layer_norm(ctx) -> bool:
    outputs = [o for o in ctx.outputs if o]
    if outputs != ctx.outputs or ctx.attr_names - {"axis", "epsilon", "stash_type"} or ctx.attr("stash_type", 1) != 1 or len(outputs) == 2:
        return False
    x = ctx.type(ctx.inputs[0])
    ctx.emit(layer_norm, [i for i in ctx.inputs[:3] if i], outputs, stats=int(len(outputs) == 3),
             axis=normalize_axis(int(ctx.attr("axis", -1)), x.rank), epsilon=float(ctx.attr("epsilon", 1e-5)))
    return True


def _export_layer_norm(ctx, node) -> None:
    if ctx.opset < 17:
        raise ctx.error(f"layer_norm needs ONNX opset >= 17 (LayerNormalization); the model has opset {ctx.opset}")
    ctx.emit("LayerNormalization", list(node.inputs), list(node.outputs), axis=node.params["axis"], epsilon=node.params["epsilon"])


layer_norm = define(
    "layer_norm",
    arity=(2, 3),
    params=[Param("axis", "int", -1), Param("epsilon", "float", 1e-5), Param("stats", "int", 0, (0, 1))],
    shape=_layer_norm_shape,
    numpy=_layer_norm,
    onnx=OnnxMapping(("LayerNormalization",), _import_layer_norm, _export_layer_norm),
    groups=("normalization",),
    doc="normalises over the axes from `axis` on, then scales and shifts (stats=1 adds mean and 1/std outputs)",
)


def _softmax(xs, p):
    x = xs[0]
    axis = p["axis"]
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def _import_softmax(ctx) -> bool:
    x = ctx.type(ctx.inputs[0])
    if ctx.opset < 13:
        # Before opset 13, Softmax flattened the axes from `axis` on: the same when they are all 1 but `axis`.
        axis = normalize_axis(int(ctx.attr("axis", 1)), x.rank)
        if any(d != 1 for d in x.shape[axis + 1 :]):
            return False
    else:
        axis = normalize_axis(int(ctx.attr("axis", -1)), x.rank)
    ctx.emit(softmax, [ctx.inputs[0]], ctx.outputs, axis=axis)
    return True


def _export_softmax(ctx, node) -> None:
    axis = node.params["axis"]
    shape = ctx.type(node.inputs[0]).shape
    if ctx.opset < 13 and any(d != 1 for d in shape[axis + 1 :]):
        raise ctx.error(f"softmax over axis {axis} of a {shape} tensor needs opset >= 13")
    ctx.emit("Softmax", list(node.inputs), list(node.outputs), axis=axis)


def _softmax_shape(types, p) -> TensorType:
    require(0 <= p["axis"] < max(types[0].rank, 1), f"softmax: axis {p['axis']} out of range for rank {types[0].rank}")
    return types[0]


softmax = define(
    "softmax",
    arity=1,
    params=[Param("axis", "int")],
    shape=_softmax_shape,
    numpy=_softmax,
    onnx=OnnxMapping(("Softmax",), _import_softmax, _export_softmax),
    groups=("normalization",),
    doc="exp(x) / sum(exp(x)) along one axis",
)

# ---- reductions ---------------------------------------------------------------------------------


def _reduce_shape(types, p) -> TensorType:
    x = types[0]
    require(all(0 <= a < x.rank for a in p["axes"]), f"reduce: axes {p['axes']} out of range for rank {x.rank}")
    if p["keepdims"]:
        shape = tuple(1 if i in p["axes"] else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in p["axes"])
    return TensorType(shape, x.dtype)


def _reduce(fn):
    def impl(xs, p):
        x = xs[0]
        return as_array(fn(x, axis=p["axes"], keepdims=bool(p["keepdims"]))).astype(x.dtype)

    return impl


def _import_reduce(kind: str):
    def importer(ctx) -> bool:
        op = REDUCE_OPS[kind]
        x = ctx.type(ctx.inputs[0])
        if 0 in x.shape:
            return False  # reductions over empty sets: identity values differ per op
        if "axes" in ctx.attr_names:
            axes = list(ctx.attr("axes"))
        elif len(ctx.inputs) > 1 and ctx.inputs[1]:
            value = ctx.const(ctx.inputs[1])
            if value is None:
                return False
            axes = [int(a) for a in value.reshape(-1)]
        else:
            axes = []
        if not axes:
            if ctx.attr("noop_with_empty_axes", 0):
                ctx.alias(ctx.outputs[0], ctx.inputs[0])
                return True
            axes = list(range(x.rank))
        axes = tuple(sorted({normalize_axis(int(a), x.rank) for a in axes}))
        ctx.emit(op, [ctx.inputs[0]], ctx.outputs, axes=axes, keepdims=int(ctx.attr("keepdims", 1)))
        return True

    return importer


def _export_reduce(onnx_type: str, axes_input_from: int):
    def exporter(ctx, node) -> None:
        axes, keep = list(node.params["axes"]), node.params["keepdims"]
        if ctx.opset >= axes_input_from:
            ctx.emit(onnx_type, [node.inputs[0], ctx.const(np.asarray(axes, np.int64))], list(node.outputs), keepdims=keep)
        else:
            ctx.emit(onnx_type, list(node.inputs), list(node.outputs), axes=axes, keepdims=keep)

    return exporter


_REDUCE_PARAMS = [Param("axes", "ints"), Param("keepdims", "int", 1, (0, 1))]

REDUCE_OPS = {
    "mean": define("reduce_mean", arity=1, params=_REDUCE_PARAMS, shape=_reduce_shape, numpy=_reduce(np.mean),
                   onnx=OnnxMapping(("ReduceMean",), _import_reduce("mean"), _export_reduce("ReduceMean", 18)),
                   groups=("reduction", "linear"), doc="mean over the given axes"),
    "sum": define("reduce_sum", arity=1, params=_REDUCE_PARAMS, shape=_reduce_shape, numpy=_reduce(np.sum), exact="polynomial",
                  onnx=OnnxMapping(("ReduceSum",), _import_reduce("sum"), _export_reduce("ReduceSum", 13)),
                  groups=("reduction", "linear"), doc="sum over the given axes"),
    "max": define("reduce_max", arity=1, params=_REDUCE_PARAMS, shape=_reduce_shape, numpy=_reduce(np.max),
                  onnx=OnnxMapping(("ReduceMax",), _import_reduce("max"), _export_reduce("ReduceMax", 18)),
                  groups=("reduction",), doc="maximum over the given axes"),
}
reduce_mean, reduce_sum = REDUCE_OPS["mean"], REDUCE_OPS["sum"]

__all__ = ["batch_norm", "layer_norm", "softmax", "reduce_mean", "reduce_sum", "REDUCE_OPS", "same_type"]
