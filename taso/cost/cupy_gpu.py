"""Operator costs measured on the GPU with the CuPy executor and CUDA events, cached per GPU fingerprint."""

from __future__ import annotations

import numpy as np

from ..measure.cupy_runtime import DeviceGraph, gpu_fingerprint, require_cupy, time_cuda
from ..ir import Graph, GraphMeta, Node
from .cache import CostCache
from .model import CostModel
from ..measure.inputs import random_array

__all__ = ["CupyCost"]


class CupyCost(CostModel):
    """Each distinct node runs alone on the device executor (constant inputs resident, as in the
    full model); its cost is the median of CUDA-event timings after warm-up."""

    name = "cupy"
    deployed_elsewhere = True

    def __init__(self, cache: CostCache | None = None):
        super().__init__()
        self.cp = require_cupy()
        self.cache = cache or CostCache()
        self._fingerprint = gpu_fingerprint(self.cp)
        self._table = self.cache.table(self._fingerprint)
        self._rng = np.random.default_rng(0)
        self.measured = 0

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def measure(self, node: Node, graph: Graph, key: str, consts) -> float:
        cached = self._table.get(key)
        if cached is not None:
            return cached
        inputs, weights = {}, {}
        for v in node.inputs:
            (weights if v in consts else inputs)[v] = graph.type(v).concrete()
        node = node.concrete()
        arrays = {v: random_array(t, self._rng) for v, t in {**inputs, **weights}.items()}
        single = Graph(inputs, {v: arrays[v] for v in weights}, [node], list(node.outputs), meta=GraphMeta(output_names=tuple(node.outputs)))
        runner = DeviceGraph(single, self.cp)
        feeds = {v: self.cp.asarray(arrays[v]) for v in inputs}
        seconds = time_cuda(self.cp, lambda: runner(feeds))
        self.cache.record(self._fingerprint, key, seconds)
        self.measured += 1
        return seconds

    def end_to_end_timer(self, original: Graph, optimized: Graph):
        """The guard's timer: both graphs on the CuPy executor."""
        from ..measure.cupy_runtime import EndToEndTimer

        return EndToEndTimer(original, optimized)

    def close(self) -> None:
        self.cache.save()
