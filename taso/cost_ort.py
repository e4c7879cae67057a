"""Operator costs measured on ONNX Runtime (CPU), with the deployment's session options.

Each node is exported alone (its constant inputs as initializers, so ONNX Runtime may
pre-pack weights and fuse a fused activation exactly as it does in the full model), run
with warm-up, and timed by the median of repeated runs. The fixed cost of calling a
session from Python is measured once and subtracted; the per-node dispatch cost inside a
graph is measured once and added, so costs of many small nodes add up like they do in a
real model.
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
        start = time.perf_counter()
        session.run(None, feeds)
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        total += elapsed
    return statistics.median(times)


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
        self._fingerprint = f"ort-cpu|{cpu_name()}|onnxruntime {ort.__version__}|threads={threads}|ENABLE_ALL"
        self._table = self.cache.table(self._fingerprint)
        self._rng = np.random.default_rng(0)
        self._call_overhead: float | None = None
        self._dispatch: float | None = None
        self.measured = 0

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def _calibrate(self) -> None:
        """Session call overhead (subtracted) and in-graph per-node dispatch cost (added)."""
        if self._call_overhead is not None:
            return
        key_call, key_dispatch = "calibration|call", "calibration|dispatch"
        if key_call in self._table and key_dispatch in self._table:
            self._call_overhead, self._dispatch = self._table[key_call], self._table[key_dispatch]
            return

        def chain(n: int) -> float:
            names = ["x"] + [f"r{i}" for i in range(n)]
            nodes = [helper.make_node("Neg", [names[i]], [names[i + 1]]) for i in range(n)]
            g = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [1])])
            model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
            model.ir_version = 8
            session = ort.InferenceSession(model.SerializeToString(), session_options(self.threads, optimize=False), providers=["CPUExecutionProvider"])
            return time_session(session, {"x": np.ones(1, np.float32)}, min_total=0.05)

        one, many = chain(1), chain(65)
        self._dispatch = max((many - one) / 64, 0.0)
        self._call_overhead = max(one - self._dispatch, 0.0)
        self.cache.record(self._fingerprint, key_call, self._call_overhead)
        self.cache.record(self._fingerprint, key_dispatch, self._dispatch)

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
        seconds = max(time_session(session, {v: arrays[v] for v in inputs}) - self._call_overhead, 0.0) + self._dispatch
        self.cache.record(self._fingerprint, key, seconds)
        self.measured += 1
        return seconds

    def close(self) -> None:
        self.cache.save()

