"""The cheap check first: run both sides of a rule on random inputs with the NumPy semantics.

A rule whose sides differ on random inputs is false, whatever Z3 would say; this finds
most wrong candidates in milliseconds and gives a concrete counterexample to report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from taso.errors import TasoError
from taso.ir import Graph, GraphMeta, Node, TensorType
from taso.ops import get as get_op
from taso.ops.base import as_array
from taso.rules import Rule

__all__ = ["counterexample", "random_shapes", "close", "SideMemo"]

DIM_CHOICES = (1, 2, 3, 4, 5, 6)
_ABOVE_ONE = DIM_CHOICES[1:]


def _feeds(rule: Rule, rng: np.random.Generator, shapes: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    return {i.name: rng.standard_normal((shapes or {}).get(i.name, i.type.shape)).astype(i.type.dtype) for i in rule.inputs}


def _run(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of a (tiny) rule side, node by node with the reference semantics."""
    env = dict(feeds)
    for node in graph.topological_order():
        env.update(zip(node.outputs, node.op.evaluate([env[v] for v in node.inputs], node.params)))
    return env


def _run_quiet(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """:func:`_run` for a caller already inside ``np.errstate(all="ignore")``.

    ``Op.evaluate`` is the op's NumPy function inside that same ``errstate`` (which decides
    only whether floating-point errors are reported, never a value), each result through
    ``as_array``; this calls the function directly, without entering the state again per node.
    """
    env = dict(feeds)
    for node in graph.topological_order():
        out = node.op.numpy_impl([env[v] for v in node.inputs], node.params)
        env.update(zip(node.outputs, [as_array(o) for o in out] if isinstance(out, (list, tuple)) else [as_array(out)]))
    return env


def close(a: np.ndarray, b: np.ndarray, rtol: float) -> bool:
    """``a`` equals ``b`` up to ``rtol`` of b's largest finite magnitude; equal infinities and NaNs agree.

    An infinity must not widen the tolerance (it would make every value close), and one
    side's NaN or infinity where the other is finite is a difference.
    """
    if a.shape != b.shape:
        return False
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = a - b
    if rtol >= 0 and np.isfinite(diff).all():
        # NOTE: the common case, the same test in fewer steps (issue 27): a difference is finite only
        # where both values are, so there is no NaN or infinity to special-case, finite_b is b,
        # nan_to_num(b) is b, and every equal pair (difference 0) is near when rtol >= 0.
        scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1.0)
        return bool(np.all(np.abs(diff) <= rtol * scale + rtol * np.abs(b)))
    same_special = (a == b) | (np.isnan(a) & np.isnan(b))
    finite_b = b[np.isfinite(b)]
    scale = max(float(np.max(np.abs(finite_b))) if finite_b.size else 0.0, 1.0)
    with np.errstate(invalid="ignore"):
        near = np.abs(a - b) <= rtol * scale + rtol * np.abs(np.nan_to_num(b, posinf=0.0, neginf=0.0))
    return bool(np.all(same_special | near))


def _renamed_shapes(rule: Rule, rng: np.random.Generator) -> dict[str, tuple[int, ...]]:
    """Distinct example sizes above 1 mapped to new random sizes (each with probability 0.6), the same everywhere they occur.

    Equal example sizes stay equal and 1s stay 1 (they may be what broadcasts): a rule that
    holds at its example shapes and is true in general holds here too, whatever
    equalities its proof will need.
    """
    sizes = sorted({d for i in rule.inputs for d in i.type.shape if d != 1})
    # NOTE: seq[rng.integers(0, len(seq))] is rng.choice(seq) for a sequence, drawing the same number
    # from the stream (tests check the shapes against rng.choice's); choice converts the tuple to an array each time.
    new = {d: _ABOVE_ONE[rng.integers(0, 5)] if rng.random() < 0.6 else d for d in sizes}  # some kept: a kernel size may be literal
    new[1] = 1
    return {i.name: tuple(new[d] for d in i.type.shape) for i in rule.inputs}


def _perturbed_shapes(rule: Rule, rng: np.random.Generator) -> dict[str, tuple[int, ...]]:
    """Some sizes changed independently (sizes of 1 included, which broadcast)."""
    return {i.name: tuple(DIM_CHOICES[rng.integers(0, 6)] if rng.random() < 0.3 else d for d in i.type.shape) for i in rule.inputs}


def _fits(rule: Rule, shapes: Mapping[str, tuple[int, ...]]) -> bool:
    """Both sides type-check, the constraints hold and mapped outputs agree in type at these shapes.

    The definition :meth:`SideMemo.fits` must agree with (it is tested against this one).
    """
    try:
        if not rule.constraints_hold(shapes):
            return False
        source, target = rule.side_graph("source", shapes), rule.side_graph("target", shapes)
    except TasoError:
        return False
    return all(source.type(s) == target.type(t) for s, t in rule.outputs)


_FAILED = object()  # a memoised TasoError: the side does not type-check there
_MEMO_LIMIT = 200_000  # entries in each per-process memo below, cleared when full
# (op, literal parameters, shape-dependent parameters) -> (op, its Params) or _FAILED: what side_graph's make_params gives
_MADE: dict[tuple, Any] = {}
# (that key, input types) -> output types or _FAILED: what op.infer gives (a pure function of them)
_INFERRED: dict[tuple, Any] = {}


class SideMemo:
    """A rule's sides at the shapes the pre-check tries, each worked out once (issue 27).

    The pre-check draws many shape assignments per rule, often the same ones again, and
    only the shapes change between them. Here:

    * :meth:`fits` is :func:`_fits` without IR graphs: a node's parameters are built once per
      op, literal parameters and shape-dependent parameters, and its output types inferred
      once per those and its input types (``op.infer``, as :class:`~taso.ir.Graph` does), in
      memos of the process (rules share ops and small shapes), so a drawn assignment costs a
      few dictionary look-ups; each side's types at an assignment are kept too. The
      constraints are checked on every call (on the rule given), since a proof may add some.
    * :meth:`graph` is :meth:`Rule.side_graph`, built once per side and assignment, from the
      memoised parameters and types.

    The memo depends only on the rule's inputs, sides, parameters and outputs (never its
    constraints, status or proof): one memo serves the rule before and after a proof adds
    constraints (:meth:`serves` says whether it can serve a rule). Exceptions other than
    :class:`TasoError` propagate as they did.
    """

    def __init__(self, rule: Rule):
        self.rule = rule
        self._graphs: dict[tuple, Graph] = {}
        self._typed: dict[tuple, tuple[dict[str, TensorType], list[tuple]] | None] = {}
        # NOTE: what decides a node's parameters besides the shapes: its op and literal parameters (repr
        # keeps True and 1 apart, which are equal and hash alike).
        self._bases = {side: [(rn.op, repr(sorted(rn.params.items()))) for rn in getattr(rule, side)] for side in ("source", "target")}
        if len(_MADE) >= _MEMO_LIMIT:
            _MADE.clear()
        # NOTE: the shortcut walks the example graphs' node order; when a side does not build at
        # its example shapes (a malformed rule), every question goes to Rule.side_graph instead.
        self._order: dict[str, list[int]] | None = {}
        for side in ("source", "target"):
            try:
                graph = self.graph(side, None)
            except TasoError:
                self._order = None
                break
            self._order[side] = [int(node.name[len(side):]) for node in graph.topological_order()]

    def serves(self, rule: Rule) -> bool:
        """Whether ``rule`` has this memo's inputs, sides, parameters and outputs (the same objects, as ``replace`` keeps them)."""
        mine = self.rule
        return rule is mine or (rule.inputs is mine.inputs and rule.source is mine.source and rule.target is mine.target
                                and rule.params is mine.params and rule.outputs is mine.outputs)

    def _key(self, shapes: Mapping[str, tuple[int, ...]] | None) -> tuple | None:
        if shapes is None:
            return None
        return tuple((tuple(shapes[i.name]) if i.name in shapes else None) for i in self.rule.inputs)

    def graph(self, side: str, shapes: Mapping[str, tuple[int, ...]] | None) -> Graph:
        """``rule.side_graph(side, shapes)``, built once per assignment (a TasoError is raised afresh each time).

        At other than the example shapes the graph is put together from the memoised
        parameters and types: the nodes and types ``side_graph`` would give, in its order.
        """
        key = (side, self._key(shapes))
        graph = self._graphs.get(key)
        if graph is None:
            if shapes is None or self._order is None:
                graph = self.rule.side_graph(side, shapes)
            else:
                typed = self._side_types(side, key[1], shapes)
                if typed is None:
                    graph = self.rule.side_graph(side, shapes)  # raises the error it always raised
                else:
                    graph = self._assemble(side, *typed)
            self._graphs[key] = graph
        return graph

    def _assemble(self, side: str, types: dict[str, TensorType], made: list[tuple]) -> Graph:
        """The graph ``side_graph`` builds, from the nodes' (op, parameters) and the types already worked out (in its inference order)."""
        nodes = [Node(op, params, rn.inputs, rn.outputs, f"{side}{index}") for (op, params), (index, rn) in zip(made, enumerate(getattr(self.rule, side)))]
        outs = [pair[0 if side == "source" else 1] for pair in self.rule.outputs]
        inputs = {i.name: types[i.name] for i in self.rule.inputs}
        return Graph(inputs, {}, nodes, outs, types=types, meta=GraphMeta(output_names=tuple(outs)))

    def fits(self, rule: Rule, shapes: Mapping[str, tuple[int, ...]]) -> bool:
        """``_fits(rule, shapes)`` for a rule this memo serves."""
        try:
            if not rule.constraints_hold(shapes):
                return False
        except TasoError:
            return False
        if self._order is None:
            try:
                source, target = self.graph("source", shapes), self.graph("target", shapes)
            except TasoError:
                return False
            return all(source.type(s) == target.type(t) for s, t in rule.outputs)
        key = self._key(shapes)
        source = self._side_types("source", key, shapes)
        target = self._side_types("target", key, shapes) if source is not None else None
        return target is not None and all(source[0][s] == target[0][t] for s, t in rule.outputs)

    def _side_types(self, side: str, key: tuple, shapes: Mapping[str, tuple[int, ...]]) -> tuple[dict[str, TensorType], list[tuple]] | None:
        """Every value's type on one side at ``shapes`` and each node's (op, parameters) (side_graph's steps without the graph),
        or None where the side does not type-check."""
        memo = (side, key)
        if memo in self._typed:
            return self._typed[memo]
        types = self._typed[memo] = self._infer_side(side, shapes)
        return types

    def _infer_side(self, side: str, shapes: Mapping[str, tuple[int, ...]]) -> tuple[dict[str, TensorType], list[tuple]] | None:
        rule = self.rule
        try:
            types, overrides = rule.side_inputs(side, shapes)
        except TasoError:
            return None
        nodes = getattr(rule, side)
        made_now: list[tuple] = []
        bases = self._bases[side]
        for index, rn in enumerate(nodes):  # NOTE: side_graph makes every node's parameters before inferring any type
            given = overrides.get(index)
            # NOTE: repr keeps True and 1 apart (they are equal and hash alike).
            made = (bases[index], repr(sorted(given.items())) if given else "")
            params = _MADE.get(made)
            if params is None:
                try:
                    op = get_op(rn.op)
                    params = (op, op.make_params(**{**rn.params, **(given or {})}))
                except (KeyError, TasoError):
                    params = _FAILED
                _MADE[made] = params
            if params is _FAILED:
                return None
            made_now.append((made, params))
        env = dict(types)
        for index in self._order[side]:
            rn = nodes[index]
            made, (op, values) = made_now[index]
            ins = tuple(env[v] for v in rn.inputs)
            inferred = (made, ins)
            outs = _INFERRED.get(inferred)
            if outs is None:
                try:
                    outs = tuple(op.infer(list(ins), values))
                except TasoError:
                    outs = _FAILED
                if len(_INFERRED) >= _MEMO_LIMIT:
                    _INFERRED.clear()
                _INFERRED[inferred] = outs
            if outs is _FAILED:
                return None
            env.update(zip(rn.outputs, outs))
        return env, [params for _, params in made_now]


def _memo_for(rule: Rule, memo: SideMemo | None) -> SideMemo:
    return memo if memo is not None and memo.serves(rule) else SideMemo(rule)


def random_shapes(rule: Rule, rng: np.random.Generator, count: int, tries: int = 60, independent: bool = True,
                  memo: SideMemo | None = None) -> list[dict[str, tuple[int, ...]]]:
    """Up to ``count`` distinct input shapes (of the example ranks) at which the rule is well formed.

    Half are consistent renamings of the example sizes; with ``independent``, the other half
    change sizes one by one (breaking equalities the rule's constraints do not state).
    ``memo`` (for this rule's sides) answers each draw; without one, one is made.
    """
    memo = _memo_for(rule, memo)
    found: list[dict[str, tuple[int, ...]]] = []
    for attempt in range(tries if count > 0 else 0):
        shapes = (_perturbed_shapes if independent and attempt % 2 else _renamed_shapes)(rule, rng)
        if shapes not in found and memo.fits(rule, shapes):
            found.append(shapes)
            if len(found) == count:
                break
    return found


def counterexample(rule: Rule, trials: int = 2, seed: int = 0, rtol: float = 1e-3, shapes: int = 4, independent: bool = False,
                   memo: SideMemo | None = None) -> dict[str, Any] | None:
    """Evidence that the rule is false, or None when every trial agrees.

    The rule runs at its example shapes and at up to ``shapes`` other shapes where it is
    well formed (sizes renamed consistently; with ``independent`` also changed one by one,
    for a rule whose constraints are final), ``trials`` random input sets each: a rule true
    only at the sizes it was found at is caught here.

    Args:
        rule: a rule whose sides type-check.
        trials: how many random input sets per shape.
        seed: the seed of the first trial (recorded in the counterexample, to reproduce it).
        rtol: tolerance relative to the largest finite magnitude of the target's output.
        shapes: how many shapes besides the example ones.
        memo: the rule's :class:`SideMemo`, to share between calls on one rule (its sides'
            graphs are built once); a memo of other sides is ignored.

    Returns:
        ``{"seed", "shapes", "source", "target", "max_abs_diff"}`` for the first mapped output that differs.
    """
    memo = _memo_for(rule, memo)
    rng = np.random.default_rng(seed)
    for at in [None, *random_shapes(rule, rng, shapes, independent=independent, memo=memo)]:
        source, target = memo.graph("source", at), memo.graph("target", at)
        for trial in range(trials):
            feeds = _feeds(rule, np.random.default_rng(seed + trial), at)
            with np.errstate(all="ignore"):
                got, want = _run_quiet(source, feeds), _run_quiet(target, feeds)
            for s, t in rule.outputs:
                a, b = np.asarray(got[s], np.float64), np.asarray(want[t], np.float64)
                if not close(a, b, rtol):
                    diff = float(np.nanmax(np.abs(a - b))) if a.shape == b.shape and a.size else float("inf")
                    return {"seed": seed + trial, "shapes": {k: list(v) for k, v in (at or {}).items()}, "source": s, "target": t, "max_abs_diff": diff}
    return None
