"""Which versions of each ONNX operator taso's importers read: the version table.

An ONNX operator changes meaning between versions (Add-6 broadcast only with ``broadcast=1``
and aligned at ``axis``; Softmax before 13 flattened the trailing axes), and a model's opset
picks the version of each operator in force (``onnx.defs.get_schema(op, opset).since_version``).
An importer is offered a node only when that version is listed here: its semantics are the
ones the importer was written for; and the exporter writes a node only at a listed version,
so a node taso adds means what taso meant. A node of any other version (Relu-1 with ``consumed_inputs``,
an operator version newer than this table) stays opaque and is written back verbatim, so a
model is read at every opset without a silent change of meaning.

The table lists the versions in force from opset 7 (the oldest ONNX Runtime runs) to
:data:`REVIEWED_THROUGH`. Versions 22 to 28 changed only these operators' lists of element
types (bfloat16, float8, float4, int2 and the like, none of them an element type taso reads),
except Cast-24, whose new ``round_mode`` attribute applies only to casts to float8e8m0, and Attention-24 and 25,
whose new input and attributes the importer declines (their defaults are the earlier meaning):
``tests/test_onnx_versions.py`` compares every listed version with the one before it in the
installed onnx and fails on any other change.
"""

from __future__ import annotations

import functools

__all__ = ["VERSIONS", "REVIEWED_THROUGH", "OLDEST_OPSET", "version_in_force", "understood"]

# The newest ai.onnx opset whose operator changes were reviewed for this table.
REVIEWED_THROUGH = 28
# The oldest opset ONNX Runtime runs; versions only older opsets use are not listed.
OLDEST_OPSET = 7

VERSIONS: dict[str, tuple[int, ...]] = {
    "Abs": (6, 13),
    "Attention": (23, 24, 25),  # 24 added an optional last input (nonpad_kv_seqlen), 25 window sizes (default none): both declined
    "Add": (7, 13, 14),
    "AveragePool": (7, 10, 11, 19, 22),
    "BatchNormalization": (7, 9, 14, 15),  # 7: spatial=0 (per-activation statistics) is left opaque by the importer
    "Cast": (6, 9, 13, 19, 21, 23, 24, 25, 28),
    "Ceil": (6, 13),
    "Clip": (6, 11, 12, 13),
    "Concat": (4, 11, 13),
    "ConstantOfShape": (9, 20, 21, 23, 24, 25),
    "Conv": (1, 11, 22),
    "Div": (7, 13, 14),
    "Dropout": (7, 10, 12, 13, 22),
    "Equal": (7, 11, 13, 19),
    "Erf": (9, 13),
    "IsNaN": (9, 13, 20),  # 13 and 20 added element types only
    "Exp": (6, 13),
    "Expand": (8, 13),
    "Flatten": (1, 9, 11, 13, 21, 23, 24, 25),
    "Floor": (6, 13),
    "Gather": (1, 11, 13),
    "Gelu": (20,),
    "Gemm": (7, 9, 11, 13),
    "GRU": (7, 14, 22),  # written only (taso.ops.recurrent), forward, default activations; 14 added layout (default 0, the earlier one)
    "GlobalAveragePool": (1, 22),
    "GlobalMaxPool": (1, 22),
    "Greater": (7, 9, 13),
    "HardSigmoid": (6, 22),
    "HardSwish": (14, 22),
    "Identity": (1, 13, 14, 16, 19, 21, 23, 24, 25),
    "LSTM": (7, 14, 22),  # written only (taso.ops.recurrent), forward, default activations; 14 added layout (default 0, the earlier one)
    "LayerNormalization": (17,),
    "LeakyRelu": (6, 16),
    "Less": (7, 9, 13),
    "Log": (6, 13),
    "MatMul": (1, 9, 13),
    "Max": (6, 8, 12, 13),
    "MaxPool": (1, 8, 10, 11, 12, 22),
    "Min": (6, 8, 12, 13),
    "Mul": (7, 13, 14),
    "Neg": (6, 13),
    "Pad": (2, 11, 13, 18, 19, 21, 23, 24, 25),
    "Pow": (7, 12, 13, 15),
    "RMSNormalization": (23,),
    "Reciprocal": (6, 13),
    "ReduceMax": (1, 11, 12, 13, 18, 20),
    "ReduceMean": (1, 11, 13, 18),
    "ReduceSum": (1, 11, 13),
    "Relu": (6, 13, 14),
    "Reshape": (5, 13, 14, 19, 21, 23, 24, 25),
    "Resize": (10, 11, 13, 18, 19),
    "Shape": (1, 13, 15, 19, 21, 23, 24, 25),  # written only, without start and end (a dim computed at run time)
    "Sigmoid": (6, 13),
    "Slice": (1, 10, 11, 13),
    "Softmax": (1, 11, 13),
    "Split": (2, 11, 13, 18),
    "Sqrt": (6, 13),
    "Squeeze": (1, 11, 13, 21, 23, 24, 25),
    "Sub": (7, 13, 14),
    "Sum": (6, 8, 13),
    "Tanh": (6, 13),
    "Transpose": (1, 13, 21, 23, 24, 25),
    "Unsqueeze": (1, 11, 13, 21, 23, 24, 25),
    "Upsample": (7, 9, 10),  # 7: scales as an attribute, left opaque by the importer
    "Where": (9, 16),
}


@functools.lru_cache(maxsize=None)
def version_in_force(op_type: str, opset: int) -> int | None:
    """The version of an ai.onnx operator that a model at ``opset`` uses, or None when onnx defines none there."""
    import onnx.defs

    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except Exception:  # noqa: BLE001 - onnx.defs.SchemaError: no such operator at this opset
        return None


def understood(op_type: str, opset: int) -> bool:
    """Whether ``op_type`` means at ``opset`` what taso's importers read and its exporters write."""
    return opset >= OLDEST_OPSET and version_in_force(op_type, opset) in VERSIONS.get(op_type, ())
