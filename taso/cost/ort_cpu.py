"""Operator costs measured on ONNX Runtime (CPU), with the deployment's session options.

Each node is exported alone (its constant inputs as initializers, so ONNX Runtime may
pre-pack weights and fuse a fused activation exactly as it does in the full model) and run
repeatedly with ONNX Runtime's profiler on: its kernel times are measured inside the
session, so a microsecond-sized operator is not buried under the ~15 us of calling a
session from Python (subtracting that overhead from wall-clock timings gave a 512-wide Add
19 us and a 1024-wide Sigmoid 0.3 us, and NasRNN's search chased those numbers). The cost of
a trivial node inside a running graph is measured once and added per node.

Costs cached over days on a shared machine were taken under different loads, and a search
that compares a node timed on a quiet machine with one timed on a busy one chases noise (a
1.5x "gain" on VGG-19 from fusing ReLUs, measured 0.96x end to end). So every run also
executes a fixed reference kernel beside the node, and the cache stores the node's time
rescaled to the reference's speed when the table was started: costs stay comparable
whatever the load was when each one was taken.

Each entry also keeps its noise band (the spread of the runs it came from) and when it was
measured, and is not trusted forever: a search re-measures a small sample of the entries it
takes from the cache, replaces one that disagrees beyond the band, and treats the whole table
as stale when much of the sample disagrees (see :class:`taso.cost.cache.SpotCheckPolicy`).
``taso info --costs --check N`` re-measures N entries from their keys alone
(:func:`check_cached_costs`), before figures are quoted.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import os
import platform
import random
import re
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from ..errors import TasoError
from ..ir import Graph, GraphMeta, Node, Params, TensorType
from ..ops import ACTIVATION_OPS, HAS_ACTIVATION, get
from ..measure.timing import median_run, open_session, session_options
from .cache import (BAND_FLOOR, CALIBRATION, STALE, SUSPECT, CostCache, Measure, SpotCheck, SpotCheckPolicy, noise_band)
from ..onnx.exporter import gemm_pairs
from ..onnx.sizing import declared_only
from .copies import (COPIES, WALL_CLOCK_ROUNDS, WALL_CLOCK_RUN_SECONDS, WallReference, append_copy, cold_read_penalty,
                     interquartile_range, negations, wall_clock_marginal)
from .declared import declared_shape_seconds
from .in_place import IN_PLACE_BYTES, InPlaceWeights, in_place_session
from .model import CostModel, Neighbourhood, node_key
from ..measure.inputs import random_array
from .residency import CacheSizes, WeightReads, graph_run_order, main_weight
from .wake import SPLITS, splits_over_threads, wake_seconds

__all__ = ["OrtCpuCost", "cpu_name", "fingerprint", "profile_kernels", "check_cached_costs", "split_gathers", "gather_siblings"]


# Measuring a node with this many bytes of tensors or more tells how measuring time grows with size.
_RATE_MIN_BYTES = 1 << 24
_FIRST_SECONDS_PER_BYTE = 2e-9  # 0.5 GB/s until a large node was measured


def _tensor_bytes(node: Node, graph: Graph) -> int:
    """The bytes of a node's inputs and outputs at the measurement sizes (what measuring it allocates and fills)."""
    try:
        return sum(graph.type(v).concrete().nbytes for v in (*node.inputs, *node.outputs))
    except Exception:  # noqa: BLE001 - a value the graph does not type (a fused activation priced apart)
        return 0


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(threads: int = 1) -> str:
    """The cache table of this machine, ONNX Runtime build and thread count."""
    spinning = "|spinning-within-runs|copies-after-a-split-product|wake-per-run" if threads > 1 else ""  # see taso.measure.timing.session_options
    wall = f"under-{round(wall_clock_below(threads) * 1e6)}us-by-wall-clock"
    return f"ort-cpu|{cpu_name()}|onnxruntime {ort.__version__}|threads={threads}{spinning}|ENABLE_ALL|profiled|floor-per-run|warm-copy|{wall}|no-layout-reorders"


class OrtCpuCost(CostModel):
    """Costs measured on ONNX Runtime's CPU provider, cached per hardware fingerprint.

    Args:
        threads: intra-op threads, as the model will be deployed.
        cache: the on-disk cache (default ``CostCache()``).
    """

    name = "ort-cpu"
    # ONNX Runtime folds a BatchNormalization into the Conv before it, fuses a Conv with the activation after it
    # (after the folded BatchNormalization too), and a 2-D MatMul with its bias Add (into a Gemm): the absorbed node
    # runs inside the other's kernel (see absorbed()).
    absorbers = frozenset(("conv2d", "matmul", "batch_norm"))
    context_sensitive = True
    order_sensitive = True  # a weight read's penalty depends on what runs between its reads

    def __init__(self, threads: int = 1, cache: CostCache | None = None):
        super().__init__()
        self.threads = threads
        self.cache = cache or CostCache()
        self._fingerprint = fingerprint(threads)
        self._table = self.cache.table(self._fingerprint)
        self._rng = np.random.default_rng(0)
        self._unit: float | None = None  # the reference kernel's seconds when this table was started
        self._dispatch = 0.0  # what a trivial node costs inside a running graph
        self.measured = 0  # nodes measured: new entries, and cached ones no longer trusted
        self._seconds_per_byte = 0.0  # the slowest measuring seen, per byte of a node's tensors
        self.caches = CacheSizes.of_this_machine()
        self._penalties: dict[tuple[int, int], tuple[Node, float]] = {}  # (id(node), eviction bytes) -> (node, seconds)
        self._reads: dict[int, tuple] = {}  # id(graph) -> (graph, its weight reads, their penalties, node positions)
        self._wall: WallReference | None = None  # timed beside the wall-clock measurements (copies)
        self._last_splits = False  # whether the node fresh() last profiled split its kernel over the threads
        self._splitting: dict[int, tuple[Graph, int]] = {}  # id(graph) -> (graph, how many of its nodes split)

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def _calibrate(self) -> None:
        """The table's unit (the reference kernel's speed) and the in-graph cost of a trivial node."""
        if self._unit is not None:
            return
        keys = (f"{CALIBRATION}unit", f"{CALIBRATION}dispatch")
        if all(k in self._table for k in keys):
            self._unit, self._dispatch = (self._table[k] for k in keys)
            return
        self._unit = _robust_mean(profile_kernels(negations(1), {"x": np.ones(1, np.float32)}, self.threads).reference)
        # NOTE: wall clock, not the profiler: a node's in-graph cost outside its kernel is what we add back.
        one, many = (median_run(open_session(negations(n), self.threads, optimize=False), {"x": np.ones(1, np.float32)}, min_seconds=0.05)
                     for n in (1, 65))
        self._dispatch = max((many - one) / 64, 0.0)
        for key, value in zip(keys, (self._unit, self._dispatch)):
            self.cache.record(self._fingerprint, key, value)

    def wall_reference(self) -> WallReference:
        """The reference the wall-clock measurements are rescaled by, at its speed when first used with this table
        (an entry of its own: tables started before it keep their unit and dispatch)."""
        if self._wall is None:
            key = f"{CALIBRATION}wall-reference"
            self._wall = WallReference(self.threads, self._table.get(key))
            if self._wall.calibrated is None:
                self.cache.record(self._fingerprint, key, self._wall.calibrate())
        return self._wall

    def input_overhead(self, model: onnx.ModelProto) -> float:
        """The values only the file's ``value_info`` lets ONNX Runtime size (:func:`taso.onnx.sizing.declared_only`), at
        what a declared shape costs a value on this machine (:func:`taso.cost.declared.declared_shape_seconds`, measured
        once per table): a GRU h128 over 64 steps from the dynamo exporter declares 768 of them, at 0.06 us each."""
        values = declared_only(model)
        return values * self.declared_shape_price() if values else 0.0

    def declared_shape_price(self) -> float:
        """What declaring a value's shape adds to it on this machine (seconds), from the table or measured into it."""
        key = f"{CALIBRATION}declared-shape"
        if key not in self._table:
            self.cache.record(self._fingerprint, key, declared_shape_seconds(self.threads, self.wall_reference()))
        return self._table[key]

    def time_model(self, model: bytes, feeds: dict) -> float:
        """Kernel seconds of one run of ``model``, rescaled to the reference's speed when the table was started."""
        profile = profile_kernels(model, feeds, self.threads)
        return _robust_mean([k / r for k, r in zip(profile.kernels, profile.reference)]) * self._unit

    def measure(self, node: Node, graph: Graph, key: str, consts) -> float:
        if node.op.name in HAS_ACTIVATION and node.params["activation"] != "none":
            return self._with_activation(node, graph, consts)
        cached = self._table.get(key)
        if cached is not None:
            seconds = self._from_cache(key, cached, node, graph, consts)
        elif time.perf_counter() + self._expected_measuring(node, graph) > self.deadline:
            return self.estimate(node, graph, key, consts)  # a cold cache must not overrun the search's time limit
        else:
            started = time.perf_counter()
            seconds, band = self.fresh(node, graph, consts)
            self._note_measuring(node, graph, time.perf_counter() - started)
            self.cache.record(self._fingerprint, key, seconds, band)
            if self.threads > 1:
                self.cache.record(self._fingerprint, key + SPLITS, 1.0 if self._last_splits else 0.0)
            self.measured += 1
        self.calibrate_estimates(node, graph, key, consts, seconds)
        return seconds

    def _expected_measuring(self, node: Node, graph: Graph) -> float:
        """About how long measuring ``node`` would take: exporting, loading and filling its tensors grows with their
        bytes (a 1 GB weight takes seconds), at the slowest rate seen in this process, or 0.5 GB/s at first."""
        if self.deadline == float("inf"):
            return 0.0
        return _SESSION_SECONDS + _tensor_bytes(node, graph) * max(self._seconds_per_byte, _FIRST_SECONDS_PER_BYTE)

    def _note_measuring(self, node: Node, graph: Graph, seconds: float) -> None:
        size = _tensor_bytes(node, graph)
        if size >= _RATE_MIN_BYTES:
            self._seconds_per_byte = max(self._seconds_per_byte, (seconds - _SESSION_SECONDS) / size)

    def _from_cache(self, key: str, cached: float, node: Node, graph: Graph, consts) -> float:
        """A cached entry, re-measured instead when the cache no longer trusts it, compared with a fresh measurement when the spot-check draws it.

        An untrusted entry is re-measured only while the search's time allows, as a missing one is; past that its cached
        value is still the best guess (a stale table once made a 1 s extraction re-measure for 22 s).
        """
        check = self.cache.spot_check(self._fingerprint)
        entry = self.cache.entry(self._fingerprint, key)
        fresh: Measure = functools.partial(self.fresh, node, graph, consts)
        if entry is not None and not entry.trusted:
            if time.perf_counter() + self._expected_measuring(node, graph) > self.deadline:
                return cached
            self.measured += 1
            return check.remeasure(key, cached, fresh)
        if check.wants(key, self._check_seconds(cached)):
            return check.verify(key, cached, fresh).value
        return cached

    def _check_seconds(self, cached: float) -> float:
        """About what screening an entry of ``cached`` seconds takes (profile_kernels: a session, 3 warm-up runs, then 7 runs or 5 ms)."""
        per_run = 2 * cached + (self._unit or 0.0)  # the node runs twice (profile_kernels' warm copy), the reference beside it
        profiled = _SESSION_SECONDS + 3 * per_run + max(7 * per_run, QUICK_SECONDS)
        return profiled + (_wall_clock_seconds(cached) if cached < wall_clock_below(self.threads) else 0.0)

    def fresh(self, node: Node, graph: Graph, consts, quick: bool = False) -> tuple[float, float]:
        """Measures a node now, whatever the cache holds: (seconds, relative noise band); ``quick``: runs for 5 ms, not 20 (a spot-check's screen)."""
        self._calibrate()
        self._last_splits = False
        try:
            model, feeds, in_place = self._single_model(node, graph, consts)
            profile = profile_kernels(model, feeds, self.threads, min_total=QUICK_SECONDS if quick else FULL_SECONDS, warm=True,
                                      in_place=in_place)
        except Exception:  # noqa: BLE001 - ONNX Runtime's own exception types; only an opaque node may fail here
            if node.op.name != "opaque":
                raise
            # An opaque node taso never rewrites may not run alone on random values (silero-vad's If:
            # a random sample rate takes the branch that cannot run at the fixed length); it costs
            # the same in every candidate, so the in-graph cost of a node stands for it.
            return self._dispatch, BAND_FLOOR
        self._last_splits = profile.splits
        # Each run's floor is subtracted before the run is rescaled: the profiler's time for a kernel that does
        # nothing moves from session to session (2-4 us at 1 thread, 4-8 us at 2), and it is in every kernel's time.
        ratios = [(k - f) / r for k, f, r in zip(profile.kernels, profile.floor, profile.reference)]
        seconds = max(_robust_mean(ratios) * self._unit, 0.0) + self._dispatch
        if seconds < wall_clock_below(self.threads):
            timed = functools.partial(wall_clock_marginal, model, feeds, self.threads, in_place, self.wall_reference(),
                                      copies_for(seconds))
            return steadier(timed)
        return seconds, noise_band(seconds, interquartile_range(ratios) * self._unit)

    def _single_model(self, node: Node, graph: Graph, consts) -> tuple[bytes, dict[str, np.ndarray], InPlaceWeights]:
        """``node`` alone as an ONNX model (its constant inputs as initializers, the large ones handed to ONNX Runtime in
        place: :mod:`taso.cost.in_place`) and random values for its other inputs."""
        inputs, weights = {}, {}
        for v in node.inputs:
            (weights if v in consts else inputs)[v] = graph.type(v).concrete()
        node = node.concrete()  # measured at the measurement sizes: a one-node model has no value to take a symbol's size from
        # A weight keeps its value: a shape operand (Resize sizes, OneHot depth) filled at random is another kernel, or none.
        arrays = {v: graph.weights[v] if v in graph.weights else random_array(t, self._rng) for v, t in {**inputs, **weights}.items()}
        single = Graph(inputs, {v: arrays[v] for v in weights}, [node], list(node.outputs),
                       meta=GraphMeta(opset=max(graph.meta.opset, 13), output_names=tuple(node.outputs)))
        from ..onnx import export_onnx

        in_place = InPlaceWeights()
        return export_onnx(single, check=False, weights_file=in_place).SerializeToString(), {v: arrays[v] for v in inputs}, in_place

    def _with_activation(self, node: Node, graph: Graph, consts) -> float:
        """A Conv or MatMul with a fused activation costs the plain op, plus the activation where ONNX Runtime runs it apart.

        Priced from the same plain-op entry as the unfused form, so that fusing an
        activation is a gain only where the runtime would not fuse it anyway (MatMul + Relu):
        a Conv timed alone under one load and timed with its ReLU under another must not make
        the search "find" conv+ReLU fusions (1.60x predicted on SqueezeNet, 0.99x measured).
        """
        cost = self.node_cost(_plain(node), graph, consts)
        if node.op.name == "conv2d":
            return cost  # FusedConv: the activation runs in the convolution's epilogue
        activation = get(node.params["activation"])
        alone = Node(activation, activation.make_params(), (node.outputs[0],), (f"{node.outputs[0]}~activation",), node.name)
        return cost + self.node_cost(alone, graph, consts)

    def absorbed(self, node: Node, around: Neighbourhood) -> bool:
        """:func:`ort_absorbs`."""
        return ort_absorbs(node, around)

    def shared_price(self, node: Node, around: Neighbourhood) -> float | None:
        """A Gather that ONNX Runtime makes one Split with its siblings (:func:`split_gathers`) costs its share of that
        Split, and the Squeeze after its part where its index is a scalar: an unrolled cell's per-step Gathers of its
        input run so (a GRU h128x64's 64 came to 23 us priced as Gathers, 59 us so)."""
        group = split_gathers(node, around) if node.op.name == "gather" else None
        return None if group is None else self._split_share(node, len(group), around)

    def _split_share(self, gather: Node, parts: int, around: Neighbourhood) -> float:
        """A Split of the Gather's data into ``parts`` along its axis, over ``parts``; plus, for a scalar index, the
        Squeeze of a part, priced as the same copy the other way (a Reshape of the Gather's output to the part)."""
        data = around.type(gather.inputs[0])
        axis, scalar = gather.params["axis"] % data.rank, around.type(gather.inputs[1]).rank == 0
        key = (data, axis, parts, scalar)
        if key not in self._shared:
            split = Node(get("split"), get("split").make_params(axis=axis, sizes=(1,) * parts), ("data",),
                         tuple(f"part{i}" for i in range(parts)), gather.name)
            share = self.node_cost(split, Graph({"data": data}, {}, [split], list(split.outputs))) / parts
            estimated = self._estimate_used
            if scalar:
                part = data.shape[:axis] + (1,) + data.shape[axis + 1:]
                squeeze = Node(get("reshape"), get("reshape").make_params(shape=part), ("gathered",), ("part",), gather.name)
                share += self.node_cost(squeeze, Graph({"gathered": around.type(gather.outputs[0])}, {}, [squeeze], ["part"]))
            if estimated or self._estimate_used:
                return share  # an estimate past the deadline is not remembered
            self._shared[key] = share
        return self._shared[key]

    def fusion_neighbours(self, parent: Graph, before: Neighbourhood, after: Neighbourhood, removed, added) -> dict[int, Node]:
        """Also the parts of each GELU near the rewrite (a rewrite that takes one part away unfuses the others), and
        the Gathers that read what a Gather the rewrite removes or adds reads."""
        neighbours = super().fusion_neighbours(parent, before, after, removed, added)
        gone = {id(n) for n in removed}

        def kept(n: Node) -> bool:  # a node of the parent the rewrite leaves in place
            return id(n) not in gone and parent.producer(n.outputs[0]) is n

        neighbours.update(gather_siblings(parent, removed, added))
        erfs = {id(erf): erf for node in (*removed, *added) if node.op.name in _GELU_OPS
                for erf in _erfs_near(node, before if id(node) in gone else after) if kept(erf)}
        for erf in erfs.values():
            neighbours[id(erf)] = erf
            for near in (before, after):
                neighbours.update({id(n): n for n in gelu_parts(erf, near) or () if kept(n)})
        return neighbours

    # -- where each weight lives when its node runs (taso.cost.residency) --

    def graph_cost(self, graph: Graph) -> float:
        """The nodes' warm prices, plus what reading each weight costs after the other weights read since its last read,
        plus, with more than one thread, the run's wake-up where a kernel splits over the threads (:mod:`taso.cost.wake`)."""
        return super().graph_cost(graph) + self._parent_reads(graph)[1] + self._wake_if(self._splitting_nodes(graph))

    def rewrite_cost(self, parent: Graph, parent_cost: float, removed, added, child) -> float:
        """As the per-node delta; a rewrite that changes which weights are read, or how often, also re-prices every
        weight read it moves closer or further (a group merge puts the recurrent weight back in L2 for every step).

        The reads keep the parent's run order (see ``taso.cost.residency``): a rewrite that moves no weight read
        but changes the order ONNX Runtime walks the graph in is priced as the parent; the search prices the graphs it
        builds by graph_cost, in their own order."""
        cost = super().rewrite_cost(parent, parent_cost, removed, added, child)
        after = None
        if self.threads > 1:
            before = self._splitting_nodes(parent)
            left = before - self._count_splitting(removed, parent, parent.constant_values())
            if left <= 0:  # whether the child splits anything rests on what the rewrite adds
                after = Neighbourhood.after(parent, removed, added, child)
                left += self._count_splitting(added, after.pricing, after.consts)
            cost += self._wake_if(left) - self._wake_if(before)
        if not self._moves_reads(parent, removed, added):
            return cost
        if after is None:
            after = Neighbourhood.after(parent, removed, added, child)
        reads = self.child_reads(parent, removed, added, after)
        if reads is None:
            return cost
        return cost + self._read_penalties(reads, after.pricing, after.consts) - self._parent_reads(parent)[1]

    # -- the run's wake-up (taso.cost.wake) --

    def wake(self) -> float:
        """What a run pays at its first kernel split over the threads, from the table or measured into it; 0 at 1 thread."""
        if self.threads <= 1:
            return 0.0
        key = f"{CALIBRATION}wake"
        if key not in self._table:
            self.cache.record(self._fingerprint, key, wake_seconds(self.threads, self.wall_reference()))
        return self._table[key]

    def _wake_if(self, splitting: int) -> float:
        return self.wake() if splitting > 0 else 0.0

    def _splitting_nodes(self, graph: Graph) -> int:
        """How many of the graph's running nodes split their kernel over the threads (kept for the graphs the search expands)."""
        if self.threads <= 1:
            return 0
        hit = self._splitting.get(id(graph))
        if hit is not None and hit[0] is graph:
            return hit[1]
        count = self._count_splitting(graph.nodes, graph, graph.constant_values())
        if len(self._splitting) >= 64:
            self._splitting.clear()
        self._splitting[id(graph)] = (graph, count)
        return count

    def _count_splitting(self, nodes, graph, consts) -> int:
        """How many of ``nodes`` (running in ``graph``, a graph or a search's plan of one) the table says split their kernel over the threads."""
        count = 0
        for node in nodes:
            if self._runs(node, consts):
                count += self._table.get(node_key(_plain(node), graph, consts) + SPLITS, 0.0) > 0.5
        return count

    @staticmethod
    def _moves_reads(parent: Graph, removed, added) -> bool:
        """Whether a node that reads a weight may come or go, or one that makes a new weight (from weights, or from nothing)."""
        consts = parent.constant_values()
        return not all(n.inputs for n in added) or any(v in consts for n in (*removed, *added) for v in n.inputs)

    def child_reads(self, parent: Graph, removed, added, after: Neighbourhood) -> WeightReads | None:
        """The child's weight reads in the order they are priced in: the parent's, the reads the rewrite adds where
        the first node it removes ran; None when no weight read comes or goes."""
        before_consts = parent.constant_values()
        gone = [n for n in removed if self._runs(n, before_consts) and self._weight_of(n, parent, before_consts)]
        new = [(n, w, self._nbytes(w, after)) for n in added
               if self._runs(n, after.consts) and (w := self._weight_of(n, after, after.consts))]
        if not gone and not new:
            return None
        reads, _, position = self._parent_reads(parent)
        at = min((position[id(n)] for n in removed if id(n) in position), default=len(position))
        return reads.changed(gone, new, at)

    @staticmethod
    def _runs(node: Node, consts) -> bool:
        return not all(o in consts for o in node.outputs)

    @staticmethod
    def _nbytes(value: str, graph) -> int:
        return graph.type(value).concrete().nbytes

    def _weight_of(self, node: Node, graph, consts) -> str | None:
        return main_weight(node, consts.__contains__, lambda v: self._nbytes(v, graph), self.caches.l1)

    def _parent_reads(self, graph: Graph) -> tuple[WeightReads, float, dict[int, int]]:
        """A graph's weight reads in ONNX Runtime's order, their penalties, and each running node's place in that order;
        kept for the graphs the search expands (each is a parent many times)."""
        hit = self._reads.get(id(graph))
        if hit is not None and hit[0] is graph:
            return hit[1:]
        consts = graph.constant_values()
        order = graph_run_order(graph, fusion_pass(graph))
        position = {id(n): i for i, n in enumerate(order)}
        reads = WeightReads.of((i, n, w, self._nbytes(w, graph)) for i, n in enumerate(order) if (w := self._weight_of(n, graph, consts)))
        penalties = self._read_penalties(reads, graph, consts)
        if len(self._reads) >= 64:
            self._reads.clear()
        self._reads[id(graph)] = (graph, reads, penalties, position)
        return reads, penalties, position

    def _read_penalties(self, reads: WeightReads, graph, consts) -> float:
        return sum(penalty for _, penalty in self._penalised_reads(reads, graph, consts))

    def _penalised_reads(self, reads: WeightReads, graph, consts) -> Iterator[tuple[Node, float]]:
        """Each read whose weight the reads since its last were large enough to evict, with its penalty."""
        times = Counter(reads.weights)
        for node, weight, between in zip(reads.nodes, reads.weights, reads.distances()):
            evicted = self.caches.eviction(reads.bytes[weight], between, self.threads, again=times[weight] > 1)
            if evicted:
                yield node, self.read_penalty(node, graph, consts, evicted)

    def surcharges(self, graph: Graph) -> dict[int, float]:
        """Each node's weight-read penalties in ``graph`` (what :meth:`graph_cost` adds to the nodes' warm prices)."""
        found: dict[int, float] = {}
        for node, penalty in self._penalised_reads(self._parent_reads(graph)[0], graph, graph.constant_values()):
            found[id(node)] = found.get(id(node), 0.0) + penalty
        return found

    def read_penalty(self, node: Node, graph, consts, evicted: int) -> float:
        """What ``node`` costs beyond its price when ``evicted`` bytes passed through the caches since it last ran:
        measured once per key and size (:meth:`cold_penalty`)."""
        hit = self._penalties.get((id(node), evicted))
        if hit is not None and hit[0] is node:
            return hit[1]
        cycle = self._cycle(node, graph, consts, evicted)
        suffix = f"{_CYCLE_PENALTY_KEY}-{cycle}" if cycle else f"{_PENALTY_KEY}-{evicted >> 10}K"
        key = f"{node_key(node, graph, consts)}@{suffix}"
        seconds = self._table.get(key)
        if seconds is None:
            if time.perf_counter() + _PENALTY_PAIRS * self._expected_measuring(node, graph) > self.deadline:
                self.estimated += 1
                return 0.0  # past the time limit: priced warm, not remembered
            seconds, band = self.cold_penalty(node, graph, consts, evicted, cycle)
            self.cache.record(self._fingerprint, key, seconds, band)
            self.measured += 1
        self._penalties[(id(node), evicted)] = (node, seconds)
        return seconds

    def _cycle(self, node: Node, graph, consts, evicted: int) -> int | None:
        """How many weights of the node's main weight's size, read in turn, stand for ``evicted`` bytes between its reads
        (:meth:`CacheSizes.cycle`); None for a weight handed to ONNX Runtime in place (too large to copy)."""
        weight = self._weight_of(node, graph, consts)
        own = self._nbytes(weight, graph) if weight is not None else 0
        return self.caches.cycle(own, evicted, self.threads) if own < IN_PLACE_BYTES else None

    def cold_penalty(self, node: Node, graph, consts, evicted: int, cycle: int | None = None) -> tuple[float, float]:
        """Measures now what ``evicted`` bytes streamed through the caches add to ``node``'s kernel: (seconds, noise band).

        With ``cycle``, by the wall clock: copies of the node cycling over that many weights of its own against copies
        reading one (:func:`taso.cost.copies.cold_read_penalty`), which a graph of products read in turn takes
        (an unrolled GRU h256: 16.8 us a read where the profiled pairs below measured 10.4). Otherwise the median over
        ``_PENALTY_PAIRS`` pairs of sessions, each profiling the node after products over ``evicted`` bytes of weights.

        Each pair compares one session's evicting runs with another's resting runs, and two sessions of a millisecond
        product differ by more than its penalty: one pair's figure for BERT's [1, 64, 1024] x [1024, 4096] product was
        0, 492, 0 and 2004 us in four tries (``benchmarks/bench_penalty_noise.py``)."""
        try:
            model, feeds, in_place = self._single_model(node, graph, consts)
            if cycle:
                cycled = cold_read_penalty(model, feeds, self.threads, self._weight_of(node, graph, consts), cycle, in_place,
                                           self.wall_reference())
                if cycled is not None:
                    return cycled
            pairs = [profile_cold_penalty(model, feeds, self.threads, evicted, in_place=in_place) for _ in range(_PENALTY_PAIRS)]
        except Exception:  # noqa: BLE001 - as in fresh(): an opaque node that cannot run alone is priced warm
            if node.op.name != "opaque":
                raise
            pairs = []
        pairs = [deltas for deltas in pairs if deltas]
        if not pairs:
            return 0.0, BAND_FLOOR
        seconds = statistics.median(max(_robust_mean(deltas), 0.0) for deltas in pairs)
        return seconds, noise_band(seconds, interquartile_range([d for deltas in pairs for d in deltas]))

    def close(self) -> None:
        self.cache.save()


def _plain(node: Node) -> Node:
    """The node without its fused activation: the op its table entry is measured as (``_with_activation``)."""
    if node.op.name not in HAS_ACTIVATION or node.params["activation"] == "none":
        return node
    return Node(node.op, node.params.replace(activation="none"), node.inputs, node.outputs, node.name)


def ort_absorbs(node: Node, around: Neighbourhood) -> bool:
    """ONNX Runtime's CPU fusions at ENABLE_ALL that a per-node price would miss.

    * a BatchNormalization of constant parameters after a Conv of constant weights without an
      activation: ConvBNFusion folds it into the Conv's weights;
    * an activation (Relu, Sigmoid, Tanh) after a Conv without one, or after a BatchNormalization
      folded so: FusedConv;
    * a bias Add after a MatMul of 2-D operands, the bias a constant row (shape ``[N]`` or
      ``[1, N]``): MatMulAddFusion makes them one Gemm;
    * the Div, Add and two Muls of an exact GELU around its Erf: GeluFusion makes them one
      Gelu kernel, priced as the Erf (:func:`gelu_parts`).

    Each only when the producer's output has no other reader and is not a graph output.
    A rewrite that gives the producer a second reader, or puts a Split between the two,
    pays for the absorbed node again: the +2.7 us per merged step that kept unrolled
    LSTM exports' merges from paying, priced as zero before.
    """
    name = node.op.name
    if name == "batch_norm":
        return _folded_into_conv(node, around)
    if name in _GELU_OPS and name != "erf" and _in_gelu(node, around):
        return True
    if name in ACTIVATION_OPS:
        data = node.inputs[0]
        producer = around.producer(data)
        if producer is None or not _sole_reader(node, data, around):
            return False
        if producer.op.name == "batch_norm":
            return _folded_into_conv(producer, around)
        return producer.op.name == "conv2d" and producer.params["activation"] == "none"
    if name == "add" and len(node.inputs) == 2:
        for data, bias in (node.inputs, node.inputs[::-1]):
            producer = around.producer(data)
            if (producer is not None and producer.op.name == "matmul" and producer.params["activation"] == "none"
                    and bias in around.consts and _bias_row(around.type(bias).shape, around.type(data).shape)
                    and all(around.type(v).rank == 2 for v in producer.inputs) and _sole_reader(node, data, around)):
                return True
    return False


def split_gathers(gather: Node, around: Neighbourhood) -> list[Node] | None:
    """The Gathers ONNX Runtime's GatherToSplitFusion runs as one Split with ``gather`` (then a Squeeze of each part where
    the indices are scalars), or None: Gathers of one value along one axis, each at a constant single index, one per
    position of that axis (which must be static), whatever else reads the value. Checked on ONNX Runtime 1.32: 3
    Gathers of a 4-long axis stay Gathers; 4 fuse, with another reader of the value or without, from a graph input or a
    node's output; an exporter's unrolled ``x[:, t]`` over all steps fuses so."""
    data = gather.inputs[0]
    rank = around.type(data).rank
    axis = gather.params["axis"] % rank if rank else 0
    size = around.type(data).shape[axis] if rank else None
    if type(size) is not int or size < 2:  # a symbolic size (a Dim) is not static: the fusion needs a fixed count
        return None
    group, seen = [], set()
    for reader in around.readers(data):
        if reader.op.name != "gather" or reader.inputs[0] != data or reader.params["axis"] % rank != axis:
            continue
        index = _single_index(reader, around)
        if index is None:
            return None
        seen.add(index % size)
        group.append(reader)
    return group if len(group) == size and len(seen) == size else None


def gather_siblings(parent: Graph, removed, added) -> dict[int, Node]:
    """The parent's Gathers, not removed, that read what a Gather a rewrite removes or adds reads: whether they run as
    one Split (:func:`split_gathers`) may change with it."""
    gone = {id(n) for n in removed}
    return {id(sibling): sibling for node in (*removed, *added) if node.op.name == "gather"
            for sibling, _ in parent.uses(node.inputs[0]) if sibling.op.name == "gather" and id(sibling) not in gone}


def _single_index(gather: Node, around: Neighbourhood) -> int | None:
    """A Gather's index where it is one constant int64 (a scalar or a one-element vector), else None."""
    index = gather.inputs[1]
    value = around.graph.weights.get(index) if index in around.consts else None
    if value is None or value.size != 1 or value.ndim > 1 or value.dtype != np.int64:  # the fusion takes int64 indices only
        return None
    return int(value.reshape(()))


def fusion_pass(graph: Graph) -> Callable[[Node], tuple[int, int]]:
    """For each node of ``graph``, which of ONNX Runtime's fusion passes replaces it by a new node (0: none), and the
    new node's place among those that pass makes (:func:`taso.cost.residency.run_order`).

    A product and its bias export writes as one Gemm stay where the file has them
    (:func:`taso.onnx.exporter.gemm_pairs`). Pass 1, MatMulAddFusion: another MatMul of 2-D operands and the Add
    that alone reads it become a Gemm (the addend any row or matrix of the product's shape); of two products an
    Add sums, the one ONNX Runtime's order reaches first. Pass 2: a Gemm, or a Conv (a BatchNormalization after it
    folded into its weights), and the activation that alone reads it become a FusedGemm or FusedConv. Each pass
    visits the nodes in the run order of the graph the pass before left. A new node is numbered after every node
    of the file and every node an earlier pass made, which changes the run order: in a recurrent cell, a step's
    recurrent product added to its input product runs before the input product that the file lists first."""
    around = Neighbourhood.of(graph)
    passes: dict[int, tuple[int, int]] = {}
    products: dict[int, Node] = gemm_pairs(graph, graph.meta.opset)  # an Add -> the MatMul it is one Gemm with
    for place, node in enumerate(graph_run_order(graph)):
        if node.op.name != "matmul" or node.params["activation"] != "none" or any(around.type(v).rank != 2 for v in node.inputs):
            continue
        readers = around.readers(node.outputs[0])
        add = readers[0] if len(readers) == 1 else None
        if add is None or add.op.name != "add" or len(add.inputs) != 2 or id(add) in products or not _sole_reader(add, node.outputs[0], around):
            continue
        addend = add.inputs[1] if add.inputs[0] == node.outputs[0] else add.inputs[0]
        if _broadcasts_to(around.type(addend).shape, around.type(node.outputs[0]).shape):
            passes[id(node)] = passes[id(add)] = (1, place)
            products[id(add)] = node
    after_first = graph_run_order(graph, lambda n: passes.get(id(n), (0, 0)))
    place_of = {id(n): i for i, n in enumerate(after_first)}
    for node in after_first:
        if node.op.name not in ACTIVATION_OPS:
            continue
        producer = around.producer(node.inputs[0])
        if producer is None or not _sole_reader(node, node.inputs[0], around):
            continue
        fused = [producer]
        if producer.op.name == "batch_norm" and _folded_into_conv(producer, around):
            fused.append(around.producer(producer.inputs[0]))
        if id(producer) in products:
            fused.append(products[id(producer)])
        elif fused[-1].op.name != "conv2d" or fused[-1].params["activation"] != "none":
            continue
        for n in (node, *fused):
            passes[id(n)] = (2, place_of[id(producer)])
    return lambda node: passes.get(id(node), (0, 0))


def _broadcasts_to(addend: tuple, shape: tuple) -> bool:
    """Whether a Gemm's C input of shape ``addend`` broadcasts to its output's ``shape`` (rank 2)."""
    return len(addend) <= 2 and all(a in (1, b) for a, b in zip(reversed(addend), reversed(shape)))


_GELU_OPS = frozenset(("div", "erf", "add", "mul", "scalar_mul"))


def gelu_parts(erf: Node, around: Neighbourhood) -> tuple[Node, ...] | None:
    """The five nodes of an exact GELU, ``x * 0.5 * (1 + erf(x / sqrt(2)))``, that ONNX Runtime's GeluFusion makes one
    Gelu kernel of, found from its Erf; None when they are not all there as the fusion needs them.

    Exporters write it x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5, or with x * 0.5 first; each intermediate value has
    one reader and is not a graph output. (Where the bias Add before it is not part of a Gemm, BiasGeluFusion takes it
    in too; that Add is still priced.) Priced node by node, the scale by 0.5 was a kernel
    a rule could save by moving it into the next product's weight: on BERT that broke all twelve fusions and the
    file measured 0.98x where 1.004x was predicted.
    """
    scale = around.producer(erf.inputs[0])
    if scale is None or not _sole_reader(erf, erf.inputs[0], around):
        return None
    if scale.op.name != "div" or not _constant_near(around, scale.inputs[1], math.sqrt(2.0)):
        return None  # x * (1 / sqrt(2)) is not fused (ONNX Runtime 1.2x's optimized graph keeps its five nodes)
    x = scale.inputs[0]
    add = _sole_reader_of(erf.outputs[0], around)
    if add is None or add.op.name != "add" or _other_than_constant(around, add, 1.0) != erf.outputs[0]:
        return None
    product = _sole_reader_of(add.outputs[0], around)
    if product is None or product.op.name != "mul" or add.outputs[0] not in product.inputs:
        return None
    other = product.inputs[1] if product.inputs[0] == add.outputs[0] else product.inputs[0]
    if other == x:  # x * (1 + erf) * 0.5
        half = _sole_reader_of(product.outputs[0], around)
        if half is not None and half.op.name in ("mul", "scalar_mul") and _other_than_constant(around, half, 0.5) == product.outputs[0]:
            return scale, erf, add, product, half
        return None
    half = around.producer(other)  # (x * 0.5) * (1 + erf)
    if (half is not None and half.op.name in ("mul", "scalar_mul") and _other_than_constant(around, half, 0.5) == x
            and _sole_reader(product, other, around)):
        return scale, erf, add, half, product
    return None


def _in_gelu(node: Node, around: Neighbourhood) -> bool:
    """Whether ``node`` is one of the GELU parts around an Erf near it (:func:`gelu_parts`)."""
    return any(node in parts for erf in _erfs_near(node, around) if (parts := gelu_parts(erf, around)) is not None)


def _erfs_near(node: Node, around: Neighbourhood) -> list[Node]:
    """The Erf nodes within the three steps a GELU part can be from its Erf, up or down the graph."""
    found, frontier, seen = [], [node], {id(node)}
    for _ in range(3):
        step = []
        for n in frontier:
            near = [around.producer(v) for v in n.inputs] + [r for v in n.outputs for r in around.readers(v)]
            for m in near:
                if m is not None and id(m) not in seen and m.op.name in _GELU_OPS:
                    seen.add(id(m))
                    step.append(m)
        found += [m for m in step if m.op.name == "erf"]
        frontier = step
    return found + ([node] if node.op.name == "erf" else [])


def _sole_reader_of(value: str, around: Neighbourhood) -> Node | None:
    readers = around.readers(value)
    return readers[0] if len(readers) == 1 and not around.is_output(value) else None


def _other_than_constant(around: Neighbourhood, node: Node, value: float) -> str | None:
    """The input of a binary node other than a one-element constant close to ``value``; None when neither is that."""
    if len(node.inputs) != 2:
        return None
    for constant, other in (node.inputs[::-1], node.inputs):
        if _constant_near(around, constant, value):
            return other
    return None


def _constant_near(around: Neighbourhood, value: str, target: float) -> bool:
    """Whether ``value`` is a one-element weight within 1e-4 of ``target`` (GeluFusion's own tolerance)."""
    for source in (around.graph, around.pricing):
        array = getattr(source, "weights", {}).get(value)
        if array is not None:
            return array.size == 1 and abs(float(np.asarray(array).ravel()[0]) - target) <= 1e-4
    return False


def _folded_into_conv(batch_norm: Node, around: Neighbourhood) -> bool:
    """ONNX Runtime's ConvBNFusion: a BatchNormalization of constant parameters, the sole reader of a Conv without an
    activation whose weights are constant, is folded into the Conv's weights."""
    data = batch_norm.inputs[0]
    conv = around.producer(data)
    return (conv is not None and conv.op.name == "conv2d" and conv.params["activation"] == "none"
            and all(v in around.consts for v in (*batch_norm.inputs[1:], *conv.inputs[1:])) and _sole_reader(batch_norm, data, around))


def _sole_reader(node: Node, value: str, around: Neighbourhood) -> bool:
    readers = around.readers(value)
    return len(readers) == 1 and readers[0] is node and not around.is_output(value)


def _bias_row(bias: tuple[int, ...], data: tuple[int, ...]) -> bool:
    """A bias Gemm takes as C: one value per output column, broadcast over the rows."""
    return bias in ((data[-1],), (1, data[-1]))


REFERENCE = "__taso_reference"
FLOOR = "__taso_floor"
_SESSION_SECONDS = 0.005  # exporting a node, building its session and reading its profile, beside its runs
FULL_SECONDS = 0.02  # a measurement's runs; a quick one (a spot-check's screen) runs a quarter of that
QUICK_SECONDS = 0.005
# A node profiled below this is timed again by the wall clock (wall_clock_marginal: copies of it against one), which
# is what it adds to a running graph: below a few us the profiler's ticks and its own ~5 us per kernel swamp it,
# and up to an L2-sized weight its bookkeeping between kernels costs the weight part of its residency (a 1 MB
# product: 24 us a step of a chain, 32 us profiled). Above, a node's run dwarfs both, and 33 copies would take long.
SMALL_SECONDS = 30e-6
# With more than one intra-op thread the profiler prices a product split over the threads above what it adds to a
# running graph. Without spinning (sessions 27-29): the per-step [1,512] x [512,1536] product of an unrolled GRU h512
# profiled at 70-77 us at 2 threads, 56-60 us by copies, and the graph paid about 58 a step. With the workers spinning
# within a run (taso.measure.timing.session_options, session 30) the profiled excess grew with the kernel: [64,256] x
# [256,1024] profiled at 310 us and took 180 by copies, [32,512] x [512,2048] 590 and 388, [64,512] x [512,2048]
# 1,117-1,148 and 725-743; the LSTM h256x64 graph that merged product saves in paid what copies say. Up to this
# bound every node is timed by copies; past it a node's run dwarfs the copies' budget (8 copies of 1 ms: 8 ms a run).
SMALL_SECONDS_THREADED = 1e-3


def wall_clock_below(threads: int) -> float:
    """The profiled price under which a node is timed again by the wall clock, at ``threads`` intra-op threads."""
    return SMALL_SECONDS if threads <= 1 else SMALL_SECONDS_THREADED


# A run of the copies lasts about this long: 33 copies of a 100 us node; fewer of a longer one (16 of a 200 us one),
# and never fewer than 8 (3 copies of [32,512] x [512,2048] took 439 us each, 8 and 16 of them 387-388).
_COPIES_SECONDS = COPIES * 100e-6
_FEWEST_COPIES = 8


def copies_for(seconds: float) -> int:
    """How many copies of a node profiled at ``seconds`` :func:`taso.cost.copies.wall_clock_marginal` times."""
    return max(_FEWEST_COPIES, min(COPIES, round(_COPIES_SECONDS / max(seconds, 1e-9))))


NOISY_BAND = 0.2  # a wall-clock measurement whose middle half spreads wider than this is taken again


def steadier(timed: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    """A wall-clock measurement, taken again when its rounds spread over more than :data:`NOISY_BAND`: of the two, the one
    whose rounds agree better. Copies of a merged product once came out at 1,384 us with a band of 0.27, where before
    and after they took 725-743 with 0.10."""
    first = timed()
    if first[1] <= NOISY_BAND:
        return first
    return min(first, timed(), key=lambda measured: measured[1])


def _wall_clock_seconds(seconds: float) -> float:
    """About what timing copies of a node of ``seconds`` takes: two sessions (one copy, and ``copies_for`` copies), each
    timed in every round for at least 3 runs and ``WALL_CLOCK_RUN_SECONDS``."""
    per_round = sum(max(WALL_CLOCK_RUN_SECONDS, 3 * copies * seconds) for copies in (1, copies_for(seconds)))
    return 2 * _SESSION_SECONDS + WALL_CLOCK_ROUNDS * per_round


@dataclass(frozen=True)
class KernelProfile:
    """Per run of a profiled session, seconds: in the model's own kernels, in the reference kernel beside them, and
    in the floor kernel (a Neg of one float: what the profiler reports for a kernel that does nothing, in that run)."""

    kernels: list[float]
    reference: list[float]
    floor: list[float]
    splits: bool = False  # whether the model's own kernels split their work over the threads (taso.cost.wake)


def profile_kernels(model: bytes, feeds: dict, threads: int, min_total: float = FULL_SECONDS, min_runs: int = 7,
                    max_runs: int = 400, warm: bool = False, in_place: InPlaceWeights | None = None) -> KernelProfile:
    """Profiles runs of ``model`` with a reference MatMul and a floor kernel beside it.

    ONNX Runtime's profiler times each kernel inside the session, so no Python call overhead
    has to be subtracted from microsecond-sized operators; the reference kernel (a 128x256 by
    256x256 MatMul added as an independent node) runs in the same session run, under the same
    machine load, and each run's kernel time is later divided by its reference time. The floor
    kernel runs there too: the profiler's own overhead in a kernel's time differs between
    sessions (a 1-float Neg took 2.0 us in one session and 4.0 in the next), so it is measured
    in each run, not once per machine. Runs go on until ``min_total`` seconds have passed: a few
    for a big kernel, hundreds for a microsecond one, whose profiled times come in whole microseconds.

    With ``warm``, each run runs the model twice, after the reference: the kernels timed are the
    second copy's, on the inputs and weights the first has just read. Timed alone after the
    reference, a 384x384 product on one row took 20 us; the same product took 10 us at each step
    of a chain that reads its weight again and again (``benchmarks/bench_small_nodes.py``). A
    weight's reads after other bytes passed through the caches are priced apart
    (``taso.cost.residency``). A model the copies cannot be ordered in (no computed input), or
    one whose copies ONNX Runtime fuses into a kernel of another name, is timed once.
    """
    proto = onnx.load_model_from_string(model)
    twice = _cold_then_warm(proto, after=f"{REFERENCE}_y") if warm else None
    timed = twice or proto
    _add_reference(timed.graph)
    _add_floor(timed.graph, after=f"{proto.graph.output[0].name}~warm" if twice else None)
    rng = np.random.default_rng(0)
    beside = {f"{REFERENCE}_x": rng.standard_normal((128, 256)).astype(np.float32), f"{FLOOR}_x": np.ones(1, np.float32)}
    events = _profiled_runs(timed, {**feeds, **beside}, threads, min_total, min_runs, max_runs, in_place=in_place)
    if twice is None:
        return _kernel_times(events, skip=_WARM_UP_RUNS)
    roles = (REFERENCE, FLOOR, WARM, COLD, EVICT)
    times = _role_times(events, _WARM_UP_RUNS, roles=roles)
    if any(times[_WORK]) or not any(times[WARM]):
        return profile_kernels(model, feeds, threads, min_total, min_runs, max_runs, in_place=in_place)
    return KernelProfile(times[WARM], times[REFERENCE], times[FLOOR], splits_over_threads(events, lambda name: _kernel_role(name, roles) == WARM))


def _kernel_times(events: list[dict], skip: int) -> KernelProfile:
    """The profiled kernel seconds of each session run (after ``skip`` warm-up runs): the model's, the reference's, the floor's."""
    times = _role_times(events, skip, roles=(REFERENCE, FLOOR))
    if not times[REFERENCE]:
        raise TasoError(f"the ort-cpu cost model found no timed runs in ONNX Runtime {ort.__version__}'s profile "
                        "(its profile format may have changed); use --cost analytic")
    return KernelProfile(*(times[role] for role in (_WORK, REFERENCE, FLOOR)),
                         splits_over_threads(events, lambda name: _kernel_role(name, (REFERENCE, FLOOR)) == _WORK))


_WARM_UP_RUNS = 3
_WORK = "work"  # a profiled kernel of the model itself, not one added beside it


def _profiled_runs(proto: onnx.ModelProto, feeds: dict, threads: int, min_total: float, min_runs: int, max_runs: int,
                   in_place: InPlaceWeights | None = None) -> list[dict]:
    """ONNX Runtime's profile events of ``_WARM_UP_RUNS`` runs, then runs until ``min_total`` seconds and ``min_runs`` runs."""
    options = session_options(threads)
    with tempfile.TemporaryDirectory() as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "profile")
        session = in_place_session(proto, options, in_place)
        for _ in range(_WARM_UP_RUNS):
            session.run(None, feeds)
        total, runs = 0.0, 0
        while (total < min_total or runs < min_runs) and runs < max_runs:
            start = time.perf_counter()
            session.run(None, feeds)
            total += time.perf_counter() - start
            runs += 1
        with open(session.end_profiling(), encoding="utf-8") as f:
            return json.load(f)


def _role_times(events: list[dict], skip: int, roles: tuple[str, ...]) -> dict[str, list[float]]:
    """Per session run (after ``skip`` warm-up runs), the seconds of the kernels whose node name starts with each
    of ``roles``, and of the rest (``_WORK``); runs in which the first role's kernel did not run are left out."""
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"][skip:]
    kernels = sorted((e["ts"], e["dur"], _kernel_role(e["name"], roles)) for e in events
                     if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
                     and e.get("args", {}).get("op_name") not in _LAYOUT_KERNELS)
    times: dict[str, list[float]] = {role: [] for role in (_WORK, *roles)}
    index = 0
    for start, end in windows:
        seconds = dict.fromkeys(times, 0.0)
        while index < len(kernels) and kernels[index][0] < start:
            index += 1
        while index < len(kernels) and kernels[index][0] <= end:
            _, dur, role = kernels[index]
            seconds[role] += dur * 1e-6
            index += 1
        if seconds[roles[0]] > 0:
            for role, value in seconds.items():
                times[role].append(value)
    return times


# The layout conversions ONNX Runtime puts around a convolution or pooling it runs in its blocked (NCHWc) layout. A
# node measured alone pays both; in a graph, consecutive convolutions and poolings stay blocked and pay none (a
# [1, 192, 35, 35] input's ReorderInput took 90 us beside a 1x1 convolution's 231 us: two sibling convolutions
# measured alone counted it twice, merged once, and the search bought 26 merges that measured 0.94x on Inception-v3).
_LAYOUT_KERNELS = frozenset({"ReorderInput", "ReorderOutput"})


def _kernel_role(name: str, roles: tuple[str, ...]) -> str:
    """Whose kernel a profile event times: the first of ``roles`` its node's name starts with, or the model's own."""
    for role in roles:
        if name.startswith(role):
            return role
    return _WORK


COLD = "__taso_cold/"
WARM = "__taso_warm/"
EVICT = "__taso_evict"
# A read penalty's cost-table name: "cold-after" and "evicted-each-run" named the penalties two earlier probes measured
# (a fraction of what a graph pays), "after-products" this probe's on one pair of sessions; a new name so that none of
# them is read again, while the tables' warm prices stay.
_PENALTY_KEY = "after-products-pairs"
_PENALTY_PAIRS = 3  # pairs of sessions a penalty is the median of
# A penalty measured on copies of the node cycling over weights of its own (CacheSizes.cycle of them): a name of its own.
_CYCLE_PENALTY_KEY = "after-own-weights"


def profile_cold_penalty(model: bytes, feeds: dict, threads: int, evict_bytes: int, min_total: float = FULL_SECONDS,
                         in_place: InPlaceWeights | None = None) -> list[float]:
    """Per run, how much longer the kernels of ``model`` take when products over ``evict_bytes`` of weights of their
    own run before them in every run than when none do: in one session, against the median in another.

    The eviction is what a graph does between two reads of a weight: other products read their (pre-packed) weights,
    run after run. Two probes measured before it read far less than a graph pays: a copy run right after an evicting
    read of a buffer against a copy right after it (the cache kept neither the weight just read nor the one before:
    an 8 MB weight's product took 970 us cold and 870 us right after), and then runs that each read the buffer
    (18-70 us where a graph among 16-32 MB of others paid 80-460 us, on a quiet machine). With products it measured
    70-380 us there (docs/measured.md, session 22). Empty when the model has no computed input to order the eviction
    before its kernels by.
    """
    proto = onnx.load_model_from_string(model)
    evicting, resting = _after_eviction(proto, evict_bytes), _after_eviction(proto, 0)
    if evicting is None or resting is None:
        return []
    feeds = {**feeds, f"{EVICT}_x": np.ones((1, _EVICT_ROWS), np.float32)}
    rested, evicted = (_role_times(_profiled_runs(m, feeds, threads, min_total / 2, min_runs=15, max_runs=40, in_place=in_place),
                                   _WARM_UP_RUNS, roles=(COLD,))[COLD] for m in (resting, evicting))
    if not rested or not evicted:
        return []
    baseline = float(np.median(rested))
    return [seconds - baseline for seconds in evicted]


_EVICT_ROWS = 1024  # the eviction's products: [1, 1024] x [1024, n], n up to _EVICT_COLUMNS (4 MB weights)
_EVICT_COLUMNS = 1024


@functools.lru_cache(maxsize=1)
def _eviction_weight() -> np.ndarray:
    """A 4 MB weight the eviction's products shift by their number (a weight of its own for each)."""
    return (np.random.default_rng(0).standard_normal((_EVICT_ROWS, _EVICT_COLUMNS)) / 32).astype(np.float32)


def _without_nodes(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, int]] | None:
    """A copy of the model with no nodes (its inputs, weights and outputs kept), for copies of its nodes that wait on
    something to be added, and the element type of each computed input; None when it has none a copy can wait with."""
    initializers = {t.name for t in proto.graph.initializer}
    dynamic = {i.name: i.type.tensor_type.elem_type for i in proto.graph.input if i.name not in initializers}
    if not dynamic or any(t in (TensorProto.BOOL, TensorProto.STRING, TensorProto.UNDEFINED) for t in dynamic.values()):
        return None
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.node[:]
    return out, dynamic


def _after_eviction(proto: onnx.ModelProto, evict_bytes: int) -> onnx.ModelProto | None:
    """The model's nodes (named ``COLD...``) after products ``EVICT_x @ E_i`` over ``evict_bytes`` of weights (none for
    0); each computed input waits on them (the input plus zero times one element of their result), so ONNX Runtime
    runs the eviction, then the model. None when the model has no computed input to wait with."""
    emptied = _without_nodes(proto)
    if emptied is None:
        return None
    out, dynamic = emptied
    g = out.graph
    g.input.append(helper.make_tensor_value_info(f"{EVICT}_x", TensorProto.FLOAT, [1, _EVICT_ROWS]))
    parts, left, weight = [], evict_bytes, _eviction_weight()
    while left >= 4 * _EVICT_ROWS:
        columns = min(_EVICT_COLUMNS, left // (4 * _EVICT_ROWS))
        name = f"{EVICT}_w{len(parts)}"
        # Each product's weight holds values of its own: given the same bytes, ONNX Runtime's products read one
        # buffer (the eviction then measured 2-14 us where distinct weights measured 46-228).
        g.initializer.append(numpy_helper.from_array(weight[:, :columns] + np.float32(len(parts)), name))
        g.node.append(helper.make_node("MatMul", [f"{EVICT}_x", name], [f"{name}_y"], name=f"{EVICT}_product{len(parts)}"))
        parts.append(f"{name}_y")
        left -= 4 * _EVICT_ROWS * columns
    if len(parts) > 1:
        g.node.append(helper.make_node("Concat", parts, [f"{EVICT}_all"], axis=1, name=f"{EVICT}_all"))
        read = f"{EVICT}_all"
    else:
        read = parts[0] if parts else f"{EVICT}_x"
    g.node.append(helper.make_node("ReduceMax", [read], [f"{EVICT}_streamed"], keepdims=0, name=f"{EVICT}_read"))
    append_copy(g, proto.graph.node, COLD, {v: _waiting(g, v, dynamic[v], f"{EVICT}_streamed", "cold") for v in dynamic}, "")
    return out


def _cold_then_warm(proto: onnx.ModelProto, after: str | None = None) -> onnx.ModelProto | None:
    """The model's nodes twice: after a ReduceMax reads a graph input ``EVICT_x`` (or the value ``after``) through
    the caches (named ``COLD...``), then again right after them (``WARM...``). Each copy's computed inputs wait on
    what must run before it (the input plus zero times one element of it), so ONNX Runtime runs: eviction, cold
    copy, warm copy."""
    emptied = _without_nodes(proto)
    if emptied is None:
        return None
    out, dynamic = emptied
    g = out.graph
    if after is None:
        g.input.append(helper.make_tensor_value_info(f"{EVICT}_x", TensorProto.FLOAT, None))
    g.node.append(helper.make_node("ReduceMax", [after or f"{EVICT}_x"], [f"{EVICT}_streamed"], keepdims=0, name=f"{EVICT}_read"))

    append_copy(g, proto.graph.node, COLD, {v: _waiting(g, v, dynamic[v], f"{EVICT}_streamed", "cold") for v in dynamic}, "")
    first_output = proto.graph.output[0].name
    append_copy(g, proto.graph.node, WARM, {v: _waiting(g, v, dynamic[v], first_output, "warm") for v in dynamic}, "~warm")
    for output in proto.graph.output:
        twin = g.output.add()
        twin.CopyFrom(output)
        twin.name = f"{output.name}~warm"
    return out


def _waiting(g: onnx.GraphProto, value: str, dtype: int, on: str, tag: str) -> str:
    """``value`` + 0 * (one element of ``on``): ``value`` again, computed only once ``on`` is."""
    if not any(t.name == f"{EVICT}_zero" for t in g.initializer):
        g.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), f"{EVICT}_start"),
                              numpy_helper.from_array(np.array([1], np.int64), f"{EVICT}_end"),
                              numpy_helper.from_array(np.array(0, np.float32), f"{EVICT}_zero")])
    names = [f"{EVICT}/{tag}/{value}/{i}" for i in range(6)]
    g.node.extend([
        helper.make_node("Cast", [on], [names[0]], to=TensorProto.FLOAT, name=names[0]),
        helper.make_node("Flatten", [names[0]], [names[1]], axis=0, name=names[1]),
        helper.make_node("Slice", [names[1], f"{EVICT}_start", f"{EVICT}_end", f"{EVICT}_end"], [names[2]], name=names[2]),
        helper.make_node("ReduceSum", [names[2]], [names[3]], keepdims=0, name=names[3]),
        helper.make_node("Mul", [names[3], f"{EVICT}_zero"], [names[4]], name=names[4]),
        helper.make_node("Cast", [names[4]], [names[5]], to=dtype, name=names[5]),
        helper.make_node("Add", [value, names[5]], [f"{value}~{tag}"], name=f"{EVICT}/{tag}/{value}/add"),
    ])
    return f"{value}~{tag}"


def _robust_mean(values: list[float]) -> float:
    """The mean of the middle half: robust to outliers like a median, finer than the profiler's microsecond ticks."""
    ordered = sorted(values)
    quarter = len(ordered) // 4
    middle = ordered[quarter : len(ordered) - quarter] or ordered
    return sum(middle) / len(middle)


@functools.lru_cache(maxsize=1)
def _reference_weight() -> bytes:
    """The reference MatMul's weight, built once: as a list of floats it took 10 ms per measurement (a quarter of a small node's)."""
    values = np.random.default_rng(1).standard_normal(65536).astype(np.float32)
    return helper.make_tensor(f"{REFERENCE}_w", TensorProto.FLOAT, [256, 256], values.tobytes(), raw=True).SerializeToString()


def _add_reference(graph: onnx.GraphProto) -> None:
    graph.initializer.add().ParseFromString(_reference_weight())
    graph.input.append(helper.make_tensor_value_info(f"{REFERENCE}_x", TensorProto.FLOAT, [128, 256]))
    graph.output.append(helper.make_tensor_value_info(f"{REFERENCE}_y", TensorProto.FLOAT, [128, 256]))
    graph.node.append(helper.make_node("MatMul", [f"{REFERENCE}_x", f"{REFERENCE}_w"], [f"{REFERENCE}_y"], name=REFERENCE))


def _add_floor(graph: onnx.GraphProto, after: str | None = None) -> None:
    """A Neg of one float; run after the value ``after`` where given (the profiler's overhead in the first kernels of a run
    is larger: a floor that ran first took 6-7 us, a 384-float Sigmoid after it 5)."""
    graph.input.append(helper.make_tensor_value_info(f"{FLOOR}_x", TensorProto.FLOAT, [1]))
    graph.output.append(helper.make_tensor_value_info(f"{FLOOR}_y", TensorProto.FLOAT, [1]))
    x = f"{FLOOR}_x" if after is None else _waiting(graph, f"{FLOOR}_x", TensorProto.FLOAT, after, "floor")
    graph.node.append(helper.make_node("Neg", [x], [f"{FLOOR}_y"], name=FLOOR))


def check_cached_costs(cache: CostCache, entries: int, seed: int | None = None) -> list[SpotCheck]:
    """Spot-checks ``entries`` entries of each of this machine's ort-cpu tables now (``taso info --costs --check N``).

    Unlike a search's spot-check, no time bound: a big Conv is checked too. Entries the
    cache already doubts (suspect, stale, without a noise band) come first, the rest in random
    order. Each is re-measured from its key alone (op, parameters, input types and
    constness), constant float inputs filled at random like any computed constant; an entry whose
    key cannot be rebuilt (an opaque operator, a constant input whose value may pick the kernel:
    an integer operand, a one-element one like Pow's exponent) is passed over. The cache is updated as a search's check would; save it after.
    """
    checks = []
    for table, threads in _machine_tables(cache):
        model = OrtCpuCost(threads=threads, cache=cache)
        check = SpotCheck(cache, table, SpotCheckPolicy(entries=entries, seconds=math.inf, rate=1.0, seed=seed))
        for key in _checking_order(cache, table, random.Random(seed)):
            if len(check.verdicts) >= entries:
                break
            rebuilt = _single_node(key)
            if rebuilt is not None:
                node, graph = rebuilt
                check.verify(key, cache.table(table)[key], functools.partial(model.fresh, node, graph, graph.constant_values()))
        checks.append(check)
    return checks


def _machine_tables(cache: CostCache) -> list[tuple[str, int]]:
    """This machine's ort-cpu tables (its CPU and ONNX Runtime build), with their thread counts."""
    pattern = re.escape(fingerprint(0)).replace("threads=0", r"threads=(\d+)")
    return [(table, int(m.group(1))) for table in cache.summary() if (m := re.fullmatch(pattern, table))]


def _checking_order(cache: CostCache, table: str, rng: random.Random) -> list[str]:
    """The table's entries, those the cache doubts first, each group in random order."""
    keys = [key for key in cache.table(table) if not key.startswith(CALIBRATION)]
    rng.shuffle(keys)

    def doubted(key: str) -> bool:
        entry = cache.entry(table, key)
        return entry is None or entry.band is None or entry.state in (SUSPECT, STALE)

    return sorted(keys, key=lambda key: not doubted(key))


_INPUT_TYPE = re.compile(r"(\w+)\[([\d,]*)\](c?)")


def _single_node(key: str) -> tuple[Node, Graph] | None:
    """The one-node graph a cache key describes (``node_key``: op, parameters, input types, constness); None when the key cannot rebuild it."""
    op_name, _, rest = key.partition("|")
    params_text, _, inputs_text = rest.rpartition("|")
    try:
        op = get(op_name)
        params = Params(dict(ast.literal_eval(params_text)))
        op.check_params(params)  # an opaque node's model is in the key only as a digest: it fails here
    except (KeyError, ValueError, SyntaxError, TypeError, TasoError):
        return None
    inputs, weights, names = {}, {}, []
    rng = np.random.default_rng(0)
    for i, text in enumerate(inputs_text.split(";") if inputs_text else ()):
        match = _INPUT_TYPE.fullmatch(text)
        if match is None:
            return None
        dtype, dims, constant = match.groups()
        t = TensorType(tuple(int(d) for d in dims.split(",") if d), dtype)
        if constant and (not dtype.startswith("float") or t.size <= 1):
            return None  # its value may pick the kernel (a shape, sizes, Pow's exponent) and is not in the key
        names.append(f"in{i}")
        if constant:
            weights[names[-1]] = random_array(t, rng)
        else:
            inputs[names[-1]] = t
    try:
        types = [inputs[v] if v in inputs else TensorType.of(weights[v]) for v in names]
        outputs = tuple(f"out{i}" for i in range(len(op.infer(types, params))))
        node = Node(op, params, tuple(names), outputs, "checked")
        graph = Graph(inputs, weights, [node], list(outputs))
    except (TasoError, ValueError, TypeError):
        return None
    return (node, graph) if node_key(node, graph) == key else None
