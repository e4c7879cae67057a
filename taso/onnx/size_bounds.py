"""Sizes a file implies: the largest value of a size symbol at which the model still runs as written.

Exporters slice tables to the length a symbol names at run time: transformers' BERT slices its position ids, a
``[1, max_positions]`` buffer, to ``[:, :seq]``, and GPT-2 gathers rows ``range(seq)`` of its position embedding. Past
the table's length the slice stops short (and the product or Expand after it fails) or the Gather reads past its
table. So such a table bounds the symbol, and a measurement size above the bound measures a model that does not run:
a 64-position BERT measured at seq 128 could not be checked at all. :func:`implied_bounds` reads those bounds off the
file, before anything is imported; :mod:`taso.onnx.symbolic` measures no symbol past its bound, and ``taso info``
says why.

Found: a Slice of a constant from 0 to a symbol along an axis of static length L, and a Gather from a constant table
along an axis of length L at the indices ``Range(0, symbol, 1)``; each gives ``symbol <= L``. The symbol is traced
through what exporters compute sizes with: Shape of a graph input (its ``start`` and ``end`` too), Gather, Slice,
Squeeze, Unsqueeze, Reshape, Cast, Identity and Concat of such values and constants.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["Bound", "implied_bounds"]

Bound = tuple[int, str]  # the largest size, and why
Entry = str | int | None  # one element of a size vector: a symbol, a known int, or unknown

_PASS_THROUGH = {"Squeeze", "Unsqueeze", "Reshape", "Cast", "Identity"}


def implied_bounds(model: onnx.ModelProto, symbol_of: Callable[[onnx.ValueInfoProto, int], str | None]) -> dict[str, Bound]:
    """Each size symbol's bound where the file implies one (the smallest, where several do). ``symbol_of(input, axis)``
    names an input's dim as the importer does (None for a static one)."""
    graph = model.graph
    tensors = {i.name: i for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output and any(a.name == "value" for a in node.attribute):
            tensors[node.output[0]] = next(a.t for a in node.attribute if a.name == "value")
    tables = {name: tuple(int(d) for d in t.dims) for name, t in tensors.items()}  # each constant's shape
    small = {name: v for name, t in tensors.items() if (v := _small_ints(t)) is not None}  # its values, where a few ints
    inputs = {vi.name: vi for vi in graph.input if vi.name not in tensors}
    sizes: dict[str, list[Entry]] = {}  # value -> its elements, where it is a vector of sizes
    ranges: dict[str, str] = {}  # value -> the symbol s of Range(0, s, 1)
    bounds: dict[str, Bound] = {}

    def vector(value: str) -> list[Entry] | None:
        return sizes.get(value, small.get(value))

    def bound(symbol: str, length: int, why: str) -> None:
        if symbol not in bounds or length < bounds[symbol][0]:
            bounds[symbol] = (length, why)

    for node in graph.node:
        op, ins = node.op_type, list(node.input)
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if op == "Shape" and ins and ins[0] in inputs and inputs[ins[0]].type.tensor_type.HasField("shape"):
            vi = inputs[ins[0]]
            dims = [symbol_of(vi, axis) or d.dim_value for axis, d in enumerate(vi.type.tensor_type.shape.dim)]
            sizes[node.output[0]] = dims[slice(attrs.get("start", 0), attrs.get("end"))]
        elif op in _PASS_THROUGH and ins and (known := vector(ins[0])) is not None and (len(known) <= 1 or op in ("Cast", "Identity")):
            sizes[node.output[0]] = known
        elif op == "Gather" and len(ins) == 2 and (known := vector(ins[0])) is not None and (index := vector(ins[1])) is not None:
            if attrs.get("axis", 0) == 0 and len(index) == 1 and isinstance(index[0], int) and -len(known) <= index[0] < len(known):
                sizes[node.output[0]] = [known[index[0]]]
        elif op == "Concat" and all(vector(v) is not None for v in ins):
            sizes[node.output[0]] = [e for v in ins for e in vector(v)]
        elif op == "Slice" and len(ins) >= 3 and (known := vector(ins[0])) is not None:
            starts, ends = vector(ins[1]), vector(ins[2])
            if starts and ends and all(isinstance(e, int) for e in starts + ends) and len(starts) == 1:
                sizes[node.output[0]] = known[slice(starts[0], ends[0])]
        elif op == "Range" and len(ins) == 3:
            start, limit, delta = vector(ins[0]), vector(ins[1]), vector(ins[2])
            if start == [0] and delta == [1] and limit and isinstance(limit[0], str):
                ranges[node.output[0]] = limit[0]
        if op == "Slice" and len(ins) >= 3 and ins[0] in tables:
            _slice_bound(ins, tables[ins[0]], vector, bound)
        elif op == "Gather" and len(ins) == 2 and ins[0] in tables and tables[ins[0]] and ins[1] in ranges:
            table = tables[ins[0]]
            axis = attrs.get("axis", 0) % len(table)
            bound(ranges[ins[1]], table[axis], f"rows 0 to {ranges[ins[1]]} of the {table[axis]}-long {ins[0]!r} are gathered")
    return bounds


def _small_ints(tensor: onnx.TensorProto) -> list[int] | None:
    """The values of a constant of at most 8 integers (a size vector, an index, an axis), else None."""
    if len(tensor.dims) > 1 or int(np.prod(tensor.dims)) > 8 or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    try:
        array = numpy_helper.to_array(tensor)
    except (ValueError, TypeError):  # a malformed constant: the importer says so in its own words
        return None
    return [int(v) for v in array.reshape(-1)] if array.dtype.kind in "iu" else None


def _slice_bound(ins: list[str], shape: tuple[int, ...], vector, bound) -> None:
    """A Slice of a constant from 0 to a symbol along an axis of static length: that symbol's bound."""
    starts, ends = vector(ins[1]), vector(ins[2])
    axes = vector(ins[3]) if len(ins) > 3 and ins[3] else list(range(len(ends or ())))
    steps = vector(ins[4]) if len(ins) > 4 and ins[4] else [1] * len(ends or ())
    if not starts or not ends or axes is None or steps is None or not len(starts) == len(ends) == len(axes) == len(steps):
        return
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if isinstance(end, str) and start == 0 and step == 1 and isinstance(axis, int) and -len(shape) <= axis < len(shape):
            length = shape[axis]
            bound(end, length, f"the {length}-long axis {axis % len(shape)} of {ins[0]!r} is sliced up to it")
