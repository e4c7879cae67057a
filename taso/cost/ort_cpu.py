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

import functools
import platform
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from ..ir import Graph, GraphMeta, Node
from ..measure.inputs import random_array
from ..measure.timing import median_run, open_session
from ..onnx.probes import negations
from ..onnx.sizing import declared_only
from ..ops import HAS_ACTIVATION, get
from .bulk import BULK_BYTES, BULK_NODES, Single, bulk_profile, bulk_wall_clock
from .cache import BAND_FLOOR, CALIBRATION, CostCache, Measure, noise_band
from .cold_reads import _CYCLE_PENALTY_KEY, _PENALTY_KEY, _PENALTY_PAIRS, profile_cold_penalty
from .copies import WallReference, cold_read_penalty, interquartile_range, wall_clock_marginal
from .declared import declared_shape_seconds
from .in_place import IN_PLACE_BYTES, InPlaceWeights
from .model import CostModel, Neighbourhood, node_key
from .ort_fusions import (
    GELU_OPS,
    NORM_OPS,
    NormParts,
    gelu_anchors_near,
    norm_anchors_near,
    norm_parts,
    fusion_pass,
    gather_siblings,
    gelu_parts,
    norms_near,
    ort_absorbs,
    skip_norm_of,
    skip_norm_parts,
    split_gathers,
)
from .profiling import (
    _SESSION_SECONDS,
    FULL_SECONDS,
    QUICK_SECONDS,
    _robust_mean,
    _wall_clock_seconds,
    copies_for,
    profile_kernels,
    steadier,
    wall_clock_below,
)
from .residency import CacheSizes, WeightReads, graph_run_order, main_weight
from .wake import SPLITS, wake_seconds

__all__ = ["OrtCpuCost", "cpu_name", "fingerprint"]


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

    def calibrate(self) -> None:
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

    def calibrated_as(self, other: OrtCpuCost) -> None:
        """Takes ``other``'s calibration (its unit, dispatch and wall-clock reference): two tables of this machine
        compared entry by entry, without a calibration's noise between them (``benchmarks/costs/bench_bulk.py``)."""
        other.calibrate()
        self._unit, self._dispatch, self._wall = other._unit, other._dispatch, other.wall_reference()

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
            self._record(key, seconds, band, self._last_splits)
        self.calibrate_estimates(node, graph, key, consts, seconds)
        return seconds

    def _record(self, key: str, seconds: float, band: float, splits: bool) -> None:
        """A node measured now: its entry, with its noise band and (at more than one thread) whether it split."""
        self.cache.record(self._fingerprint, key, seconds, band)
        if self.threads > 1:
            self.cache.record(self._fingerprint, key + SPLITS, 1.0 if splits else 0.0)
        self.measured += 1

    def measure_ahead(self, nodes: Iterable[tuple[Node, Any, Any]]) -> int:
        """Measures in bulk (:mod:`taso.cost.bulk`) the nodes the table holds no entry of, ``BULK_NODES`` to a
        session, while the search's time allows; their entries are then taken as measured here, without a spot-check.
        A node past ``BULK_BYTES`` of tensors, or one that cannot share a session (an opaque one, one without a computed
        input), is left to be measured alone when priced."""
        wanted: dict[str, tuple[Node, Graph, frozenset[str] | set[str]]] = {}
        for node, graph, consts in nodes:
            for plain in self._measured_forms(node, graph):
                if not self.measured_in_bulk(plain, graph, consts):
                    continue
                key = node_key(plain, graph, consts)
                if key not in self._table and key not in self._memo and key not in wanted:
                    wanted[key] = (plain, graph, consts)
        if not wanted:
            return 0
        self.calibrate()
        reference, measured_before, items = self.wall_reference(), self.measured, list(wanted.items())
        for start in range(0, len(items), BULK_NODES):
            chunk = items[start:start + BULK_NODES]
            if time.perf_counter() + sum(self._expected_measuring(n, g) for _, (n, g, _) in chunk) > self.deadline:
                break
            singles = [Single(*self._single_model(n, g, c)) for _, (n, g, c) in chunk]
            profiled = bulk_profile(singles, self.threads, self._unit, self._dispatch)
            if profiled is None:
                continue
            small = [i for i, (seconds, _, _) in enumerate(profiled) if seconds < wall_clock_below(self.threads)]
            timed = dict(zip(small, bulk_wall_clock([singles[i] for i in small], [profiled[i][0] for i in small],
                                                    self.threads, reference))) if small else {}
            for i, (key, (node, graph, consts)) in enumerate(chunk):
                seconds, band = timed.get(i, profiled[i][:2])
                self._record(key, seconds, band, profiled[i][2])
                self._memo[key] = seconds
                self.calibrate_estimates(node, graph, key, consts, seconds)
        return self.measured - measured_before

    @staticmethod
    def measured_in_bulk(node: Node, graph, consts) -> bool:
        """Whether :meth:`measure_ahead` takes ``node`` (one of the forms :meth:`measure` times): it runs on a computed
        input, is not opaque, and has at most ``BULK_BYTES`` of tensors."""
        return not all(v in consts for v in node.inputs) and node.op.name != "opaque" and _tensor_bytes(node, graph) <= BULK_BYTES

    @staticmethod
    def _measured_forms(node: Node, graph) -> tuple[Node, ...]:
        """The nodes :meth:`measure` times for ``node``: itself, or a fused activation's plain op and the activation."""
        if node.op.name not in HAS_ACTIVATION or node.params["activation"] == "none":
            return (node,)
        plain = _plain(node)
        if node.op.name == "conv2d":
            return (plain,)  # FusedConv: the activation runs in the convolution's epilogue
        activation = get(node.params["activation"])
        return plain, Node(activation, activation.make_params(), (node.outputs[0],), (f"{node.outputs[0]}~activation",), node.name)

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
        self.calibrate()
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
                       meta=GraphMeta(opset=max(graph.meta.opset, 13), opset_limit=graph.meta.opset_limit, output_names=tuple(node.outputs)))
        from ..onnx import to_onnx_model

        in_place = InPlaceWeights()
        return to_onnx_model(single, check=False, weights_file=in_place).SerializeToString(), {v: arrays[v] for v in inputs}, in_place

    def _with_activation(self, node: Node, graph: Graph, consts) -> float:
        """A Conv or MatMul with a fused activation costs the plain op, plus the activation where ONNX Runtime runs it apart.

        Priced from the same plain-op entry as the unfused form, so that fusing an
        activation is a gain only where the runtime would not fuse it anyway (MatMul + Relu):
        a Conv timed alone under one load and timed with its ReLU under another must not make
        the search "find" conv+ReLU fusions (1.60x predicted on SqueezeNet, 0.99x measured).
        """
        return sum(self.node_cost(form, graph, consts) for form in self._measured_forms(node, graph))

    def absorbed(self, node: Node, around: Neighbourhood) -> bool:
        """:func:`ort_absorbs`."""
        return ort_absorbs(node, around)

    def shared_price(self, node: Node, around: Neighbourhood) -> float | None:
        """A Gather that ONNX Runtime makes one Split with its siblings (:func:`split_gathers`) costs its share of that
        Split, and the Squeeze after its part where its index is a scalar: an unrolled cell's per-step Gathers of its
        input run so (a GRU h128x64's 64 came to 23 us priced as Gathers, 59 us so).

        A LayerNormalization that ONNX Runtime makes one SkipLayerNormalization with the residual Add before it
        (:func:`skip_norm_parts`) costs that kernel, and the Adds it takes in nothing: on an AMD EPYC core the kernel
        is 4-7x slower than the pair it replaces (benchmarks/costs/bench_fused_kernels.py), which priced node by node
        the search never saw.

        A Tanh that ONNX Runtime makes one FastGelu with the nodes around it (:func:`gelu_parts`) costs that kernel, and
        the nodes it takes in nothing: 1.5-1.7x the Tanh alone on an AMD EPYC core, level with ONNX's Gelu
        (bench_fused_kernels.py); node by node the eight came to 3-4x the kernel."""
        if node.op.name == "tanh":
            parts = gelu_parts(node, around)
            return None if parts is None else self._fast_gelu_price(parts[0].inputs[0], around)
        if node.op.name == "sqrt":
            norm = norm_parts(node, around)
            return None if norm is None else self._norm_price(norm, around)
        if node.op.name == "gather":
            group = split_gathers(node, around)
            return None if group is None else self._split_share(node, len(group), around)
        if node.op.name == "add":
            return 0.0 if skip_norm_of(node, around) is not None else None
        if node.op.name == "layer_norm":
            parts = skip_norm_parts(node, around)
            return None if parts is None else self._skip_norm_price(node, parts[0], around)
        return None

    def _skip_norm_price(self, norm: Node, residual: Node, around: Neighbourhood) -> float:
        """The SkipLayerNormalization ONNX Runtime runs for ``norm`` and the Adds before it, measured as one node of
        their types (a bias Add taken in is priced inside it: the kernel adds one vector more)."""
        data = around.type(residual.inputs[0])
        affine = [(v, around.type(v)) for v in norm.inputs[1:]]
        weights = {v: around.graph.weights[v] for v, _ in affine if v in around.graph.weights}
        key = ("skip_layer_norm", data, norm.params["epsilon"], tuple(t for _, t in affine), tuple(sorted(weights)))

        def alone() -> tuple[Node, Graph]:
            op = get("skip_layer_norm")
            fused = Node(op, op.make_params(epsilon=norm.params["epsilon"]), ("x", "skip", *(v for v, _ in affine)), ("y",), norm.name)
            inputs = {"x": data, "skip": data, **{v: t for v, t in affine if v not in weights}}
            return fused, Graph(inputs, weights, [fused], ["y"])

        return self._fused_price(key, alone)

    def _fast_gelu_price(self, x: str, around: Neighbourhood) -> float:
        """The FastGelu ONNX Runtime runs for a tanh GELU of ``x``, measured as one node of its type."""
        data = around.type(x)

        def alone() -> tuple[Node, Graph]:
            fused = Node(get("fast_gelu"), get("fast_gelu").make_params(), ("x",), ("y",), "fast_gelu")
            return fused, Graph({"x": data}, {}, [fused], ["y"])

        return self._fused_price(("fast_gelu", data), alone)

    def _norm_price(self, norm: NormParts, around: Neighbourhood) -> float:
        """The LayerNormalization or SimplifiedLayerNormalization ONNX Runtime runs for a normalization written out,
        measured as one node of taso's op for it (written at the model's opset, it is the form ONNX Runtime fuses)."""
        data = around.type(norm.data)
        # (a scale computed from weights, which ONNX Runtime folds before it fuses, is an input of the node alone)
        weights = {v: around.graph.weights[v] for v in norm.affine if v in around.graph.weights}
        key = (norm.kernel, data, norm.epsilon, tuple(around.type(v) for v in norm.affine), tuple(sorted(weights)))

        def alone() -> tuple[Node, Graph]:
            op = get(norm.kernel)
            fused = Node(op, op.make_params(axis=data.rank - 1, epsilon=norm.epsilon), ("x", *norm.affine), ("y",), norm.nodes[0].name)
            inputs = {"x": data, **{v: around.type(v) for v in norm.affine if v not in weights}}
            return fused, Graph(inputs, weights, [fused], ["y"])

        return self._fused_price(key, alone)

    def _fused_price(self, key: tuple, alone: Callable[[], tuple[Node, Graph]]) -> float:
        """The price of the fused kernel ``alone()`` builds (the node and a graph of it alone), measured once per
        ``key``; an estimate past the deadline is not remembered."""
        if key not in self._shared:
            price = self.node_cost(*alone())
            if self._estimate_used:
                return price
            self._shared[key] = price
        return self._shared[key]

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
        # A rewrite of a residual Add, of what it reads or of what reads it makes or breaks a SkipLayerNormalization:
        # the LayerNormalizations near it and the Adds each takes in, before and after (a new one only after).
        for node, where in [*((n, before) for n in removed), *((n, after) for n in added)]:
            for norm in norms_near(node, where):
                for near in ((before, after) if kept(norm) else (where,)):
                    neighbours.update({id(n): n for n in (norm, *(skip_norm_parts(norm, near) or ())) if kept(n)})
        # A fusion found from an anchor (a GELU's Erf or Tanh, a norm's Sqrt): the anchors near the rewrite, each with its
        # parts before and after it (a rewrite that takes one part away unfuses the others).
        anchored = ((GELU_OPS, gelu_anchors_near, lambda anchor, near: gelu_parts(anchor, near) or ()),
                    (NORM_OPS, norm_anchors_near, lambda anchor, near: getattr(norm_parts(anchor, near), "nodes", ())))
        for part_ops, anchors_near, parts_of in anchored:
            anchors = {id(anchor): anchor for node in (*removed, *added) if node.op.name in part_ops
                       for anchor in anchors_near(node, before if id(node) in gone else after) if kept(anchor)}
            for anchor in anchors.values():
                neighbours[id(anchor)] = anchor
                for near in (before, after):
                    neighbours.update({id(n): n for n in parts_of(anchor, near) if kept(n)})
        return neighbours

    # -- where each weight lives when its node runs (taso.cost.residency) --

    def graph_cost(self, graph: Graph) -> float:
        """The nodes' warm prices, plus what reading each weight costs after the other weights read since its last read,
        plus, with more than one thread, the run's wake-up where a kernel splits over the threads (:mod:`taso.cost.wake`)."""
        return super().graph_cost(graph) + self.parent_reads(graph)[1] + self._wake_if(self._splitting_nodes(graph))

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
        return cost + self._read_penalties(reads, after.pricing, after.consts) - self.parent_reads(parent)[1]

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
        reads, _, position = self.parent_reads(parent)
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

    def parent_reads(self, graph: Graph) -> tuple[WeightReads, float, dict[int, int]]:
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
        for node, penalty in self._penalised_reads(self.parent_reads(graph)[0], graph, graph.constant_values()):
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
        0, 492, 0 and 2004 us in four tries (``benchmarks/costs/bench_penalty_noise.py``)."""
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
