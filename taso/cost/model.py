"""What a cost model is: an operator instance (type, parameters, input shapes, dtype, which inputs are constant) -> seconds.

The graph cost is the sum over nodes that run at inference time, as in TASO; nodes
computed from weights alone cost nothing because export folds them into initializers.
:class:`CostModel` is the interface every back end implements (:mod:`taso.cost.ort_cpu`,
:mod:`taso.cost.cupy_gpu`, :mod:`taso.cost.region`); :class:`AnalyticCost` prices by FLOPs and
bytes against a roofline, for tests and quick runs, and stands in for a measured model past its deadline.
"""

from __future__ import annotations

import statistics
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import TasoError
from ..ir import Graph, Node, TensorType, folds_when_constant
from ..ops import ELEMENTWISE
from .cache import CostCache

__all__ = ["CostModel", "Neighbourhood", "AnalyticCost", "node_key", "flops"]


def node_key(node: Node, graph: Graph, consts=None) -> str:
    """What determines a node's cost: op, params, input types and which inputs are constant.

    An elementwise node without broadcasting runs one flat loop whatever the layout, so it is
    keyed by its element count (:func:`_flat_types`): Tanh on [1, 128] and on [128, 1] is one
    kernel with one price. Measured apart, microsecond kernels differ by the profiler's noise,
    and the search once bought that noise with 128 Transposes around the Tanhs of an LSTM.
    """
    consts = graph.constant_values() if consts is None else consts
    types = [graph.type(v) for v in node.inputs]
    types = _flat_types(node, graph, types) or types
    inputs = ";".join(f"{t.key}{'c' if v in consts else ''}" for v, t in zip(node.inputs, types))
    # an op that is one ONNX node only from a later opset is another kernel where it is written decomposed
    form = "|decomposed" if node.op.onnx.native_opset and not graph.meta.writes_natively(node.op.onnx.native_opset) else ""
    return f"{node.op.name}|{node.params.canonical()}|{inputs}{form}"


def _flat_types(node: Node, graph: Graph, types: list[TensorType]) -> list[TensorType] | None:
    """The input types of a layout-free elementwise node as flat vectors (a scalar operand as [1]); None for any other node."""
    if node.op.name not in ELEMENTWISE:
        return None
    sizes = [t.concrete().size for t in types]  # at the measurement sizes, as every entry is measured
    full = {t.shape for t, size in zip(types, sizes) if size > 1}
    if len(full) > 1:
        return None  # a broadcast: its loops depend on the shapes
    return [TensorType((size,), t.dtype) for t, size in zip(types, sizes)]


def flops(node: Node, in_types: list[TensorType], out_types: list[TensorType]) -> float:
    """Floating-point operations (a multiply-add counts 2)."""
    name = node.op.name
    if name == "matmul":
        a, b = in_types
        k = a.shape[-1]
        return 2.0 * out_types[0].size * k
    if name == "conv2d":
        w = in_types[1]
        return 2.0 * out_types[0].size * w.shape[1] * w.shape[2] * w.shape[3]
    return float(sum(t.size for t in out_types))


class CostModel(ABC):
    """Maps nodes to seconds; memoises per key so a search never prices one node twice."""

    name = "abstract"
    # True when a rewrite's price depends on the nodes around it (measured regions, fusions the
    # runtime makes): the search re-prices an inherited rewrite whose neighbourhood the applied one changed.
    context_sensitive = False
    # The ops whose kernels absorb a node after them in the runtime (see :meth:`absorbed`); a
    # rewrite then also re-prices the readers of those ops' outputs around it.
    absorbers: frozenset[str] = frozenset()
    # True when a graph's cost depends on the order its nodes run in, which a rewrite's price estimates from
    # the parent's order: the search then prices each graph it builds by graph_cost (see OrtCpuCost's residency).
    order_sensitive = False
    # True when the deployment this model prices is another runtime than ONNX Runtime on this CPU (a GPU runtime):
    # the guard then times there, with :meth:`end_to_end_timer`.
    deployed_elsewhere = False

    def __init__(self):
        self._memo: dict[str, float] = {}
        # Nodes are shared between graph versions: price each (node, constness) once.
        self._by_node: dict[tuple[int, bool], tuple[Node, float]] = {}
        self._shared: dict[tuple, float] = {}  # shared_price's figures, by what they depend on
        # After this perf_counter() time (the search's time limit), a measured model estimates a node it has no
        # measurement of instead of measuring it (see estimate()); estimates are neither memoised nor cached.
        self.deadline = float("inf")
        self.estimated = 0  # nodes estimated past the deadline
        self._estimate_used = False
        self._scales: list[float] = []  # measured seconds over roofline seconds, per node measured

    @abstractmethod
    def measure(self, node: Node, graph: Graph, key: str, consts) -> float:
        """Seconds for one node (called once per key); ``consts`` holds the graph's constant values."""

    def node_cost(self, node: Node, graph: Graph, consts=None) -> float:
        consts = graph.constant_values() if consts is None else consts
        key = node_key(node, graph, consts)
        cost = self._memo.get(key)
        self._estimate_used = False
        if cost is None:
            cost = self.measure(node, graph, key, consts)
            if not self._estimate_used:
                self._memo[key] = cost
        return cost

    def estimate(self, node: Node, graph: Graph, key: str, consts) -> float:
        """A node's cost without measuring it, for a measured model past its deadline: the roofline's figure,
        scaled by how the nodes measured so far compared with their roofline figures."""
        self._estimate_used = True
        self.estimated += 1
        roofline = _roofline_seconds(node, graph, key, consts)
        return (roofline or _ROOFLINE.launch) * (statistics.median(self._scales) if self._scales else 1.0)

    def calibrate_estimates(self, node: Node, graph: Graph, key: str, consts, seconds: float) -> None:
        """Records a measured node's cost against its roofline figure (what :meth:`estimate` scales by)."""
        roofline = _roofline_seconds(node, graph, key, consts)
        if roofline and seconds > 0:
            self._scales.append(seconds / roofline)

    def _runtime_cost(self, node: Node, graph: Graph, consts: frozenset[str] | set[str]) -> float:
        """The node's cost in this graph: zero when it is computed from weights alone (folded at export)."""
        if all(o in consts for o in node.outputs):
            return 0.0
        flags = all(v in consts for v in node.inputs)  # constness of inputs is part of the key
        hit = self._by_node.get((id(node), flags))
        if hit is not None and hit[0] is node:
            return hit[1]
        cost = self.node_cost(node, graph, consts)
        if not self._estimate_used:
            self._by_node[(id(node), flags)] = (node, cost)
        return cost

    def absorbed(self, node: Node, around: Neighbourhood) -> bool:
        """Whether the runtime runs ``node`` inside its producer's kernel, so that it costs nothing there.

        None here; a measured model says which fusions its runtime makes (see ``OrtCpuCost``).
        """
        return False

    def cost_in(self, node: Node, around: Neighbourhood) -> float:
        """The node's price where it runs in a graph: zero when the runtime fuses it into its producer, its share of
        the kernel the runtime makes of it and its siblings where it does (:meth:`shared_price`)."""
        if self.absorbers and self.absorbed(node, around):
            return 0.0
        shared = self.shared_price(node, around) if self.absorbers else None
        return self._runtime_cost(node, around.pricing, around.consts) if shared is None else shared

    def shared_price(self, node: Node, around: Neighbourhood) -> float | None:
        """The node's share of one kernel the runtime runs for it and nodes beside it; None where it runs its own."""
        return None

    def graph_cost(self, graph: Graph) -> float:
        """Sum of the costs of the nodes that run at inference time."""
        around = Neighbourhood.of(graph)
        return sum(self.cost_in(n, around) for n in graph.nodes)

    def end_to_end_timer(self, original: Graph, optimized: Graph):
        """The guard's timer where this model's deployment is not ONNX Runtime on this CPU (a GPU runtime): an object
        whose ``speedup()`` times the two graphs side by side on it. None: the guard times on ONNX Runtime."""
        return None

    def input_overhead(self, model) -> float:
        """What the input file (an ``onnx.ModelProto``) costs beyond its graph's price, which taso's re-export of the
        graph does not pay: none here (``OrtCpuCost``: the shapes only its ``value_info`` declares)."""
        return 0.0

    def surcharges(self, graph: Graph) -> dict[int, float]:
        """What :meth:`graph_cost` charges each node (by ``id``) beyond its price in place: none here.

        A search that prices node by node (eqsat's extraction) reads here which nodes a rewrite might make cheaper
        than their prices alone say (``OrtCpuCost``: a weight read cold after other weights evicted it)."""
        return {}

    def rewrite_cost(self, parent: Graph, parent_cost: float, removed, added, child) -> float:
        """The child's cost from its parent's: only the removed and added nodes are priced.

        ``child`` is the child graph, or the search's plan of it (anything with ``type()``).
        With fusions, also the parent's nodes that read a value the rewrite produces, consumes
        or stops producing: a rewrite can take a node's producer away from it, or give its
        producer a second reader, and the runtime then no longer fuses the two.
        """
        before = Neighbourhood.of(parent)
        after = Neighbourhood.after(parent, removed, added, child)
        delta = sum(self.cost_in(n, after) for n in added) - sum(self.cost_in(n, before) for n in removed)
        neighbours = self.fusion_neighbours(parent, before, after, removed, added)
        delta += sum(self.cost_in(n, after) - self.cost_in(n, before) for n in neighbours.values())
        return parent_cost + delta

    def fusion_neighbours(self, parent: Graph, before: Neighbourhood, after: Neighbourhood, removed, added) -> dict[int, Node]:
        """The parent's nodes (by ``id``), not removed, whose fusion a rewrite may make or break: what it re-prices."""
        if not self.absorbers:
            return {}
        gone = {id(n) for n in removed}
        neighbours = {id(user): user for v in self._fusion_values(before, after, removed, added)
                      for user, _ in parent.uses(v) if id(user) not in gone}
        # An absorbing neighbour passes the change on: a Conv given a second reader no longer folds the
        # BatchNormalization after it, nor then fuses the activation after that.
        for user in [n for n in neighbours.values() if n.op.name in self.absorbers]:
            neighbours.update({id(reader): reader for v in user.outputs for reader, _ in parent.uses(v) if id(reader) not in gone})
        return neighbours

    def _fusion_values(self, before: Neighbourhood, after: Neighbourhood, removed, added) -> set[str]:
        """Values around a rewrite whose readers' fusions it may change: computed ones an absorbing op produces, before or after."""
        values = {v for n in (*removed, *added) for v in (*n.inputs, *n.outputs)}
        found = set()
        for v in values:
            if v in before.consts:
                continue  # folded at export: nothing reading it is fused with its producer
            was, now = before.producer(v), after.producer(v)
            if (was is not None and was.op.name in self.absorbers) or (now is not None and now.op.name in self.absorbers):
                found.add(v)
        return found

    def measure_ahead(self, nodes: Iterable[tuple[Node, Any, Any]]) -> int:
        """Measures at once the nodes this model would measure one by one when priced, each given with what types its
        values (a graph, a search's plan) and the constant values there: a measured model measures them in bulk
        (``OrtCpuCost``); how many it measured. None here."""
        return 0

    def measure_graph_ahead(self, graph: Graph) -> int:
        """:meth:`measure_ahead` of every node of ``graph``: the input's nodes, before a search prices them one by one."""
        consts = graph.constant_values()
        return self.measure_ahead((node, graph, consts) for node in graph.nodes)

    def measure_plans_ahead(self, parent: Graph, plans) -> int:
        """:meth:`measure_ahead` of the nodes the search's ``plans`` (rewrites of ``parent``, not built) add."""
        def added():
            for plan in plans:
                around = Neighbourhood.after(parent, plan.removed, plan.added, plan)
                yield from ((node, around.pricing, around.consts) for node in plan.added)

        return self.measure_ahead(added())

    def close(self) -> None:
        """Hook to persist measurements."""

    @property
    def fingerprint(self) -> str:
        return self.name


class Neighbourhood:
    """What a fusion depends on around a node: producers, readers, graph outputs, types, constants.

    Of a built graph (:meth:`of`) or of a rewrite not built yet (:meth:`after`: the parent
    with some nodes removed and others added), so that a search prices a child graph
    without building it. ``pricing`` is what node costs read types from.
    """

    __slots__ = ("graph", "pricing", "consts", "_producers", "_readers", "_removed", "_outputs")

    def __init__(self, graph: Graph, pricing, consts, producers: dict, readers: dict, removed: set, outputs):
        self.graph, self.pricing, self.consts = graph, pricing, consts
        self._producers, self._readers, self._removed, self._outputs = producers, readers, removed, frozenset(outputs)

    @classmethod
    def of(cls, graph: Graph) -> Neighbourhood:
        return cls(graph, graph, graph.constant_values(), {}, {}, set(), graph.outputs)

    @classmethod
    def after(cls, parent: Graph, removed, added, child) -> Neighbourhood:
        parent_consts = parent.constant_values()
        new_consts: set[str] = set()
        for node in added:  # added nodes are in topological order among themselves
            if all(v in parent_consts or v in new_consts for v in node.inputs) and folds_when_constant(node, child.type):
                new_consts.update(node.outputs)
        readers: dict[str, list[Node]] = {}
        for n in added:
            for v in n.inputs:
                readers.setdefault(v, []).append(n)
        outputs = getattr(child, "outputs", None)
        return cls(parent, child, _Overlay(parent_consts, new_consts), {v: n for n in added for v in n.outputs}, readers,
                   {id(n) for n in removed}, parent.outputs if outputs is None else outputs)

    def producer(self, value: str) -> Node | None:
        node = self._producers.get(value)
        if node is not None:
            return node
        node = self.graph.producer(value)
        return None if node is None or id(node) in self._removed else node

    def readers(self, value: str) -> list[Node]:
        kept = [user for user, _ in self.graph.uses(value) if id(user) not in self._removed]
        return kept + self._readers.get(value, [])

    def is_output(self, value: str) -> bool:
        return value in self._outputs

    def type(self, value: str) -> TensorType:
        return self.pricing.type(value)


class _Overlay:
    """Membership in either of two sets, without copying the big one."""

    __slots__ = ("base", "extra")

    def __init__(self, base, extra):
        self.base, self.extra = base, extra

    def __contains__(self, value) -> bool:
        return value in self.base or value in self.extra


class AnalyticCost(CostModel):
    """A roofline: max(FLOPs / peak, bytes / bandwidth) plus a per-node launch overhead.

    Args:
        peak_flops: sustained FLOP/s of one core running a GEMM.
        bandwidth: bytes/s of memory traffic.
        launch: seconds of fixed overhead per node (kernel dispatch in a runtime).
    """

    name = "analytic"

    def __init__(self, peak_flops: float = 5e10, bandwidth: float = 1e10, launch: float = 2e-6):
        super().__init__()
        self.peak_flops, self.bandwidth, self.launch = peak_flops, bandwidth, launch

    def measure(self, node: Node, graph: Graph, key: str, consts) -> float:
        in_types = [graph.type(v) for v in node.inputs]
        out_types = [graph.type(v) for v in node.outputs]
        if node.op.name == "reshape":
            return self.launch  # a view: no data moves
        traffic = sum(t.nbytes for t in in_types) + sum(t.nbytes for t in out_types)
        return max(flops(node, in_types, out_types) / self.peak_flops, traffic / self.bandwidth) + self.launch


_ROOFLINE = AnalyticCost()


def _roofline_seconds(node: Node, graph: Graph, key: str, consts) -> float | None:
    """The roofline's figure for a node, or None for one whose values the graph does not type (a fused
    activation priced apart, under a name of its own)."""
    try:
        return _ROOFLINE.measure(node, graph, key, consts)
    except TasoError:
        return None


class DeviceCost(CostModel):
    """A model that times each distinct node on a device runtime (the torch runtime, the CuPy executor), caches the
    seconds under the device's fingerprint, and hands the guard that runtime's timer. A subclass says how one node is
    timed (:meth:`time_node`) and how two graphs are (:meth:`end_to_end_timer`)."""

    deployed_elsewhere = True

    def __init__(self, fingerprint: str, cache: CostCache | None = None):
        super().__init__()
        self.cache = cache or CostCache()
        self._fingerprint = fingerprint
        self._table = self.cache.table(fingerprint)
        self._rng = np.random.default_rng(0)
        self.measured = 0

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @abstractmethod
    def time_node(self, node: Node, graph: Graph, consts, rng: np.random.Generator) -> float:
        """Seconds of one node on the device (its constant inputs resident as weights)."""

    def measure(self, node: Node, graph: Graph, key: str, consts) -> float:
        cached = self._table.get(key)
        if cached is not None:
            return cached
        seconds = self.time_node(node, graph, consts, self._rng)
        self.cache.record(self._fingerprint, key, seconds)
        self.measured += 1
        self.calibrate_estimates(node, graph, key, consts, seconds)
        return seconds

    def close(self) -> None:
        self.cache.save()
