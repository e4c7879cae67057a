"""A tiny term language for axioms: tensor terms over registry ops, integer expressions, guards.

An axiom is written once, as data, in this language (``matmul(matmul(x, y), z)``), and the
same text is rendered two ways:

* to Z3 (:mod:`taso.specs.z3model`), where tensors are constants of one uninterpreted sort
  and integer parameters are Z3 integers;
* to NumPy (:func:`evaluate`), through the registry's reference semantics, so every axiom
  is validated against the ground truth before anyone trusts it.

Both renderings interpret the terms in the same *model*: a tensor is a real array or
``BOTTOM`` (the value of an ill-typed application: a shape error, a bad parameter, a
BOTTOM argument). ``Dim(t, k)`` is ``t.shape[k]``, or -1 when ``t`` is BOTTOM or ``k`` is
not an axis of ``t``; ``Rank(t)`` is ``t.ndim`` or -1; ``Ok(t)`` says ``t`` is not BOTTOM.
The model's tensors are non-empty: an application whose result has a zero-size dimension
is BOTTOM too (so ``conv(x, identity kernel) = x`` needs no "x is non-empty" guard).

An axiom is sound exactly when it holds in this model for *every* valuation, ill-typed ones
included: then anything Z3 derives from the axioms holds for real tensors too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Union

import numpy as np

__all__ = [
    "Expr", "IntVar", "Lit", "Arith", "Dim", "Rank", "Select", "IndexOf", "Cond", "Cmp", "Ok",
    "Term", "TensorVar", "App", "BOTTOM", "Undefined", "tensors", "ints", "op", "lit", "eq", "ne", "le", "lt", "ge", "gt",
    "ok", "dim", "rank", "select", "index_of", "same_shape", "evaluate", "evaluate_expr", "concrete_params", "holds", "variables", "apps",
]


class Undefined(Exception):
    """Raised while evaluating a term whose value is BOTTOM."""


BOTTOM = None  # the value of an ill-typed term in the NumPy model (:func:`evaluate` returns it)


# ---- integer expressions -----------------------------------------------------------------------


class Expr:
    """An integer expression: operator overloads build :class:`Arith` nodes (ints are wrapped)."""

    def __add__(self, other): return Arith("+", self, lit(other))
    def __radd__(self, other): return Arith("+", lit(other), self)
    def __sub__(self, other): return Arith("-", self, lit(other))
    def __rsub__(self, other): return Arith("-", lit(other), self)
    def __mul__(self, other): return Arith("*", self, lit(other))
    def __rmul__(self, other): return Arith("*", lit(other), self)
    def __floordiv__(self, other): return Arith("//", self, lit(other))
    def __mod__(self, other): return Arith("%", self, lit(other))


@dataclass(frozen=True)
class IntVar(Expr):
    """A universally quantified integer (an axis, a stride, an activation code, a size)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Lit(Expr):
    """An integer or real literal."""

    value: int | float

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class Arith(Expr):
    """``a op b`` for op in + - * // % (floor division and modulo, as in Python and SMT-LIB)."""

    op: str
    a: Expr
    b: Expr

    def __str__(self) -> str:
        return f"({self.a} {self.op} {self.b})"


@dataclass(frozen=True)
class Dim(Expr):
    """Dimension ``axis`` of a tensor term (-1 when BOTTOM or not an axis)."""

    tensor: Term
    axis: Expr

    def __str__(self) -> str:
        return f"dim({self.tensor}, {self.axis})"


@dataclass(frozen=True)
class Rank(Expr):
    """The rank of a tensor term (-1 when BOTTOM)."""

    tensor: Term

    def __str__(self) -> str:
        return f"rank({self.tensor})"


@dataclass(frozen=True)
class Select(Expr):
    """``items[index]``, or -1 when index is out of range (composes permutations)."""

    items: tuple[Expr, ...]
    index: Expr

    def __str__(self) -> str:
        return f"({', '.join(map(str, self.items))})[{self.index}]"


@dataclass(frozen=True)
class IndexOf(Expr):
    """The first position of ``value`` in ``items``, or -1 (inverts permutations)."""

    items: tuple[Expr, ...]
    value: Expr

    def __str__(self) -> str:
        return f"index({self.value} in ({', '.join(map(str, self.items))}))"


# ---- guards ---------------------------------------------------------------------------------------


class Cond:
    """A guard of an axiom: the axiom claims lhs = rhs only where all its guards hold."""


@dataclass(frozen=True)
class Cmp(Cond):
    """``a op b`` for op in == != <= < >= >."""

    op: str
    a: Expr
    b: Expr

    def __str__(self) -> str:
        return f"{self.a} {self.op} {self.b}"


@dataclass(frozen=True)
class Ok(Cond):
    """The term is well typed (not BOTTOM)."""

    term: Term

    def __str__(self) -> str:
        return f"ok({self.term})"


# ---- tensor terms ---------------------------------------------------------------------------------


class Term:
    """A tensor-valued term."""


@dataclass(frozen=True)
class TensorVar(Term):
    """A universally quantified tensor."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class App(Term):
    """Output ``index`` of a registry op applied to argument terms with parameters.

    Parameters use the registry's names and values (``activation="relu"``,
    ``strides=(sh, sw)``); any value may be an integer expression. Parameters left out take
    the registry's defaults.
    """

    op: str
    args: tuple[Term, ...]
    params: tuple[tuple[str, Any], ...] = ()
    index: int = 0

    def __getitem__(self, index: int) -> App:
        return replace(self, index=index)

    def __str__(self) -> str:
        shown = [str(a) for a in self.args] + [f"{k}={_show(v)}" for k, v in self.params]
        text = f"{self.op}({', '.join(shown)})"
        return f"{text}[{self.index}]" if self.index else text


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_show(v) for v in value) + ")"
    return repr(value) if isinstance(value, str) else str(value)


# ---- builders -------------------------------------------------------------------------------------


def tensors(names: str) -> tuple[TensorVar, ...]:
    """``x, y = tensors("x y")``."""
    return tuple(TensorVar(n) for n in names.split())


def ints(names: str) -> tuple[IntVar, ...]:
    """``ax, sh = ints("ax sh")``."""
    return tuple(IntVar(n) for n in names.split())


def lit(value: Any) -> Expr:
    return value if isinstance(value, Expr) else Lit(value)


def _param(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return tuple(_param(v) for v in value)
    if isinstance(value, (bool, np.integer)):
        return Lit(int(value))
    if isinstance(value, (int, float)):
        return Lit(value)
    return value


def op(name: str) -> Callable[..., App]:
    """A builder for terms of one registry op: ``matmul = op("matmul"); matmul(x, y, activation="relu")``.

    Raises:
        KeyError: the registry has no op of that name (caught when the spec module loads).
    """
    from taso.ops import get

    registry_op = get(name)
    known = {p.name for p in registry_op.params}

    def build(*args: Term, **params: Any) -> App:
        unknown = set(params) - known
        if unknown:
            raise TypeError(f"{name}: unknown parameter(s) {sorted(unknown)}")
        return App(name, tuple(args), tuple(sorted((k, _param(v)) for k, v in params.items())))

    build.__name__ = name
    return build


def eq(a, b) -> Cmp: return Cmp("==", lit(a), lit(b))
def ne(a, b) -> Cmp: return Cmp("!=", lit(a), lit(b))
def le(a, b) -> Cmp: return Cmp("<=", lit(a), lit(b))
def lt(a, b) -> Cmp: return Cmp("<", lit(a), lit(b))
def ge(a, b) -> Cmp: return Cmp(">=", lit(a), lit(b))
def gt(a, b) -> Cmp: return Cmp(">", lit(a), lit(b))
def ok(term: Term) -> Ok: return Ok(term)
def dim(term: Term, axis) -> Dim: return Dim(term, lit(axis))
def rank(term: Term) -> Rank: return Rank(term)
def select(items: Sequence, index) -> Select: return Select(tuple(lit(i) for i in items), lit(index))
def index_of(items: Sequence, value) -> IndexOf: return IndexOf(tuple(lit(i) for i in items), lit(value))


def same_shape(a: Term, b: Term, rank_: int) -> tuple[Cond, ...]:
    """Guards saying ``a`` and ``b`` both have rank ``rank_`` and equal dimensions."""
    return (eq(rank(a), rank_), eq(rank(b), rank_)) + tuple(eq(dim(a, k), dim(b, k)) for k in range(rank_))


# ---- traversal ----------------------------------------------------------------------------------------


def _children(node: Any) -> Iterator[Any]:
    if isinstance(node, App):
        yield from node.args
        for _, v in node.params:
            yield from _children_of_value(v)
    elif isinstance(node, Arith):
        yield node.a
        yield node.b
    elif isinstance(node, Dim):
        yield node.tensor
        yield node.axis
    elif isinstance(node, Rank):
        yield node.tensor
    elif isinstance(node, Select):
        yield from node.items
        yield node.index
    elif isinstance(node, IndexOf):
        yield from node.items
        yield node.value
    elif isinstance(node, Cmp):
        yield node.a
        yield node.b
    elif isinstance(node, Ok):
        yield node.term


def _children_of_value(value: Any) -> Iterator[Any]:
    if isinstance(value, tuple):
        for v in value:
            yield from _children_of_value(v)
    elif isinstance(value, Expr):
        yield value


def _walk(node: Any) -> Iterator[Any]:
    yield node
    for child in _children(node):
        yield from _walk(child)


def variables(*nodes: Any) -> list[TensorVar | IntVar]:
    """The variables of some terms, expressions or guards, in order of first appearance."""
    seen: dict[Any, None] = {}
    for node in nodes:
        for sub in _walk(node):
            if isinstance(sub, (TensorVar, IntVar)):
                seen.setdefault(sub, None)
    return list(seen)


def apps(*nodes: Any) -> list[App]:
    """Every operator application inside some terms or guards."""
    return [sub for node in nodes for sub in _walk(node) if isinstance(sub, App)]


# ---- the NumPy model ------------------------------------------------------------------------------------

Value = Union[np.ndarray, None]


def evaluate_expr(expr: Any, env: Mapping[str, Any], dtype: str = "float64") -> int | float:
    """Evaluates an integer expression in the NumPy model (``env`` binds variables)."""
    if isinstance(expr, (int, float)):
        return expr
    if isinstance(expr, Lit):
        return expr.value
    if isinstance(expr, IntVar):
        return env[expr.name]
    if isinstance(expr, Arith):
        a, b = evaluate_expr(expr.a, env, dtype), evaluate_expr(expr.b, env, dtype)
        if expr.op in ("//", "%") and b == 0:
            return 0  # SMT-LIB leaves division by zero unspecified; no guard relies on it
        return _ARITH[expr.op](a, b)
    if isinstance(expr, Dim):
        value = evaluate(expr.tensor, env, dtype)
        axis = evaluate_expr(expr.axis, env, dtype)
        return -1 if value is None or not 0 <= axis < value.ndim else int(value.shape[axis])
    if isinstance(expr, Rank):
        value = evaluate(expr.tensor, env, dtype)
        return -1 if value is None else value.ndim
    if isinstance(expr, Select):
        index = evaluate_expr(expr.index, env, dtype)
        return evaluate_expr(expr.items[index], env, dtype) if 0 <= index < len(expr.items) else -1
    if isinstance(expr, IndexOf):
        value = evaluate_expr(expr.value, env, dtype)
        items = [evaluate_expr(i, env, dtype) for i in expr.items]
        return items.index(value) if value in items else -1
    raise TypeError(f"not an integer expression: {expr!r}")


_ARITH = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "//": lambda a, b: a // b, "%": lambda a, b: a % b}
_COMPARE = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<=": lambda a, b: a <= b,
            "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}


def holds(cond: Cond, env: Mapping[str, Any], dtype: str = "float64") -> bool:
    """Evaluates a guard in the NumPy model."""
    if isinstance(cond, Ok):
        return evaluate(cond.term, env, dtype) is not None
    if isinstance(cond, Cmp):
        return bool(_COMPARE[cond.op](evaluate_expr(cond.a, env, dtype), evaluate_expr(cond.b, env, dtype)))
    raise TypeError(f"not a guard: {cond!r}")


def _concrete(value: Any, env: Mapping[str, Any], dtype: str) -> Any:
    if isinstance(value, tuple):
        return tuple(_concrete(v, env, dtype) for v in value)
    if isinstance(value, Expr):
        return evaluate_expr(value, env, dtype)
    return value


def concrete_params(app: App, env: Mapping[str, Any], dtype: str = "float64") -> dict[str, Any]:
    """An application's parameters with every integer expression evaluated (codes not yet decoded)."""
    return {k: _concrete(v, env, dtype) for k, v in app.params}


def evaluate(term: Term, env: Mapping[str, Any], dtype: str = "float64") -> Value:
    """Evaluates a tensor term in the NumPy model: an array, or None (BOTTOM) when ill typed.

    Args:
        term: the term.
        env: variable name -> array (or None for BOTTOM) for tensors, int for integers.
        dtype: the element type of the model; constant ops (eye, fill, ...) take it too.
    """
    if isinstance(term, TensorVar):
        return env[term.name]
    if not isinstance(term, App):
        raise TypeError(f"not a tensor term: {term!r}")
    from taso.ir import TensorType

    from . import spec_of

    args = [evaluate(a, env, dtype) for a in term.args]
    if any(a is None for a in args):
        return None
    spec = spec_of(term.op)
    try:
        params = spec.registry_params(concrete_params(term, env, dtype), dtype)
        registry_op = spec.op
        types = registry_op.infer([TensorType.of(a) for a in args], params)
        outputs = registry_op.evaluate(args, params)
    except Exception:  # noqa: BLE001 - any failure of an ill-typed application is BOTTOM
        return None
    if term.index >= len(outputs) or outputs[term.index].size == 0:
        return None  # NOTE: the model's tensors are non-empty (see the module docstring)
    if outputs[term.index].shape != types[term.index].shape:
        return None  # NOTE: the executor rejects a result that contradicts the shape rule (a negative stride)
    return outputs[term.index]
