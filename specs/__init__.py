"""taso.specs: the Z3 specification of every operator the generator uses, and their axioms.

One module per operator family (``elementwise``, ``linalg``, ``conv``, ``shape``,
``constants``, ``norm``, ``attention``, ``recurrent``); each declares ``specs`` (one :class:`OpSpec` per registry op: the Z3
signature and a symbolic shape rule) and ``axioms`` (equations in the term language of
:mod:`taso.specs.terms`, each with the valuations it is validated on). The verifier reads
:data:`SPECS` and :data:`AXIOMS`; nothing else keeps a list of operators or axioms.
"""

from __future__ import annotations

from . import attention, constants, conv, elementwise, linalg, norm, recurrent, shape
from .base import Axiom, OpSpec, Slot, Unsupported
from .terms import TensorVar

__all__ = ["SPECS", "AXIOMS", "UNFOLDINGS", "FAMILIES", "spec_of", "axiom", "Axiom", "OpSpec", "Slot", "Unsupported"]

FAMILIES = (elementwise, linalg, conv, shape, constants, norm, attention, recurrent)

SPECS: dict[str, OpSpec] = {}
AXIOMS: list[Axiom] = []
for _family in FAMILIES:
    for _spec in _family.specs:
        if _spec.name in SPECS:
            raise ValueError(f"operator {_spec.name!r} is specified twice")
        # NOTE: a parameter that reached neither the Z3 function nor the model would let Z3
        # equate two applications that differ in it: every one must be a slot or context.
        _missing = {p.name for p in _spec.op.params} - {s.param for s in _spec.slots} - set(_spec.context)
        if _missing:
            raise ValueError(f"the spec of {_spec.name!r} leaves parameter(s) {sorted(_missing)} out of its Z3 function")
        SPECS[_spec.name] = _spec
    AXIOMS.extend(_family.axioms)
AXIOMS.extend(linalg.batched_axioms)  # batched matmul laws, last (see linalg.batched_axioms)
AXIOMS.extend(norm.definitions)  # the normalizations' definitions after them: the axioms before keep their places
AXIOMS.extend(attention.definitions)  # and attention's after those
AXIOMS.extend(recurrent.definitions)  # and the recurrent cells' last

_BY_NAME = {a.name: a for a in AXIOMS}
if len(_BY_NAME) != len(AXIOMS):
    raise ValueError("two axioms share a name")

# The definitional axioms, by the op of their left side (see Axiom.unfold).
UNFOLDINGS: dict[str, list[Axiom]] = {}
for _axiom in AXIOMS:
    if _axiom.unfold:
        _args = getattr(_axiom.lhs, "args", None)
        if _args is None or len(set(_args)) != len(_args) or not all(isinstance(a, TensorVar) for a in _args):
            raise ValueError(f"definitional axiom {_axiom.name}: its left side must apply one op to distinct tensor variables")
        UNFOLDINGS.setdefault(_axiom.lhs.op, []).append(_axiom)


def spec_of(name: str) -> OpSpec:
    """The specification of a registry op.

    Raises:
        Unsupported: the op has no specification (the verifier reports the rule as unknown).
    """
    try:
        return SPECS[name]
    except KeyError:
        raise Unsupported(f"operator {name!r} has no Z3 specification") from None


def axiom(name: str) -> Axiom:
    """The axiom with this name."""
    return _BY_NAME[name]
