"""Shape expressions: rules that apply to any shapes, not only the pool's.

A candidate is found on the pool's shapes (2x4 activations, 4x4 matrices...), but some of
its parameters are shapes in disguise: the sizes of the split that undoes a concat, the
size of an identity matrix, the channels of an identity or pool kernel, the shape of an
all-ones tensor, the kernel an enlarge grows to, the groups of a depthwise convolution.
For the optimizer to apply the rule to a model, each must become a *shape expression*
over the rule's inputs (``{"dim": ["w1", 1]}``), and the shape equalities the rule relies
on must become *constraints*.

Which dimension a parameter follows is found by probing the registry's own shape rules,
so nothing here knows how any operator computes shapes:

* Every input dimension and every shape parameter is a variable with its example value.
* Variables with equal example values are perturbed together to a fresh value; if both
  sides still type-check and their outputs keep equal types, the set may vary together.
  Shrinking such a set one variable at a time leaves the smallest set that must vary
  together: a *group* (e.g. {x1.1, w1.0, eye.n}).
* A variable that cannot vary (a kernel side fixed by literal padding) is *fixed*, and so
  is every size 1 (it broadcasts, so it is not an ordinary dimension).

A parameter in a group becomes the group's first input dimension; a group of several input
dimensions becomes equality constraints; a fixed input dimension becomes a constraint to its
value. Finally the rule is re-checked numerically, twice, at shapes where every group takes
a new size, so a wrong generalisation is caught, not emitted. Types do not see everything
(a grouped convolution needs equal groups, a block product matching blocks), so a rule that
fails the check is retried with the coarser grouping that keeps all equal example sizes
equal, and dropped if that fails too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from itertools import combinations
from typing import Any

import numpy as np

from taso import ops as registry
from taso.errors import GraphError, ShapeError, TasoError
from taso.ir import Params, TensorType
from taso.ops.base import Op
from taso.rules import STATUSES, Rule, RuleFormatError, RuleNode

from .pairing import close

__all__ = ["SHAPE_PARAMS", "generalize", "generalize_all", "evaluate_side", "NotGeneral"]

# Parameters that are shapes in disguise, per canonical op name. (conv2d's groups only
# when above 1: a plain convolution's groups=1 is part of what it computes.)
# TODO(lead): mark these on the registry's Param declarations and read them from there.
SHAPE_PARAMS: dict[str, tuple[str, ...]] = {
    "eye": ("n",),
    "conv_identity": ("channels", "kernel"),
    "pool_kernel": ("channels", "kernel"),
    "fill": ("shape",),
    "enlarge": ("kernel",),
    "split": ("sizes",),
    "conv2d": ("groups",),
}

# How far a probe moves a value: even (so parities, which centred kernels need, are kept)
# and larger than any sum of example sizes, so a probe never coincides with another size.
_PROBE_STEP = 74


class NotGeneral(TasoError):
    """A rule's shape parameters could not be expressed so that it holds at other shapes."""


Var = tuple  # ("in", input, axis) or ("param", side, node, param, element or None)


def _variables(rule: Rule) -> dict[Var, int]:
    """Every input dimension and every shape-parameter element, with its example value."""
    values: dict[Var, int] = {}
    for inp in rule.inputs:
        for axis, d in enumerate(inp.type.shape):
            values[("in", inp.name, axis)] = d
    for side in ("source", "target"):
        for index, node in enumerate(getattr(rule, side)):
            for param in SHAPE_PARAMS.get(node.op, ()):
                value = node.params[param]
                if node.op == "conv2d" and value == 1:
                    continue
                if isinstance(value, tuple):
                    for k, v in enumerate(value):
                        values[("param", side, index, param, k)] = v
                else:
                    values[("param", side, index, param, None)] = value
    return values


def _bind(rule: Rule, binding: Mapping[Var, int]) -> tuple[dict[str, tuple[int, ...]], dict[tuple, dict[str, Any]]]:
    """Input shapes and per-node parameter overrides under a binding of the variables."""
    shapes = {i.name: list(i.type.shape) for i in rule.inputs}
    overrides: dict[tuple, dict[str, Any]] = {}
    for var, value in binding.items():
        if var[0] == "in":
            shapes[var[1]][var[2]] = value
        else:
            _, side, index, param, k = var
            node_params = overrides.setdefault((side, index), {})
            if k is None:
                node_params[param] = value
            else:
                current = list(node_params.get(param, getattr(rule, side)[index].params[param]))
                current[k] = value
                node_params[param] = tuple(current)
    return {k: tuple(v) for k, v in shapes.items()}, overrides


class _ShapeMemo:
    """Shape inference and parameter validation through the registry, memoised for a whole process.

    Probing one rule re-infers every node of both sides at each binding (dozens per rule),
    and the candidates of a run share a few thousand (op, input types, parameters) triples,
    so without a memo most of generalisation went to re-running the same shape rules and
    re-building the same parameters. All three tables hold pure functions of their keys, so
    a hit is what a fresh call would return. Parameters are keyed by their items, sorted.
    """

    LIMIT = 500_000  # entries per table before it is emptied: a long-lived process never grows without bound

    def __init__(self):
        self._frozen: dict[tuple, Params] = {}
        self._validated: dict[tuple, Params | TasoError] = {}
        self._outputs: dict[tuple, tuple[TensorType, ...] | None] = {}

    def frozen(self, items: tuple) -> Params:
        """``Params(items)``."""
        try:
            got = self._frozen.get(items)
        except TypeError:  # an unfrozen value (a list): Params freezes it
            return Params(items)
        if got is None:
            got = self._frozen[items] = Params(items)
            self._trim(self._frozen)
        return got

    def validated(self, op: str, items: tuple) -> Params:
        """``registry.get(op).make_params(**dict(items))``, raising its TasoError again where it raised one."""
        key = (op, items)
        try:
            got = self._validated.get(key)
        except TypeError:  # an unfrozen value (a list): make_params freezes it
            return registry.get(op).make_params(**dict(items))
        if got is None:
            try:
                got = registry.get(op).make_params(**dict(items))
            except TasoError as e:
                got = e
            self._validated[key] = got
            self._trim(self._validated)
        if isinstance(got, TasoError):
            raise got
        return got

    def outputs(self, op: str, types: tuple[TensorType, ...], params: Params) -> tuple[TensorType, ...] | None:
        """``registry.get(op).infer(types, params)`` as a tuple, or None where it raises ShapeError."""
        key = (op, types, params)
        if key in self._outputs:
            return self._outputs[key]
        try:
            got = tuple(registry.get(op).infer(list(types), params))
        except ShapeError:
            got = None
        self._outputs[key] = got
        self._trim(self._outputs)
        return got

    def _trim(self, table: dict) -> None:
        if len(table) > self.LIMIT:
            table.clear()


_MEMO = _ShapeMemo()


def _side_types(rule: Rule, side: str, shapes, overrides) -> dict[str, TensorType] | None:
    """Every value's type on one side under a binding (:func:`_bind`), or None where a shape rule refuses it."""
    types = {name: TensorType(shape, "float32") for name, shape in shapes.items()}
    for index, node in enumerate(getattr(rule, side)):
        override = overrides.get((side, index))
        params = _MEMO.frozen(tuple(sorted({**node.params, **override}.items() if override else node.params.items())))
        outs = _MEMO.outputs(node.op, tuple(types[v] for v in node.inputs), params)
        if outs is None:
            return None
        types.update(zip(node.outputs, outs))
    return types


def _type_checks(rule: Rule, binding: Mapping[Var, int]) -> bool:
    """Both sides type-check under the binding and mapped outputs have equal types."""
    shapes, overrides = _bind(rule, binding)
    if any(d <= 0 for shape in shapes.values() for d in shape):
        return False
    source = _side_types(rule, "source", shapes, overrides)
    target = source and _side_types(rule, "target", shapes, overrides)
    return bool(target) and all(source[s] == target[t] for s, t in rule.outputs)


def _partition(rule: Rule, values: dict[Var, int]) -> tuple[list[list[Var]], list[Var]]:
    """The groups of variables that vary together, and the fixed variables."""

    def ok(moved: Iterable[Var]) -> bool:
        return _type_checks(rule, {**values, **{v: values[v] + _PROBE_STEP for v in moved}})

    by_value: dict[int, list[Var]] = {}
    for var, value in values.items():
        by_value.setdefault(value, []).append(var)
    groups: list[list[Var]] = []
    # NOTE: a size of 1 broadcasts against anything, so two such sizes may each vary alone
    # but not to different values; they are kept literal.
    fixed: list[Var] = list(by_value.pop(1, []))
    for members in by_value.values():
        todo, stuck = _free_part(list(members), ok)
        fixed.extend(stuck)
        while todo:
            group = _smallest_group(todo, ok)
            groups.append(group)
            todo = [v for v in todo if v not in group]
            if todo and not ok(todo):
                fixed.extend(todo)
                todo = []
    return groups, fixed


def _free_part(members: list[Var], ok) -> tuple[list[Var], list[Var]]:
    """Splits variables of one example size into a part that may vary together and the fixed rest.

    Preferences, in order: everything varies; parameters stay literal (a ``groups=2`` is a
    count, not the batch size it happens to equal); one variable is fixed; only the
    variables that vary on their own do.
    """
    if ok(members):
        return members, []
    dims = [v for v in members if v[0] == "in"]
    if dims and len(dims) < len(members) and ok(dims):
        return dims, [v for v in members if v[0] != "in"]
    for v in members:
        rest = [u for u in members if u != v]
        if rest and ok(rest):
            return rest, [v]
    singles = [v for v in members if ok([v])]
    if singles and ok(singles):
        return singles, [v for v in members if v not in singles]
    return [], members


def _smallest_group(members: list[Var], ok) -> list[Var]:
    """The smallest set containing ``members[0]`` that may vary on its own (``members`` may).

    Dropping one variable at a time from ``members`` gives a small superset quickly but can
    stop at a union of groups (two groups that each need two variables dropped at once);
    the smallest passing subset of that superset, by increasing size, is the group itself.
    """
    first, superset = members[0], list(members)
    for v in members[1:]:
        smaller = [u for u in superset if u != v]
        if ok(smaller):
            superset = smaller
    rest = superset[1:]
    for size in range(len(rest)):
        for extra in combinations(rest, size):
            if ok([first, *extra]):
                return [first, *extra]
    return superset


def _dim(var: Var) -> dict:
    return {"dim": [var[1], var[2]]}


def generalize(rule: Rule, rng: np.random.Generator) -> Rule:
    """The rule with shape expressions for its shape parameters and the constraints it needs.

    Shape rules see only types: a grouped convolution over two concatenated kernels
    type-checks whatever the kernels' output channels, but computes the same as two
    convolutions only when they are equal. So when the finest grouping fails the numeric
    check, coarser ones are tried: the groups of one example size merged (each size in
    turn), then the groups of every size merged.

    Raises:
        NotGeneral: no grouping type-checks and holds numerically at new shapes.
    """
    values = _variables(rule)
    groups, fixed = _partition(rule, values)
    sizes = sorted({values[g[0]] for g in groups if sum(values[h[0]] == values[g[0]] for h in groups) > 1})
    attempts = [groups] + [_merged(groups, values, {size}) for size in sizes]
    if len(sizes) > 1:
        attempts.append(_merged(groups, values, set(sizes)))
    for attempt in attempts[:-1]:
        try:
            return _generalized(rule, attempt, fixed, values, rng)
        except NotGeneral:
            pass
    return _generalized(rule, attempts[-1], fixed, values, rng)


def _merged(groups: list[list[Var]], values: dict[Var, int], sizes: set[int]) -> list[list[Var]]:
    """The groups with all groups of the given example sizes merged, size by size."""
    merged: dict[int, list[Var]] = {}
    out: list[list[Var]] = []
    for group in groups:
        size = values[group[0]]
        if size in sizes:
            if size not in merged:
                merged[size] = []
                out.append(merged[size])
            merged[size].extend(group)
        else:
            out.append(group)
    return out


def _generalized(rule: Rule, groups: list[list[Var]], fixed: list[Var], values: dict[Var, int], rng: np.random.Generator) -> Rule:
    """The rule under one grouping of its variables, checked at new shapes."""
    expression: dict[Var, Any] = {}
    constraints: list[dict] = []
    for group in groups:
        dims = [v for v in group if v[0] == "in"]
        if not dims:
            continue
        for other in dims[1:]:
            constraints.append({"eq": [_dim(dims[0]), _dim(other)]})
        for v in group:
            if v[0] == "param":
                expression[v] = _dim(dims[0])
    constraints += [{"eq": [_dim(v), values[v]]} for v in fixed if v[0] == "in"]
    params = []
    slots: dict[tuple, list[Var]] = {}
    for var in values:
        if var[0] == "param":
            slots.setdefault(var[1:4], []).append(var)
    for (side, index, param), elements in slots.items():
        if not any(v in expression for v in elements):
            continue
        if elements[0][4] is None:
            value = expression[elements[0]]
        else:
            value = [expression.get(v, values[v]) for v in elements]
        params.append({"side": side, "node": index, "param": param, "value": value})
    general = replace(rule, params=tuple(params), constraints=tuple(constraints))
    _validate(general)
    for reverse in (False, True):
        _check_at_new_shapes(general, groups, values, rng, reverse)
    return general


def generalize_all(items: list[tuple[Rule, int]]) -> list[Rule | None]:
    """:func:`generalize` for a worker process: (rule, seed) -> the general rule, or None.

    Each rule draws its check inputs from its own seed and id, so the result does not
    depend on which process generalises it.
    """
    out: list[Rule | None] = []
    for rule, seed in items:
        try:
            out.append(generalize(rule, np.random.default_rng([seed, 2, int(rule.id[2:], 16)])))
        except NotGeneral:
            out.append(None)
    return out


def _check_at_new_shapes(rule: Rule, groups: list[list[Var]], values: dict[Var, int], rng: np.random.Generator, reverse: bool) -> None:
    """Runs both sides at shapes where every group of input dimensions takes its own new size.

    The new sizes are the smallest above every example size, one per group with the
    group's parity; ``reverse`` deals them out in the opposite order, so that two checks
    see different sizes for every group at little cost.
    """
    dims_of = [[v for v in group if v[0] == "in"] for group in groups]
    dims_of = [dims for dims in dims_of if dims]
    above = max(values.values())
    following = {parity: above + 1 + (above + 1 - parity) % 2 for parity in (0, 1)}  # the next free size of each parity
    fresh: dict[int, list[int]] = {0: [], 1: []}
    for dims in dims_of:
        parity = values[dims[0]] % 2
        fresh[parity].append(following[parity])
        following[parity] += 2
    if reverse:
        fresh = {p: sizes[::-1] for p, sizes in fresh.items()}
    shapes = {i.name: list(i.type.shape) for i in rule.inputs}
    for dims in dims_of:
        new = fresh[values[dims[0]] % 2].pop(0)
        for v in dims:
            shapes[v[1]][v[2]] = new
    shapes = {k: tuple(v) for k, v in shapes.items()}
    if not rule.constraints_hold(shapes):
        raise NotGeneral(f"rule {rule.id}: its constraints reject the shapes it was generalised to")
    feeds = {name: rng.standard_normal(shape) for name, shape in shapes.items()}
    try:
        source = evaluate_side(rule, "source", feeds)
        target = evaluate_side(rule, "target", feeds)
    except TasoError as e:
        raise NotGeneral(f"rule {rule.id}: does not type-check at shapes {shapes}: {e}") from None
    for s, t in rule.outputs:
        if not close(source[s], target[t], 1e-6):
            raise NotGeneral(f"rule {rule.id}: sides differ at shapes {shapes}")


def evaluate_side(rule: Rule, side: str, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluates one side in the feeds' precision (float64 for checks), shapes resolved from the feeds.

    The side's nodes must come in topological order, as a rule lists them (see :func:`_typed_side`).

    Raises:
        TasoError: the side does not type-check at the feeds' shapes.
    """
    values = dict(feeds)
    for op, params, node in _typed_side(rule, side, {name: array.shape for name, array in feeds.items()})[0]:
        values.update(zip(node.outputs, op.evaluate([values[v] for v in node.inputs], params)))
    return values


def _typed_side(rule: Rule, side: str, shapes: Mapping[str, tuple[int, ...]]) -> tuple[list[tuple[Op, Params, RuleNode]], dict[str, TensorType]]:
    """One side's nodes, each with its op and validated parameters at these input shapes, and every value's type.

    What ``rule.side_graph(side, shapes)`` builds and checks (it raises RuleFormatError where
    that does), through the process's memo: building the graph re-ran every shape rule and
    parameter check, twice per side and rule. The nodes must come in topological order, as a
    rule's do.
    """
    types, overrides = rule.side_inputs(side, shapes)
    nodes = []
    for index, node in enumerate(getattr(rule, side)):
        given = {**node.params, **overrides[index]} if index in overrides else node.params
        try:
            op = registry.get(node.op)
            params = _MEMO.validated(node.op, tuple(sorted(given.items())))
            outs = _MEMO.outputs(node.op, tuple(types[v] for v in node.inputs), params)
        except (KeyError, TasoError) as e:
            raise RuleFormatError(f"rule {rule.id}: {side} node {index} ({node.op}): {e}") from None
        if outs is None:
            dims = {i.name: types[i.name].shape for i in rule.inputs}
            raise RuleFormatError(f"rule {rule.id}: {side} does not type-check at shapes {dims}")
        types.update(zip(node.outputs, outs))
        nodes.append((op, params, node))
    return nodes, types


def _type_of(types: Mapping[str, TensorType], value: str) -> TensorType:
    """``types[value]``, failing as ``Graph.type`` does."""
    try:
        return types[value]
    except KeyError:
        raise GraphError(f"value {value!r} is not defined in the graph") from None


def _validate(rule: Rule) -> None:
    """``rule.validate()``, typing the sides through the memo (:func:`_typed_side`).

    Raises:
        RuleFormatError, GraphError: where ``rule.validate()`` raises them.
    """
    names = [i.name for i in rule.inputs]
    if len(set(names)) != len(names):
        raise RuleFormatError(f"rule {rule.id}: duplicate input names {names}")
    if not rule.outputs:
        raise RuleFormatError(f"rule {rule.id}: maps no outputs")
    if rule.status not in STATUSES:
        raise RuleFormatError(f"rule {rule.id}: unknown status {rule.status!r}")
    _, source = _typed_side(rule, "source", {})
    _, target = _typed_side(rule, "target", {})
    for s, t in rule.outputs:
        if _type_of(source, s) != _type_of(target, t):
            raise RuleFormatError(f"rule {rule.id}: output {s} is {source[s]} but {t} is {target[t]}")
    if not rule.constraints_hold({i.name: i.type.shape for i in rule.inputs}):
        raise RuleFormatError(f"rule {rule.id}: its constraints do not hold on its own example shapes")
