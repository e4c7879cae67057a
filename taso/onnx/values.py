"""ONNX value types and taso's: element types, string tensors and the values that are not tensors.

taso's operators read tensors of numbers and booleans. A string tensor is a tensor too (dtype
``object``, as ONNX Runtime hands strings to NumPy), and a sequence, map or optional is an
:class:`~taso.ir.OpaqueType` that keeps its ONNX ``TypeProto``: both only pass between opaque
nodes, which are written back verbatim, so a tokenizer's strings or a classifier's ZipMap leave
the tensors around them to the rewrites.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import helper

from ..ir import OpaqueType, TensorType
from ..ir.dims import Dim

__all__ = ["element_dtype", "type_of", "value_info", "random_value", "WORDS"]

# What a random string tensor holds: short words (a tokenizer's input is text, not noise).
WORDS = ("taso", "graph", "rule", "tensor", "proof", "cost")

_ELEMENT_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64", "object"}


@functools.lru_cache(maxsize=None)
def element_dtype(elem_type: int) -> str | None:
    """The NumPy dtype name of an ONNX element type (``object`` for strings), or None outside taso's types (bfloat16,
    float8, int4...)."""
    try:
        name = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # noqa: BLE001 - an element type NumPy has no dtype for
        return None
    return name if name in _ELEMENT_DTYPES else None


def type_of(type_proto: onnx.TypeProto) -> OpaqueType | None:
    """The opaque type of a value that is not a tensor (a sequence, map, optional or sparse tensor); None for a tensor."""
    if type_proto.WhichOneof("value") in (None, "tensor_type"):
        return None
    return OpaqueType((), "opaque", type_proto.SerializeToString(deterministic=True))


def value_info(name: str, t: TensorType, dims=None) -> onnx.ValueInfoProto:
    """A value's declaration: a tensor with ``dims`` (default its shape; a symbolic dim by its name, None unknown), or an
    opaque value with its own type."""
    if isinstance(t, OpaqueType):
        return helper.make_value_info(name, onnx.TypeProto.FromString(t.proto))
    shape = t.shape if dims is None else dims
    declared = [str(d) if isinstance(d, Dim) else d for d in shape] if shape is not None else None
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(t.dtype)), declared)


def random_value(t: OpaqueType, rng: np.random.Generator):
    """A random value of a type that is not a tensor: a sequence of two tensors, a map of two entries, an optional
    holding a value; a tensor's dims that are not sizes are 2, its values small (floats normal, integers 0 to 2)."""
    return _random_of(onnx.TypeProto.FromString(t.proto), rng)


def _random_of(type_proto: onnx.TypeProto, rng: np.random.Generator):
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        return [_random_of(type_proto.sequence_type.elem_type, rng) for _ in range(2)]
    if kind == "optional_type":
        return _random_of(type_proto.optional_type.elem_type, rng)
    if kind == "map_type":
        keys = list(WORDS[:2]) if type_proto.map_type.key_type == onnx.TensorProto.STRING else [0, 1]
        return {k: _random_of(type_proto.map_type.value_type, rng) for k in keys}
    if kind != "tensor_type":
        raise ValueError(f"no random value of an ONNX {kind}")
    tt = type_proto.tensor_type
    shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 2 for d in tt.shape.dim) if tt.HasField("shape") else (2,)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "OSU":
        return rng.choice(np.asarray(WORDS, dtype=object), shape)
    return rng.integers(0, 3, shape).astype(dtype)
