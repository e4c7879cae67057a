"""Operator specifications and axioms as data.

An :class:`OpSpec` is the Z3 signature of one registry op: which parameters become integer
(or real) arguments of its uninterpreted function, how string parameters are coded as
integers, and a *symbolic shape rule* over dimensions that may be Z3 integers. An
:class:`Axiom` is one equation between two terms of :mod:`taso.specs.terms`, with guards
and a generator of valuations on which it is checked against the NumPy semantics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from taso.ir import Params

from .terms import Cond, IntVar, TensorVar, Term, Undefined, variables

__all__ = ["Slot", "OpSpec", "Axiom", "ShapeRule", "Valuation", "Unsupported", "if_", "idiv", "any_of", "all_of"]

# dims -> (output dims, requirements); dims and results are ints or Z3 integer expressions.
ShapeRule = Callable[[Sequence[Sequence[Any]], Mapping[str, Any]], "tuple[list[list[Any]], list[Any]]"]
# A valuation: tensor variable -> shape tuple, integer variable -> int.
Valuation = dict[str, Any]


class Unsupported(Exception):
    """A use of an op that its specification does not cover (the verifier reports 'unknown')."""


@dataclass(frozen=True)
class Slot:
    """A parameter that becomes arguments of the op's Z3 function.

    Attributes:
        param: the registry parameter name.
        kind: 'int' (one Int), 'ints' (one Int per element; the length is part of the
            function's identity), 'enum' (a string coded as its index in ``codes``) or
            'real' (one Real).
        codes: the values of an 'enum' parameter, in code order.
    """

    param: str
    kind: str
    codes: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in ("int", "ints", "enum", "real"):
            raise ValueError(f"slot {self.param}: unknown kind {self.kind!r}")

    def encode(self, value: Any) -> list[Any]:
        """The Z3-side values of this parameter (ints, floats or Z3 expressions)."""
        if self.kind == "ints":
            return list(value)
        if self.kind == "enum" and isinstance(value, str):
            return [self.codes.index(value)]
        return [value]

    def decode(self, value: Any) -> Any:
        """The registry value of this parameter from its model value (codes become strings).

        Raises:
            Undefined: an enum code out of range.
        """
        if self.kind == "enum" and not isinstance(value, str):
            if not 0 <= value < len(self.codes):
                raise Undefined(f"{self.param} code {value}")
            return self.codes[value]
        return value


@dataclass(frozen=True)
class OpSpec:
    """The specification of one registry op.

    Attributes:
        name: the registry's canonical name.
        slots: parameters passed to the Z3 function, in argument order; the op's inputs follow.
        shape: the symbolic shape rule: output dims and the equalities/inequalities a
            well-typed application satisfies. It must agree with the registry's shape rule
            wherever that succeeds (tested); leaving a requirement out is always safe.
        context: parameters taken from the model rather than the term (the dtype of constants).
        normalize: rewrites concrete parameters into the form the Z3 terms use, given the
            input ranks (a negative axis becomes non-negative); it must not change the value.
        doc: one line for people.
    """

    name: str
    slots: tuple[Slot, ...]
    shape: ShapeRule
    context: tuple[str, ...] = ()
    normalize: Callable[[dict[str, Any], list[int]], dict[str, Any]] | None = None
    doc: str = ""

    @cached_property
    def op(self):
        from taso.ops import get

        return get(self.name)

    @property
    def multi_output(self) -> bool:
        return "multi_output" in self.op.groups

    def complete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters with registry defaults filled in.

        Raises:
            KeyError: a required parameter is missing.
        """
        from taso.ops.base import REQUIRED

        full = {}
        for p in self.op.params:
            if p.name in params:
                full[p.name] = params[p.name]
            elif p.name in self.context:
                continue
            elif p.default is REQUIRED:
                raise KeyError(f"{self.name}: parameter {p.name!r} is required")
            else:
                full[p.name] = p.default
        return full

    def variant(self, params: Mapping[str, Any], nargs: int) -> tuple:
        """What besides the name identifies the Z3 function: arity and tuple lengths."""
        return (nargs,) + tuple(len(params[s.param]) for s in self.slots if s.kind == "ints")

    def slot_values(self, params: Mapping[str, Any]) -> list[Any]:
        """The Z3 arguments that precede the tensor inputs (complete ``params`` first)."""
        return [v for s in self.slots for v in s.encode(params[s.param])]

    def slot_sorts(self, params: Mapping[str, Any]) -> list[str]:
        """'int' or 'real' for each value of :meth:`slot_values`."""
        return [("real" if s.kind == "real" else "int") for s in self.slots for _ in s.encode(params[s.param])]

    def registry_params(self, values: Mapping[str, Any], dtype: str) -> Params:
        """Registry parameters from model values (codes decoded, context filled).

        Raises:
            Undefined: a code out of range.
            taso.errors.ShapeError: parameters the registry rejects.
        """
        decoded = dict(values)
        for s in self.slots:
            if s.param in decoded:
                decoded[s.param] = s.decode(decoded[s.param])
        decoded.update({name: dtype for name in self.context})
        return self.op.make_params(**decoded)


@dataclass(frozen=True)
class Axiom:
    """An equation ``lhs = rhs`` that holds wherever every guard in ``when`` holds.

    It must hold in the NumPy model for *every* valuation (see :mod:`taso.specs.terms`):
    where the guards hold, lhs is ill-typed exactly when rhs is, and otherwise both are
    equal arrays. ``sample`` draws valuations for the validation test; the test perturbs
    them too (one dimension or integer changed, a tensor made ill-typed) to check the
    ill-typed cases. ``trigger`` says which sides may trigger instantiation in Z3 ('both',
    or 'lhs' to rewrite only left to right, as for ``relu(relu(x)) = relu(x)``, whose right
    side would otherwise match its own result forever). An ``unfold`` axiom is a definition
    (its left side one op application on distinct tensor variables): the verifier
    instantiates it on every matching application of a rule, so fused activations and
    biases reach the prover as the plain ops they stand for.
    """

    name: str
    lhs: Term
    rhs: Term
    sample: Callable[[np.random.Generator], Valuation]
    when: tuple[Cond, ...] = ()
    doc: str = ""
    rtol: float = 1e-7
    trigger: str = "both"
    unfold: bool = False

    @cached_property
    def variables(self) -> list[TensorVar | IntVar]:
        return variables(self.lhs, self.rhs, *self.when)

    def __str__(self) -> str:
        guard = f"  if {' and '.join(map(str, self.when))}" if self.when else ""
        return f"{self.name}: {self.lhs} = {self.rhs}{guard}"


# ---- helpers for symbolic shape rules: the same code runs on ints and on Z3 integers ------------------


def _is_z3(value: Any) -> bool:
    return type(value).__module__.startswith("z3")


def if_(cond: Any, then: Any, otherwise: Any) -> Any:
    """``then if cond else otherwise`` for Python bools and Z3 conditions."""
    if isinstance(cond, (bool, np.bool_)):
        return then if cond else otherwise
    import z3

    return z3.If(cond, then, otherwise)


def idiv(a: Any, b: Any) -> Any:
    """Floor division for ints and Z3 integers (by a positive divisor)."""
    if _is_z3(a) or _is_z3(b):
        return a / b
    return a // b


def any_of(*conds: Any) -> Any:
    """Disjunction for Python bools and Z3 conditions."""
    if all(isinstance(c, (bool, np.bool_)) for c in conds):
        return any(conds)
    import z3

    return z3.Or(*conds)


def all_of(conds: Sequence[Any]) -> list[Any]:
    """Drops requirements that are plainly true; keeps Z3 ones (and False ones, which are errors)."""
    return [c for c in conds if not (isinstance(c, (bool, np.bool_)) and c)]

