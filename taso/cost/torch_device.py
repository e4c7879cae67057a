"""Operator costs in device time on the torch runtime (cuDNN and cuBLAS kernels on a GPU), cached per device.

A node is measured as TASO measured its operators, alone with its weights resident; here several copies of it run in
one captured CUDA graph, so a launch costs what it costs inside a deployment's graph and a copy's share is the
node's price. Without a GPU the same code measures torch's CPU kernels with the wall clock.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, GraphMeta, Node
from ..measure.inputs import random_array
from ..measure.torch_runtime import Device, EndToEndTimer, Replay, TorchGraph, default_device
from .cache import CostCache
from .model import DeviceCost

__all__ = ["TorchCost", "COPIES"]

COPIES = 8  # copies of a node in one captured graph: launch gaps amortized as in a graph of many nodes
REPLAYS = 10  # replays of the captured graph per timing
ROUNDS = 3  # timings per node; the median is its price


def copies_of(node: Node, graph, consts, copies: int, rng: np.random.Generator) -> tuple[Graph, dict[str, np.ndarray]]:
    """A graph of ``copies`` copies of ``node`` reading the same inputs (those in ``consts`` as weights), and feeds;
    ``graph`` is anything with ``type()`` (a graph, or the search's plan of one)."""
    node = node.concrete()
    inputs = {v: graph.type(v).concrete() for v in dict.fromkeys(node.inputs) if v not in consts}
    weights = {v: random_array(graph.type(v).concrete(), rng) for v in dict.fromkeys(node.inputs) if v in consts}
    nodes, outputs = [], []
    for k in range(copies):
        renamed = tuple(f"{o}#{k}" for o in node.outputs)
        nodes.append(Node(node.op, node.params, node.inputs, renamed, f"{node.name}#{k}"))
        outputs += renamed
    copied = Graph(inputs, weights, nodes, outputs, meta=GraphMeta(output_names=tuple(outputs)))
    return copied, {v: random_array(t, rng) for v, t in inputs.items()}


class TorchCost(DeviceCost):
    """Each distinct node timed on the torch runtime: ``COPIES`` copies in one captured graph, replayed; a copy's
    share of the median is its cost. Entries are cached under the device's fingerprint (GPU, driver, CUDA, cuDNN and
    torch versions; on the CPU, the processor, threads and torch)."""

    name = "torch"

    def __init__(self, cache: CostCache | None = None, device: Device | None = None, copies: int = COPIES):
        self.device = device or default_device()
        self.copies = copies
        super().__init__(f"{self.device.fingerprint()}|copies {copies}", cache)

    def time_node(self, node: Node, graph, consts, rng: np.random.Generator) -> float:
        copied, feeds = copies_of(node, graph, consts, self.copies, rng)
        replay = Replay(TorchGraph(copied, self.device), feeds)
        return float(np.median([replay.seconds(REPLAYS) for _ in range(ROUNDS)])) / self.copies

    def end_to_end_timer(self, original: Graph, optimized: Graph) -> EndToEndTimer:
        """The guard's timer for this deployment: both graphs on the torch runtime, side by side."""
        return EndToEndTimer(original, optimized, self.device)
