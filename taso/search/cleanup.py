"""Clean-up: the simplifications a graph simplifier does, each an instance of a proved equality.

Exporters leave work behind that no cost model needs to weigh: the same projection computed
once per layer from tied weights, a transpose undone by the next, a reshape to the shape the
tensor already has. :func:`clean_up` removes it in one topological sweep, before the search,
inside it (a graph a rewrite built is cleaned up when :func:`may_clean_up` finds work at the
rewrite's new nodes: merging steps of a recurrent cell makes the same concatenation twice) and
on its result. Each step is an instance of an equality the project has proved, recorded in
:data:`CLEANUPS` (``taso info LIBRARY`` lists them):

* ``tied-weights``: initializers with the same dtype, shape and bits are one tensor;
* ``common-subexpression``: a node applying the same operator with the same parameters to
  the same values as an earlier one computes the same outputs (every taso operator is a
  function of its inputs and parameters; verbatim ONNX nodes, which may be random, are
  never merged);
* ``transpose-pair`` / ``identity-transpose``: the spec axioms ``transpose-transpose-Nd``
  and ``transpose-identity-Nd``;
* ``reshape-pair`` / ``identity-reshape``: the spec axioms ``reshape-reshape-Md-Nd`` and
  ``reshape-identity-Nd``;

  an instance at a rank the specs state no axiom for (a rank-5 transpose) is left alone: the
  axioms are validated against the NumPy semantics (``taso.verifier.axiom_check``), and a
  clean-up is exactly as proved as the axiom it instantiates;
* ``neutral-operand``: adding a weight of zeros, multiplying by a weight of ones, of x's
  shape or of its trailing dims (a zero bias, a unit scale): the spec axioms
  ``add-zeros-Nd``, ``add-trailing-Nd-K``, ``mul-ones-Nd``, ``mul-trailing-Nd-K``;
* ``whole-slice`` / ``zero-pad``: a slice that keeps every element, a pad of nothing (by
  the operators' definitions; the specs model neither operator);
* ``gathered-slices``: the concatenation of every slice ``gather(x, i, axis=a)``, i = 0..n-1
  in order, is a transpose and reshape of ``x`` (by the definitions of gather, concat,
  transpose and reshape; the specs model no gather). Merging the input products of an
  unrolled cell concatenates its per-step inputs: one transpose instead of n gathers; so does a chain of
  concatenations on one axis (``concat-assoc``), as folding a recurrent loop leaves its steps' inputs;
* ``dead-code``: nodes and weights no output depends on (counted together).

Constant subgraphs (weights transposed, split or scaled by the exporter) need no clean-up:
the cost models price a value computed from weights alone at zero and export folds it into
an initializer (:func:`taso.onnx.folding_plan`), so a rewrite that makes a new
one is priced folded the moment it is made.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from ..ir import Graph, Node, Params, TensorType
from ..ops import get as get_op

__all__ = ["Cleanup", "CLEANUPS", "CleanupReport", "clean_up", "may_clean_up"]


@dataclass(frozen=True)
class Cleanup:
    """One clean-up: the equality it applies and what proves it.

    ``axiom`` names the spec axiom each instance applies (``{}`` stands for its ranks); an instance
    whose axiom the specs do not state (a rank-5 transpose pair) is not applied.
    """

    name: str
    equality: str
    proof: str
    axiom: str = ""


CLEANUPS: tuple[Cleanup, ...] = (
    Cleanup("tied-weights", "w1 = w2  ->  one initializer", "the tensors are compared bit for bit (dtype, shape and bytes)"),
    Cleanup("common-subexpression", "op(x; p) twice  ->  once", "every taso operator is a function of its inputs and parameters (verbatim ONNX nodes are never merged)"),
    Cleanup("transpose-pair", "transpose(transpose(x, p), q)  ->  transpose(x, p[q])", "spec axiom transpose-transpose-<rank>d", "transpose-transpose-{}d"),
    Cleanup("identity-transpose", "transpose(x, 0..n-1)  ->  x", "spec axiom transpose-identity-<rank>d", "transpose-identity-{}d"),
    Cleanup("reshape-pair", "reshape(reshape(x, s), t)  ->  reshape(x, t)", "spec axiom reshape-reshape-<rank s>d-<rank t>d", "reshape-reshape-{}d-{}d"),
    Cleanup("identity-reshape", "reshape(x, shape(x))  ->  x", "spec axiom reshape-identity-<rank>d", "reshape-identity-{}d"),
    Cleanup("neutral-operand", "x + 0  ->  x,  x * 1  ->  x  (zeros or ones of x's shape or trailing dims, a weight)",
            "spec axioms add-zeros-<rank>d, add-trailing-<rank>d-<k>, mul-ones-<rank>d, mul-trailing-<rank>d-<k> (with add-comm, mul-comm)"),
    Cleanup("whole-slice", "slice(x, 0:dim:1 on every axis it names)  ->  x", "the operator's definition (checked against ONNX Runtime in tests)"),
    Cleanup("zero-pad", "pad(x, pads all 0)  ->  x", "the operator's definition (checked against ONNX Runtime in tests)"),
    Cleanup("gathered-slices", "concat(gather(x, 0, axis=a), ..., gather(x, n-1, axis=a), axis=c)  ->  reshape(transpose(x, a before c))",
            "the definitions of gather, concat, transpose and reshape (checked against ONNX Runtime in tests); a chain of "
            "concatenations on axis c joins what one does (spec axiom concat-assoc)"),
    Cleanup("dead-code", "a node no output reads  ->  nothing", "the outputs do not depend on it"),
)
_IDENTITY_STEP = {"add": "neutral-operand", "mul": "neutral-operand", "slice": "whole-slice", "pad": "zero-pad"}
# The neutral element of each operator, and the axiom that drops it: same shape, or x's last k dims of rank r.
_NEUTRAL = {"add": (0, "add-zeros-{r}d", "add-trailing-{r}d-{k}"), "mul": (1, "mul-ones-{r}d", "mul-trailing-{r}d-{k}")}
_AXIOM_PATTERN = {c.name: c.axiom for c in CLEANUPS if c.axiom}


@functools.cache
def _axiom_names() -> frozenset[str]:
    from ..specs import AXIOMS

    return frozenset(a.name for a in AXIOMS)


def _proved(cleanup: str, *ranks: int) -> bool:
    """Whether the specs state the axiom this instance of ``cleanup`` applies."""
    return _AXIOM_PATTERN[cleanup].format(*ranks) in _axiom_names()


# Operators whose nodes are never merged: verbatim ONNX (possibly random) and run-time sizes.
_NOT_MERGED = frozenset({"opaque", "dims"})
# Weights compared by a strided sample first; only equal samples are compared in full.
_SAMPLE = 64


@dataclass
class CleanupReport:
    """What :func:`clean_up` did: steps by kind, nodes and weight bytes before and after."""

    nodes_before: int
    nodes_after: int
    weight_bytes_before: int
    weight_bytes_after: int
    steps: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(self.steps)

    def describe(self) -> str:
        if not self.steps:
            return "nothing to clean up"
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self.steps.items(), key=lambda kv: (-kv[1], kv[0])))
        return (f"{self.nodes_before} -> {self.nodes_after} nodes, weights {_megabytes(self.weight_bytes_before)} -> "
                f"{_megabytes(self.weight_bytes_after)} ({kinds})")

    def to_json(self) -> dict:
        return {"nodes_before": self.nodes_before, "nodes_after": self.nodes_after, "weight_bytes_before": self.weight_bytes_before,
                "weight_bytes_after": self.weight_bytes_after, "steps": dict(self.steps), "seconds": self.seconds}


def _megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n} B"


def clean_up(graph: Graph) -> tuple[Graph, CleanupReport]:
    """The graph with tied weights merged, common subexpressions shared, transpose and reshape chains
    shortened, neutral operands, whole slices and zero pads dropped and dead code removed (each where
    :data:`CLEANUPS` says it is proved); the input graph itself when nothing applies."""
    started = time.perf_counter()
    steps: Counter = Counter()
    alias = _tied_weights(graph, steps)
    nodes: list[Node] = []
    producer: dict[str, Node] = {}
    seen: dict[tuple, Node] = {}
    new_types: dict[str, TensorType] = {}  # of the values clean-up creates
    for node in graph.topological_order():
        inputs = tuple(alias.get(v, v) for v in node.inputs)
        node = node if inputs == node.inputs else replace(node, inputs=inputs)
        node = _shortened(node, producer, steps)
        whole = _gathered_whole(node, producer, graph)
        if whole is not None:
            for n in whole[:-1]:
                new_types.update(zip(n.outputs, n.op.infer([graph.type(v) for v in n.inputs], n.params)))
            nodes.extend(whole)
            producer.update((o, n) for n in whole for o in n.outputs)
            steps["gathered-slices"] += 1
            continue
        same = _identity_of(node, graph)
        if same is not None:
            alias[node.outputs[0]] = same
            steps[_IDENTITY_STEP.get(node.op.name, f"identity-{node.op.name}")] += 1
            continue
        if node.op.name not in _NOT_MERGED:
            key = (node.op, node.params, node.inputs)
            earlier = seen.get(key)
            if earlier is not None:
                alias.update(zip(node.outputs, earlier.outputs))
                steps["common-subexpression"] += 1
                continue
            seen[key] = node
        nodes.append(node)
        producer.update((o, node) for o in node.outputs)
    result = _rebuilt(graph, nodes, alias, new_types) if steps else graph.pruned()
    dead = (len(nodes) - len(result)) + (len(graph.weights) - steps["tied-weights"] - len(result.weights))  # nodes and weights
    if dead:
        steps["dead-code"] += dead
    report = CleanupReport(len(graph), len(result), _weight_bytes(graph), _weight_bytes(result), steps, time.perf_counter() - started)
    return result, report


def may_clean_up(graph: Graph, nodes: Iterable[Node]) -> bool:
    """Whether clean-up has something to do at ``nodes`` of ``graph`` (a rewrite's new nodes): one of them
    computes what another node already does, returns its input unchanged, or extends a transpose or reshape
    chain. Local and cheap, so the search can ask it of every graph it builds."""
    for node in nodes:
        if node.op.name in _NOT_MERGED or not node.inputs:
            continue
        if _identity_of(node, graph) is not None:
            return True
        if node.op.name == "concat" and _gathered_whole(node, _Producers(graph), graph) is not None:
            return True
        chained = node.op.name in ("transpose", "reshape")
        producer = graph.producer(node.inputs[0])
        if chained and producer is not None and producer.op is node.op:
            return True
        for user, _ in graph.uses(node.inputs[0]):
            if user is not node and user.op is node.op and user.params == node.params and user.inputs == node.inputs:
                return True
        if chained and any(user.op is node.op for o in node.outputs for user, _ in graph.uses(o)):
            return True
    return False


def _weight_bytes(graph: Graph) -> int:
    return sum(int(w.nbytes) for w in graph.weights.values())


def _tied_weights(graph: Graph, steps: Counter) -> dict[str, str]:
    """Each weight that equals an earlier one bit for bit, mapped to that one (overridable inputs excepted)."""
    overridable = set(graph.meta.initializer_inputs)
    groups: dict[tuple, list[str]] = {}
    for name, array in graph.weights.items():
        if name not in overridable and array.size > 1:
            groups.setdefault((array.dtype.str, array.shape, _sample(array)), []).append(name)
    alias: dict[str, str] = {}
    for names in groups.values():
        kept: list[str] = []
        for name in names:
            twin = next((k for k in kept if _same_bits(graph.weights[k], graph.weights[name])), None)
            if twin is None:
                kept.append(name)
            else:
                alias[name] = twin
                steps["tied-weights"] += 1
    return alias


def _sample(array: np.ndarray) -> bytes:
    flat = array.reshape(-1)
    return flat[:: max(1, flat.size // _SAMPLE)].tobytes()


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality (NaN equals NaN, 0.0 differs from -0.0), without copying either array."""
    if a.dtype.kind in "fc":
        as_int = np.dtype(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else np.dtype("u1")
        return bool(np.array_equal(np.ascontiguousarray(a).view(as_int), np.ascontiguousarray(b).view(as_int)))
    return bool(np.array_equal(a, b))


def _shortened(node: Node, producer: Mapping[str, Node], steps: Counter) -> Node:
    """A transpose of a transpose as one transpose, a reshape of a reshape as one reshape (of the first's input)."""
    name = node.op.name
    if name not in ("transpose", "reshape"):
        return node
    inner = producer.get(node.inputs[0])
    if inner is None or inner.op is not node.op:
        return node
    params = node.params
    if name == "transpose":
        first, second = inner.params["perm"], node.params["perm"]
        if not _proved("transpose-pair", len(first)):
            return node
        params = Params({"perm": tuple(first[i] for i in second)})
    elif not _proved("reshape-pair", len(inner.params["shape"]), len(node.params["shape"])):
        return node
    steps[f"{name}-pair"] += 1
    return replace(node, params=params, inputs=inner.inputs)


def _concat_leaves(node: Node, producer: Mapping[str, Node | None]) -> list[str]:
    """The values a concatenation joins, through the concatenations on its own axis that it reads: a chain of
    two-input ones, as the rules that extend a sequence leave it (``taso.search.sequences``), joins what one would."""
    leaves = []
    for value in node.inputs:
        inner = producer.get(value)
        if inner is not None and inner.op is node.op and inner.params["axis"] == node.params["axis"]:
            leaves += _concat_leaves(inner, producer)
        else:
            leaves.append(value)
    return leaves


class _Producers:
    """A graph's producers as the mapping :func:`_gathered_whole` reads."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def get(self, value: str, default: Node | None = None) -> Node | None:
        return self.graph.producer(value) or default


def _gathered_whole(node: Node, producer: Mapping[str, Node | None], graph: Graph) -> tuple[Node, ...] | None:
    """For ``concat(gather(x, 0, axis=a), ..., gather(x, n-1, axis=a), axis=c)`` with n = x's size along a (scalar
    constant indices, in order): the transpose that moves axis a before the concatenation's axis and the reshape that
    merges the two, writing the concatenation's output; None for any other node."""
    if node.op.name != "concat" or len(node.inputs) < 2:
        return None
    gathers = [producer.get(v) for v in _concat_leaves(node, producer)]
    first = gathers[0]
    if first is None or first.op.name != "gather":
        return None
    x, axis = first.inputs[0], first.params["axis"]
    shape = graph.type(x).shape
    if len(gathers) != shape[axis] or type(shape[axis]) is not int:
        return None
    for i, g in enumerate(gathers):
        if g is None or g.op is not first.op or g.inputs[0] != x or g.params["axis"] != axis:
            return None
        index = graph.weights.get(g.inputs[1])
        if index is None or index.ndim != 0 or index.dtype.kind not in "iu" or int(index) != i:
            return None
    joined = node.params["axis"]
    kept = [k for k in range(len(shape)) if k != axis]  # x's axes in a slice's order
    perm = kept[:joined] + [axis] + kept[joined:]
    out = node.outputs[0]
    target = tuple(graph.type(out).shape)
    if perm == list(range(len(shape))):
        return (Node(get_op("reshape"), Params({"shape": target}), (x,), (out,), node.name),)
    moved = f"{out}/transposed"
    return (Node(get_op("transpose"), Params({"perm": tuple(perm)}), (x,), (moved,), f"{node.name}/transpose"),
            Node(get_op("reshape"), Params({"shape": target}), (moved,), (out,), node.name))


def _identity_of(node: Node, graph: Graph) -> str | None:
    """The value a node returns unchanged: a transpose by the identity, a reshape to the input's own shape,
    an addition of zeros or a product with ones."""
    name = node.op.name
    if name in _NEUTRAL:
        return _neutral_operand(node, graph)
    if name == "slice":
        p, shape = node.params, graph.type(node.inputs[0]).shape
        whole = all(s == 0 and e is not None and e == shape[a] and t == 1 for s, e, a, t in zip(p["starts"], p["ends"], p["axes"], p["steps"]))
        return node.inputs[0] if whole else None
    if name == "pad":
        return node.inputs[0] if not any(node.params["pads"]) else None
    if name == "transpose":
        perm = tuple(node.params["perm"])
        return node.inputs[0] if perm == tuple(range(len(perm))) and _proved("identity-transpose", len(perm)) else None
    if name == "reshape":
        shape = graph.type(node.outputs[0]).shape
        return node.inputs[0] if shape == graph.type(node.inputs[0]).shape and _proved("identity-reshape", len(shape)) else None
    return None


def _neutral_operand(node: Node, graph: Graph) -> str | None:
    """x, when the node adds to x a weight of zeros (multiplies it by ones) of x's shape or trailing dims."""
    neutral, same, trailing = _NEUTRAL[node.op.name]
    for x, w in (node.inputs, tuple(reversed(node.inputs))):
        array = graph.weights.get(w)
        if array is None or w in graph.meta.initializer_inputs or array.dtype.kind not in "fiu":
            continue
        x_type = graph.type(x)
        r, k = x_type.rank, array.ndim
        if not 1 <= k <= r or graph.type(node.outputs[0]).shape != x_type.shape or tuple(x_type.shape[r - k:]) != array.shape:
            continue
        axiom = (same if k == r else trailing).format(r=r, k=k)
        if axiom in _axiom_names() and x_type.dtype == array.dtype.name and bool(np.all(array == neutral)):
            return x
    return None


def _rebuilt(graph: Graph, nodes: list[Node], alias: Mapping[str, str], new_types: Mapping[str, TensorType]) -> Graph:
    """The graph over the kept nodes, its outputs (and the values its symbols are read from) renamed through ``alias``."""

    def resolved(value: str) -> str:
        while value in alias:
            value = alias[value]
        return value

    outputs = tuple(resolved(v) for v in graph.outputs)
    meta = graph.meta
    if meta.symbol_sources:
        meta = replace(meta, symbol_sources=tuple((s, resolved(v), axis) for s, v, axis in meta.symbol_sources))
    types = {**graph.types, **new_types}
    weights = {k: v for k, v in graph.weights.items() if k not in alias}
    return Graph(graph.inputs, weights, nodes, outputs, types, meta).pruned()
