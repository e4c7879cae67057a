"""Convolution and pooling over NCHW images: conv2d (groups, fused activation), enlarge, pools."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..ir import TensorType
from .base import FINGERPRINT_PRIME, OnnxMapping, Param, array_module, contiguous, define, modular_inverse, require
from .elementwise import ACTIVATION_PARAM, apply_activation, emit_with_activation, exact_with_activation, torch_activation


def _out_dim(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int = 1, ceil: bool = False) -> int:
    span = (kernel - 1) * dilation + 1
    room = size + pad_begin + pad_end - span
    require(room >= 0, f"window of {span} does not fit in {size} + padding {pad_begin}+{pad_end}")
    if not ceil:
        return room // stride + 1
    out = -(-room // stride) + 1
    if (out - 1) * stride >= size + pad_begin:  # the last window must start inside the input
        out -= 1
    return out


def _windows(x: np.ndarray, kernel, strides, pads, dilations, fill: float, extra=(0, 0)) -> np.ndarray:
    """Padded sliding windows of an NCHW array: shape (N, C, OH, OW, KH, KW)."""
    (pt, pl, pb, pr), (dh, dw) = pads, dilations
    padded = np.pad(x, ((0, 0), (0, 0), (pt, pb + extra[0]), (pl, pr + extra[1])), constant_values=fill)
    span = ((kernel[0] - 1) * dh + 1, (kernel[1] - 1) * dw + 1)
    view = sliding_window_view(padded, span, axis=(2, 3))
    return view[:, :, :: strides[0], :: strides[1], ::dh, ::dw]


def same_pads(size_hw, kernel, strides, dilations, upper: bool = True) -> tuple[int, int, int, int]:
    """Explicit (top, left, bottom, right) pads of ONNX's SAME_UPPER / SAME_LOWER auto padding."""
    pads = []
    for size, k, s, d in zip(size_hw, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        pads.append((small, big) if upper else (big, small))
    return (pads[0][0], pads[1][0], pads[0][1], pads[1][1])


def _spatial_attrs(ctx, kernel) -> tuple | None:
    """strides, pads, dilations of an ONNX Conv/Pool node (None when not 2-D or not static)."""
    x = ctx.type(ctx.inputs[0])
    if x.rank != 4:
        return None
    strides = tuple(int(s) for s in ctx.attr("strides", (1, 1)))
    dilations = tuple(int(s) for s in ctx.attr("dilations", (1, 1)))
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = same_pads(x.shape[2:], kernel, strides, dilations, auto_pad == "SAME_UPPER")
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    else:
        pads = tuple(int(p) for p in ctx.attr("pads", (0, 0, 0, 0)))
    if len(strides) != 2 or len(dilations) != 2 or len(pads) != 4:
        return None
    return strides, pads, dilations


def _spatial_onnx_attrs(p) -> dict:
    return {"strides": list(p["strides"]), "pads": list(p["pads"]), "dilations": list(p["dilations"])}


SPATIAL_PARAMS = [Param("strides", "ints", (1, 1)), Param("pads", "ints", (0, 0, 0, 0)), Param("dilations", "ints", (1, 1))]

# ---- conv2d --------------------------------------------------------------------------------------


def _conv_shape(types, p) -> TensorType:
    x, w = types[0], types[1]
    require(x.rank == 4 and w.rank == 4, f"conv2d: needs NCHW input and OIHW kernel, got {x.shape} and {w.shape}")
    g = p["groups"]
    require(g >= 1 and x.shape[1] == w.shape[1] * g and w.shape[0] % g == 0,
            f"conv2d: {x.shape[1]} input channels, kernel {w.shape} and groups {g} do not fit")
    require(x.dtype == w.dtype, "conv2d: input and kernel dtypes differ")
    if len(types) == 3:
        require(types[2].shape == (w.shape[0],), f"conv2d: bias shape {types[2].shape} is not ({w.shape[0]},)")
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = p["strides"], p["pads"], p["dilations"]
    oh = _out_dim(x.shape[2], w.shape[2], sh, pt, pb, dh)
    ow = _out_dim(x.shape[3], w.shape[3], sw, pl, pr, dw)
    return TensorType((x.shape[0], w.shape[0], oh, ow), x.dtype)


def _conv2d(xs, p):
    x, w = xs[0], xs[1]
    n, c = x.shape[:2]
    m, cg, kh, kw = w.shape
    g = p["groups"]
    win = _windows(x, (kh, kw), p["strides"], p["pads"], p["dilations"], 0.0)  # N, C, OH, OW, KH, KW
    oh, ow = win.shape[2:4]
    # (G, N*OH*OW, Cg*KH*KW) @ (G, Cg*KH*KW, M/G): one batched GEMM for every group.
    cols = win.reshape(n, g, cg, oh, ow, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6).reshape(g, n * oh * ow, cg * kh * kw)
    kernels = w.reshape(g, m // g, cg * kh * kw).transpose(0, 2, 1)
    y = np.matmul(cols, kernels)  # G, N*OH*OW, M/G
    y = y.reshape(g, n, oh, ow, m // g).transpose(1, 0, 4, 2, 3).reshape(n, m, oh, ow)
    if len(xs) == 3:
        y = y + xs[2].reshape(1, m, 1, 1)
    return contiguous(apply_activation(p["activation"], y.astype(x.dtype, copy=False)))


def _symmetric(pads) -> tuple[int, int] | None:
    """(top, left) when top == bottom and left == right (a padding cuDNN takes itself), else None."""
    t, l, b, r = pads
    return (t, l) if t == b and l == r else None


def _conv2d_torch(rt, xs, p):
    x, w = xs[0], xs[1]
    padding = _symmetric(p["pads"])
    if padding is None:
        t, l, b, r = p["pads"]
        x, padding = rt.F.pad(x, (l, r, t, b)), (0, 0)
    y = rt.F.conv2d(x, w, xs[2] if len(xs) == 3 else None, p["strides"], padding, p["dilations"], p["groups"])
    return torch_activation(rt, p["activation"], y)


def _import_conv(ctx) -> bool:
    w = ctx.type(ctx.inputs[1])
    if w.rank != 4 or ctx.attr_names - {"strides", "pads", "dilations", "group", "kernel_shape", "auto_pad"}:
        return False
    if tuple(ctx.attr("kernel_shape", w.shape[2:])) != w.shape[2:]:
        return False
    spatial = _spatial_attrs(ctx, w.shape[2:])
    if spatial is None:
        return False
    strides, pads, dilations = spatial
    inputs = [i for i in ctx.inputs[:3] if i]
    ctx.emit(conv2d, inputs, ctx.outputs, strides=strides, pads=pads, dilations=dilations, groups=int(ctx.attr("group", 1)))
    return True


conv2d = define(
    "conv2d",
    arity=(2, 3),
    params=[*SPATIAL_PARAMS, Param("groups", "int", 1), ACTIVATION_PARAM],
    shape=_conv_shape,
    numpy=_conv2d,
    torch=_conv2d_torch,
    onnx=OnnxMapping(("Conv",), _import_conv,
                     lambda ctx, n: emit_with_activation(ctx, "Conv", list(n.inputs), n, group=n.params["groups"], **_spatial_onnx_attrs(n.params))),
    groups=("linear_in_each", "has_activation", "has_weights"),
    doc="2-D cross-correlation (NCHW, OIHW kernel, optional bias) followed by an optional activation",
    exact=exact_with_activation(_conv2d),
)

# ---- enlarge ---------------------------------------------------------------------------------------


def _enlarge_pads(shape, kernel) -> tuple[int, int, int, int]:
    dh, dw = kernel[0] - shape[2], kernel[1] - shape[3]
    return dh // 2, dw // 2, dh - dh // 2, dw - dw // 2


def _enlarge_shape(types, p) -> TensorType:
    w, (kh, kw) = types[0], p["kernel"]
    require(w.rank == 4 and kh >= w.shape[2] and kw >= w.shape[3], f"enlarge: kernel {w.shape} cannot grow to {kh}x{kw}")
    require((kh - w.shape[2]) % 2 == 0 and (kw - w.shape[3]) % 2 == 0, f"enlarge: growing {w.shape[2:]} to {(kh, kw)} cannot stay centred")
    return TensorType(w.shape[:2] + (kh, kw), w.dtype)


def _enlarge(xs, p):
    w = xs[0]
    t, l, b, r = _enlarge_pads(w.shape, p["kernel"])
    return np.pad(w, ((0, 0), (0, 0), (t, b), (l, r)))


def _export_enlarge(ctx, node) -> None:
    t, l, b, r = _enlarge_pads(ctx.type(node.inputs[0]).shape, node.params["kernel"])
    pads = [0, 0, t, l, 0, 0, b, r]
    if ctx.opset < 11:
        ctx.emit("Pad", [node.inputs[0]], list(node.outputs), pads=pads)
    else:
        ctx.emit("Pad", [node.inputs[0], ctx.const(np.asarray(pads, np.int64))], list(node.outputs))


enlarge = define(
    "enlarge",
    arity=1,
    params=[Param("kernel", "ints")],
    shape=_enlarge_shape,
    numpy=_enlarge,
    torch=lambda rt, xs, p: rt.F.pad(xs[0], (lambda t, l, b, r: (l, r, t, b))(*_enlarge_pads(tuple(xs[0].shape), p["kernel"]))),
    onnx=OnnxMapping((), None, _export_enlarge),
    groups=("linear", "kernel_only"),
    doc="zero-pads an OIHW kernel to a larger, centred kernel size (conv with padding+1 keeps its result)",
    exact="polynomial",
)

# ---- pooling ----------------------------------------------------------------------------------------


def _pool_shape(types, p) -> TensorType:
    x = types[0]
    require(x.rank == 4, f"pooling needs an NCHW input, got {x.shape}")
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = p["kernel"], p["strides"], p["pads"], p["dilations"]
    ceil = bool(p["ceil_mode"])
    return TensorType((*x.shape[:2], _out_dim(x.shape[2], kh, sh, pt, pb, dh, ceil), _out_dim(x.shape[3], kw, sw, pl, pr, dw, ceil)), x.dtype)


def _ceil_extra(x_shape, p) -> tuple[int, int]:
    out = _pool_shape([TensorType(tuple(x_shape))], p).shape[2:]
    floor_p = p.replace(ceil_mode=0)
    base = _pool_shape([TensorType(tuple(x_shape))], floor_p).shape[2:]
    return tuple((o - b) * s for o, b, s in zip(out, base, p["strides"]))


def _max_pool(xs, p):
    x = xs[0]
    fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    win = _windows(x, p["kernel"], p["strides"], p["pads"], p["dilations"], fill, _ceil_extra(x.shape, p))
    return contiguous(win.max(axis=(4, 5)))


def _avg_pool(xs, p):
    x = xs[0]
    extra = _ceil_extra(x.shape, p)
    args = (p["kernel"], p["strides"], p["pads"], p["dilations"])
    total = _windows(x.astype(np.float64), *args, 0.0, extra).sum(axis=(4, 5))
    divisors = _avg_pool_divisors(x.shape, p)
    return (total / array_module(total).asarray(divisors)).astype(x.dtype)


def _pool_padding(x_shape, p) -> tuple[int, int] | None:
    """The padding torch's pooling kernels take for these parameters as they are (symmetric, at most half the
    window, no ceil mode), else None: the input is then padded explicitly, ceil mode's extra rows included."""
    padding = _symmetric(p["pads"])
    if p["ceil_mode"] and any(_ceil_extra(x_shape, p)):
        return None
    if padding is None or any(2 * q > k for q, k in zip(padding, p["kernel"])):
        return None
    return padding


def _padded_for_pool(rt, x, p, value: float):
    t, l, b, r = p["pads"]
    eh, ew = _ceil_extra(tuple(x.shape), p)
    return rt.F.pad(x, (l, r + ew, t, b + eh), value=value)


def _max_pool_torch(rt, xs, p):
    x = xs[0]
    if not x.is_floating_point():
        raise NotImplementedError("max_pool2d on integers")
    padding = _pool_padding(tuple(x.shape), p)
    if padding is None:
        x, padding = _padded_for_pool(rt, x, p, float("-inf")), (0, 0)
    return rt.F.max_pool2d(x, p["kernel"], p["strides"], padding, p["dilations"])


def _avg_pool_torch(rt, xs, p):
    x = xs[0]
    padding = _pool_padding(tuple(x.shape), p)
    if padding is not None and p["dilations"] == (1, 1):
        return rt.F.avg_pool2d(x, p["kernel"], p["strides"], padding, count_include_pad=bool(p["count_include_pad"]))
    # The general case: window sums over the explicitly padded input, over each position's divisor.
    window = p["kernel"][0] * p["kernel"][1]
    if p["dilations"] != (1, 1):
        raise NotImplementedError("dilated average pooling")
    sums = rt.F.avg_pool2d(_padded_for_pool(rt, x, p, 0.0), p["kernel"], p["strides"], 0, count_include_pad=True) * window
    divisors = rt.const(("avg_pool_divisors", tuple(x.shape), p), lambda: _avg_pool_divisors(tuple(x.shape), p).astype(np.float32))
    return (sums / divisors).to(x.dtype)


def _import_pool(kind: str):
    def importer(ctx) -> bool:
        op = max_pool2d if kind == "max" else avg_pool2d
        x = ctx.type(ctx.inputs[0])
        kernel = tuple(int(k) for k in ctx.attr("kernel_shape"))
        allowed = {"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "dilations", "count_include_pad", "storage_order"}
        if x.rank != 4 or len(kernel) != 2 or ctx.attr_names - allowed or len(ctx.outputs) > 1 or ctx.attr("storage_order", 0):
            return False
        spatial = _spatial_attrs(ctx, kernel)
        if spatial is None:
            return False
        strides, pads, dilations = spatial
        extra = {"count_include_pad": int(ctx.attr("count_include_pad", 0))} if op is avg_pool2d else {}
        ctx.emit(op, [ctx.inputs[0]], ctx.outputs, kernel=kernel, strides=strides, pads=pads, dilations=dilations,
                 ceil_mode=int(ctx.attr("ceil_mode", 0)), **extra)
        return True

    return importer


def _export_pool(onnx_type):
    def exporter(ctx, node) -> None:
        p = node.params
        attrs = {"kernel_shape": list(p["kernel"]), "strides": list(p["strides"]), "pads": list(p["pads"])}
        if p["ceil_mode"]:
            attrs["ceil_mode"] = 1
        if p["dilations"] != (1, 1):
            attrs["dilations"] = list(p["dilations"])
        if onnx_type == "AveragePool" and p["count_include_pad"]:
            attrs["count_include_pad"] = 1
        ctx.emit(onnx_type, list(node.inputs), list(node.outputs), **attrs)

    return exporter


def _avg_pool_exact(xs, p):
    """Window sums times the modular inverse of each window's divisor: exact 'division'."""
    x = np.asarray(xs[0], np.int64)
    extra = _ceil_extra(x.shape, p)
    total = _windows(x, p["kernel"], p["strides"], p["pads"], p["dilations"], 0, extra).sum(axis=(4, 5)) % FINGERPRINT_PRIME
    counts = _avg_pool_divisors(x.shape, p)
    inverses = np.vectorize(modular_inverse, otypes=[np.int64])(counts)
    return total * inverses % FINGERPRINT_PRIME


def _avg_pool_divisors(shape, p) -> np.ndarray:
    """The divisor of every output position of an average pool (real elements, plus padding when counted)."""
    mask = np.ones((1, 1) + tuple(shape[2:]))
    args = (p["kernel"], p["strides"], p["pads"], p["dilations"])
    if p["count_include_pad"]:
        t, l, b, r = p["pads"]
        mask = np.pad(mask, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=1.0)
        args = (p["kernel"], p["strides"], (0, 0, 0, 0), p["dilations"])
    return np.rint(_windows(mask, *args, 0.0, _ceil_extra(shape, p)).sum(axis=(4, 5))).astype(np.int64)


def _max_pool_exact(xs, p):
    """Stand-in for the maximum: the window sum of x**3 (symmetric in the window, not linear)."""
    x = np.asarray(xs[0], np.int64) % FINGERPRINT_PRIME
    cubes = x * x % FINGERPRINT_PRIME * x % FINGERPRINT_PRIME
    return _windows(cubes, p["kernel"], p["strides"], p["pads"], p["dilations"], 0, _ceil_extra(x.shape, p)).sum(axis=(4, 5))


POOL_PARAMS = [Param("kernel", "ints"), *SPATIAL_PARAMS, Param("ceil_mode", "int", 0, (0, 1))]

max_pool2d = define(
    "max_pool2d",
    arity=1,
    params=POOL_PARAMS,
    shape=_pool_shape,
    numpy=_max_pool,
    torch=_max_pool_torch,
    onnx=OnnxMapping(("MaxPool",), _import_pool("max"), _export_pool("MaxPool")),
    groups=("pool",),
    doc="maximum over each window (padding never wins)",
    exact=_max_pool_exact,
)

avg_pool2d = define(
    "avg_pool2d",
    arity=1,
    params=[*POOL_PARAMS, Param("count_include_pad", "int", 0, (0, 1))],
    shape=_pool_shape,
    numpy=_avg_pool,
    torch=_avg_pool_torch,
    onnx=OnnxMapping(("AveragePool",), _import_pool("avg"), _export_pool("AveragePool")),
    groups=("pool", "linear"),
    doc="mean over each window; the divisor counts padding only when count_include_pad",
    exact=_avg_pool_exact,
)

def _global_pool_shape(types, p) -> TensorType:
    x = types[0]
    require(x.rank >= 3, f"global pooling needs rank >= 3, got {x.shape}")
    return TensorType(x.shape[:2] + (1,) * (x.rank - 2), x.dtype)


def _global_pool(reduce):
    return lambda xs, p: reduce(xs[0], axis=tuple(range(2, xs[0].ndim)), keepdims=True).astype(xs[0].dtype)


global_avg_pool = define(
    "global_avg_pool",
    arity=1,
    shape=_global_pool_shape,
    numpy=_global_pool(np.mean),
    torch=lambda rt, xs, p: xs[0].mean(dim=tuple(range(2, xs[0].dim())), keepdim=True),
    onnx=OnnxMapping(("GlobalAveragePool",), lambda ctx: bool(ctx.emit(global_avg_pool, [ctx.inputs[0]], ctx.outputs)),
                     lambda ctx, n: ctx.emit("GlobalAveragePool", list(n.inputs), list(n.outputs))),
    groups=("pool", "linear"),
    doc="mean over all spatial positions, keeping N and C",
    exact=lambda xs, p: np.asarray(xs[0], np.int64).sum(axis=tuple(range(2, xs[0].ndim)), keepdims=True) % FINGERPRINT_PRIME
    * modular_inverse(int(np.prod(xs[0].shape[2:]))),
)

global_max_pool = define(
    "global_max_pool",
    arity=1,
    shape=_global_pool_shape,
    numpy=_global_pool(np.max),
    torch=lambda rt, xs, p: xs[0].amax(dim=tuple(range(2, xs[0].dim())), keepdim=True),
    onnx=OnnxMapping(("GlobalMaxPool",), lambda ctx: bool(ctx.emit(global_max_pool, [ctx.inputs[0]], ctx.outputs)),
                     lambda ctx, n: ctx.emit("GlobalMaxPool", list(n.inputs), list(n.outputs))),
    groups=("pool",),
    doc="maximum over all spatial positions, keeping N and C",
)

__all__ = ["conv2d", "enlarge", "max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool", "same_pads"]
