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
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from .cost import CostCache, CostModel, Neighbourhood, _random_array
from .errors import TasoError
from .ir import Graph, GraphMeta, Node
from .ops import ACTIVATION_OPS, HAS_ACTIVATION, get
from .timing import median_run, open_session, session_options

__all__ = ["OrtCpuCost", "cpu_name", "profile_kernels"]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class OrtCpuCost(CostModel):
    """Costs measured on ONNX Runtime's CPU provider, cached per hardware fingerprint.

    Args:
        threads: intra-op threads, as the model will be deployed.
        cache: the on-disk cache (default ``CostCache()``).
    """

    name = "ort-cpu"
    # ONNX Runtime fuses a Conv with the activation after it, and a 2-D MatMul with its bias Add
    # (into a Gemm): the absorbed node runs inside the other's kernel (see absorbed()).
    absorbers = frozenset(("conv2d", "matmul"))
    context_sensitive = True

    def __init__(self, threads: int = 1, cache: CostCache | None = None):
        super().__init__()
        self.threads = threads
        self.cache = cache or CostCache()
        self._fingerprint = f"ort-cpu|{cpu_name()}|onnxruntime {ort.__version__}|threads={threads}|ENABLE_ALL|profiled"
        self._table = self.cache.table(self._fingerprint)
        self._rng = np.random.default_rng(0)
        self._unit: float | None = None  # the reference kernel's seconds when this table was started
        self._floor = 0.0  # what the profiler reports for a kernel that does nothing
        self._dispatch = 0.0  # what a trivial node costs inside a running graph
        self.measured = 0

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def _calibrate(self) -> None:
        """The table's unit (the reference kernel's speed), the profiler's floor, and the in-graph cost of a trivial node."""
        if self._unit is not None:
            return
        keys = ("calibration|unit", "calibration|floor", "calibration|dispatch")
        if all(k in self._table for k in keys):
            self._unit, self._floor, self._dispatch = (self._table[k] for k in keys)
            return
        kernels, reference = profile_kernels(_negations(1), {"x": np.ones(1, np.float32)}, self.threads)
        self._unit = _robust_mean(reference)
        self._floor = self._normalized(kernels, reference)
        # NOTE: wall clock, not the profiler: a node's in-graph cost outside its kernel is what we add back.
        one, many = (median_run(open_session(_negations(n), self.threads, optimize=False), {"x": np.ones(1, np.float32)}, min_seconds=0.05)
                     for n in (1, 65))
        self._dispatch = max((many - one) / 64, 0.0)
        for key, value in zip(keys, (self._unit, self._floor, self._dispatch)):
            self.cache.record(self._fingerprint, key, value)

    def time_model(self, model: bytes, feeds: dict) -> float:
        """Kernel seconds of one run of ``model``, rescaled to the reference's speed when the table was started."""
        return self._normalized(*profile_kernels(model, feeds, self.threads))

    def _normalized(self, kernels: list[float], reference: list[float]) -> float:
        """Per-run kernel seconds over the reference's, in the table's unit."""
        return _robust_mean([k / r for k, r in zip(kernels, reference)]) * self._unit

    def measure(self, node: Node, graph: Graph, key: str, consts) -> float:
        if node.op.name in HAS_ACTIVATION and node.params["activation"] != "none":
            return self._with_activation(node, graph, consts)
        cached = self._table.get(key)
        if cached is not None:
            return cached
        self._calibrate()
        inputs, weights = {}, {}
        for v in node.inputs:
            (weights if v in consts else inputs)[v] = graph.type(v).concrete()
        node = node.concrete()  # measured at the measurement sizes: a one-node model has no value to take a symbol's size from
        # A weight keeps its value: a shape operand (Resize sizes, OneHot depth) filled at random is another kernel, or none.
        arrays = {v: graph.weights[v] if v in graph.weights else _random_array(t, self._rng) for v, t in {**inputs, **weights}.items()}
        single = Graph(inputs, {v: arrays[v] for v in weights}, [node], list(node.outputs),
                       meta=GraphMeta(opset=max(graph.meta.opset, 13), output_names=tuple(node.outputs)))
        from .onnx import export_onnx

        try:
            model = export_onnx(single, check=False).SerializeToString()
            seconds = max(self.time_model(model, {v: arrays[v] for v in inputs}) - self._floor, 0.0) + self._dispatch
        except Exception:  # noqa: BLE001 - ONNX Runtime's own exception types; only an opaque node may fail here
            if node.op.name != "opaque":
                raise
            # An opaque node taso never rewrites may not run alone on random values (silero-vad's If:
            # a random sample rate takes the branch that cannot run at the fixed length); it costs
            # the same in every candidate, so the in-graph cost of a node stands for it.
            seconds = self._dispatch
        self.cache.record(self._fingerprint, key, seconds)
        self.measured += 1
        return seconds

    def _with_activation(self, node: Node, graph: Graph, consts) -> float:
        """A Conv or MatMul with a fused activation costs the plain op, plus the activation where ONNX Runtime runs it apart.

        Priced from the same plain-op entry as the unfused form, so that fusing an
        activation is a gain only where the runtime would not fuse it anyway (MatMul + Relu):
        a Conv timed alone under one load and timed with its ReLU under another must not make
        the search "find" conv+ReLU fusions (1.60x predicted on SqueezeNet, 0.99x measured).
        """
        plain = Node(node.op, node.params.replace(activation="none"), node.inputs, node.outputs, node.name)
        cost = self.node_cost(plain, graph, consts)
        if node.op.name == "conv2d":
            return cost  # FusedConv: the activation runs in the convolution's epilogue
        activation = get(node.params["activation"])
        alone = Node(activation, activation.make_params(), (node.outputs[0],), (f"{node.outputs[0]}~activation",), node.name)
        return cost + self.node_cost(alone, graph, consts)

    def absorbed(self, node: Node, around: Neighbourhood) -> bool:
        """ONNX Runtime's CPU fusions at ENABLE_ALL that a per-node price would miss.

        * an activation (Relu, Sigmoid, Tanh) after a Conv without one: FusedConv;
        * a bias Add after a MatMul of 2-D operands, the bias a constant row (shape ``[N]`` or
          ``[1, N]``): MatMulAddFusion makes them one Gemm.

        Either only when the producer's output has no other reader and is not a graph output.
        A rewrite that gives the producer a second reader, or puts a Split between the two,
        pays for the absorbed node again: the +2.7 us per merged step that kept unrolled
        LSTM exports' merges from paying, priced as zero before.
        """
        name = node.op.name
        if name in ACTIVATION_OPS:
            data = node.inputs[0]
            producer = around.producer(data)
            return (producer is not None and producer.op.name == "conv2d" and producer.params["activation"] == "none"
                    and _sole_reader(node, data, around))
        if name == "add" and len(node.inputs) == 2:
            for data, bias in (node.inputs, node.inputs[::-1]):
                producer = around.producer(data)
                if (producer is not None and producer.op.name == "matmul" and producer.params["activation"] == "none"
                        and bias in around.consts and _bias_row(around.type(bias).shape, around.type(data).shape)
                        and all(around.type(v).rank == 2 for v in producer.inputs) and _sole_reader(node, data, around)):
                    return True
        return False

    def close(self) -> None:
        self.cache.save()


def _sole_reader(node: Node, value: str, around: Neighbourhood) -> bool:
    readers = around.readers(value)
    return len(readers) == 1 and readers[0] is node and not around.is_output(value)


def _bias_row(bias: tuple[int, ...], data: tuple[int, ...]) -> bool:
    """A bias Gemm takes as C: one value per output column, broadcast over the rows."""
    return bias in ((data[-1],), (1, data[-1]))


REFERENCE = "__taso_reference"


def profile_kernels(model: bytes, feeds: dict, threads: int, min_total: float = 0.02, min_runs: int = 7,
                    max_runs: int = 400) -> tuple[list[float], list[float]]:
    """Per run: seconds in the model's kernels, and in a reference MatMul run beside them.

    ONNX Runtime's profiler times each kernel inside the session, so no Python call overhead
    has to be subtracted from microsecond-sized operators; the reference kernel (a 128x256 by
    256x256 MatMul added as an independent node) runs in the same session run, under the same
    machine load, and each run's kernel time is later divided by its reference time. Runs
    go on until ``min_total`` seconds have passed: a few for a big kernel, hundreds for a
    microsecond one, whose profiled times come in whole microseconds.
    """
    proto = onnx.load_model_from_string(model)
    _add_reference(proto.graph)
    rng = np.random.default_rng(0)
    feeds = {**feeds, f"{REFERENCE}_x": rng.standard_normal((128, 256)).astype(np.float32)}
    options = session_options(threads)
    with tempfile.TemporaryDirectory() as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "profile")
        session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        total, runs = 0.0, 0
        for _ in range(3):
            session.run(None, feeds)
        while (total < min_total or runs < min_runs) and runs < max_runs:
            start = time.perf_counter()
            session.run(None, feeds)
            total += time.perf_counter() - start
            runs += 1
        with open(session.end_profiling(), encoding="utf-8") as f:
            events = json.load(f)
    return _kernel_times(events, skip=3)


def _kernel_times(events: list[dict], skip: int) -> tuple[list[float], list[float]]:
    """Sums the profiled kernel times of each session run (after ``skip`` warm-up runs)."""
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"][skip:]
    kernels = sorted((e["ts"], e["dur"], e["name"].startswith(REFERENCE)) for e in events
                     if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"))
    out_kernels, out_reference = [], []
    index = 0
    for start, end in windows:
        work = reference = 0.0
        while index < len(kernels) and kernels[index][0] < start:
            index += 1
        while index < len(kernels) and kernels[index][0] <= end:
            _, dur, is_reference = kernels[index]
            if is_reference:
                reference += dur
            else:
                work += dur
            index += 1
        if reference > 0:
            out_kernels.append(work * 1e-6)
            out_reference.append(reference * 1e-6)
    if not out_reference:
        raise TasoError(f"the ort-cpu cost model found no timed runs in ONNX Runtime {ort.__version__}'s profile "
                        "(its profile format may have changed); use --cost analytic")
    return out_kernels, out_reference


def _robust_mean(values: list[float]) -> float:
    """The mean of the middle half: robust to outliers like a median, finer than the profiler's microsecond ticks."""
    ordered = sorted(values)
    quarter = len(ordered) // 4
    middle = ordered[quarter : len(ordered) - quarter] or ordered
    return sum(middle) / len(middle)


def _add_reference(graph: onnx.GraphProto) -> None:
    rng = np.random.default_rng(1)
    graph.initializer.append(helper.make_tensor(f"{REFERENCE}_w", TensorProto.FLOAT, [256, 256], rng.standard_normal(65536).astype(np.float32)))
    graph.input.append(helper.make_tensor_value_info(f"{REFERENCE}_x", TensorProto.FLOAT, [128, 256]))
    graph.output.append(helper.make_tensor_value_info(f"{REFERENCE}_y", TensorProto.FLOAT, [128, 256]))
    graph.node.append(helper.make_node("MatMul", [f"{REFERENCE}_x", f"{REFERENCE}_w"], [f"{REFERENCE}_y"], name=REFERENCE))


def _negations(n: int) -> bytes:
    """A chain of ``n`` Neg nodes on one float: nodes that cost nothing but being run."""
    names = ["x"] + [f"r{i}" for i in range(n)]
    nodes = [helper.make_node("Neg", [names[i]], [names[i + 1]]) for i in range(n)]
    graph = helper.make_graph(nodes, "negations", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()
