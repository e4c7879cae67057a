"""Operator costs measured on the GPU with the CuPy executor and CUDA events, cached per GPU fingerprint."""

from __future__ import annotations

import numpy as np

from ..ir import Graph, GraphMeta, Node
from ..measure.cupy_runtime import DeviceGraph, gpu_fingerprint, require_cupy, time_cuda
from ..measure.inputs import random_array
from .cache import CostCache
from .model import DeviceCost

__all__ = ["CupyCost"]


class CupyCost(DeviceCost):
    """Each distinct node runs alone on the device executor (constant inputs resident, as in the
    full model); its cost is the median of CUDA-event timings after warm-up."""

    name = "cupy"

    def __init__(self, cache: CostCache | None = None):
        self.cp = require_cupy()
        super().__init__(gpu_fingerprint(self.cp), cache)

    def time_node(self, node: Node, graph: Graph, consts, rng: np.random.Generator) -> float:
        inputs, weights = {}, {}
        for v in node.inputs:
            (weights if v in consts else inputs)[v] = graph.type(v).concrete()
        node = node.concrete()
        arrays = {v: random_array(t, rng) for v, t in {**inputs, **weights}.items()}
        single = Graph(inputs, {v: arrays[v] for v in weights}, [node], list(node.outputs), meta=GraphMeta(output_names=tuple(node.outputs)))
        runner = DeviceGraph(single, self.cp)
        feeds = {v: self.cp.asarray(arrays[v]) for v in inputs}
        return time_cuda(self.cp, lambda: runner(feeds))

    def end_to_end_timer(self, original: Graph, optimized: Graph):
        """The guard's timer: both graphs on the CuPy executor."""
        from ..measure.cupy_runtime import EndToEndTimer

        return EndToEndTimer(original, optimized)

