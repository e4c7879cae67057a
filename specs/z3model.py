"""The Z3 rendering of specifications: one uninterpreted sort, one function per op variant.

Tensors are constants of the uninterpreted sort ``Tensor``. Each op (and each *variant* of
it: its number of inputs, the lengths of its tuple parameters, its output index) is an
uninterpreted function whose leading arguments are the op's integer (or real) parameters.
Three more functions describe the model of :mod:`taso.specs.terms`: ``dim(t, k)``,
``rank(t)`` and the predicate ``ok(t)`` (t is well typed).

Axioms become ``ForAll`` formulas with explicit E-matching patterns: each side that is an
operator application mentioning every variable (and no arithmetic) is a pattern, so Z3
rewrites in both directions where it can and never instantiates on unrelated terms.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import z3
from z3.z3 import _to_expr_ref

from .base import Axiom, OpSpec
from .terms import App, Arith, Cmp, Dim, Expr, IndexOf, IntVar, Lit, Ok, Rank, Select, TensorVar, apps

__all__ = ["TENSOR", "DIM", "RANK", "OK", "app", "dim_of", "function", "apply", "symbol", "render_axiom", "render_term", "render_expr", "render_cond",
           "axiom_symbols", "axiom_rewrites", "closure_laws"]

TENSOR = z3.DeclareSort("Tensor")
DIM = z3.Function("dim", TENSOR, z3.IntSort(), z3.IntSort())
RANK = z3.Function("rank", TENSOR, z3.IntSort())
OK = z3.Function("ok", TENSOR, z3.BoolSort())

_FUNCTIONS: dict[tuple, z3.FuncDeclRef] = {}


def _spec(name: str) -> OpSpec:
    from . import spec_of

    return spec_of(name)


def symbol(op: str, params: Mapping[str, Any], nargs: int) -> tuple:
    """The identity of the Z3 function family of one application: (op, variant)."""
    spec = _spec(op)
    return (op,) + spec.variant(spec.complete(params), nargs)


def function(spec: OpSpec, full_params: Mapping[str, Any], nargs: int, index: int) -> z3.FuncDeclRef:
    """The Z3 function of output ``index`` of this op variant (created once per process)."""
    variant = spec.variant(full_params, nargs)
    key = (spec.name, variant, index)
    f = _FUNCTIONS.get(key)
    if f is None:
        sorts = [z3.RealSort() if s == "real" else z3.IntSort() for s in spec.slot_sorts(full_params)]
        name = spec.name + "_" + "_".join(map(str, variant)) + (f"#{index}" if spec.multi_output else "")
        f = z3.Function(name, *sorts, *([TENSOR] * nargs), TENSOR)
        _FUNCTIONS[key] = f
    return f


_CLOSURE: dict[tuple, z3.BoolRef] = {}


def closure_laws(symbols: frozenset[tuple]) -> list[z3.BoolRef]:
    """For every Z3 function of these op variants: ``ok(f(..., x, ...)) -> ok(x)`` (BOTTOM propagates).

    Only functions already created (by rendering axioms or encoding rules) are covered.
    """
    laws = []
    for (name, variant, index), f in list(_FUNCTIONS.items()):
        if (name, *variant) not in symbols:
            continue
        law = _CLOSURE.get((name, variant, index))
        if law is None:
            args = [z3.Const(f"v{i}", f.domain(i)) for i in range(f.arity())]
            tensors = [a for a in args if a.sort() == TENSOR]
            term = f(*args)
            law = _CLOSURE[(name, variant, index)] = z3.ForAll(args, z3.Implies(OK(term), z3.And(*[OK(t) for t in tensors])), patterns=[term])
        laws.append(law)
    return laws


@functools.lru_cache(maxsize=1024)
def _numeral(value: int | float, sort: str) -> z3.ExprRef:
    return z3.RealVal(value) if sort == "real" else z3.IntVal(int(value))


def _scalar(value: Any, sort: str) -> z3.ExprRef:
    if isinstance(value, z3.ExprRef):
        return value
    return _numeral(value, sort)


def dim_of(term: z3.ExprRef, axis: int) -> z3.ExprRef:
    """``dim(term, axis)`` for a Python int axis (fast path of ``DIM(term, axis)``)."""
    return app(DIM, term, _numeral(axis, "int"))


def app(f: z3.FuncDeclRef, *args: z3.ExprRef) -> z3.ExprRef:
    """``f(*args)`` for arguments already of the right sorts, without z3py's per-call coercions.

    NOTE: building terms is most of the encoder's time; ``f(*args)`` converts and checks
    every argument in Python, this goes straight to the C API.
    """
    ctx = f.ctx
    array = (z3.Ast * len(args))(*[a.as_ast() for a in args])
    return _to_expr_ref(z3.Z3_mk_app(ctx.ref(), f.ast, len(args), array), ctx)


def apply(op: str, params: Mapping[str, Any], args: Sequence[z3.ExprRef], index: int = 0) -> z3.ExprRef:
    """The Z3 term of output ``index`` of ``op`` with these parameters (ints, strings or Z3) on ``args``.

    Raises:
        KeyError: no spec for ``op``, or a required parameter is missing.
    """
    spec = _spec(op)
    full = spec.complete(params)
    f = function(spec, full, len(args), index)
    values = [_scalar(v, s) for v, s in zip(spec.slot_values(full), spec.slot_sorts(full))]
    return app(f, *values, *args)


# ---- rendering terms, expressions and guards --------------------------------------------------------


def render_expr(expr: Any, env: Mapping[str, z3.ExprRef]) -> z3.ExprRef:
    """An integer expression as a Z3 term (``env`` maps variable names to Z3 constants)."""
    if isinstance(expr, IntVar):
        return env[expr.name]
    if isinstance(expr, Lit):
        return z3.RealVal(expr.value) if isinstance(expr.value, float) else z3.IntVal(expr.value)
    if isinstance(expr, Arith):
        a, b = render_expr(expr.a, env), render_expr(expr.b, env)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a / b, "%": lambda: a % b}[expr.op]()
    if isinstance(expr, Dim):
        return DIM(render_term(expr.tensor, env), render_expr(expr.axis, env))
    if isinstance(expr, Rank):
        return RANK(render_term(expr.tensor, env))
    if isinstance(expr, Select):
        index, result = render_expr(expr.index, env), z3.IntVal(-1)
        for i in reversed(range(len(expr.items))):
            result = z3.If(index == i, render_expr(expr.items[i], env), result)
        return result
    if isinstance(expr, IndexOf):
        value, result = render_expr(expr.value, env), z3.IntVal(-1)
        for i in reversed(range(len(expr.items))):
            result = z3.If(render_expr(expr.items[i], env) == value, z3.IntVal(i), result)
        return result
    raise TypeError(f"not an integer expression: {expr!r}")


def _render_param(value: Any, env: Mapping[str, z3.ExprRef]) -> Any:
    if isinstance(value, tuple):
        return tuple(_render_param(v, env) for v in value)
    if isinstance(value, Expr):
        return render_expr(value, env)
    return value


def render_term(term: Any, env: Mapping[str, z3.ExprRef]) -> z3.ExprRef:
    """A tensor term as a Z3 term."""
    if isinstance(term, TensorVar):
        return env[term.name]
    if isinstance(term, App):
        params = {k: _render_param(v, env) for k, v in term.params}
        return apply(term.op, params, [render_term(a, env) for a in term.args], term.index)
    raise TypeError(f"not a tensor term: {term!r}")


_COMPARE = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<=": lambda a, b: a <= b,
            "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}


def render_cond(cond: Any, env: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    if isinstance(cond, Ok):
        return OK(render_term(cond.term, env))
    if isinstance(cond, Cmp):
        return _COMPARE[cond.op](render_expr(cond.a, env), render_expr(cond.b, env))
    raise TypeError(f"not a guard: {cond!r}")


# ---- axioms ---------------------------------------------------------------------------------------------


def _pattern_ready(term: Any, variables: set) -> bool:
    """A side can trigger instantiation if it is an application holding every variable, no arithmetic."""
    if not isinstance(term, App):
        return False
    from .terms import variables as vars_of

    if set(vars_of(term)) != variables:
        return False
    for app in apps(term):
        for _, value in app.params:
            for v in value if isinstance(value, tuple) else (value,):
                if isinstance(v, Expr) and not isinstance(v, (IntVar, Lit)):
                    return False
    return True


def _symbols_of(*nodes) -> frozenset[tuple]:
    return frozenset(symbol(a.op, {k: v for k, v in a.params}, len(a.args)) for a in apps(*nodes))


_AXIOM_SYMBOLS: dict[str, frozenset[tuple]] = {}


def axiom_symbols(axiom: Axiom) -> frozenset[tuple]:
    """The op variants an axiom mentions (for relevance filtering; cached per process)."""
    found = _AXIOM_SYMBOLS.get(axiom.name)
    if found is None:
        found = _AXIOM_SYMBOLS[axiom.name] = _symbols_of(axiom.lhs, axiom.rhs, *axiom.when)
    return found


_AXIOM_REWRITES: dict[str, list[tuple[frozenset[tuple], frozenset[tuple]]]] = {}


def axiom_rewrites(axiom: Axiom) -> list[tuple[frozenset[tuple], frozenset[tuple]]]:
    """(symbols a trigger needs, symbols an instance creates) for each side that triggers instantiation (cached)."""
    found = _AXIOM_REWRITES.get(axiom.name)
    if found is None:
        every = set(axiom.variables)
        sides = ((axiom.lhs, axiom.rhs), (axiom.rhs, axiom.lhs)) if axiom.trigger == "both" else ((axiom.lhs, axiom.rhs),)
        found = _AXIOM_REWRITES[axiom.name] = [(_symbols_of(side), _symbols_of(other, *axiom.when)) for side, other in sides if _pattern_ready(side, every)]
    return found


_RENDERED: dict[str, z3.BoolRef] = {}


def render_axiom(axiom: Axiom) -> z3.BoolRef:
    """The axiom as a Z3 ``ForAll`` with patterns (cached per process).

    Raises:
        ValueError: neither side can serve as a pattern.
    """
    rendered = _RENDERED.get(axiom.name)
    if rendered is not None:
        return rendered
    env: dict[str, z3.ExprRef] = {}
    for v in axiom.variables:
        env[v.name] = z3.Const(v.name, TENSOR) if isinstance(v, TensorVar) else z3.Int(v.name)
    lhs, rhs = render_term(axiom.lhs, env), render_term(axiom.rhs, env)
    body = lhs == rhs
    if axiom.when:
        body = z3.Implies(z3.And(*[render_cond(c, env) for c in axiom.when]), body)
    every = set(axiom.variables)
    sides = ((axiom.lhs, lhs), (axiom.rhs, rhs)) if axiom.trigger == "both" else ((axiom.lhs, lhs),)
    patterns = [side for term, side in sides if _pattern_ready(term, every)]
    if not patterns:
        raise ValueError(f"axiom {axiom.name}: neither side is an application that mentions every variable without arithmetic")
    rendered = z3.ForAll([env[v.name] for v in axiom.variables], body, patterns=patterns, qid=axiom.name)
    _RENDERED[axiom.name] = rendered
    return rendered
