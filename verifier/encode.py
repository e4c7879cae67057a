"""Translation of a rule into Z3: one term per value of each side, and ground facts about shapes.

Each side is walked in order and every node is mapped through its op's specification
(:mod:`taso.specs`): the node's parameters become the leading arguments of the op's
uninterpreted function, its inputs the remaining ones. Shape-dependent parameters (the
rule's shape expressions, such as the sizes of a split) stay *symbolic*: ``{"dim": ["w1",
1]}`` becomes the Z3 term ``dim(w1, 1)``, so a proof covers every shape the rule can be
applied to, not just its example shapes.

The ground facts are what holds for every tensor the rule can match: every value of both
sides is well typed (``ok``); inputs have the ranks of their examples and positive
dimensions (the model's tensors are non-empty); the rule's shape constraints hold; mapped
outputs have equal shapes (the rewrite engine checks all of this when it applies a rule).
Everything else about shapes follows from the *shape laws*: one quantified law per op
application pattern of the rule, built from its spec's symbolic shape rule, which gives
the rank and dimensions of every well-typed application of that pattern, including the
ones Z3 creates while rewriting. Axiom guards about shapes are decided from them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import z3
from taso.specs import UNFOLDINGS, Axiom, Unsupported, spec_of
from taso.specs.terms import App, Arith, Dim, IntVar, Lit, TensorVar
from taso.specs.z3model import DIM, OK, RANK, TENSOR, app, apply, dim_of, render_cond, symbol

from taso.rules import Rule

__all__ = ["Encoding", "encode_rule"]


@dataclass(frozen=True)
class Encoding:
    """A rule in Z3.

    Attributes:
        goals: one ``(source value, target value, source term == target term)`` per mapped output.
        facts: labelled ground facts (label, formula).
        symbols: the op variants the rule uses, its unfoldings included (for choosing relevant axioms).
        assumptions: shape equalities that hold on the example shapes but that the rule does
            not state, each as (rule constraint, formula): an input dimension equal to another
            or to its example value. A proof may use some; the rule then gains them as
            constraints, so it is applied only where they hold.
        definitions: ground instances of definitional axioms (see :class:`_Builder`), as
            (axiom name, formula); the prover tracks them like the axioms they come from.
        shape_laws: for each op application in the rule (parameters and input ranks), a
            quantified law giving the rank and dims of *every* such application, the ones
            Z3 creates while rewriting included: ``ok(f(x)) and rank(x) = r -> dim(f(x), k)
            = ...``. With :func:`~taso.specs.z3model.closure_laws` (arguments of well-typed
            terms are well typed), axiom guards about new terms can then be decided.
    """

    goals: tuple[tuple[str, str, z3.BoolRef], ...]
    facts: tuple[tuple[str, z3.BoolRef], ...]
    symbols: frozenset[tuple]
    definitions: tuple[tuple[str, z3.BoolRef], ...] = ()
    shape_laws: tuple[z3.BoolRef, ...] = ()
    rule: Rule | None = None

    @cached_property
    def assumptions(self) -> tuple[tuple[dict, z3.BoolRef], ...]:
        # NOTE: computed on first use: most proofs never need them.
        return _example_equalities(self.rule) if self.rule is not None else ()


@dataclass(frozen=True)
class _Value:
    """A value's Z3 term and its rank."""

    term: z3.ExprRef
    rank: int


class _Builder:
    """Builds the Z3 terms of op applications with their ground facts, unfolding definitions.

    Every application of the rule is well typed (a fact; ``well_typed``) and brings the
    shape laws of its pattern. An application that matches the left side of a
    *definitional* axiom (``conv2d(x, w, b, activation=relu) = relu(conv2d(x, w, b))``,
    ``conv2d(x, w, b) = add(conv2d(x, w), reshape(b, ...))``) also gets that axiom's ground
    instance, under its guards: the prover then sees fused activations and biases as the
    plain ops they stand for. The instance's new subterms are well typed when the
    application is (by congruence and the closure laws), so nothing more is asserted.
    """

    def __init__(self, well_typed: bool = True):
        self.well_typed = well_typed
        self.facts: list[tuple[str, z3.BoolRef]] = []
        self.definitions: list[tuple[str, z3.BoolRef]] = []
        self.symbols: set[tuple] = set()
        self.shape_laws: dict[int, z3.BoolRef] = {}

    def apply(self, op: str, params: Mapping[str, Any], args: list[_Value], label: str) -> list[_Value]:
        """The outputs of ``op`` on ``args``; records their facts (and unfoldings) in ``self.facts``."""
        spec = spec_of(op)
        params = spec.complete(params)
        ranks = tuple(a.rank for a in args)
        if spec.normalize is not None:
            params = spec.normalize(params, list(ranks))
        out_ranks = [len(d) for d in spec.shape([[1] * r for r in ranks], params)[0]]
        self.symbols.add(symbol(op, params, len(args)))
        outs = [_Value(apply(op, params, [a.term for a in args], k), r) for k, r in enumerate(out_ranks)]
        if args:
            self.shape_laws.update((id(law), law) for law in _shape_laws(op, params, ranks))
        else:
            self.facts.extend((f"shape of {label}", fact) for fact in _constant_shape(op, params, outs[0].term))
        if self.well_typed:
            self.facts.extend((f"{label}[{k}] is well typed", app(OK, out.term)) for k, out in enumerate(outs))
        for axiom in UNFOLDINGS.get(op, ()):  # a definition of output k (k = 0 for single-output ops)
            if axiom.lhs.index < len(outs):
                self._unfold(axiom, params, args, outs[axiom.lhs.index], label)
        return outs

    def _unfold(self, axiom: Axiom, params: Mapping[str, Any], args: list[_Value], out: _Value, label: str) -> None:
        env = _bind(axiom.lhs, params, args)
        if env is None:
            return
        inner = _Builder(well_typed=False)
        rhs = inner.build(axiom.rhs, env, f"{label} unfolded by {axiom.name}")
        names = {k: (v.term if isinstance(v, _Value) else _z3_int(v)) for k, v in env.items()}
        guard = [render_cond(c, names) for c in axiom.when]
        self.definitions.append((axiom.name, z3.Implies(z3.And(*guard), out.term == rhs.term)))
        self.definitions.extend(inner.definitions)
        self.facts.extend(inner.facts)
        self.symbols |= inner.symbols
        self.shape_laws.update(inner.shape_laws)

    def build(self, term: Any, env: Mapping[str, Any], label: str) -> _Value:
        """A term of the spec language with variables bound by ``env`` (tensors to values, ints to ints)."""
        if isinstance(term, TensorVar):
            return env[term.name]
        params = {k: _param_value(v, env) for k, v in term.params}
        args = [self.build(a, env, label) for a in term.args]
        return self.apply(term.op, params, args, f"{term.op} in {label}")[term.index]


_LAWS: dict[tuple, list[z3.BoolRef]] = {}


def _shape_laws(op: str, params: Mapping[str, Any], ranks: tuple[int, ...]) -> list[z3.BoolRef]:
    """The quantified shape laws of one op application pattern (see ``Encoding.shape_laws``).

    Symbolic parameters (shape expressions) become quantified integers too: a pattern may
    not contain arithmetic, and the law holds for every value anyway. That also makes the
    laws independent of the rule, so they are built once per process.
    """
    if not any(_holds_z3(v) for v in params.values()):
        # NOTE: the key below without building anything: nothing to generalize (issue 27)
        laws = _LAWS.get((op, repr(sorted(params.items())), ranks))
        if laws is not None:
            return laws
    xs = [z3.Const(f"x{i}", TENSOR) for i in range(len(ranks))]
    bound: list[z3.ExprRef] = []

    def generalize(value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(generalize(v) for v in value)
        if isinstance(value, z3.ExprRef) and not z3.is_int_value(value):
            bound.append(z3.Int(f"p{len(bound)}"))
            return bound[-1]
        return value

    params = {k: generalize(v) for k, v in params.items()}
    key = (op, repr(sorted(params.items())), ranks)
    if key in _LAWS:
        return _LAWS[key]
    out_dims, requirements = spec_of(op).shape([[DIM(x, j) for j in range(r)] for x, r in zip(xs, ranks)], params)
    typing = [r for r in requirements if not isinstance(r, (bool, np.bool_))]
    laws = []
    for k, dims in enumerate(out_dims):
        term = apply(op, params, xs, k)
        premise = z3.And(OK(term), *[RANK(x) == r for x, r in zip(xs, ranks)])
        conclusion = z3.And(RANK(term) == len(dims), *[DIM(term, j) == d for j, d in enumerate(dims)], *typing)
        laws.append(z3.ForAll(xs + bound, z3.Implies(premise, conclusion), patterns=[term]))
    _LAWS[key] = laws
    return laws


def _holds_z3(value: Any) -> bool:
    return isinstance(value, z3.ExprRef) or (isinstance(value, tuple) and any(_holds_z3(v) for v in value))


def _constant_shape(op: str, params: Mapping[str, Any], term: z3.ExprRef) -> list[z3.BoolRef]:
    """The rank and dimensions of an op without inputs (a constant), when well typed: no law needed."""
    (dims,), _ = spec_of(op).shape([], params)
    return [z3.Implies(OK(term), z3.And(RANK(term) == len(dims), *[DIM(term, j) == d for j, d in enumerate(dims)]))]


def _bind(lhs: App, params: Mapping[str, Any], args: list[_Value]) -> dict[str, Any] | None:
    """Binds a definitional axiom's left side to an application, or None when it does not match.

    Parameters the left side leaves out must have their registry defaults.
    """
    if len(lhs.args) != len(args):
        return None
    env: dict[str, Any] = {var.name: value for var, value in zip(lhs.args, args)}
    for name, pattern in spec_of(lhs.op).complete(dict(lhs.params)).items():
        if isinstance(pattern, tuple) and (not isinstance(params[name], tuple) or len(pattern) != len(params[name])):
            return None
        for p, v in zip(pattern, params[name]) if isinstance(pattern, tuple) else ((pattern, params[name]),):
            if isinstance(p, IntVar):
                env[p.name] = v
            elif (p.value if isinstance(p, Lit) else p) != v:
                return None
    return env


def _param_value(value: Any, env: Mapping[str, Any]) -> Any:
    if isinstance(value, tuple):
        return tuple(_param_value(v, env) for v in value)
    if isinstance(value, Lit):
        return value.value
    if isinstance(value, IntVar):
        return env[value.name]
    if isinstance(value, Dim) and isinstance(value.tensor, TensorVar) and isinstance(value.axis, Lit):
        return dim_of(env[value.tensor.name].term, value.axis.value)
    if isinstance(value, Arith) and value.op in _ARITH:
        return _ARITH[value.op](_z3_int(_param_value(value.a, env)), _z3_int(_param_value(value.b, env)))
    if isinstance(value, str):
        return value
    raise Unsupported(f"a definitional axiom uses the parameter expression {value}")


# Integer arithmetic in a definition's parameters (attention's head count, a width over a head size), as Z3 has it:
# floor division and modulo (SMT-LIB's, Python's for positive divisors).
_ARITH = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "//": lambda a, b: a / b, "%": lambda a, b: a % b}


def _z3_int(value: Any) -> z3.ExprRef:
    return value if isinstance(value, z3.ExprRef) else z3.IntVal(int(value))


def _input_term(name: str) -> z3.ExprRef:
    return z3.Const(f"in:{name}", TENSOR)


_INPUT_FACTS: dict[tuple[str, int, int], list[tuple[str, z3.BoolRef]]] = {}


def _input_facts(name: str, value: _Value) -> list[tuple[str, z3.BoolRef]]:
    """The facts of an input, built once per name, term and rank in a process (the same formulas each time)."""
    key = (name, value.term.get_id(), value.rank)
    facts = _INPUT_FACTS.get(key)
    if facts is None:
        facts = _INPUT_FACTS[key] = _input_facts_of(name, value)
    return list(facts)


def _input_facts_of(name: str, value: _Value) -> list[tuple[str, z3.BoolRef]]:
    dims = [dim_of(value.term, k) for k in range(value.rank)]
    return [(f"input {name} is well typed", app(OK, value.term)), (f"rank of input {name}", app(RANK, value.term) == value.rank),
            *((f"dim {k} of input {name} is positive", d >= 1) for k, d in enumerate(dims))]


def _symbolic(expr: Any, inputs: Mapping[str, z3.ExprRef], ranks: Mapping[str, int]) -> Any:
    """A shape expression with each ``{"dim": [input, axis]}`` as the Z3 term ``dim(input, axis)`` (a quotient by a
    constant, linear)."""
    if isinstance(expr, (list, tuple)):
        return tuple(_symbolic(e, inputs, ranks) for e in expr)
    if isinstance(expr, Mapping) and set(expr) == {"dim"}:
        name, axis = expr["dim"]
        return dim_of(inputs[name], int(axis) % ranks[name])
    if isinstance(expr, Mapping) and set(expr) == {"div"}:
        numerator, divisor = expr["div"]
        return _symbolic(numerator, inputs, ranks) / int(divisor)  # Z3's integer division: floor, for positive sizes
    return expr


def encode_rule(rule: Rule, graphs: Mapping[str, Any] | None = None) -> Encoding:
    """The Z3 encoding of a well-formed rule.

    ``graphs`` may hold the sides' graphs at the example shapes (``rule.side_graph(side)``,
    already built), by side; missing ones are built.

    Raises:
        Unsupported: an op without specification, or a use its specification does not cover.
        taso.rules.RuleFormatError: a side does not type-check on the example shapes.
    """
    dtypes = {i.type.dtype for i in rule.inputs}
    if len(dtypes) > 1:
        raise Unsupported(f"inputs of several dtypes {sorted(dtypes)}")
    terms = {i.name: _input_term(i.name) for i in rule.inputs}
    ranks = {i.name: i.type.rank for i in rule.inputs}
    inputs = {name: _Value(term, ranks[name]) for name, term in terms.items()}
    builder = _Builder()
    for name, value in inputs.items():
        builder.facts.extend(_input_facts(name, value))
    for c in rule.constraints:
        left, right = (_symbolic(e, terms, ranks) for e in c["eq"])
        builder.facts.append((f"constraint {c['eq']}", _equal(left, right)))
    values = {}
    for side in ("source", "target"):
        values[side] = _build_side(rule, side, inputs, builder, terms, ranks, (graphs or {}).get(side))
    goals = []
    for s, t in rule.outputs:
        source, target = values["source"][s], values["target"][t]
        builder.facts.append((f"mapped outputs {s} and {t} have one rank", app(RANK, source.term) == app(RANK, target.term)))
        for k in range(source.rank):
            builder.facts.append((f"mapped outputs {s} and {t} agree in dim {k}", dim_of(source.term, k) == dim_of(target.term, k)))
        goals.append((s, t, source.term == target.term))
    return Encoding(tuple(goals), tuple(builder.facts), frozenset(builder.symbols), tuple(builder.definitions),
                    tuple(builder.shape_laws.values()), rule)


def _build_side(rule: Rule, side: str, inputs: Mapping[str, _Value], builder: _Builder, terms, ranks, graph=None) -> dict[str, _Value]:
    """Every value of one side, node by node, with shape expressions left symbolic."""
    symbolic: dict[int, dict[str, Any]] = {}
    for p in rule.params:
        if p["side"] == side:
            symbolic.setdefault(int(p["node"]), {})[p["param"]] = _symbolic(p["value"], terms, ranks)
    if graph is None:
        graph = rule.side_graph(side)
    by_name = {node.name: node for node in graph.nodes}
    values = dict(inputs)
    for index, rule_node in enumerate(getattr(rule, side)):
        node = by_name[f"{side}{index}"]
        _check_shape_rule(rule_node.op, node.params, [graph.type(v).shape for v in node.inputs], [graph.type(v).shape for v in node.outputs])
        params = {**dict(node.params), **symbolic.get(index, {})}
        outs = builder.apply(rule_node.op, params, [values[v] for v in node.inputs], f"{side} node {index} ({rule_node.op})")
        values.update(zip(node.outputs, outs))
    return values


def _check_shape_rule(op: str, params: Mapping[str, Any], inputs: list[tuple[int, ...]], outputs: list[tuple[int, ...]]) -> None:
    """Checks the spec's symbolic shape rule against the registry's types on this node's example shapes.

    The shape laws hand that rule to Z3 as a fact about every application, so a rule that
    disagreed with the registry could make the facts contradictory and prove anything.

    Raises:
        Unsupported: they disagree (a specification bug).
    """
    spec = spec_of(op)
    params = dict(params)
    if spec.normalize is not None:
        params = spec.normalize(params, [len(s) for s in inputs])
    dims, requirements = spec.shape([list(s) for s in inputs], params)
    if [tuple(int(d) for d in out) for out in dims] != [tuple(s) for s in outputs] or not all(bool(r) for r in requirements):
        raise Unsupported(f"internal error: the shape rule of {op} disagrees with the registry on {inputs} (a specification bug)")


def _example_equalities(rule: Rule) -> tuple[tuple[dict, z3.BoolRef], ...]:
    """Every equality between input dimensions, and every input dimension's value, on the example shapes."""
    inputs = {i.name: _Value(_input_term(i.name), i.type.rank) for i in rule.inputs}
    dims = [(i.name, k, d) for i in rule.inputs for k, d in enumerate(i.type.shape)]
    stated = {json.dumps(c, sort_keys=True) for c in rule.constraints}
    out = []
    for index, (name, k, value) in enumerate(dims):
        here = dim_of(inputs[name].term, k)
        candidates = [({"eq": [{"dim": [name, k]}, {"dim": [other, j]}]}, here == dim_of(inputs[other].term, j))
                      for other, j, v in dims[index + 1 :] if v == value]
        candidates.append(({"eq": [{"dim": [name, k]}, value]}, here == value))
        out.extend(c for c in candidates if json.dumps(c[0], sort_keys=True) not in stated)
    return tuple(out)


def _equal(a: Any, b: Any) -> z3.BoolRef:
    if isinstance(a, tuple) or isinstance(b, tuple):
        a, b = tuple(a) if isinstance(a, tuple) else (a,), tuple(b) if isinstance(b, tuple) else (b,)
        return z3.And(*[_equal(x, y) for x, y in zip(a, b)]) if len(a) == len(b) else z3.BoolVal(False)
    result = a == b
    return z3.BoolVal(result) if isinstance(result, bool) else result
