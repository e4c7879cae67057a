"""Data-movement operators: transpose, reshape, concat, split, slice, gather, expand, pad.

Shape arguments that ONNX passes as tensors (Reshape's shape, Slice's starts, Split's
sizes...) are static parameters here: the importer reads them from constants and keeps the
node opaque when they are computed at run time.
"""

from __future__ import annotations

import numpy as np

from ..ir import TensorType
from ..ir.dims import Dim, UndecidableDim, bare_symbol, broadcast_dims, floordiv, is_static_shape, prod
from .base import OnnxMapping, Param, as_dims, contiguous, define, define_importer, normalize_axis, require


def _int64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


# ---- transpose ---------------------------------------------------------------------------------


def _transpose_shape(types, p) -> TensorType:
    x, perm = types[0], p["perm"]
    require(sorted(perm) == list(range(x.rank)), f"transpose: perm {perm} is not a permutation of rank {x.rank}")
    return TensorType(tuple(x.shape[i] for i in perm), x.dtype)


def _import_transpose(ctx) -> bool:
    rank = ctx.type(ctx.inputs[0]).rank
    perm = tuple(ctx.attr("perm", tuple(reversed(range(rank)))))
    ctx.emit(transpose, [ctx.inputs[0]], ctx.outputs, perm=tuple(int(i) for i in perm))
    return True


transpose = define(
    "transpose",
    arity=1,
    params=[Param("perm", "ints")],
    shape=_transpose_shape,
    torch=lambda rt, xs, p: xs[0].permute(p["perm"]).contiguous(),  # a transpose kernel, as a deployment runs one
    numpy=lambda xs, p: np.transpose(xs[0], p["perm"]).copy(),  # C order, rank 0 kept (np.ascontiguousarray makes it 1), CuPy stays on device
    onnx=OnnxMapping(("Transpose",), _import_transpose, lambda ctx, n: ctx.emit("Transpose", list(n.inputs), list(n.outputs), perm=list(n.params["perm"]))),
    groups=("shape_only", "linear"),
    doc="permutes axes",
    exact="polynomial",
)

# ---- reshape (also Flatten, Squeeze, Unsqueeze) --------------------------------------------------


def _reshape_shape(types, p) -> TensorType:
    x, shape = types[0], p["shape"]
    require(all(d >= 0 for d in shape), f"reshape: target shape {shape} must be fully resolved")
    require(prod(shape) == prod(x.shape), f"reshape: cannot reshape {tuple(map(str, x.shape))} to {tuple(map(str, shape))} at every size")
    return TensorType(tuple(shape), x.dtype)


def _export_reshape(ctx, node) -> None:
    ctx.emit("Reshape", [node.inputs[0], ctx.reshape_target(node.inputs[0], node.params["shape"])], list(node.outputs))


reshape = define(
    "reshape",
    arity=1,
    params=[Param("shape", "ints")],
    shape=_reshape_shape,
    numpy=lambda xs, p: xs[0].reshape(p["shape"]),
    torch=lambda rt, xs, p: xs[0].reshape(tuple(int(d) for d in p["shape"])),
    onnx=OnnxMapping(("Reshape", "Flatten", "Squeeze", "Unsqueeze"), None, _export_reshape),
    groups=("shape_only", "linear"),
    doc="reinterprets the data with a new static shape (row-major)",
    exact="polynomial",
)


def _resolve_reshape(in_shape, target, allowzero: bool) -> tuple[int, ...] | None:
    """ONNX Reshape's target with 0 (copy) and -1 (infer) resolved; symbolic dims stay symbolic."""
    target = list(as_dims(target))
    out = [in_shape[i] if type(d) is int and d == 0 and not allowzero else d for i, d in enumerate(target)]
    wildcards = [i for i, d in enumerate(out) if type(d) is int and d == -1]
    if len(wildcards) > 1:
        return None
    if wildcards:
        known = prod(d for i, d in enumerate(out) if i != wildcards[0])
        total = prod(in_shape)
        if int(known) == 0 or int(total) % int(known):
            return None
        inferred = floordiv(total, known)
        if not inferred * known == total:
            return None  # the product divides at the measurement sizes only
        out[wildcards[0]] = inferred
    return tuple(out)


def _import_reshape_like(ctx) -> bool:
    x = ctx.type(ctx.inputs[0])
    op_type = ctx.op_type
    if op_type == "Reshape":
        target = ctx.attr("shape", None) if ctx.opset < 5 else ctx.const(ctx.inputs[1], symbolic=True)
        if target is None:
            return False
        shape = _resolve_reshape(x.shape, np.asarray(target).reshape(-1).tolist(), bool(ctx.attr("allowzero", 0)))
    elif op_type == "Flatten":
        axis = int(ctx.attr("axis", 1))
        axis = axis + x.rank if axis < 0 else axis
        shape = (prod(x.shape[:axis]), prod(x.shape[axis:]))
    else:
        axes = _axes_argument(ctx)
        if axes is False:
            return False
        if op_type == "Squeeze":
            if axes is None and not is_static_shape(x.shape):
                return False  # which axes go depends on the sizes (a symbolic dim may be 1)
            axes = [i for i, d in enumerate(x.shape) if d == 1] if axes is None else [normalize_axis(a, x.rank) for a in axes]
            shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        else:
            if axes is None:
                return False
            rank = x.rank + len(axes)
            axes = sorted(normalize_axis(a, rank) for a in axes)
            dims = iter(x.shape)
            shape = tuple(1 if i in axes else next(dims) for i in range(rank))
    if shape is None:
        return False
    ctx.emit(reshape, [ctx.inputs[0]], ctx.outputs, shape=as_dims(shape))
    return True


def _axes_argument(ctx):
    """Axes from the attribute (old opsets) or the second input (new opsets); False when not constant."""
    if "axes" in ctx.attr_names:
        return [int(a) for a in ctx.attr("axes")]
    if len(ctx.inputs) > 1 and ctx.inputs[1]:
        value = ctx.const(ctx.inputs[1])
        return False if value is None else [int(a) for a in value.reshape(-1)]
    return None


define_importer(("Reshape", "Flatten", "Squeeze", "Unsqueeze"), _import_reshape_like)

# ---- concat / split -------------------------------------------------------------------------------


def _concat_shape(types, p) -> TensorType:
    first = types[0]
    axis = normalize_axis(p["axis"], first.rank)
    for t in types[1:]:
        require(t.rank == first.rank and t.dtype == first.dtype, f"concat: operands {[str(t) for t in types]} differ in rank or dtype")
        require(all(a == b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis), f"concat: shapes {[t.shape for t in types]} differ off axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return TensorType(tuple(shape), first.dtype)


concat = define(
    "concat",
    arity=(1, None),
    params=[Param("axis", "int")],
    shape=_concat_shape,
    numpy=lambda xs, p: np.concatenate(xs, axis=p["axis"]),
    torch=lambda rt, xs, p: rt.torch.cat(list(xs), dim=p["axis"]),
    onnx=OnnxMapping(
        ("Concat",),
        lambda ctx: bool(ctx.emit(concat, [i for i in ctx.inputs if i], ctx.outputs, axis=int(ctx.attr("axis", 1)))),
        lambda ctx, n: ctx.emit("Concat", list(n.inputs), list(n.outputs), axis=n.params["axis"]),
    ),
    groups=("shape_only", "linear"),
    doc="joins tensors along an axis",
    exact="polynomial",
)


def _split_shape(types, p) -> list[TensorType]:
    x = types[0]
    axis = normalize_axis(p["axis"], x.rank)
    sizes = p["sizes"]
    require(sum(sizes) == x.shape[axis] and all(s >= 0 for s in sizes), f"split: sizes {sizes} do not add up to dimension {x.shape[axis]} of axis {axis}")
    return [TensorType(x.shape[:axis] + (s,) + x.shape[axis + 1 :], x.dtype) for s in sizes]


def _split(xs, p):
    x = xs[0]
    bounds = np.cumsum(p["sizes"])[:-1]
    return [contiguous(part) for part in np.split(x, bounds, axis=p["axis"])]


def _import_split(ctx) -> bool:
    x = ctx.type(ctx.inputs[0])
    axis = normalize_axis(int(ctx.attr("axis", 0)), x.rank)
    n = len(ctx.outputs)
    if "split" in ctx.attr_names:
        sizes = [int(s) for s in ctx.attr("split")]
    elif len(ctx.inputs) > 1 and ctx.inputs[1]:
        value = ctx.const(ctx.inputs[1])
        if value is None:
            return False
        sizes = [int(s) for s in value.reshape(-1)]
    else:
        n = int(ctx.attr("num_outputs", n))
        chunk = -(-x.shape[axis] // n)
        sizes = [min(chunk, x.shape[axis] - i * chunk) for i in range(n)]
    if "" in ctx.outputs or len(sizes) != len(ctx.outputs):
        return False
    ctx.emit(split, [ctx.inputs[0]], ctx.outputs, axis=axis, sizes=tuple(sizes))
    return True


def _export_split(ctx, node) -> None:
    sizes = list(node.params["sizes"])
    axis = node.params["axis"]
    if not is_static_shape(sizes) and all(s == sizes[0] for s in sizes):
        # equal parts of a symbolic size: ONNX's even split, no sizes to compute at run time
        extra = {"num_outputs": len(sizes)} if ctx.opset >= 18 else {}
        ctx.emit("Split", [node.inputs[0]], list(node.outputs), axis=axis, **extra)
    elif ctx.opset >= 13:
        ctx.emit("Split", [node.inputs[0], ctx.shape_tensor(sizes)], list(node.outputs), axis=axis)
    else:
        require(is_static_shape(sizes), "split: unequal sizes that depend on symbolic dims need opset >= 13")
        ctx.emit("Split", [node.inputs[0]], list(node.outputs), axis=axis, split=sizes)


split = define(
    "split",
    arity=1,
    params=[Param("axis", "int"), Param("sizes", "ints")],
    shape=_split_shape,
    numpy=_split,
    torch=lambda rt, xs, p: list(rt.torch.split(xs[0], [int(v) for v in p["sizes"]], dim=p["axis"])),  # views, as torch's split
    onnx=OnnxMapping(("Split",), _import_split, _export_split),
    groups=("shape_only", "linear", "multi_output"),
    doc="cuts a tensor along an axis into parts of the given sizes",
    exact="polynomial",
)

# ---- slice -----------------------------------------------------------------------------------------


def _slice_shape(types, p) -> TensorType:
    x = types[0]
    shape = list(x.shape)
    require(len(p["axes"]) == len(p["starts"]) == len(p["ends"]) == len(p["steps"]), "slice: starts/ends/axes/steps lengths differ")
    for axis, start, end, step in zip(p["axes"], p["starts"], p["ends"], p["steps"]):
        require(0 <= axis < x.rank and step != 0, f"slice: bad axis {axis} or step {step}")
        if isinstance(x.shape[axis], Dim) or isinstance(start, Dim) or isinstance(end, Dim):
            shape[axis] = _clamped_slice_length(start, end, step)
        else:
            shape[axis] = len(range(*slice(start, end, step).indices(x.shape[axis])))
    return TensorType(tuple(shape), x.dtype)


def _clamped_slice_length(start, end, step: int):
    """The length of ``range(start, end, step)`` for bounds already clamped into the axis (symbolic allowed)."""
    if step > 0:
        length = floordiv(end - start + step - 1, step)
    else:
        length = floordiv(start - (-1 if end is None else end) - step - 1, -step)
    return _clamp(length, 0, length)  # max(0, length), asked as questions a symbolic length can answer


def _slice(xs, p):
    index = [slice(None)] * xs[0].ndim
    for axis, start, end, step in zip(p["axes"], p["starts"], p["ends"], p["steps"]):
        index[axis] = slice(start, end, step)
    return contiguous(xs[0][tuple(index)])


def _slice_torch(rt, xs, p):
    x = xs[0]
    index: list[object] = [slice(None)] * x.dim()
    picked = []
    for axis, start, end, step in zip(p["axes"], p["starts"], p["ends"], p["steps"]):
        if step > 0:
            index[axis] = slice(start, end, step)
        else:  # torch slices forward only: the positions, once, as an index
            positions = tuple(range(*slice(start, end, step).indices(x.shape[axis])))
            picked.append((axis, rt.const(("slice", positions), lambda positions=positions: np.asarray(positions, np.int64))))
    x = x[tuple(index)]
    for axis, positions in picked:
        x = x.index_select(axis, positions)
    return x


# Bounds this large mean "to the end" (exporters write INT64_MAX or INT32_MAX): no dim is this large.
_UNBOUNDED = 1 << 31


def _clamp_slice(start: int, end: int, step: int, dim: int, end_within: bool = False) -> tuple[int, int | None]:
    """ONNX slice bounds (negative = from the end, clamped) as Python slice bounds (symbolic dims allowed).
    ``end_within``: a forward slice's end is known not to pass the axis (a symbol the file bounds by its length)."""
    if type(end) is int and abs(end) >= _UNBOUNDED and isinstance(dim, Dim):
        end = dim if end > 0 else -1 - dim
    if type(start) is int and abs(start) >= _UNBOUNDED and isinstance(dim, Dim):
        start = dim if start > 0 else -1 - dim
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        return _clamp(start, 0, dim), _clamp(end, 0, end if end_within else dim)
    start = _clamp(start, -1, dim - 1)
    end = _clamp(end, -1, dim - 1)
    return start, None if end < 0 else end


def _clamp(x: int, low: int, high: int) -> int:
    """``min(max(x, low), high)`` when each comparison has one answer at every size (UndecidableDim otherwise).

    Not ``max``/``min``: they ask strict questions (``x > low``), which a symbolic ``x`` equal to
    ``low`` at some sizes cannot answer although ``x >= low`` holds at all of them.
    """
    if not _at_most(low, x):
        x = low
    if not _at_most(x, high):
        x = high
    return x


def _at_most(a: int, b: int) -> bool:
    """``a <= b`` at every size (True) or ``b <= a`` at every size (False, or both: then they are equal)."""
    try:
        return a <= b
    except UndecidableDim:
        if b <= a:
            return False
        raise


def _import_slice(ctx) -> bool:
    x = ctx.type(ctx.inputs[0])
    if ctx.opset < 10:
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes = ctx.attr("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        args = []
        for i in range(1, 5):
            name = ctx.inputs[i] if len(ctx.inputs) > i else ""
            value = ctx.const(name, symbolic=i in (1, 2)) if name else None
            if name and value is None:
                return False
            args.append(None if value is None else list(as_dims(value.reshape(-1))))
        starts, ends, axes, steps = args
        axes = axes if axes is not None else list(range(len(starts)))
        steps = steps if steps is not None else [1] * len(starts)
    axes = [normalize_axis(int(a), x.rank) for a in axes]
    bounds = [_clamp_slice(s, e, int(t), x.shape[a], _within_by_bound(ctx, e, x.shape[a])) for s, e, t, a in zip(as_dims(starts), as_dims(ends), steps, axes)]
    ctx.emit(slice_, [ctx.inputs[0]], ctx.outputs, starts=tuple(b[0] for b in bounds), ends=tuple(b[1] for b in bounds),
             axes=tuple(axes), steps=tuple(int(t) for t in steps))
    return True


def _within_by_bound(ctx, end: int, dim: int) -> bool:
    """Whether a slice's end is a symbol the file itself bounds by a static axis's length (BERT's position ids sliced to
    ``[:, :seq]``): past it the file does not run (:mod:`taso.onnx.size_bounds`), so at every size it runs the slice
    ends at the symbol, not short of it."""
    name = bare_symbol(end)
    bound = ctx.size_bound(name) if name is not None else None
    return bound is not None and not isinstance(dim, Dim) and bound <= dim


def _export_slice(ctx, node) -> None:
    p = node.params
    x = ctx.type(node.inputs[0])
    # NOTE: a None end (negative step running past index 0) is written as -(dim + 1).
    ends = [(-(x.shape[a] + 1) if e is None else e) for e, a in zip(p["ends"], p["axes"])]
    starts, ends = _size_free_bounds(p["starts"], ends, [x.shape[a] for a in p["axes"]])
    if ctx.opset < 10:
        require(all(t == 1 for t in p["steps"]), "slice with steps needs opset >= 10")
        ctx.emit("Slice", [node.inputs[0]], list(node.outputs), starts=list(starts), ends=ends, axes=list(p["axes"]))
        return
    args = [ctx.shape_tensor(v) for v in (starts, ends, p["axes"], p["steps"])]
    ctx.emit("Slice", [node.inputs[0], *args], list(node.outputs))


def _size_free_bounds(starts, ends, dims) -> tuple[list, list]:
    """Slice bounds that hold at every size: a bound equal to its axis's symbolic dim is INT64_MAX ("to
    the end"), one that is the dim minus a constant is that negative offset; others stay as they are
    (symbolic ones are then computed from the shapes at run time)."""
    def size_free(bound, dim):
        if not isinstance(dim, Dim) or not isinstance(bound, Dim):
            return bound
        if bound == dim:
            return (1 << 63) - 1
        if bound == -dim - 1:
            return -(1 << 63)
        offset = bound - dim
        return offset if type(offset) is int and offset < 0 else bound

    return [size_free(b, d) for b, d in zip(starts, dims)], [size_free(b, d) for b, d in zip(ends, dims)]


slice_ = define(
    "slice",
    arity=1,
    params=[Param("starts", "ints"), Param("ends", "optints"), Param("axes", "ints"), Param("steps", "ints")],
    shape=_slice_shape,
    numpy=_slice,
    torch=_slice_torch,
    onnx=OnnxMapping(("Slice",), _import_slice, _export_slice),
    groups=("shape_only", "linear"),
    doc="x[starts:ends:steps] on the given axes (bounds already clamped)",
    exact="polynomial",
)

# ---- gather ---------------------------------------------------------------------------------------


def _gather_shape(types, p) -> TensorType:
    data, indices = types
    require(indices.dtype in ("int32", "int64"), f"gather: indices must be int32/int64, got {indices.dtype}")
    axis = normalize_axis(p["axis"], data.rank)
    return TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1 :], data.dtype)


def _gather(xs, p):
    data, indices = xs
    axis = p["axis"] % data.ndim
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    return np.take(data, indices, axis=axis)


def _gather_torch(rt, xs, p):
    data, indices = xs
    axis = p["axis"] % data.dim()
    flat = indices.reshape(-1).long()
    flat = rt.torch.where(flat < 0, flat + data.shape[axis], flat)
    picked = data.index_select(axis, flat)
    return picked.reshape(tuple(data.shape[:axis]) + tuple(indices.shape) + tuple(data.shape[axis + 1:]))


gather = define(
    "gather",
    arity=2,
    params=[Param("axis", "int", 0)],
    shape=_gather_shape,
    numpy=_gather,
    torch=_gather_torch,
    onnx=OnnxMapping(
        ("Gather",),
        lambda ctx: bool(ctx.emit(gather, list(ctx.inputs[:2]), ctx.outputs, axis=normalize_axis(int(ctx.attr("axis", 0)), ctx.type(ctx.inputs[0]).rank))),
        lambda ctx, n: ctx.emit("Gather", list(n.inputs), list(n.outputs), axis=n.params["axis"]),
    ),
    groups=("shape_only",),
    doc="takes entries of data along an axis at the given (possibly negative) indices",
    exact="polynomial",
)

# ---- expand ---------------------------------------------------------------------------------------


def _expand_shape(types, p) -> TensorType:
    x, shape = types[0], tuple(p["shape"])
    require(all(d >= 0 for d in shape), f"expand: target shape {shape} must be fully resolved")
    require(broadcast_dims(x.shape, shape) == shape, f"expand: {tuple(map(str, x.shape))} does not broadcast to {tuple(map(str, shape))}")
    return TensorType(shape, x.dtype)


def _import_expand(ctx) -> bool:
    """ONNX Expand broadcasts both ways; the param is the resolved output shape."""
    target = ctx.const(ctx.inputs[1], symbolic=True)
    if target is None:
        return False
    x = ctx.type(ctx.inputs[0])
    shape = broadcast_dims(x.shape, as_dims(target.reshape(-1)))
    ctx.emit(expand, [ctx.inputs[0]], ctx.outputs, shape=shape)
    return True


expand = define(
    "expand",
    arity=1,
    params=[Param("shape", "ints")],
    shape=_expand_shape,
    numpy=lambda xs, p: np.broadcast_to(xs[0], p["shape"]).copy(),
    torch=lambda rt, xs, p: xs[0].expand(tuple(int(d) for d in p["shape"])).contiguous(),  # .copy(): CuPy arrays stay on the device
    onnx=OnnxMapping(("Expand",), _import_expand, lambda ctx, n: ctx.emit("Expand", [n.inputs[0], ctx.shape_tensor(n.params["shape"])], list(n.outputs))),
    groups=("shape_only",),
    doc="broadcasts x to a static shape (ONNX Expand, with the target shape resolved)",
)

# ---- pad ------------------------------------------------------------------------------------------


def _pad_shape(types, p) -> TensorType:
    x, pads = types[0], p["pads"]
    require(len(pads) == 2 * x.rank, f"pad: needs {2 * x.rank} pad values for rank {x.rank}, got {len(pads)}")
    shape = tuple(d + pads[i] + pads[i + x.rank] for i, d in enumerate(x.shape))
    require(all(d >= 0 for d in shape), f"pad: negative output shape {shape}")
    return TensorType(shape, x.dtype)


def _pad(xs, p):
    x, pads, rank = xs[0], p["pads"], xs[0].ndim
    crop = tuple(slice(max(0, -pads[i]), x.shape[i] - max(0, -pads[i + rank])) for i in range(rank))
    x = x[crop]
    width = [(max(0, pads[i]), max(0, pads[i + rank])) for i in range(rank)]
    if p["mode"] == "constant":
        return np.pad(x, width, mode="constant", constant_values=x.dtype.type(p["value"]))
    return np.pad(x, width, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[p["mode"]])


_TORCH_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


def _pad_torch(rt, xs, p):
    x, pads, rank = xs[0], p["pads"], xs[0].dim()
    widths = []
    for axis in reversed(range(rank)):  # torch lists (before, after) from the last axis
        widths += [pads[axis], pads[axis + rank]]
    if p["mode"] == "constant":
        return rt.F.pad(x, widths, value=p["value"])
    # torch pads the spatial axes of an (N, C, ...) tensor of rank 3 to 5 in these modes: the others stay on the host
    spatial_only = all(pads[axis] == pads[axis + rank] == 0 for axis in range(min(2, rank)))
    if not 3 <= rank <= 5 or not spatial_only or any(w < 0 for w in pads) or not x.is_floating_point():
        raise NotImplementedError(f"pad mode {p['mode']} on this tensor")
    return rt.F.pad(x, widths[:2 * (rank - 2)], mode=_TORCH_PAD_MODES[p["mode"]])


def _import_pad(ctx) -> bool:
    x = ctx.type(ctx.inputs[0])
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        pads, value = [int(v) for v in ctx.attr("pads")], float(ctx.attr("value", 0.0))
    else:
        pads_value = ctx.const(ctx.inputs[1])
        value_name = ctx.inputs[2] if len(ctx.inputs) > 2 else ""
        value_array = ctx.const(value_name) if value_name else np.zeros(())
        axes_name = ctx.inputs[3] if len(ctx.inputs) > 3 else ""
        if pads_value is None or value_array is None or (axes_name and ctx.const(axes_name) is None):
            return False
        pads, value = [int(v) for v in pads_value.reshape(-1)], float(value_array.reshape(-1)[0]) if value_array.size else 0.0
        if axes_name:
            axes = [normalize_axis(int(a), x.rank) for a in ctx.const(axes_name).reshape(-1)]
            full = [0] * (2 * x.rank)
            for k, a in enumerate(axes):
                full[a], full[a + x.rank] = pads[k], pads[k + len(axes)]
            pads = full
    ctx.emit(pad, [ctx.inputs[0]], ctx.outputs, pads=tuple(pads), mode=mode, value=value)
    return True


def _export_pad(ctx, node) -> None:
    p = node.params
    if ctx.opset < 11:
        ctx.emit("Pad", [node.inputs[0]], list(node.outputs), pads=list(p["pads"]), mode=p["mode"], value=p["value"])
        return
    dtype = ctx.type(node.inputs[0]).dtype
    inputs = [node.inputs[0], ctx.const(_int64(p["pads"]))]
    if p["mode"] == "constant" and p["value"] != 0:
        inputs.append(ctx.const(np.asarray(p["value"], dtype)))
    ctx.emit("Pad", inputs, list(node.outputs), mode=p["mode"])


pad = define(
    "pad",
    arity=1,
    params=[Param("pads", "ints"), Param("mode", "str", "constant", ("constant", "reflect", "edge", "wrap")), Param("value", "float", 0.0)],
    shape=_pad_shape,
    numpy=_pad,
    torch=_pad_torch,
    onnx=OnnxMapping(("Pad",), _import_pad, _export_pad),
    groups=("shape_only",),
    doc="pads (or crops, for negative pads) each axis; pads = begins then ends, as in ONNX",
)

# ---- eliminated at import: identity, dropout in inference -------------------------------------------


def _import_identity(ctx) -> bool:
    if ctx.op_type == "Dropout":
        # Inference-mode dropout is the identity, and its optional mask is all true.
        if ctx.opset >= 12 and len(ctx.inputs) > 2 and ctx.inputs[2]:
            training = ctx.const(ctx.inputs[2])
            if training is None or bool(training.reshape(-1)[0]):
                return False
        if len(ctx.outputs) > 1 and ctx.outputs[1]:
            from .constants import fill

            ctx.emit(fill, [], [ctx.outputs[1]], shape=ctx.type(ctx.inputs[0]).shape, value=1.0, dtype="bool")
    ctx.alias(ctx.outputs[0], ctx.inputs[0])
    return True


define_importer(("Identity", "Dropout"), _import_identity)

# ---- sizes computed at run time ------------------------------------------------------------------


def _dims_shape(types, p) -> TensorType:
    require(len(p["values"]) == int(np.prod(p["shape"], dtype=np.int64)), f"dims: {len(p['values'])} values for shape {p['shape']}")
    return TensorType(tuple(p["shape"]), p["dtype"])


def _export_dims(ctx, node) -> None:
    p = node.params
    sizes = ctx.shape_tensor(p["values"], p["dtype"])
    if tuple(p["shape"]) == (len(p["values"]),):
        ctx.emit("Identity", [sizes], list(node.outputs))
    else:
        ctx.emit("Reshape", [sizes, ctx.const(_int64(p["shape"]))], list(node.outputs))


dims = define(
    "dims",
    arity=0,
    params=[Param("values", "ints"), Param("shape", "ints"), Param("dtype", "str", "int64")],
    shape=_dims_shape,
    numpy=lambda xs, p: np.asarray([int(v) for v in p["values"]], p["dtype"]).reshape(p["shape"]),
    onnx=OnnxMapping((), None, _export_dims),
    groups=("size_dependent",),
    doc="a tensor of sizes that depend on size symbols (a Shape computation), computed from the shapes at run time",
)

__all__ = ["transpose", "reshape", "concat", "split", "slice_", "gather", "expand", "pad", "dims"]
