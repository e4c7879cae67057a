"""Operator costs measured on ONNX Runtime (CPU), with the deployment's session options.

Each node is exported alone (its constant inputs as initializers, so ONNX Runtime may
pre-pack weights and fuse a fused activation exactly as it does in the full model), run
with warm-up, and timed by the median of repeated runs. The fixed cost of calling a
session from Python is measured once and subtracted; the per-node dispatch cost inside a
graph is measured once and added, so costs of many small nodes add up like they do in a
real model.

Costs cached over days on a shared machine were measured under different loads, and a
search that compares a node timed on a quiet machine with one timed on a busy one chases
noise (a 1.5x "gain" on VGG-19 from fusing ReLUs, measured 0.96x end to end). So every
timing runs interleaved with a fixed reference kernel, and the cache stores it rescaled to
the reference's speed when the table was started: costs are comparable whatever the load
was when each one was taken.
"""

from __future__ import annotations

import platform
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from .cost import CostCache, CostModel, _random_array
from .ir import Graph, GraphMeta, Node

__all__ = ["OrtCpuCost", "cpu_name", "session_options"]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def session_options(threads: int, optimize: bool = True) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return options


def time_session(session: ort.InferenceSession, feeds: dict, min_total: float = 0.02, max_runs: int = 200) -> float:
    """Median seconds of one run, after warm-up."""
    for _ in range(3):
        session.run(None, feeds)
    times: list[float] = []
    total = 0.0
    while (total < min_total or len(times) < 7) and len(times) < max_runs:
        elapsed = _timed_run(session, feeds)
        times.append(elapsed)
        total += elapsed
    return statistics.median(times)


def time_paired(session: ort.InferenceSession, feeds: dict, reference: ort.InferenceSession, reference_feeds: dict,
                min_total: float = 0.02, max_runs: int = 200) -> tuple[float, float]:
    """Median seconds of one run of ``session`` and of ``reference``, timed alternately.

    Each round runs the reference about as long as the session ran, so both medians see the
    same machine load.
    """
    for _ in range(3):
        session.run(None, feeds)
        reference.run(None, reference_feeds)
    repeats = max(1, min(64, round(_timed_run(session, feeds) / max(_timed_run(reference, reference_feeds), 1e-9))))
    times: list[float] = []
    reference_times: list[float] = []
    while (sum(times) < min_total or len(times) < 7) and len(times) < max_runs:
        times.append(_timed_run(session, feeds))
        reference_times.append(sum(_timed_run(reference, reference_feeds) for _ in range(repeats)) / repeats)
    return statistics.median(times), statistics.median(reference_times)


def _timed_run(session: ort.InferenceSession, feeds: dict) -> float:
    start = time.perf_counter()
    session.run(None, feeds)
    return time.perf_counter() - start


class OrtCpuCost(CostModel):
    """Costs measured on ONNX Runtime's CPU provider, cached per hardware fingerprint.

    Args:
        threads: intra-op threads, as the model will be deployed.
        cache: the on-disk cache (default ``CostCache()``).
    """

    name = "ort-cpu"

    def __init__(self, threads: int = 1, cache: CostCache | None = None):
        super().__init__()
        self.threads = threads
        self.cache = cache or CostCache()
        self._fingerprint = f"ort-cpu|{cpu_name()}|onnxruntime {ort.__version__}|threads={threads}|ENABLE_ALL|load-normalized"
        self._table = self.cache.table(self._fingerprint)
        self._rng = np.random.default_rng(0)
        self._call_overhead: float | None = None
        self._dispatch: float | None = None
        self._reference: tuple[ort.InferenceSession, dict] | None = None
        self._unit: float | None = None  # the reference's seconds when this table was started
        self.measured = 0

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def _calibrate(self) -> None:
        """The reference's speed (the table's unit), session call overhead (subtracted) and in-graph dispatch cost (added)."""
        if self._call_overhead is not None:
            return
        keys = ("calibration|unit", "calibration|call", "calibration|dispatch")
        if all(k in self._table for k in keys):
            self._unit, self._call_overhead, self._dispatch = (self._table[k] for k in keys)
            return

        def chain(n: int) -> tuple[float, float]:
            names = ["x"] + [f"r{i}" for i in range(n)]
            nodes = [helper.make_node("Neg", [names[i]], [names[i + 1]]) for i in range(n)]
            g = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [1])])
            session = ort.InferenceSession(_model_bytes(g), session_options(self.threads, optimize=False), providers=["CPUExecutionProvider"])
            return time_paired(session, {"x": np.ones(1, np.float32)}, *self._reference_kernel(), min_total=0.05)

        (one, unit_one), (many, unit_many) = chain(1), chain(65)
        self._unit = statistics.median([unit_one, unit_many])
        one, many = one * self._unit / unit_one, many * self._unit / unit_many
        self._dispatch = max((many - one) / 64, 0.0)
        self._call_overhead = max(one - self._dispatch, 0.0)
        for key, value in zip(keys, (self._unit, self._call_overhead, self._dispatch)):
            self.cache.record(self._fingerprint, key, value)

    def _reference_kernel(self) -> tuple[ort.InferenceSession, dict]:
        """A fixed MatMul (128x256 by a 256x256 weight, ~0.3 ms on one core): the yardstick every timing is paired with."""
        if self._reference is None:
            rng = np.random.default_rng(0)
            weight = helper.make_tensor("w", TensorProto.FLOAT, [256, 256], rng.standard_normal((256, 256)).astype(np.float32).ravel())
            g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "reference",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [128, 256])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [128, 256])], [weight])
            session = ort.InferenceSession(_model_bytes(g), session_options(self.threads), providers=["CPUExecutionProvider"])
            self._reference = (session, {"x": rng.standard_normal((128, 256)).astype(np.float32)})
        return self._reference

    def measure(self, node: Node, graph: Graph, key: str, consts) -> float:
        cached = self._table.get(key)
        if cached is not None:
            return cached
        self._calibrate()
        inputs, weights = {}, {}
        for v in node.inputs:
            (weights if v in consts else inputs)[v] = graph.type(v)
        arrays = {v: _random_array(t, self._rng) for v, t in {**inputs, **weights}.items()}
        single = Graph(inputs, {v: arrays[v] for v in weights}, [node], list(node.outputs),
                       meta=GraphMeta(opset=max(graph.meta.opset, 13), output_names=tuple(node.outputs)))
        from .onnx import export_onnx

        model = export_onnx(single, check=False)
        session = ort.InferenceSession(model.SerializeToString(), session_options(self.threads), providers=["CPUExecutionProvider"])
        elapsed, reference = time_paired(session, {v: arrays[v] for v in inputs}, *self._reference_kernel())
        seconds = max(elapsed * self._unit / reference - self._call_overhead, 0.0) + self._dispatch
        self.cache.record(self._fingerprint, key, seconds)
        self.measured += 1
        return seconds

    def close(self) -> None:
        self.cache.save()


def _model_bytes(graph) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()

