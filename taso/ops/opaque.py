"""The opaque operator: an ONNX node taso does not model, kept verbatim.

Any ONNX node that no importer claims (an unknown op type, a custom domain, an attribute
combination taso does not model, a subgraph-carrying If/Loop) becomes one opaque node. Its
serialized NodeProto travels in the parameters, so export writes it back byte for byte;
its output types are fixed at import. Rewrites never look inside it.

Its NumPy semantics delegate to ONNX's reference evaluator (or, for ops outside the ONNX
domains, to ONNX Runtime) on a one-node model.
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import TasoError
from ..ir import OpaqueType, TensorType
from .base import OnnxMapping, Param, define


def _opaque_shape(types, p) -> list[TensorType]:
    return [OpaqueType.decode(shape, dtype) for shape, dtype in p["out_types"]]


@functools.lru_cache(maxsize=256)
def _single_node_model(proto: bytes, input_slots: tuple[str, ...], captures: tuple[str, ...], in_types: tuple[bytes, ...], opsets):
    import onnx
    from onnx import helper

    node = onnx.NodeProto()
    node.ParseFromString(proto)
    names = [s for s in input_slots if s] + list(captures)
    inputs = [helper.make_value_info(n, onnx.TypeProto.FromString(t)) for n, t in zip(names, in_types)]
    outputs = [helper.make_value_info(n, onnx.TypeProto()) for n in node.output if n]
    graph = helper.make_graph([node], "opaque", inputs, outputs)
    opset_ids = [helper.make_opsetid(d, v) for d, v in opsets]
    model = helper.make_model(graph, opset_imports=opset_ids)
    # NOTE: the newest IR version may be newer than ONNX Runtime reads; use the oldest that fits.
    model.ir_version = helper.find_min_ir_version_for(opset_ids, ignore_unknown=True)
    return model, names


def value_type_proto(value):
    """The ONNX type of a value an opaque node reads: a tensor (an array), a sequence (a list), a map (a dict), or an
    optional with nothing in it (None; its element type is unknown here, so float is assumed)."""
    import onnx
    from onnx import helper

    if isinstance(value, list):
        return helper.make_sequence_type_proto(value_type_proto(value[0]) if value else helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None))
    if isinstance(value, dict):
        key, item = next(iter(value.items())) if value else (0, 0.0)
        element = helper.np_dtype_to_tensor_dtype(np.asarray(item).dtype)
        return helper.make_map_type_proto(helper.np_dtype_to_tensor_dtype(np.asarray(key).dtype), helper.make_tensor_type_proto(element, None))
    if value is None:
        return helper.make_optional_type_proto(helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None))
    value = np.asarray(value)
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)


@functools.lru_cache(maxsize=256)
def _runner(model_bytes: bytes, libraries: tuple[str, ...] = ()):
    """Runs a one-node model: ONNX Runtime with the user's custom-op ``libraries`` (a key of the cache: one registered
    later gets a new session), else ONNX's reference evaluator."""
    import onnx

    model = onnx.ModelProto()
    model.ParseFromString(model_bytes)
    # NOTE: ONNX Runtime first: it is what models deploy on, and the reference evaluator
    # disagrees with it on some ops (LRN). The reference evaluator covers what ORT lacks.
    def reference(feeds):
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, feeds)

    try:
        from ..measure.timing import open_session

        session = open_session(model_bytes, threads=1, optimize=False)  # with the user's custom-op libraries
    except Exception:  # noqa: BLE001
        return reference

    def run(feeds):
        try:
            return session.run(None, feeds)
        except Exception:  # noqa: BLE001 - e.g. ORT rejects an edge case the spec defines
            return reference(feeds)

    return run


def _opaque_eval(xs, p):
    in_types = tuple(value_type_proto(x).SerializeToString(deterministic=True) for x in xs)
    model, names = _single_node_model(p["proto"], p["input_slots"], p["captures"], in_types, p["opsets"])
    try:
        from ..measure.timing import custom_op_libraries

        outputs = _runner(model.SerializeToString(), tuple(custom_op_libraries()))(dict(zip(names, xs)))
    except Exception as e:  # noqa: BLE001
        raise TasoError(f"cannot evaluate opaque ONNX op {p['domain'] or 'ai.onnx'}::{p['op_type']}: {str(e).splitlines()[0]}") from None
    return [o if isinstance(o, (list, dict)) or o is None else np.asarray(o) for o in outputs]


def _export_opaque(ctx, node) -> None:
    ctx.emit_proto(node)


opaque = define(
    "opaque",
    arity=(0, None),
    params=[
        Param("op_type", "str"),
        Param("domain", "str", ""),
        Param("proto", "bytes"),
        Param("input_slots", "any"),  # the explicit ONNX input names, "" for omitted optional inputs
        Param("captures", "any"),  # outer-scope names read by subgraphs
        Param("out_types", "any"),
        Param("opsets", "any"),
    ],
    shape=_opaque_shape,
    numpy=_opaque_eval,
    onnx=OnnxMapping((), None, _export_opaque),
    groups=("opaque",),
    doc="an ONNX node taso does not model, kept verbatim",
)

__all__ = ["opaque", "value_type_proto"]
