"""Cost models: an operator instance (type, parameters, input shapes, dtype, which inputs are constant) -> seconds.

The graph cost is the sum over nodes that run at inference time, as in TASO; nodes
computed from weights alone cost nothing because export folds them into initializers.
Implementations: :class:`AnalyticCost` (FLOPs and bytes against a roofline, for tests and
quick runs) and, in :mod:`taso.cost_ort`, costs measured on ONNX Runtime, cached on disk
per hardware fingerprint.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import TasoError
from .ir import Graph, Node, TensorType, folds_when_constant
from .ops import ELEMENTWISE

__all__ = ["CostModel", "Neighbourhood", "AnalyticCost", "CostCache", "CostEntry", "SpotCheck", "SpotCheckPolicy", "SPOT_CHECK_OFF", "Verdict",
           "node_key", "flops", "make_cost_model", "noise_band", "format_cost_report", "COST_MODELS"]


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
    return f"{node.op.name}|{node.params.canonical()}|{inputs}"


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

    def __init__(self):
        self._memo: dict[str, float] = {}
        # Nodes are shared between graph versions: price each (node, constness) once.
        self._by_node: dict[tuple[int, bool], tuple[Node, float]] = {}
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

    def _cost_in(self, node: Node, around: Neighbourhood) -> float:
        if self.absorbers and self.absorbed(node, around):
            return 0.0
        return self._runtime_cost(node, around.pricing, around.consts)

    def graph_cost(self, graph: Graph) -> float:
        """Sum of the costs of the nodes that run at inference time."""
        around = Neighbourhood.of(graph)
        return sum(self._cost_in(n, around) for n in graph.nodes)

    def rewrite_cost(self, parent: Graph, parent_cost: float, removed, added, child) -> float:
        """The child's cost from its parent's: only the removed and added nodes are priced.

        ``child`` is the child graph, or the search's plan of it (anything with ``type()``).
        With fusions, also the parent's nodes that read a value the rewrite produces, consumes
        or stops producing: a rewrite can take a node's producer away from it, or give its
        producer a second reader, and the runtime then no longer fuses the two.
        """
        before = Neighbourhood.of(parent)
        after = Neighbourhood.after(parent, removed, added, child)
        delta = sum(self._cost_in(n, after) for n in added) - sum(self._cost_in(n, before) for n in removed)
        if self.absorbers:
            gone = {id(n) for n in removed}
            neighbours = {id(user): user for v in self._fusion_values(before, after, removed, added)
                          for user, _ in parent.uses(v) if id(user) not in gone}
            delta += sum(self._cost_in(n, after) - self._cost_in(n, before) for n in neighbours.values())
        return parent_cost + delta

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

    def prepare(self, graphs) -> None:
        """Hook to price many nodes at once (measuring models batch their measurements)."""

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


# ---- the cost cache: measured entries with their noise bands, spot-checked on use ------------------

# An entry's noise band is a relative half-width: the interquartile range over the median of the
# runs it came from, at least BAND_FLOOR, because the same node timed in another session of the
# same process strays further than its runs spread (SqueezeNet's nodes timed three times each: an
# 86 us Conv whose runs spread 2-5% came out 24% apart). At most BAND_CEILING, so that an entry
# off by a factor of 3 shows even on the noisiest microsecond kernel. Two measurements agree when
# they differ by no more than the sum of their half-widths, each at least ABSOLUTE_FLOOR (the
# profiler's tick).
BAND_FLOOR = 0.10
BAND_CEILING = 0.5
ABSOLUTE_FLOOR = 1e-6
# A measuring model's own constants (the table's unit): every other entry is in their unit, so they
# are not spot-checked or marked stale; a table whose unit is wrong is a new fingerprint's job.
CALIBRATION = "calibration|"

# What the last spot-check of an entry found (its ``state``).
UNCHECKED = ""
AGREED = "ok"  # within the combined band of a fresh measurement
FIXED = "fixed"  # a quick and a full fresh measurement disagreed with it: the full one replaced it
SUSPECT = "suspect"  # the fresh measurements disagreed with it and among themselves: not re-measured yet
STALE = "stale"  # its table went stale before it was checked: not re-measured yet

# Measures an entry's node now: (seconds, noise band); quick=True for a shorter screening measurement.
Measure = Callable[[bool], tuple[float, float]]


def noise_band(seconds: float, spread: float) -> float:
    """The relative noise band of a measurement of ``seconds`` whose runs spread over ``spread`` seconds (their interquartile range)."""
    relative = spread / seconds if seconds > 0 else BAND_CEILING
    return min(max(relative, BAND_FLOOR), BAND_CEILING)


def allowed_difference(a: float, band_a: float, b: float, band_b: float) -> float:
    """How far two measurements of one entry may be apart and still agree: their combined noise band, in seconds."""
    return max(band_a * abs(a), ABSOLUTE_FLOOR) + max(band_b * abs(b), ABSOLUTE_FLOOR)


def agrees(a: float, band_a: float, b: float, band_b: float) -> bool:
    return abs(a - b) <= allowed_difference(a, band_a, b, band_b)


@dataclass
class CostEntry:
    """What the cache knows about an entry besides its seconds.

    Attributes:
        band: the relative noise band; None for an entry an older version wrote (unknown:
            first in line for a spot-check).
        measured_at: when its seconds were measured (Unix time; None: unknown).
        checked_at: when a spot-check last re-measured it.
        state: what that check found (UNCHECKED, AGREED, FIXED, SUSPECT or STALE).
        disagreement: (cached, fresh, allowed difference) seconds of that check, when it disagreed.
    """

    band: float | None = None
    measured_at: float | None = None
    checked_at: float | None = None
    state: str = UNCHECKED
    disagreement: tuple[float, float, float] | None = None

    @property
    def trusted(self) -> bool:
        """False for an entry a check found wrong or whose table went stale: it is re-measured when next used."""
        return self.state not in (SUSPECT, STALE)

    def to_json(self, seconds: float) -> dict[str, Any]:
        out: dict[str, Any] = {"s": seconds}
        if self.band is not None:
            out["band"] = round(self.band, 4)
        for name, value in (("at", self.measured_at), ("checked", self.checked_at)):
            if value is not None:
                out[name] = round(value)
        if self.state:
            out["state"] = self.state
        if self.disagreement is not None:
            out["disagreed"] = list(self.disagreement)
        return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _entry_from_json(value: Any) -> tuple[float, CostEntry | None] | None:
    """(seconds, what else is known) of an entry as stored: a dict, or seconds alone (older versions); None when damaged."""
    if _number(value):
        return float(value), None
    if not isinstance(value, dict) or not _number(value.get("s")):
        return None
    optional = {name: float(value[name]) if _number(value.get(name)) else None for name in ("band", "at", "checked")}
    disagreed = value.get("disagreed")
    state = value.get("state", UNCHECKED)
    return float(value["s"]), CostEntry(
        band=optional["band"], measured_at=optional["at"], checked_at=optional["checked"],
        state=state if state in (AGREED, FIXED, SUSPECT, STALE) else UNCHECKED,
        disagreement=tuple(disagreed) if isinstance(disagreed, list) and len(disagreed) == 3 and all(map(_number, disagreed)) else None)


@dataclass(frozen=True)
class SpotCheckPolicy:
    """How many of the entries a search takes from the cache it re-measures: per table, once per loaded cache (a process).

    A check costs a real measurement where a warm search takes every entry from the cache in a
    fraction of a second (SqueezeNet: 0.13 s of pricing in a 1.5 s search), so an entry is
    first screened with a quick measurement (about 10 ms for a small operator: a session
    profiled for 5 ms instead of 20, within about 2% of a full one), and only one that
    disagrees is measured in full, which decides. The check is bounded twice: at most
    ``entries`` entries (a quick measurement each, a full one only for one that disagreed), and
    no check starts that is expected to end past ``seconds`` of checking (a big Conv is left to
    ``taso info --costs --check N``, which has no time bound). A count alone would let a few big
    kernels take seconds; a time alone would spend it all on the first microsecond kernels of
    the graph. 4 entries cost a warm SqueezeNet search about 40 ms: its pricing 1.2-1.4x, the
    whole search within this shared machine's noise (0.94-1.03x; benchmarks/bench_cost_cache.py).

    Each entry the search takes is drawn with probability ``rate``, so that the sample spreads
    past the graph's first nodes (an entry without a noise band, from an older version, is always
    drawn while the bounds allow). A healthy table disagrees with a fresh measurement about as
    rarely as two fresh measurements disagree, so when ``stale_fraction`` of at least
    ``min_verdicts`` checked entries disagree, the table as a whole went stale (a new ONNX
    Runtime build or another machine under the same fingerprint) and its unchecked entries are
    re-measured when next used.
    """

    entries: int = 4
    seconds: float = 0.25
    rate: float = 0.1
    stale_fraction: float = 0.5
    min_verdicts: int = 3
    seed: int | None = None  # None: another sample in each process


SPOT_CHECK_OFF = SpotCheckPolicy(entries=0)


@dataclass(frozen=True)
class Verdict:
    """One spot-checked entry: its cached and fresh seconds, how far apart they could be, what was concluded and the seconds to use now."""

    key: str
    cached: float
    fresh: float
    band: float  # the allowed difference, seconds
    state: str  # AGREED, FIXED or SUSPECT
    value: float

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "cached": self.cached, "fresh": self.fresh, "band": self.band, "state": self.state}


class SpotCheck:
    """Re-measures a sample of the entries taken from one table, so that an entry that went wrong is not trusted forever.

    A measuring model asks :meth:`wants` for each entry it takes from the cache, calls
    :meth:`verify` for those drawn, and :meth:`remeasure` for an entry the cache no longer
    trusts (suspect, or its table went stale). Bounds and the stale rule: :class:`SpotCheckPolicy`.
    """

    def __init__(self, cache: CostCache, fingerprint: str, policy: SpotCheckPolicy):
        self.cache, self.fingerprint, self.policy = cache, fingerprint, policy
        self.verdicts: list[Verdict] = []
        self.measurements = 0  # fresh measurements for checks, quick or full (not re-measures of untrusted entries)
        self.seconds = 0.0  # spent on them
        self.marked_stale = 0  # entries this check marked stale (0: the table held)
        self._rng = random.Random(policy.seed)

    @property
    def exhausted(self) -> bool:
        return self.marked_stale > 0 or len(self.verdicts) >= self.policy.entries or self.seconds >= self.policy.seconds

    def wants(self, key: str, expected_seconds: float = 0.0) -> bool:
        """Whether to re-measure this entry now (``expected_seconds``: what that would take)."""
        if self.exhausted or key.startswith(CALIBRATION) or self.seconds + expected_seconds > self.policy.seconds:
            return False
        entry = self.cache.entry(self.fingerprint, key)
        return entry is None or entry.band is None or self._rng.random() < self.policy.rate

    def verify(self, key: str, cached: float, measure: Measure) -> Verdict:
        """Screens the entry with a quick fresh measurement; when they disagree a full one decides, and the cache keeps what it shows."""
        entry = self.cache.entry(self.fingerprint, key)
        quick = self._measure(measure, True)
        band = entry.band if entry is not None and entry.band is not None else quick[1]  # unknown: as noisy as now
        if agrees(cached, band, *quick):
            return self._settle(key, cached, band, quick, AGREED, cached)
        full = self._measure(measure, False)
        if agrees(cached, band, *full):  # the quick one was disturbed
            return self._settle(key, cached, band, full, AGREED, cached)
        if agrees(*quick, *full):  # both fresh measurements say the entry is wrong
            return self._settle(key, cached, band, full, FIXED, full[0])
        return self._settle(key, cached, band, quick, SUSPECT, statistics.median((cached, quick[0], full[0])))

    def remeasure(self, key: str, cached: float, measure: Measure) -> float:
        """An untrusted entry measured again: the fresh seconds replace it (outside the spot-check's bounds: a cold cache would measure it too)."""
        entry = self.cache.entry(self.fingerprint, key)
        seconds, band = measure(False)
        old_band = entry.band if entry is not None and entry.band is not None else band
        allowed = allowed_difference(cached, old_band, seconds, band)
        now = time.time()
        agreed = abs(cached - seconds) <= allowed
        self.cache.settle(self.fingerprint, key, seconds, CostEntry(
            band, now, now, AGREED if agreed else FIXED, None if agreed else (cached, seconds, allowed)))
        return seconds

    def describe(self) -> list[str]:
        """The entries checked, one line each, and whether the table went stale: for people."""
        lines = [_comparison(v.cached, v.fresh, v.band, v.state, v.key) for v in self.verdicts]
        if self.marked_stale:
            disagreed = sum(v.state != AGREED for v in self.verdicts)
            lines.append(f"{disagreed} of {len(self.verdicts)} disagreed: the table went stale, "
                         f"its other {self.marked_stale} entries are re-measured when next used")
        return lines

    def _measure(self, measure: Measure, quick: bool) -> tuple[float, float]:
        started = time.perf_counter()
        try:
            return measure(quick)
        finally:
            self.measurements += 1
            self.seconds += time.perf_counter() - started

    def _settle(self, key: str, cached: float, band: float, fresh: tuple[float, float], state: str, value: float) -> Verdict:
        """Records a check's verdict: a fixed entry takes the fresh seconds and band; others keep theirs (a band learnt if unknown)."""
        allowed = allowed_difference(cached, band, *fresh)
        disagreement = None if state == AGREED else (cached, fresh[0], allowed)
        now = time.time()
        if state == FIXED:
            self.cache.settle(self.fingerprint, key, fresh[0], CostEntry(fresh[1], now, now, FIXED, disagreement))
        else:
            old = self.cache.entry(self.fingerprint, key)
            self.cache.settle(self.fingerprint, key, cached, CostEntry(band, old and old.measured_at, now, state, disagreement))
        verdict = Verdict(key, cached, fresh[0], allowed, state, value)
        self.verdicts.append(verdict)
        self._judge_table()
        return verdict

    def _judge_table(self) -> None:
        """Marks the table stale when a large share of the sample disagreed."""
        checked = len(self.verdicts)
        disagreed = sum(v.state != AGREED for v in self.verdicts)
        if not self.marked_stale and checked >= self.policy.min_verdicts and disagreed >= self.policy.stale_fraction * checked:
            self.marked_stale = self.cache.mark_stale(self.fingerprint, spare={v.key for v in self.verdicts})


class CostCache:
    """Measured costs on disk, one table per hardware fingerprint, so a second run measures nothing it knows.

    The file (``$TASO_CACHE_DIR/costs.json``, default ``~/.cache/taso``) maps fingerprint ->
    {node key: entry}. An entry is ``{"s": seconds, "band": noise band, "at": when measured}``,
    with what its last spot-check found (``checked``, ``state``, ``disagreed``), or seconds
    alone as older versions wrote it (band unknown: first in line for a spot-check). A cached
    entry is not trusted forever: a measuring model spot-checks a sample of the entries it
    takes (:class:`SpotCheck`), and re-measures the ones found wrong or stale.

    Args:
        path: the file (default as above).
        spot_check: how entries taken from it are checked (``SPOT_CHECK_OFF``: never).
    """

    def __init__(self, path: str | None = None, spot_check: SpotCheckPolicy | None = None):
        directory = os.environ.get("TASO_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "taso"))
        self.path = path or os.path.join(directory, "costs.json")
        self.policy = spot_check or SpotCheckPolicy()
        self.problem: str | None = None  # what was wrong with the file on disk, and ignored
        self._data: dict[str, dict[str, float]] = {}
        self._meta: dict[str, dict[str, CostEntry]] = {}
        self._checks: dict[str, SpotCheck] = {}
        self._load()
        self._dirty = False

    def _load(self) -> None:
        """Reads the file; a damaged cache is only lost time, never wrong results, so what cannot be read is left out."""
        if not os.path.exists(self.path):
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except (OSError, ValueError) as e:
            self.problem = f"unreadable, ignored ({e})"
            return
        if not isinstance(raw, dict):
            self.problem = f"not a JSON object of tables but a {type(raw).__name__}, ignored"
            return
        damaged = 0
        for fingerprint, entries in raw.items():
            if not isinstance(entries, dict):
                damaged += 1
                continue
            table, meta = self._data.setdefault(fingerprint, {}), self._meta.setdefault(fingerprint, {})
            for key, value in entries.items():
                parsed = _entry_from_json(value)
                if parsed is None:
                    damaged += 1
                    continue
                table[key] = parsed[0]
                if parsed[1] is not None:
                    meta[key] = parsed[1]
        if damaged:
            self.problem = f"{damaged} damaged table(s) or entries ignored"

    def table(self, fingerprint: str) -> dict[str, float]:
        """The fingerprint's entries, key -> seconds (what else is known of each: :meth:`entry`)."""
        self._meta.setdefault(fingerprint, {})
        return self._data.setdefault(fingerprint, {})

    def record(self, fingerprint: str, key: str, seconds: float, band: float | None = None) -> None:
        """Stores a measurement just taken, with its noise band where the measuring model knows it."""
        self.settle(fingerprint, key, seconds, None if band is None else CostEntry(band, time.time()))

    def settle(self, fingerprint: str, key: str, seconds: float, entry: CostEntry | None) -> None:
        """Stores an entry's seconds with what is known of it (None: seconds alone)."""
        self.table(fingerprint)[key] = seconds
        if entry is None:
            self._meta[fingerprint].pop(key, None)
        else:
            self._meta[fingerprint][key] = entry
        self._dirty = True

    def entry(self, fingerprint: str, key: str) -> CostEntry | None:
        """What is known of an entry besides its seconds; None for seconds alone (or no entry)."""
        return self._meta.get(fingerprint, {}).get(key)

    def spot_check(self, fingerprint: str) -> SpotCheck:
        """This cache's spot-check of a table: one per table per loaded cache, so that a process checks a table once."""
        check = self._checks.get(fingerprint)
        if check is None:
            check = self._checks[fingerprint] = SpotCheck(self, fingerprint, self.policy)
        return check

    def mark_stale(self, fingerprint: str, spare: set[str] | frozenset[str] = frozenset()) -> int:
        """Marks the table's entries stale (re-measured when next used), but ``spare`` and the calibration; returns how many."""
        marked = 0
        for key in self.table(fingerprint):
            if key in spare or key.startswith(CALIBRATION):
                continue
            entry = self._meta[fingerprint].setdefault(key, CostEntry())
            entry.state = STALE
            marked += 1
        self._dirty = self._dirty or marked > 0
        return marked

    def summary(self) -> dict[str, int]:
        return {fp: len(table) for fp, table in self._data.items()}

    def health(self, fingerprint: str, worst: int = 5) -> dict[str, Any]:
        """A table's entries, how many were spot-checked, are suspect or stale, and the ``worst`` disagreements (of entries whose last check disagreed)."""
        table, meta = self.table(fingerprint), self._meta[fingerprint]
        measured = [key for key in table if not key.startswith(CALIBRATION)]
        known = [meta[key] for key in measured if key in meta]
        states = Counter(entry.state for entry in known)
        found = sorted(((key, entry.disagreement) for key, entry in meta.items() if entry.state in (FIXED, SUSPECT) and entry.disagreement),
                       key=lambda item: -abs(item[1][0] - item[1][1]) / item[1][2])
        dates = [entry.measured_at for entry in known if entry.measured_at is not None]
        return {
            "entries": len(table), "spot_checked": sum(entry.checked_at is not None for entry in known),
            "suspect": states[SUSPECT], "stale": states[STALE], "fixed": states[FIXED],
            "without_band": sum(key not in meta or meta[key].band is None for key in measured),
            "oldest_measurement": min(dates) if dates else None,
            "worst": [{"key": key, "cached": cached, "fresh": fresh, "band": allowed, "state": meta[key].state}
                      for key, (cached, fresh, allowed) in found[:worst]],
        }

    def report(self, worst: int = 5) -> dict[str, Any]:
        """What ``taso info --costs`` shows: the file, entries per fingerprint and each table's health."""
        report: dict[str, Any] = {"path": self.path, "tables": self.summary(),
                                  "health": {fp: self.health(fp, worst) for fp in self._data}}
        if self.problem:
            report["problem"] = self.problem
        return report

    def save(self) -> None:
        if not self._dirty:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.tmp-{os.getpid()}"
        data = {fp: {key: self._entry_json(fp, key, seconds) for key, seconds in table.items()} for fp, table in self._data.items()}
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=0, sort_keys=True)
        os.replace(tmp, self.path)
        self._dirty = False

    def _entry_json(self, fingerprint: str, key: str, seconds: float) -> float | dict[str, Any]:
        entry = self.entry(fingerprint, key)
        return seconds if entry is None else entry.to_json(seconds)


def format_cost_report(report: Mapping[str, Any]) -> str:
    """``taso info --costs`` as text: per fingerprint, its entries, spot-checks, suspect and stale entries and worst disagreements."""
    lines = [f"cost cache {report['path']}"]
    if report.get("problem"):
        lines.append(f"  the file was damaged: {report['problem']}")
    for fingerprint, count in report["tables"].items():
        lines.append(f"  {count:>6} entries  {fingerprint}")
        health = report["health"][fingerprint]
        if health["oldest_measurement"] is not None:
            lines.append(f"         oldest measured {time.strftime('%Y-%m-%d', time.localtime(health['oldest_measurement']))}")
        lines.append(f"         {health['spot_checked']} spot-checked, {health['suspect']} suspect, {health['stale']} stale, "
                     f"{health['fixed']} fixed by a check, {health['without_band']} without a noise band "
                     "(written by an older version, or not per-node costs)")
        if health["worst"]:
            lines.append("         worst disagreements with a fresh measurement:")
            lines.extend(f"           {_comparison(w['cached'], w['fresh'], w['band'], w['state'], w['key'])}" for w in health["worst"])
    if not report["tables"]:
        lines.append("  (empty)")
    return "\n".join(lines)


def _comparison(cached: float, fresh: float, band: float, state: str, key: str) -> str:
    return f"{_seconds(cached):>9} cached  {_seconds(fresh):>9} fresh  band ±{_seconds(band):<9}  {state:<7}  {key}"


def _seconds(value: float) -> str:
    """Seconds for people: in us or ms, the units operator costs come in."""
    return f"{value * 1e6:.1f} us" if abs(value) < 1e-3 else f"{value * 1e3:.2f} ms"


COST_MODELS = ("ort-cpu", "ort-cpu-region", "analytic", "cupy")


def make_cost_model(name: str, threads: int = 1, cache: CostCache | None = None, **options: Mapping) -> CostModel:
    """The cost model called ``name`` ('ort-cpu', 'ort-cpu-region', 'analytic' or 'cupy').

    Raises:
        TasoError: an unknown name, or a model whose runtime is not available here.
    """
    if name == "analytic":
        return AnalyticCost()
    if name == "ort-cpu":
        from .cost_ort import OrtCpuCost

        return OrtCpuCost(threads=threads, cache=cache)
    if name == "ort-cpu-region":
        from .cost_ort import OrtCpuCost
        from .cost_region import RegionCost

        return RegionCost(OrtCpuCost(threads=threads, cache=cache))
    if name == "cupy":
        try:
            from .cost_cupy import CupyCost
        except ImportError as e:
            raise TasoError(f"the cupy cost model needs a GPU and CuPy (pip install 'taso[gpu]' for CUDA 13, 'taso[gpu-cuda12]' for CUDA 12): {e}") from None
        return CupyCost(cache=cache)
    raise TasoError(f"unknown cost model {name!r}; choose one of {', '.join(COST_MODELS)}")


def _random_array(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    if t.dtype.startswith("float"):
        return rng.standard_normal(t.shape).astype(t.dtype)
    if t.dtype == "bool":
        return rng.integers(0, 2, t.shape).astype(bool)
    return np.zeros(t.shape, t.dtype)
