"""Resize (nearest, linear, cubic) with a static output shape: upsampling in FPNs, UNets and OCR detectors.

The importer reads ONNX's scales or sizes from constants (Resize from opset 11, Resize-10 and
Upsample-9 with scales >= 1), so the op carries its output shape and each axis's scale as
parameters, and a measured cost model times it with its real sizes; roi, antialiasing, axes
and crop modes stay opaque. The NumPy semantics are separable per axis: x_original from
x_resized by the coordinate transform, then the nearest pixel, a linear blend of two
neighbours or a cubic blend of four, edge-clamped.
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import ShapeError
from ..ir import TensorType
from ..ir.dims import Dim
from .base import OnnxMapping, Param, array_module, define, require

_MODES = ("nearest", "linear", "cubic")
_COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_ATTRIBUTES = {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside", "antialias",
               "keep_aspect_ratio_policy", "extrapolation_value"}


def _resize_shape(types, p) -> TensorType:
    x, sizes = types[0], tuple(p["sizes"])
    require(len(sizes) == x.rank and len(p["scales"]) == x.rank, f"resize: {len(sizes)} sizes for rank {x.rank}")
    require(all(s > 0 for s in sizes) and all(s > 0 for s in p["scales"]), f"resize: sizes {sizes} and scales {p['scales']} must be positive")
    require(p["mode"] == "nearest" or x.dtype.startswith("float"), f"resize: {p['mode']} mode needs a float input, got {x.dtype}")
    return TensorType(sizes, x.dtype)


def _source_coordinates(out_len: int, in_len: int, scale: float, mode: str, given: str) -> np.ndarray:
    """x_original for every x_resized along one axis, rounded as ONNX Runtime rounds.

    ONNX Runtime divides in float32 (3 / 0.6 is 5, not 4.9999998), except that an asymmetric
    transform whose scale is exactly out / in lands on exact halves (7 -> 4: x_resized = 2 is
    3.5, which float32 division makes 3.4999998); measured against it on 1,300 cases. With
    given scales, align_corners uses the unrounded resized length in * scale, as ONNX's spec
    says (ONNX Runtime uses the rounded one; the exported node is the original either way).
    """
    x = np.arange(out_len, dtype=np.float64)
    length = float(out_len) if given == "sizes" else in_len * scale
    if mode == "align_corners":
        return np.zeros_like(x) if length == 1 else x * (in_len - 1) / (length - 1)
    if mode == "pytorch_half_pixel" and length <= 1:
        return np.zeros_like(x)
    if mode == "asymmetric" and np.float32(in_len) * np.float32(scale) == np.float32(out_len):
        return x * in_len / out_len
    shift = np.float32(0.0 if mode == "asymmetric" else 0.5)
    x32 = x.astype(np.float32)
    return ((x32 + shift) / np.float32(scale) - shift).astype(np.float64)


def _nearest_indices(coords: np.ndarray, in_len: int, mode: str) -> np.ndarray:
    if mode == "floor":
        index = np.floor(coords)
    elif mode == "ceil":
        index = np.ceil(coords)
    else:
        half = coords - np.floor(coords) == 0.5
        index = np.where(half, np.floor(coords) if mode == "round_prefer_floor" else np.ceil(coords), np.round(coords))
    return np.clip(index, 0, in_len - 1).astype(np.int64)


def _cubic_weights(ratio: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution weights of the taps at base - 1 .. base + 2, for ratio in (0, 1]."""
    d = np.stack([ratio + 1, ratio, 1 - ratio, 2 - ratio], axis=1)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, far)


def _cubic_taps(coords: np.ndarray, in_len: int, p) -> tuple[np.ndarray, np.ndarray]:
    """The four taps of each output position (edge-clamped) and their weights (dropped outside and renormalised with
    exclude_outside): shapes alone decide them."""
    base = np.ceil(coords).astype(np.int64) - 1
    taps = base[:, None] + np.arange(-1, 3)[None, :]
    weights = _cubic_weights(coords - base, float(p["cubic_coeff_a"]))
    if p["exclude_outside"]:
        weights = np.where((taps < 0) | (taps >= in_len), 0.0, weights)
        weights = weights / weights.sum(axis=1, keepdims=True)
    return np.clip(taps, 0, in_len - 1), weights


def _linear_taps(coords: np.ndarray, in_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two neighbours of each output position and the second's weight."""
    coords = np.clip(coords, 0, in_len - 1)
    low = np.floor(coords).astype(np.int64)
    return low, np.minimum(low + 1, in_len - 1), coords - low


def _cubic_axis(x, axis: int, coords: np.ndarray, p):
    """ONNX's cubic mode: four taps around each source coordinate, edge-clamped (or dropped and
    renormalised with exclude_outside); an integral coordinate takes its own pixel."""
    xp = array_module(x)
    taps, weights = _cubic_taps(coords, x.shape[axis], p)
    shape = [1] * x.ndim
    shape[axis] = len(coords)
    out = None
    for k in range(4):
        term = xp.take(x, xp.asarray(taps[:, k]), axis=axis) * xp.asarray(weights[:, k].reshape(shape).astype(x.dtype))
        out = term if out is None else out + term
    return out


def _resize_axis(x, axis: int, out_len: int, scale: float, p):
    """One axis of the separable resize."""
    xp = array_module(x)
    in_len = x.shape[axis]
    coords = _source_coordinates(out_len, in_len, scale, p["coordinate_transformation_mode"], p["given"])
    if p["mode"] == "nearest":
        return xp.take(x, xp.asarray(_nearest_indices(coords, in_len, p["nearest_mode"])), axis=axis)
    if p["mode"] == "cubic":
        return _cubic_axis(x, axis, coords, p)
    low, high, blend = _linear_taps(coords, in_len)
    weight_shape = [1] * x.ndim
    weight_shape[axis] = out_len
    weight = xp.asarray(blend.astype(x.dtype).reshape(weight_shape))
    a, b = xp.take(x, xp.asarray(low), axis=axis), xp.take(x, xp.asarray(high), axis=axis)
    return a + (b - a) * weight


def _resize(xs, p):
    x = xs[0]
    if tuple(p["sizes"]) == tuple(x.shape):
        return x.copy()  # as ONNX Runtime does, whatever the scales (3 * 1.3 rounds down to 3)
    for axis, (out_len, scale) in enumerate(zip(p["sizes"], p["scales"])):
        if out_len != x.shape[axis] or scale != 1.0:
            x = _resize_axis(x, axis, out_len, scale, p)
    return x.astype(xs[0].dtype, copy=False)


@functools.lru_cache(maxsize=256)
def _axis_taps(in_len: int, out_len: int, scale: float, p) -> dict[str, np.ndarray]:
    """One axis's gather indices and blend weights, by name (shapes alone decide them)."""
    coords = _source_coordinates(out_len, in_len, scale, p["coordinate_transformation_mode"], p["given"])
    if p["mode"] == "nearest":
        return {"nearest": _nearest_indices(coords, in_len, p["nearest_mode"])}
    if p["mode"] == "cubic":
        taps, weights = _cubic_taps(coords, in_len, p)
        return {**{f"tap{k}": taps[:, k] for k in range(4)}, **{f"w{k}": weights[:, k] for k in range(4)}}
    low, high, blend = _linear_taps(coords, in_len)
    return {"low": low, "high": high, "blend": blend}


def _resize_axis_torch(rt, x, axis: int, out_len: int, scale: float, p):
    """:func:`_resize_axis` on the torch runtime: the same taps and weights (:func:`_axis_taps`), on the device once,
    then gathers and blends."""
    in_len = int(x.shape[axis])
    taps = _axis_taps(in_len, out_len, scale, p)
    shape = [1] * x.dim()
    shape[axis] = out_len

    def index(name: str):
        return rt.const(("resize", axis, in_len, out_len, scale, p, name), lambda: taps[name])

    def weight(name: str):
        return rt.const(("resize", axis, in_len, out_len, scale, p, name), lambda: taps[name].astype(np.float32).reshape(shape)).to(x.dtype)

    if p["mode"] == "nearest":
        return x.index_select(axis, index("nearest"))
    if p["mode"] == "cubic":
        out = x.index_select(axis, index("tap0")) * weight("w0")
        for k in range(1, 4):
            out = out + x.index_select(axis, index(f"tap{k}")) * weight(f"w{k}")
        return out
    a, b = x.index_select(axis, index("low")), x.index_select(axis, index("high"))
    return a + (b - a) * weight("blend")


def _resize_torch(rt, xs, p):
    x = xs[0]
    if tuple(p["sizes"]) == tuple(x.shape):
        return x.clone()
    for axis, (out_len, scale) in enumerate(zip(p["sizes"], p["scales"])):
        if out_len != x.shape[axis] or scale != 1.0:
            x = _resize_axis_torch(rt, x, axis, int(out_len), scale, p)
    return x


def _static_resize_args(ctx, x: TensorType):
    """(sizes, scales, given) from constant scales or sizes, or None when they are computed at run time."""
    names = [ctx.inputs[i] if len(ctx.inputs) > i else "" for i in (2, 3)]
    scales, sizes = (ctx.const(n) if n else None for n in names)
    if any(n and v is None for n, v in zip(names, (scales, sizes))):
        return None
    if scales is not None and scales.size:
        factors = [float(s) for s in scales.reshape(-1)]
        if len(factors) != x.rank:
            return None
        # NOTE: ONNX Runtime computes the output size as floor(float(dim) * scale) in float32.
        out = tuple(_scaled(d, s) for d, s in zip(x.shape, factors))
        return out, tuple(factors), "scales"
    if sizes is not None and sizes.size == x.rank:
        out = tuple(int(s) for s in sizes.reshape(-1))
        return out, tuple(float(np.float32(o) / np.float32(d)) if d else 1.0 for o, d in zip(out, x.shape)), "sizes"
    return None


def _scaled(dim: int, factor: float) -> int:
    """floor(dim * factor) as ONNX Runtime computes it (float32); a symbolic dim only when the factor is a whole number."""
    if isinstance(dim, Dim):
        if float(factor).is_integer() and factor >= 1:
            return dim * int(factor)
        raise ShapeError(f"resize: scaling the symbolic dim {dim} by {factor} rounds differently at different sizes")
    return int(np.floor(np.float32(dim) * np.float32(factor)))


def _import_upsample(ctx) -> bool:
    """Upsample (opset 9) and Resize-10: X and scales only, asymmetric coordinates; nearest
    truncates when every scale is >= 1 (ONNX Runtime ceils on downsampled axes: kept opaque)."""
    mode = ctx.attr("mode", "nearest")
    scales = ctx.const(ctx.inputs[1]) if len(ctx.inputs) > 1 and ctx.inputs[1] else None
    x = ctx.type(ctx.inputs[0])
    if ctx.attr_names - {"mode"} or mode not in ("nearest", "linear") or scales is None or scales.size != x.rank or (scales < 1).any():
        return False
    factors = tuple(float(f) for f in scales.reshape(-1))
    sizes = tuple(_scaled(d, f) for d, f in zip(x.shape, factors))
    ctx.emit(resize, [ctx.inputs[0]], ctx.outputs, sizes=sizes, scales=factors, given="scales", mode=mode,
             coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return True


def _import_resize(ctx) -> bool:
    if ctx.op_type == "Upsample" or ctx.opset < 11:
        return _import_upsample(ctx)
    mode = ctx.attr("mode", "nearest")
    coordinates = ctx.attr("coordinate_transformation_mode", "half_pixel")
    nearest = ctx.attr("nearest_mode", "round_prefer_floor")
    roi = ctx.const(ctx.inputs[1]) if len(ctx.inputs) > 1 and ctx.inputs[1] else np.zeros(0)
    if (ctx.attr_names - _ATTRIBUTES or mode not in _MODES or coordinates not in _COORDINATE_MODES
            or nearest not in _NEAREST_MODES or ctx.attr("antialias", 0) or ctx.attr("keep_aspect_ratio_policy", "stretch") != "stretch"
            or roi is None or roi.size):
        return False
    x = ctx.type(ctx.inputs[0])
    args = _static_resize_args(ctx, x)
    if args is None:
        return False
    sizes, scales, given = args
    ctx.emit(resize, [ctx.inputs[0]], ctx.outputs, sizes=sizes, scales=scales, given=given, mode=mode,
             coordinate_transformation_mode=coordinates, nearest_mode=nearest,
             cubic_coeff_a=float(ctx.attr("cubic_coeff_a", -0.75)), exclude_outside=int(ctx.attr("exclude_outside", 0)))
    return True


def _export_resize(ctx, node) -> None:
    p = node.params
    if ctx.opset < 11:
        _export_upsample(ctx, node)
        return
    empty = "" if ctx.opset >= 13 else ctx.const(np.zeros(0, np.float32), "roi")
    if p["given"] == "scales":
        inputs = [node.inputs[0], empty, ctx.const(np.asarray(p["scales"], np.float32), "scales")]
    else:
        inputs = [node.inputs[0], empty, "" if ctx.opset >= 13 else ctx.const(np.zeros(0, np.float32), "scales"),
                  ctx.shape_tensor(p["sizes"])]
    attrs = {"mode": p["mode"], "coordinate_transformation_mode": p["coordinate_transformation_mode"]}
    if p["mode"] == "nearest":
        attrs["nearest_mode"] = p["nearest_mode"]
    if p["mode"] == "cubic":
        attrs.update(cubic_coeff_a=p["cubic_coeff_a"], exclude_outside=p["exclude_outside"])
    ctx.emit("Resize", inputs, list(node.outputs), **attrs)


def _export_upsample(ctx, node) -> None:
    """Opset 9 writes Upsample, opset 10 Resize-10: both take scales only, with asymmetric coordinates."""
    p = node.params
    simple = (p["given"] == "scales" and p["coordinate_transformation_mode"] == "asymmetric" and p["mode"] in ("nearest", "linear")
              and (p["mode"] == "linear" or p["nearest_mode"] == "floor") and all(f >= 1 for f in p["scales"]))
    if not simple:
        raise ctx.error(f"this resize ({p['mode']}, {p['coordinate_transformation_mode']}) needs ONNX opset >= 11; the model has opset {ctx.opset}")
    scales = ctx.const(np.asarray(p["scales"], np.float32), "scales")
    ctx.emit("Upsample" if ctx.opset < 10 else "Resize", [node.inputs[0], scales], list(node.outputs), mode=p["mode"])


resize = define(
    "resize",
    arity=1,
    params=[
        Param("sizes", "ints"),
        Param("scales", "any"),  # per axis, the scale of the coordinate transform (given, or sizes / input)
        Param("given", "str", "sizes", ("sizes", "scales")),  # which ONNX input the model used, written back as such
        Param("mode", "str", "nearest", _MODES),
        Param("coordinate_transformation_mode", "str", "half_pixel", _COORDINATE_MODES),
        Param("nearest_mode", "str", "round_prefer_floor", _NEAREST_MODES),
        Param("cubic_coeff_a", "float", -0.75),
        Param("exclude_outside", "int", 0, (0, 1)),
    ],
    shape=_resize_shape,
    numpy=_resize,
    torch=_resize_torch,
    onnx=OnnxMapping(("Resize", "Upsample"), _import_resize, _export_resize),
    groups=("spatial",),
    doc="nearest, (multi)linear or cubic resize to a static shape (ONNX Resize without roi or antialiasing)",
)

__all__ = ["resize"]
