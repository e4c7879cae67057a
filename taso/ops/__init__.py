"""The operator registry: every operator taso knows, each declared once.

Families live in their own modules (``elementwise``, ``linalg``, ``conv``, ``norm``, ``attention``,
``recurrent``, ``shape``, ``resize``, ``constants``, ``opaque``); importing this package declares them all. Operator
groups are named once here, as frozensets of canonical names, and reused everywhere.
"""

from __future__ import annotations

from . import attention, constants, conv, elementwise, linalg, norm, opaque, recurrent, resize, shape  # noqa: F401 - declare every op
from .base import ACTIVATIONS, OnnxMapping, Op, Param, contrib_importers, onnx_importers, registry

OPS: dict[str, Op] = registry()


def get(name: str) -> Op:
    """The operator with this canonical name.

    Raises:
        KeyError: with the list of known names.
    """
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}; known: {', '.join(sorted(OPS))}") from None


def group(name: str) -> frozenset[str]:
    """Canonical names of the ops in a group ('elementwise', 'linear', 'constant', 'has_activation', ...)."""
    return frozenset(op.name for op in OPS.values() if name in op.groups)


ELEMENTWISE = group("elementwise")
ACTIVATION_OPS = group("activation")
COMMUTATIVE = group("commutative")
CONSTANT = group("constant")
SHAPE_ONLY = group("shape_only")
HAS_ACTIVATION = group("has_activation")
ORT_CONTRIB = group("ort")  # ONNX Runtime's contrib operators: rewrites make them only for `--target ort`; files may hold them

__all__ = ["OPS", "get", "group", "Op", "Param", "OnnxMapping", "ACTIVATIONS", "onnx_importers", "contrib_importers",
           "ELEMENTWISE", "ACTIVATION_OPS", "COMMUTATIVE", "CONSTANT", "SHAPE_ONLY", "HAS_ACTIVATION", "ORT_CONTRIB"]
