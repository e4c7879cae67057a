"""Fusion-aware rewrite costs: price a rewrite by timing the region it changes on ONNX Runtime.

A per-node cost model adds up kernels that ONNX Runtime fuses (MatMul + Add into Gemm,
Conv + Relu, Gemm's bias), so a rewrite that splits a fused pair looks free and one that
enables a fusion looks useless. Here a rewrite's price is measured instead: the removed
nodes and the added nodes, each with the same immediate producers and consumers around
them (what ONNX Runtime could fuse them with), are exported as two small models and timed
side by side, interleaved, with the session options the model will run with. The rewrite
costs the median paired difference; a gain that most rounds do not agree on counts as none,
because the search picks the lowest prices and would otherwise collect rewrites whose only
gain was noise. Regions are cached by a signature of their structure, types and
constness (every step of an unrolled RNN is one signature), on disk per hardware
fingerprint, so a second search measures nothing it knows.

The graph's own cost stays the per-node sum of the wrapped model; only rewrite deltas are
regional. A rewrite whose region cannot be built or run (an opaque operator at its core)
falls back to the per-node delta, and so do new regions once the measurement budget is spent.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence

import numpy as np

from ..ir import Graph, GraphMeta, Node, TensorType
from ..measure.inputs import random_array
from .model import CostModel

__all__ = ["RegionCost", "region_pair", "region_signature"]


class RegionCost(CostModel):
    """Wraps a measured per-node model; a rewrite is priced by timing its region before and after.

    Args:
        base: the per-node model (``OrtCpuCost``): graph costs, and the fallback.
        max_regions: new regions measured per search at most; later ones fall back to per-node.
        min_seconds: timing per region pair (both sides together), split over interleaved rounds.
    """

    name = "ort-cpu-region"
    context_sensitive = True

    def __init__(self, base: CostModel, max_regions: int = 400, min_seconds: float = 0.04):
        super().__init__()
        self.base = base
        self.threads = getattr(base, "threads", 1)
        self.max_regions, self.min_seconds = max_regions, min_seconds
        self._fingerprint = base.fingerprint.replace("|profiled", "") + f"|regions-v{_METHOD_VERSION}"
        cache = getattr(base, "cache", None)
        self.cache = cache
        self._table = cache.table(self._fingerprint) if cache is not None else {}
        self._rng = np.random.default_rng(0)
        self.regions_timed = 0  # regions timed in this process
        self.regions_reused = 0  # deltas answered from the cache
        self.per_node = 0  # deltas priced per node (no region, or the budget spent)

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def deadline(self) -> float:
        return self.base.deadline

    @deadline.setter
    def deadline(self, value: float) -> None:
        if "base" in self.__dict__:  # CostModel.__init__ sets it before the base is known
            self.base.deadline = value

    @property
    def estimated(self) -> int:
        return self.base.estimated

    @estimated.setter
    def estimated(self, value: int) -> None:
        pass  # counted by the base

    def measure(self, node: Node, graph: Graph, key: str, consts) -> float:
        cost = self.base.node_cost(node, graph, consts)
        self._estimate_used = self.base._estimate_used  # an estimate is not memoised here either
        return cost

    def input_overhead(self, model) -> float:
        return self.base.input_overhead(model)

    def rewrite_cost(self, parent: Graph, parent_cost: float, removed, added, child) -> float:
        pair = region_pair(parent, removed, added, child)
        if pair is None:
            self.per_node += 1
            return super().rewrite_cost(parent, parent_cost, removed, added, child)
        before, after = pair
        key = "region|" + region_signature(before, after)
        delta = self._table.get(key)
        if delta is not None:
            self.regions_reused += 1
            return parent_cost + self._at_most_the_region(delta, parent, before)
        if self.regions_timed >= self.max_regions:
            self.per_node += 1
            return super().rewrite_cost(parent, parent_cost, removed, added, child)
        delta = self._time_delta(before, after)
        if delta is None:
            self.per_node += 1
            return super().rewrite_cost(parent, parent_cost, removed, added, child)
        self.regions_timed += 1
        self._table[key] = delta
        if self.cache is not None:
            self.cache.record(self._fingerprint, key, delta)
        return parent_cost + self._at_most_the_region(delta, parent, before)

    def _at_most_the_region(self, delta: float, parent: Graph, before: Graph) -> float:
        """A rewrite saves at most what its whole region costs per node; a larger measured gain is noise."""
        consts = parent.constant_values()
        return max(delta, -sum(self._runtime_cost(node, parent, consts) for node in before.nodes))

    def _time_delta(self, before: Graph, after: Graph) -> float | None:
        """Seconds ``after`` takes more than ``before`` (negative: the rewrite pays), timed interleaved."""
        from ..measure.timing import interleaved_samples, mean_run, warm_session
        from ..onnx import to_onnx_model

        measures = []
        try:
            for position, region in enumerate((before, after)):
                feeds = {v: random_array(t, self._rng) for v, t in region.inputs.items()}
                measures.append(warm_session(position, "a region", to_onnx_model(region, check=False).SerializeToString(), feeds, self.threads))
        except Exception:  # noqa: BLE001 - a region taso cannot export or ORT cannot take is priced per node instead
            return None
        once = sum(mean_run(session, feeds, 1) for session, feeds in measures)
        runs = max(1, int(self.min_seconds / _ROUNDS / max(once, 1e-6)))
        timed = [lambda m=m: mean_run(*m, runs) for m in measures]
        first, second = interleaved_samples(timed, _ROUNDS)
        delta = _significant_difference(first, second)
        if delta < -_SUSPICIOUS_GAIN * statistics.median(first):
            # A gain this large is more often a burst of load on one side than a real one
            # (a cached -58 us for removing one Add from a 29 us region): measure again, keep the smaller.
            delta = max(delta, _significant_difference(*interleaved_samples(timed, _ROUNDS)))
        return delta

    def measure_ahead(self, nodes) -> int:
        return self.base.measure_ahead(nodes)

    def close(self) -> None:
        self.base.close()


_ROUNDS = 9
# Bumped whenever the way a delta is measured changes: cached deltas of another method are not reused.
_METHOD_VERSION = 2
# A gain above this fraction of the region's own time is measured a second time.
_SUSPICIOUS_GAIN = 0.25
# A gain counts only when at least this many of the _ROUNDS paired rounds agree (a sign test, p < 0.1):
# the search picks the lowest prices, so a gain that is only noise would be picked and accumulate.
_AGREEING_ROUNDS = 7


def _significant_difference(before: list[float], after: list[float]) -> float:
    """The median paired difference ``after - before``; a gain not seen in most rounds counts as none.

    A loss is kept as measured: pricing a rewrite too high only makes the search cautious.
    """
    differences = [a - b for a, b in zip(after, before)]
    median = statistics.median(differences)
    if median < 0 and sum(d < 0 for d in differences) < _AGREEING_ROUNDS:
        return 0.0
    return median


# ---- regions --------------------------------------------------------------------------------------


def region_pair(parent: Graph, removed: Sequence[Node], added: Sequence[Node], child) -> tuple[Graph, Graph] | None:
    """The rewrite's region before and after: its nodes with the same immediate producers and consumers.

    ``child`` is the rewritten graph or a :class:`~taso.search.rewrite.Plan` of it (anything with
    ``type``, ``weights``, ``meta``). None when a core node is opaque (its kernel is not
    ours to pair with neighbours) or nothing runs at inference time on either side.
    """
    if any(n.op.name == "opaque" for n in (*removed, *added)):
        return None
    consts = parent.constant_values()
    removed_ids = {id(n) for n in removed}
    neighbours: dict[int, Node] = {}
    for node in (*removed, *added):
        for value in node.inputs:
            producer = parent.producer(value)
            if producer is not None and id(producer) not in removed_ids and value not in consts:
                neighbours[id(producer)] = producer
    for node in removed:
        for value in node.outputs:
            for user, _ in parent.uses(value):
                if id(user) not in removed_ids:
                    neighbours[id(user)] = user
    around = [n for n in neighbours.values() if n.op.name != "opaque"]
    parent_outputs = set(parent.outputs)
    child_outputs = set(getattr(child, "outputs", None) or parent.outputs)
    before = _region(parent, list(removed), around, consts, parent_outputs)
    after = _region(child, list(added), around, consts, child_outputs)
    if before is None or after is None:
        return None
    return before, after


def _region(view, core: list[Node], around: list[Node], consts, graph_outputs: set[str]) -> Graph | None:
    """A standalone graph of ``core`` and ``around`` at the measurement sizes: values from outside become inputs (or
    weights, when constant)."""
    nodes = [n.concrete() for n in core + around]
    produced = {o for n in nodes for o in n.outputs}
    inputs: dict[str, TensorType] = {}
    weights: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(1)
    for node in nodes:
        for value in node.inputs:
            if value in produced or value in inputs or value in weights:
                continue
            if value in view.weights:
                weights[value] = view.weights[value]
            elif value in consts:
                weights[value] = random_array(view.type(value), rng)  # a folded constant: its value does not change the kernels
            else:
                inputs[value] = view.type(value).concrete()
    outputs = [o for n in around for o in n.outputs] + [o for n in core for o in n.outputs if o in graph_outputs]
    if not outputs or not inputs:
        return None
    types = {v: view.type(v).concrete() for n in nodes for v in (*n.inputs, *n.outputs)}
    try:
        return Graph(inputs, weights, nodes, outputs, types=types,
                     meta=GraphMeta(opset=max(view.meta.opset, 13), opset_limit=view.meta.opset_limit, output_names=tuple(outputs)))
    except Exception:  # noqa: BLE001 - a region that is not a graph (a neighbour reading another's output) is priced per node
        return None


def region_signature(before: Graph, after: Graph) -> str:
    """A digest of both regions' structure, parameters, types and constness, independent of value names."""
    parts = [_canonical(before), _canonical(after)]
    return hashlib.sha1("\n#\n".join(parts).encode()).hexdigest()


def _canonical(region: Graph) -> str:
    names: dict[str, str] = {}

    def name(value: str) -> str:
        if value not in names:
            kind = "w" if value in region.weights else "i" if value in region.inputs else "v"
            names[value] = f"{kind}{len(names)}"
        return names[value]

    lines = []
    for node in region.topological_order():
        ins = ",".join(f"{name(v)}:{region.type(v).key}" for v in node.inputs)
        outs = ",".join(name(v) for v in node.outputs)
        lines.append(f"{node.op.name}|{node.params.canonical()}|{ins}|{outs}")
    lines.append("out:" + ",".join(name(v) for v in region.outputs))
    return "\n".join(lines)
