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

from ..dims import Dim
from ..ir import OpaqueType, TensorType

__all__ = ["element_dtype", "type_of", "value_info"]

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
