"""Symbolic dims at import: the inputs' size symbols, shape computations folded symbolically, opaque outputs typed.

A model as it ships declares some input dims by name (``batch``, ``seq``) or not at all. Each
becomes a size symbol (:mod:`taso.ir.dims`) measured at a size: the one ``input_shapes`` gives,
else :data:`DEFAULT_BATCH` for a batch (a dim at axis 0, or one named like a batch wherever it
sits: :func:`is_batch_like`) and :data:`DEFAULT_SIZE` for any other, or the largest size the file implies where
that is less (a table sliced up to the symbol: :mod:`taso.onnx.size_bounds`). Exporters
compute shapes at run time from those dims (``Shape -> Gather -> Concat -> Reshape``); such a
computation is folded here into a tensor of symbolic sizes, which the Reshape, Expand,
ConstantOfShape and Slice importers read as parameters, so the graph has no shape constant
baked at the measurement size. What cannot be folded this way (a ``Range`` over ``seq``) reads
the sizes from a ``dims`` node, which export computes from the shapes at run time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from ..errors import ImportError_, ShapeError, Unsupported
from ..ir import OpaqueType, TensorType
from ..ir.dims import Dim, UndecidableDim, decide_equal, floordiv, holds_dims, prod, symbol
from .size_bounds import Bound, implied_bounds
from .values import type_of

__all__ = ["DEFAULT_BATCH", "DEFAULT_SIZE", "is_batch_like", "measured_sizes_of", "input_types", "implied_size_bounds", "fold_symbolic", "symbolic_types", "dim_labels", "range_length"]

# Measurement sizes of a symbol that --input-shape does not give.
DEFAULT_BATCH = 1  # a symbol at axis 0 of an input, or one named like a batch
DEFAULT_SIZE = 128  # any other symbol

# What exporters and users name a batch: batch, batch_size, batch_dim, N, B, bs (and with a suffix: batch_0).
_BATCH_NAME = re.compile(r"(?i)^(?:.*batch.*|n|b|bs|nb|num_?samples?)(?:_?\d+)?$")
# What they name a sequence or time axis, which a model at axis 0 may also have (a steps-first layout).
_SEQUENCE_NAME = re.compile(r"(?i).*(?:seq|time|step|len|token|frame|past|total|cache).*")


def is_batch_like(symbol: str, axis: int) -> bool:
    """Whether a size symbol is a batch: named like one wherever it sits (``[steps, batch, features]``), or any symbol
    at axis 0 not named like a sequence (``seq`` of a steps-first layout is not; tf2onnx's ``unk__7`` is)."""
    return bool(_BATCH_NAME.match(symbol)) or (axis == 0 and not _SEQUENCE_NAME.match(symbol))


def measured_sizes_of(given: Sequence) -> tuple[int, ...]:
    """The sizes an input is measured at when ``--input-shape`` gives a range for some dims (``(24, (1, 8, 128), 256)``):
    each range's first size."""
    return tuple(int(d[0]) if isinstance(d, tuple) else int(d) for d in given)


def is_static_dim(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """A dimension with a size; old converters write -1 for \"dynamic\", which is no size."""
    return dim.HasField("dim_value") and dim.dim_value >= 0


def _label(dim: onnx.TensorShapeProto.Dimension) -> str:
    if is_static_dim(dim):
        return str(dim.dim_value)
    return dim.dim_param or "?"


def input_types(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]], static: bool,
                dtype_of: Callable[[int], str | None], bounds: Mapping[str, Bound] | None = None) -> tuple[dict[str, TensorType], dict[str, int]]:
    """The real inputs' types and the measurement size of each size symbol.

    A declared size stays an int; a named dim (``dim_param``) becomes that symbol, shared by every
    input that names it; an unnamed one (or an old converter's -1) a symbol of its own,
    ``INPUT_dimAXIS``. ``input_shapes`` gives the sizes to measure at (its static entries must
    match the declared ones); ``static`` freezes every symbol at its measurement size; ``bounds``
    (:func:`implied_size_bounds`, read here when not given) caps the default sizes.

    Raises:
        ImportError_: an unknown input name, a rank or size that contradicts the declaration, two
            sizes for one symbol, an input with no declared shape and none given, an unsupported type.
    """
    _refuse_ranges_on_fixed_dims(model, input_shapes)
    input_shapes = {name: measured_sizes_of(given) for name, given in input_shapes.items()}
    initializers = {i.name for i in model.graph.initializer}
    real_inputs = [i for i in model.graph.input if i.name not in initializers]
    names = {i.name for i in real_inputs}
    unknown = set(input_shapes) - names
    if unknown:
        raise ImportError_(f"--input-shape names unknown input(s) {sorted(unknown)}; the model's inputs are {sorted(names)}")
    declared: dict[str, tuple[list, str]] = {}
    opaque_inputs: dict[str, TensorType] = {}
    for vi in real_inputs:
        if type_of(vi.type) is not None:
            if vi.name in input_shapes:
                raise ImportError_(f"--input-shape {vi.name}=...: input {vi.name!r} is not a tensor (a sequence, map or optional)")
            opaque_inputs[vi.name] = type_of(vi.type)
            continue
        tt = vi.type.tensor_type
        dtype = dtype_of(tt.elem_type)
        if dtype is None:
            raise Unsupported(f"input {vi.name!r} has an element type taso does not support ({helper.tensor_dtype_to_string(tt.elem_type)})")
        given = input_shapes.get(vi.name)
        if not tt.HasField("shape"):
            if given is None:
                raise Unsupported(f"input {vi.name!r} has no declared shape; give one with --input-shape {vi.name}=D0,D1,...")
            dims = [int(d) for d in given]
        else:
            dims = [int(d.dim_value) if is_static_dim(d) else _symbol_name(d, vi.name, axis) for axis, d in enumerate(tt.shape.dim)]
            if given is not None and (len(given) != len(dims) or any(type(d) is int and d != int(s) for d, s in zip(dims, given))):
                labels = ",".join(_label(d) for d in tt.shape.dim)
                raise ImportError_(f"--input-shape {vi.name}={','.join(map(str, given))} does not fit the declared shape [{labels}]")
        if given is not None and any(int(s) < 1 for s in given):
            raise ImportError_(f"--input-shape {vi.name}={','.join(map(str, given))}: sizes must be at least 1")
        declared[vi.name] = (dims, dtype)
    sizes = _measurement_sizes(declared, input_shapes, implied_size_bounds(model) if bounds is None else bounds)
    types = {}
    for vi in real_inputs:
        if vi.name in opaque_inputs:
            types[vi.name] = opaque_inputs[vi.name]
            continue
        dims, dtype = declared[vi.name]
        shape = tuple(d if type(d) is int else (sizes[d] if static else symbol(d, sizes[d])) for d in dims)
        types[vi.name] = TensorType(shape, dtype)
    return types, ({} if static else sizes)


def _refuse_ranges_on_fixed_dims(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence]) -> None:
    for vi in model.graph.input:
        given = input_shapes.get(vi.name)
        if given is None or not vi.type.tensor_type.HasField("shape"):
            continue
        for axis, (sizes, dim) in enumerate(zip(given, vi.type.tensor_type.shape.dim)):
            if isinstance(sizes, tuple) and is_static_dim(dim):
                raise ImportError_(f"--input-shape {vi.name}: axis {axis} has a range ({':'.join(map(str, sizes))}) but the model fixes "
                                   f"that dim at {dim.dim_value}; a range needs a symbolic dim")


# Names converters write for "some size" that say nothing about which: each such dim is a symbol of its own.
_ANONYMOUS = {"", "?", "-1", "None", "unk", "dynamic"}


def _symbol_name(dim: onnx.TensorShapeProto.Dimension, value: str, axis: int) -> str:
    """A dynamic dim's symbol: its ``dim_param``, shared by every input naming it, or ``INPUT_dimAXIS`` for an
    unnamed one (paddle2onnx writes "?" for every dynamic dim: they are not one size)."""
    return dim.dim_param if dim.dim_param.strip() not in _ANONYMOUS else f"{value}_dim{axis}"


def implied_size_bounds(model: onnx.ModelProto) -> dict[str, Bound]:
    """Each size symbol's largest size where the file implies one (:mod:`taso.onnx.size_bounds`)."""
    def symbol_of(vi: onnx.ValueInfoProto, axis: int) -> str | None:
        dim = vi.type.tensor_type.shape.dim[axis]
        return None if is_static_dim(dim) else _symbol_name(dim, vi.name, axis)

    return implied_bounds(model, symbol_of)


def _measurement_sizes(declared: Mapping[str, tuple[list, str]], input_shapes: Mapping[str, Sequence[int]],
                       bounds: Mapping[str, Bound]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for name, (dims, _) in declared.items():
        for axis, d in enumerate(dims):
            if type(d) is int or name not in input_shapes:
                continue
            size = int(input_shapes[name][axis])
            if sizes.get(d, size) != size:
                raise ImportError_(f"--input-shape gives the symbol {d!r} two sizes, {sizes[d]} and {size}")
            sizes[d] = size
    for name, (dims, _) in declared.items():
        for axis, d in enumerate(dims):
            if type(d) is not int and d not in sizes:
                default = DEFAULT_BATCH if axis == 0 or is_batch_like(d, axis) else DEFAULT_SIZE
                sizes[d] = min(default, bounds[d][0]) if d in bounds else default
    return sizes


def dim_labels(types: Mapping[str, TensorType]) -> dict[str, Dim]:
    """The ``dim_param`` each symbolic dim is written as for ONNX shape inference, and back."""
    labels: dict[str, Dim] = {}
    for t in types.values():
        for d in t.shape:
            if isinstance(d, Dim):
                labels[str(d)] = d
    return labels


def symbolic_types(concrete: Sequence[TensorType | None], inferred: Sequence[Sequence[onnx.ValueInfoProto | None]],
                   labels: Mapping[str, Dim], fresh: Callable[[int, int], Dim]) -> list[TensorType | None]:
    """Output types with symbolic dims: each measured dim takes what ONNX's symbolic inference says of it.

    ``inferred[k]`` lists what inferences (over the model, over the node alone) say of output k;
    for each dim the first that tells is taken. A dim inference gives as a size stays that int;
    one it names after a known symbolic dim becomes that dim (when the measured sizes agree); any
    other (unknown, or a name of inference's own) becomes a fresh symbol ``fresh(k, axis)``, of
    which nothing is assumed.
    """
    out = []
    for k, (t, infos) in enumerate(zip(concrete, inferred)):
        if t is None or isinstance(t, OpaqueType):
            out.append(t)
            continue
        candidates = [_dims_of(vi, t.rank) for vi in infos]
        shape = []
        for axis, size in enumerate(t.shape):
            shape.append(_known_dim([c[axis] for c in candidates if c is not None], int(size), labels))
            if shape[-1] is None:
                shape[-1] = fresh(k, axis) if size >= 1 else int(size)
        out.append(TensorType(tuple(shape), t.dtype))
    return out


def _dims_of(vi: onnx.ValueInfoProto | None, rank: int) -> list | None:
    if vi is None or not vi.type.tensor_type.HasField("shape") or len(vi.type.tensor_type.shape.dim) != rank:
        return None
    return list(vi.type.tensor_type.shape.dim)


def _known_dim(candidates: list, size: int, labels: Mapping[str, Dim]) -> int | None:
    for d in candidates:
        if is_static_dim(d) and d.dim_value == size:
            return int(size)
        if d.dim_param in labels and int(labels[d.dim_param]) == size:
            return labels[d.dim_param]
    return None


def range_length(values: Sequence[np.ndarray | None]) -> int | None:
    """The length of ONNX Range(start, limit, delta) over a symbolic limit: ``ceil((limit - start) / delta)``, or None."""
    if len(values) != 3 or any(v is None or np.size(v) != 1 for v in values):
        return None
    start, limit, delta = (_objects(v).reshape(-1)[0] for v in values)
    try:
        start, limit, delta = _whole(start), _whole(limit), _whole(delta)
        if isinstance(start, Dim) or isinstance(delta, Dim) or delta <= 0:
            return None
        length = floordiv(limit - start + delta - 1, delta)
        return length if length >= 0 else 0
    except (UndecidableDim, ShapeError):
        return None


# ---- folding shape computations over symbolic sizes ------------------------------------------------

_INTEGER = ("int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8")
_FLOAT = ("float32", "float64", "float16")


def fold_symbolic(node: onnx.NodeProto, values: Sequence[np.ndarray | None], types: Sequence[TensorType | None], attrs: Mapping) -> list[np.ndarray] | None:
    """Evaluates a shape computation on symbolic sizes (object arrays of ints and dims), or None when it is not one.

    ``values`` holds each input's value when known (an object array, or a NumPy array of a
    weight), ``types`` each input's type. Covered: Shape, Size, Gather, Unsqueeze, Squeeze,
    Reshape, Flatten, Concat, Slice, Identity, Cast (to integer and float types), Add, Sub, Mul, Div,
    Mod, Max, Min, Equal, Where, Neg — each as ONNX defines it on integers. A comparison or a
    division whose answer depends on the sizes is not folded.
    """
    try:
        results = _fold(node.op_type, values, types, attrs)
    except (UndecidableDim, ShapeError, ValueError, IndexError, TypeError, KeyError, ZeroDivisionError):
        return None
    return None if results is None else [r if isinstance(r, np.ndarray) and r.dtype == bool else _objects(r) for r in results]


def _objects(value) -> np.ndarray:
    """An object array (NumPy returns a bare element for 0-d results)."""
    if isinstance(value, np.ndarray) and value.dtype == object:
        return value
    out = np.empty(np.shape(value), dtype=object)
    out[...] = value if not isinstance(value, np.ndarray) else value.astype(object)
    return out


def _fold(op: str, values, types, attrs) -> list | None:
    """One ONNX op on symbolic sizes (see :func:`fold_symbolic`); raises when the answer depends on the sizes."""
    if op in ("Shape", "Size"):
        return _fold_shape(op, types[0], attrs)
    if any(v is None for v in values) or not values:
        return None
    xs = [_objects(v) for v in values]
    if op == "Identity":
        return [xs[0]]
    if op == "Cast":
        # sizes are whole numbers: exact in every integer type and in float (YOLO's Range over a float grid size)
        return [xs[0]] if np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"])).name in _INTEGER + _FLOAT else None
    if op == "Gather":
        axis = int(attrs.get("axis", 0))
        return [np.take(xs[0], _ints(values[1]), axis=axis)]
    if op in ("Unsqueeze", "Squeeze", "Reshape", "Flatten"):
        return [_fold_reshape_like(op, xs, attrs)]
    if op == "Concat":
        return [np.concatenate([x.reshape(x.shape or (1,)) if x.ndim == 0 else x for x in xs], axis=int(attrs.get("axis", 0)))]
    if op == "Slice":
        return [_fold_slice(xs, attrs)]
    if op == "Div" and any(t is not None and t.dtype in _FLOAT for t in types):
        return [np.frompyfunc(_exact_div, 2, 1)(xs[0], xs[1])]
    if op in _ARITHMETIC:
        return [np.frompyfunc(_ARITHMETIC[op], 2, 1)(xs[0], xs[1])]
    if op == "Neg":
        return [np.frompyfunc(lambda a: -a, 1, 1)(xs[0])]
    if op == "Equal":
        decided = np.frompyfunc(decide_equal, 2, 1)(xs[0], xs[1])
        return None if any(v is None for v in np.asarray(decided).flat) else [np.asarray(decided, dtype=bool)]
    if op == "Where":
        return [np.where(np.asarray(values[0], dtype=bool), xs[1], xs[2])]
    return None


def _ints(value) -> np.ndarray:
    """Indices, axes or bounds as an int64 array; symbolic ones are not folded here (``int()`` would freeze them)."""
    array = np.asarray(value, dtype=object) if not isinstance(value, np.ndarray) else value
    if array.dtype == object and any(isinstance(v, Dim) for v in array.flat):
        raise UndecidableDim("an index, axis or bound that depends on the sizes")
    return np.asarray(array, dtype=np.int64)


def _truncating_div(a, b):
    """ONNX's integer Div truncates; sizes are >= 0, where that is floor division."""
    if isinstance(a, Dim) or isinstance(b, Dim):
        if (isinstance(b, Dim) or b > 0) and a >= 0:
            return floordiv(a, b)
        raise UndecidableDim(f"{a} / {b} with a negative operand")
    q = abs(int(a)) // abs(int(b))
    return q if (a >= 0) == (b >= 0) else -q


def _exact_div(a, b):
    """Float division of sizes, folded only when the quotient is a whole number at every size."""
    if not isinstance(a, Dim) and not isinstance(b, Dim):
        if float(b) == 0 or float(a) / float(b) != int(float(a) / float(b)):
            raise UndecidableDim(f"{a} / {b} is not a whole number")
        return int(float(a) / float(b))
    quotient = floordiv(a, _whole(b))
    if not quotient * b == a:
        raise UndecidableDim(f"{a} / {b} is a whole number at some sizes only")
    return quotient


def _whole(x):
    if isinstance(x, Dim):
        return x
    if float(x) != int(float(x)):
        raise UndecidableDim(f"{x} is not a whole number")
    return int(float(x))


def _mod(a, b):
    if isinstance(a, Dim) or isinstance(b, Dim):
        return a % b
    return int(a) % int(b)


def _on_sizes(fn: Callable) -> Callable:
    """A binary op where a symbolic size meets a float: folded only when the float is a whole number (a float
    0.5 times ``h`` would otherwise leave a plain float, the measured value, in place of the size)."""
    def apply(a, b):
        if isinstance(a, Dim) or isinstance(b, Dim):
            a, b = _whole(a), _whole(b)
        return fn(a, b)

    return apply


_ARITHMETIC: dict[str, Callable] = {name: _on_sizes(fn) for name, fn in {
    "Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
    "Div": _truncating_div, "Mod": _mod, "Max": max, "Min": min}.items()}


def _fold_shape(op: str, t: TensorType | None, attrs: Mapping) -> list[np.ndarray] | None:
    if t is None:
        return None
    if op == "Size":
        return [np.asarray(prod(t.shape), dtype=object)]
    rank = t.rank
    start, end = int(attrs.get("start", 0)), int(attrs.get("end", rank))
    return [np.asarray(list(t.shape[slice(start, end)]), dtype=object)]


def _fold_reshape_like(op: str, xs: list[np.ndarray], attrs: Mapping) -> np.ndarray:
    x = xs[0]
    if op == "Flatten":
        axis = int(attrs.get("axis", 1)) % max(x.ndim, 1)
        return x.reshape(int(np.prod(x.shape[:axis])), -1)
    if op == "Reshape":
        target = list(_ints(xs[1]).reshape(-1))
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
        return x.reshape(target)
    axes = attrs.get("axes")
    if axes is None and len(xs) > 1:
        axes = list(_ints(xs[1]).reshape(-1))
    if op == "Squeeze":
        axes = [a % x.ndim for a in axes] if axes is not None else [i for i, d in enumerate(x.shape) if d == 1]
        return x.reshape([d for i, d in enumerate(x.shape) if i not in axes])
    rank = x.ndim + len(axes)
    axes = sorted(a % rank for a in axes)
    shape, it = [], iter(x.shape)
    for i in range(rank):
        shape.append(1 if i in axes else next(it))
    return x.reshape(shape)


def _fold_slice(xs: list[np.ndarray], attrs: Mapping) -> np.ndarray:
    x = xs[0]
    if "starts" in attrs:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = list(_ints(xs[1]).reshape(-1)), list(_ints(xs[2]).reshape(-1))
        axes = list(_ints(xs[3]).reshape(-1)) if len(xs) > 3 else list(range(len(starts)))
        steps = list(_ints(xs[4]).reshape(-1)) if len(xs) > 4 else [1] * len(starts)
    index = [slice(None)] * x.ndim
    for s, e, a, t in zip(starts, ends, axes, steps):
        index[a % x.ndim] = slice(s, e, t)
    return x[tuple(index)]


def concrete_array(array: np.ndarray, dtype: str) -> np.ndarray:
    """A symbolic array's values at the measurement sizes."""
    return np.asarray([int(v) if isinstance(v, Dim) else v for v in array.flat], dtype=dtype).reshape(array.shape)


def static_or_none(array: np.ndarray, dtype: str) -> np.ndarray | None:
    """The array as a plain NumPy array when no entry is symbolic (a shape computation over static dims)."""
    return None if holds_dims(tuple(array.flat)) else np.asarray([v for v in array.flat], dtype=dtype).reshape(array.shape)
