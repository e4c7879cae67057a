"""Normalisations and reductions: batch norm (inference), layer norm, RMS norm, softmax, reduce mean/sum."""

from __future__ import annotations

import numpy as np

from ..ir import TensorType
from .base import ORT_DOMAIN, FINGERPRINT_PRIME, OnnxMapping, Param, as_array, define, define_contrib_importer, normalize_axis, require, same_type
from .elementwise import add


def _batch_norm_shape(types, p) -> TensorType:
    x = types[0]
    require(x.rank >= 2, f"batch_norm: needs rank >= 2, got {x.shape}")
    for t in types[1:]:
        require(t.shape == (x.shape[1],), f"batch_norm: per-channel tensors must have shape ({x.shape[1]},), got {t.shape}")
    return x


def _bn_gain(scale, var, epsilon: float):
    """The per-channel factor of inference batch norm, scale / sqrt(|var| + epsilon), in float64.

    NOTE: ONNX divides by sqrt(var + epsilon), which is NaN for a negative variance; taking
    |var| agrees wherever ONNX is defined (a variance is never negative) and makes the op
    total, so rules about it can be checked on unconstrained random tensors.
    """
    return scale.astype(np.float64) / np.sqrt(np.abs(var.astype(np.float64)) + epsilon)


def _channel_view(vector, rank: int, axis: int):
    """A per-channel vector shaped to broadcast along ``axis`` of a rank-``rank`` tensor (NumPy, CuPy or torch)."""
    shape = [1] * rank
    shape[axis] = -1
    return vector.reshape(shape)


def _batch_norm(xs, p):
    x, scale, bias, mean, var = xs
    gain = _channel_view(_bn_gain(scale, var, p["epsilon"]), x.ndim, 1)
    y = (x - _channel_view(mean, x.ndim, 1)) * gain + _channel_view(bias, x.ndim, 1)
    return y.astype(x.dtype)


def _bn_gain_torch(rt, scale, var, epsilon: float):
    return scale.double() / rt.torch.sqrt(var.double().abs() + epsilon)


def _batch_norm_torch(rt, xs, p):
    x, scale, bias, mean, var = xs
    if x.is_floating_point() and x.dim() >= 2:  # cuDNN's inference batch norm; |var| keeps the op total, as above
        return rt.F.batch_norm(x, mean, var.abs(), scale, bias, False, 0.0, p["epsilon"])
    raise NotImplementedError("batch_norm on integers")


# The exact (fingerprint) semantics replaces 1 / sqrt(|var| + eps) by a fixed polynomial in var,
# distinct from the activations' stand-ins: an identity that holds for every such polynomial
# factor g(var) holds for the real one.
def _exact_gain(scale, var):
    v = np.asarray(var, np.int64) % FINGERPRINT_PRIME
    inv_root = (v * v % FINGERPRINT_PRIME + 7 * v + 11) % FINGERPRINT_PRIME
    return np.asarray(scale, np.int64) % FINGERPRINT_PRIME * inv_root % FINGERPRINT_PRIME


def _batch_norm_exact(xs, p):
    x, scale, bias, mean, var = (np.asarray(a, np.int64) for a in xs)
    gain = _channel_view(_exact_gain(scale, var), x.ndim, 1)
    centred = (x - _channel_view(mean, x.ndim, 1)) % FINGERPRINT_PRIME
    return (centred * gain + _channel_view(bias, x.ndim, 1)) % FINGERPRINT_PRIME


def _epsilon(ctx, default: float = 1e-5) -> float:
    """The node's epsilon as the exporter meant it. ONNX stores it as float32 (1e-5 reads back as 9.99999974e-06):
    the shortest decimal that rounds to the same float32 is the one exporters wrote, and the one rules are stated at."""
    return float(str(np.float32(ctx.attr("epsilon", default))))


def _import_batch_norm(ctx) -> bool:
    if len([o for o in ctx.outputs if o]) != 1 or ctx.attr("training_mode", 0) or ctx.attr_names - {"epsilon", "momentum", "training_mode", "spatial", "is_test"}:
        return False
    if ctx.attr("spatial", 1) != 1:
        return False
    ctx.emit(batch_norm, list(ctx.inputs[:5]), ctx.outputs[:1], epsilon=_epsilon(ctx))
    return True


batch_norm = define(
    "batch_norm",
    arity=5,
    params=[Param("epsilon", "float", 1e-5)],
    shape=_batch_norm_shape,
    numpy=_batch_norm,
    torch=_batch_norm_torch,
    onnx=OnnxMapping(("BatchNormalization",), _import_batch_norm,
                     lambda ctx, n: ctx.emit("BatchNormalization", list(n.inputs), list(n.outputs), epsilon=n.params["epsilon"])),
    groups=("normalization", "has_weights"),
    doc="inference batch normalisation: (x - mean) / sqrt(|var| + eps) * scale + bias, per channel",
    exact=_batch_norm_exact,
)


# ---- folding batch norm into a convolution -----------------------------------------------------------
# batch_norm(conv2d(x, w), scale, bias, mean, var) = conv2d(x, bn_kernel(w, scale, var), bn_shift(scale, bias, mean, var)):
# two weight-only ops (folded into initializers at export), as TASO's fuse_conv_batchnorm(_bias).


def _bn_kernel_shape(types, p) -> TensorType:
    w, scale, var = types
    require(w.rank == 4, f"bn_kernel: needs an OIHW kernel, got {w.shape}")
    require(scale.shape == (w.shape[0],) and var.shape == (w.shape[0],),
            f"bn_kernel: per-channel tensors must have shape ({w.shape[0]},), got {scale.shape} and {var.shape}")
    return w


def _bn_kernel(xs, p):
    w, scale, var = xs
    return (w * _channel_view(_bn_gain(scale, var, p["epsilon"]), w.ndim, 0)).astype(w.dtype)


def _bn_kernel_exact(xs, p):
    w, scale, var = (np.asarray(a, np.int64) for a in xs)
    return w % FINGERPRINT_PRIME * _channel_view(_exact_gain(scale, var), w.ndim, 0) % FINGERPRINT_PRIME


def _export_gain(ctx, scale: str, var: str, epsilon: float, hint: str) -> str:
    dtype = np.dtype(ctx.type(scale).dtype)
    magnitude, shifted, root, gain = (ctx.fresh(f"{hint}_{s}") for s in ("abs", "eps", "sqrt", "gain"))
    ctx.emit("Abs", [var], [magnitude])
    ctx.emit("Add", [magnitude, ctx.const(np.asarray(epsilon, dtype))], [shifted])
    ctx.emit("Sqrt", [shifted], [root])
    ctx.emit("Div", [scale, root], [gain])
    return gain


def _export_bn_kernel(ctx, node) -> None:
    w, scale, var = node.inputs
    gain = _export_gain(ctx, scale, var, node.params["epsilon"], node.outputs[0])
    column = ctx.fresh(node.outputs[0] + "_column")
    ctx.emit("Reshape", [gain, ctx.const(np.asarray([-1, 1, 1, 1], np.int64))], [column])
    ctx.emit("Mul", [w, column], list(node.outputs))


bn_kernel = define(
    "bn_kernel",
    arity=3,
    params=[Param("epsilon", "float", 1e-5)],
    shape=_bn_kernel_shape,
    numpy=_bn_kernel,
    torch=lambda rt, xs, p: (xs[0] * _channel_view(_bn_gain_torch(rt, xs[1], xs[2], p["epsilon"]), xs[0].dim(), 0)).to(xs[0].dtype),
    onnx=OnnxMapping((), None, _export_bn_kernel),
    groups=("kernel_only",),
    doc="a convolution kernel scaled per output channel by batch norm's scale / sqrt(|var| + eps)",
    exact=_bn_kernel_exact,
)


def _bn_shift_shape(types, p) -> TensorType:
    require(all(t.rank == 1 and t.shape == types[0].shape for t in types),
            f"bn_shift: per-channel tensors must have one shape (C,), got {[t.shape for t in types]}")
    return types[0]


def _bn_shift(xs, p):
    scale, bias, mean, var = xs
    return (bias - mean * _bn_gain(scale, var, p["epsilon"])).astype(bias.dtype)


def _bn_shift_exact(xs, p):
    scale, bias, mean, var = (np.asarray(a, np.int64) for a in xs)
    return (bias - mean % FINGERPRINT_PRIME * _exact_gain(scale, var)) % FINGERPRINT_PRIME


def _export_bn_shift(ctx, node) -> None:
    scale, bias, mean, var = node.inputs
    gain = _export_gain(ctx, scale, var, node.params["epsilon"], node.outputs[0])
    moved = ctx.fresh(node.outputs[0] + "_moved")
    ctx.emit("Mul", [mean, gain], [moved])
    ctx.emit("Sub", [bias, moved], list(node.outputs))


bn_shift = define(
    "bn_shift",
    arity=4,
    params=[Param("epsilon", "float", 1e-5)],
    shape=_bn_shift_shape,
    numpy=_bn_shift,
    torch=lambda rt, xs, p: (xs[1] - xs[2] * _bn_gain_torch(rt, xs[0], xs[3], p["epsilon"])).to(xs[1].dtype),
    onnx=OnnxMapping((), None, _export_bn_shift),
    groups=(),
    doc="batch norm's per-channel shift, bias - mean * scale / sqrt(|var| + eps): the bias of the conv it folds into",
    exact=_bn_shift_exact,
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


def _layer_norm_torch(rt, xs, p):
    x = xs[0]
    axis = normalize_axis(p["axis"], x.dim())
    if p["stats"]:
        raise NotImplementedError("layer_norm with its statistics")
    shape = tuple(x.shape[axis:])
    weight = xs[1].expand(shape)
    bias = xs[2].expand(shape) if len(xs) == 3 else None
    return rt.F.layer_norm(x, shape, weight, bias, p["epsilon"])


def _import_layer_norm(ctx) -> bool:
    outputs = [o for o in ctx.outputs if o]
    if outputs != ctx.outputs or ctx.attr_names - {"axis", "epsilon", "stash_type"} or ctx.attr("stash_type", 1) != 1 or len(outputs) == 2:
        return False
    x = ctx.type(ctx.inputs[0])
    ctx.emit(layer_norm, [i for i in ctx.inputs[:3] if i], outputs, stats=int(len(outputs) == 3),
             axis=normalize_axis(int(ctx.attr("axis", -1)), x.rank), epsilon=_epsilon(ctx))
    return True


def _export_layer_norm(ctx, node) -> None:
    """LayerNormalization from opset 17; below it, its decomposition (:func:`_export_decomposed_norm`)."""
    if ctx.opset >= 17:
        ctx.emit("LayerNormalization", list(node.inputs), list(node.outputs), axis=node.params["axis"], epsilon=node.params["epsilon"])
    elif node.params["stats"]:
        raise ctx.error(f"layer_norm with its statistics needs ONNX opset >= 17 (LayerNormalization); the model has opset {ctx.opset}")
    else:
        _export_decomposed_norm(ctx, node, centred=True)


def _export_decomposed_norm(ctx, node, centred: bool) -> None:
    """A layer norm (``centred``) or an RMS norm below the opset of its ONNX operator, as the TorchScript exporter
    writes it: (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * gamma + beta, and x * (1 / sqrt(mean(x^2) + eps))
    * gamma. Standard operators at the model's opset, which ONNX Runtime's LayerNormFusion and SimplifiedLayerNormFusion
    make one kernel again at load (checked on ONNX Runtime 1.32 in tests/test_norm_forms.py)."""
    x, out = node.inputs[0], node.outputs[0]
    x_type = ctx.type(x)
    axes = list(range(normalize_axis(node.params["axis"], x_type.rank), x_type.rank))

    def apply(op_type: str, *inputs: str, output: str | None = None, **attrs) -> str:
        value = output or ctx.fresh(f"{out}_{op_type.lower()}")
        ctx.emit(op_type, list(inputs), [value], **attrs)
        return value

    def const(value: float) -> str:
        return ctx.const(np.asarray(value, x_type.dtype))

    def mean(value: str) -> str:
        averaged = ctx.fresh(f"{out}_reducemean")
        _write_reduce(ctx, "ReduceMean", 18, value, axes, 1, [averaged])
        return averaged

    centre = apply("Sub", x, mean(x)) if centred else x
    root = apply("Sqrt", apply("Add", mean(apply("Pow", centre, const(2))), const(node.params["epsilon"])))
    scaled_by = node.inputs[1]
    if centred:
        normalized = apply("Div", centre, root)
        if len(node.inputs) == 3:
            apply("Add", apply("Mul", normalized, scaled_by), node.inputs[2], output=out)
        else:
            apply("Mul", normalized, scaled_by, output=out)
    else:
        apply("Mul", apply("Mul", x, apply("Div", const(1), root)), scaled_by, output=out)


layer_norm = define(
    "layer_norm",
    arity=(2, 3),
    params=[Param("axis", "int", -1), Param("epsilon", "float", 1e-5), Param("stats", "int", 0, (0, 1))],
    shape=_layer_norm_shape,
    numpy=_layer_norm,
    torch=_layer_norm_torch,
    onnx=OnnxMapping(("LayerNormalization",), _import_layer_norm, _export_layer_norm),
    groups=("normalization",),
    doc="normalises over the axes from `axis` on, then scales and shifts (stats=1 adds mean and 1/std outputs)",
)


# ---- RMS norm (ONNX's RMSNormalization, opset 23) ------------------------------------------------


def _rms_norm_shape(types, p) -> TensorType:
    x, scale = types
    axis = normalize_axis(p["axis"], x.rank)
    require(np.broadcast_shapes(scale.shape, x.shape[axis:]) == x.shape[axis:], f"rms_norm: {scale.shape} does not broadcast to {x.shape[axis:]}")
    return x


def _rms_norm(xs, p):
    x, scale = xs
    axes = tuple(range(normalize_axis(p["axis"], x.ndim), x.ndim))
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt((x64 * x64).mean(axis=axes, keepdims=True) + p["epsilon"]) * scale).astype(x.dtype)


def _rms_norm_torch(rt, xs, p):
    x, scale = xs
    shape = tuple(x.shape[normalize_axis(p["axis"], x.dim()):])
    return rt.F.rms_norm(x, shape, scale.expand(shape), p["epsilon"])


def _import_rms_norm(ctx) -> bool:
    """ONNX's RMSNormalization (23), or ONNX Runtime's SimplifiedLayerNormalization (which its own optimizer writes, in
    the ONNX domain) without its inverse deviation output."""
    outputs = [o for o in ctx.outputs if o]
    if outputs != ctx.outputs[:1] or ctx.attr_names - {"axis", "epsilon", "stash_type"} or ctx.attr("stash_type", 1) != 1 or len(ctx.inputs) != 2:
        return False
    x = ctx.type(ctx.inputs[0])
    ctx.emit(rms_norm, list(ctx.inputs), outputs, axis=normalize_axis(int(ctx.attr("axis", -1)), x.rank), epsilon=_epsilon(ctx))
    return True


def _export_rms_norm(ctx, node) -> None:
    """RMSNormalization from opset 23; below it, its decomposition (:func:`_export_decomposed_norm`)."""
    if ctx.opset >= 23:
        ctx.emit("RMSNormalization", list(node.inputs), list(node.outputs), axis=node.params["axis"], epsilon=node.params["epsilon"])
    else:
        _export_decomposed_norm(ctx, node, centred=False)


rms_norm = define(
    "rms_norm",
    arity=2,
    params=[Param("axis", "int", -1), Param("epsilon", "float", 1e-5)],
    shape=_rms_norm_shape,
    numpy=_rms_norm,
    torch=_rms_norm_torch,
    onnx=OnnxMapping(("RMSNormalization",), _import_rms_norm, _export_rms_norm),
    groups=("normalization",),
    doc="x / sqrt(mean(x^2) + eps) * scale over the axes from `axis` on (ONNX's RMSNormalization; ONNX Runtime's SimplifiedLayerNormalization)",
)
define_contrib_importer("", "SimplifiedLayerNormalization", _import_rms_norm)


def _import_skip_rms_norm(ctx) -> bool:
    """ONNX Runtime's SkipSimplifiedLayerNormalization (com.microsoft), which its transformers optimizer writes for T5
    and Llama blocks: read as the residual Add (then the bias Add) and an rms_norm over the last axis, the sum an
    output where the file reads it; its mean and inverse deviation outputs are not modelled (such a node stays opaque)."""
    inputs, outputs = list(ctx.inputs), list(ctx.outputs) + [""] * (4 - len(ctx.outputs))
    if ctx.attr_names - {"epsilon"} or not 3 <= len(inputs) <= 4 or not all(inputs[:3]) or any(outputs[1:3]) or not outputs[0]:
        return False
    x, skip, gamma = inputs[:3]
    bias, sum_output = (inputs[3:] + [""])[0], outputs[3]
    total = ctx.emit(add, [x, skip], [sum_output] if sum_output and not bias else None)[0]
    if bias:
        total = ctx.emit(add, [total, bias], [sum_output] if sum_output else None)[0]
    ctx.emit(rms_norm, [total, gamma], outputs[:1], axis=ctx.type(x).rank - 1, epsilon=_epsilon(ctx, 1e-12))  # ONNX Runtime's default
    return True


define_contrib_importer(ORT_DOMAIN, "SkipSimplifiedLayerNormalization", _import_skip_rms_norm)


# ---- ONNX Runtime's fused residual + layer norm (com.microsoft) -----------------------------------------



def _skip_layer_norm_shape(types, p) -> list[TensorType]:
    x, skip = types[0], types[1]
    require(x.rank in (2, 3), f"skip_layer_norm: ONNX Runtime's kernel takes a 2-D or 3-D input, not rank {x.rank}")
    require(skip.shape == x.shape, f"skip_layer_norm: the skip {skip.shape} is not the input's shape {x.shape}")
    for t in types[2:]:
        require(t.shape == x.shape[-1:], f"skip_layer_norm: gamma and beta are ({x.shape[-1]},), not {t.shape}")
    return [x, x] if p["sum"] else [x]


def _skip_layer_norm(xs, p):
    """The definition: layer norm over the last axis of the input plus the skip (and, with sum=1, that sum)."""
    total = (xs[0] + xs[1]).astype(xs[0].dtype)
    y = _layer_norm([total, *xs[2:]], dict(axis=-1, epsilon=p["epsilon"], stats=0))
    return [*y, total] if p["sum"] else y


def _skip_layer_norm_torch(rt, xs, p):
    total = xs[0] + xs[1]
    y = rt.F.layer_norm(total, total.shape[-1:], xs[2], xs[3] if len(xs) == 4 else None, p["epsilon"])
    return [y, total] if p["sum"] else y


def _export_skip_layer_norm(ctx, node) -> None:
    # outputs: the normalised sum, its mean and inverse deviation (not written), the input + skip sum
    outputs = [node.outputs[0], "", "", node.outputs[1]] if node.params["sum"] else [node.outputs[0]]
    ctx.emit("SkipLayerNormalization", list(node.inputs), outputs, domain=ORT_DOMAIN, epsilon=node.params["epsilon"])


def _import_skip_layer_norm(ctx) -> bool:
    """A SkipLayerNormalization a file holds (ONNX Runtime's transformers optimizer writes them), so that the rules can
    take it back apart where the pair runs faster. Its bias input, where there is one, is an Add before it; its mean
    and inverse deviation outputs are not modelled (such a node stays opaque)."""
    inputs, outputs = list(ctx.inputs), list(ctx.outputs) + [""] * (4 - len(ctx.outputs))
    if ctx.attr_names - {"epsilon"} or not 3 <= len(inputs) <= 5 or not all(inputs[:3]) or any(outputs[1:3]) or not outputs[0]:
        return False
    x, skip, gamma = inputs[:3]
    beta, bias = (inputs[3:] + ["", ""])[:2]
    if bias:
        x = ctx.emit(add, [x, bias])[0]
    sum_output = outputs[3]
    ctx.emit(skip_layer_norm, [x, skip, gamma, *([beta] if beta else [])], [outputs[0], *([sum_output] if sum_output else [])],
             epsilon=_epsilon(ctx, 1e-12), sum=int(bool(sum_output)))  # ONNX Runtime's default epsilon is 1e-12
    return True


skip_layer_norm = define(
    "skip_layer_norm",
    arity=(3, 4),
    params=[Param("epsilon", "float", 1e-5), Param("sum", "int", 0, (0, 1))],
    shape=_skip_layer_norm_shape,
    numpy=_skip_layer_norm,
    torch=_skip_layer_norm_torch,
    onnx=OnnxMapping((), None, _export_skip_layer_norm),
    groups=("normalization", "ort", "multi_output"),
    doc="ONNX Runtime's SkipLayerNormalization: layer norm over the last axis of input + skip (sum=1 also outputs the sum)",
)
define_contrib_importer(ORT_DOMAIN, "SkipLayerNormalization", _import_skip_layer_norm)


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
    torch=lambda rt, xs, p: rt.torch.softmax(xs[0], dim=p["axis"]),
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


def _reduce_torch(kind: str):
    def impl(rt, xs, p):
        x, dims, keep = xs[0], tuple(p["axes"]), bool(p["keepdims"])
        if not dims:
            return x
        if kind == "max":
            return x.amax(dim=dims, keepdim=keep)
        if kind == "mean" and not x.is_floating_point():
            raise NotImplementedError("reduce_mean on integers")
        return getattr(x, kind)(dim=dims, keepdim=keep)

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
        _write_reduce(ctx, onnx_type, axes_input_from, node.inputs[0], list(node.params["axes"]), node.params["keepdims"], list(node.outputs))

    return exporter


def _write_reduce(ctx, onnx_type: str, axes_input_from: int, data: str, axes: list[int], keepdims: int, outputs: list[str]) -> None:
    """A reduction over ``axes``: an axes input from opset ``axes_input_from`` on, an attribute before it."""
    if ctx.opset >= axes_input_from:
        ctx.emit(onnx_type, [data, ctx.const(np.asarray(axes, np.int64))], outputs, keepdims=keepdims)
    else:
        ctx.emit(onnx_type, [data], outputs, axes=axes, keepdims=keepdims)


_REDUCE_PARAMS = [Param("axes", "ints"), Param("keepdims", "int", 1, (0, 1))]

REDUCE_OPS = {
    "mean": define("reduce_mean", arity=1, params=_REDUCE_PARAMS, shape=_reduce_shape, numpy=_reduce(np.mean), torch=_reduce_torch("mean"),
                   onnx=OnnxMapping(("ReduceMean",), _import_reduce("mean"), _export_reduce("ReduceMean", 18)),
                   groups=("reduction", "linear"), doc="mean over the given axes"),
    "sum": define("reduce_sum", arity=1, params=_REDUCE_PARAMS, shape=_reduce_shape, numpy=_reduce(np.sum), torch=_reduce_torch("sum"), exact="polynomial",
                  onnx=OnnxMapping(("ReduceSum",), _import_reduce("sum"), _export_reduce("ReduceSum", 13)),
                  groups=("reduction", "linear"), doc="sum over the given axes"),
    "max": define("reduce_max", arity=1, params=_REDUCE_PARAMS, shape=_reduce_shape, numpy=_reduce(np.max), torch=_reduce_torch("max"),
                  onnx=OnnxMapping(("ReduceMax",), _import_reduce("max"), _export_reduce("ReduceMax", 18)),
                  groups=("reduction",), doc="maximum over the given axes"),
}
reduce_mean, reduce_sum = REDUCE_OPS["mean"], REDUCE_OPS["sum"]

__all__ = ["batch_norm", "bn_kernel", "bn_shift", "layer_norm", "rms_norm", "skip_layer_norm", "ORT_DOMAIN", "softmax", "reduce_mean", "reduce_sum", "REDUCE_OPS", "same_type"]
