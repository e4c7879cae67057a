"""What a product split over threads costs the small nodes after it: its shadow.

With more than one intra-op thread, ONNX Runtime's thread pool (MLAS) splits a product of 64K multiply-adds or more
over the threads; the elementwise nodes of a recurrent cell's step run on the calling thread alone. Every node is
priced by copies of it back to back (:mod:`taso.cost.copies`), where no split product runs before it. In a graph,
the single-threaded nodes right after a split product run slower: on a 2-vCPU cloud machine, 16 Tanhs on 256 floats
after each of 64 products `[1, 256] x [256, 768]` took 0.75-0.79 us each where they take 0.37 at one thread and
alone, 64 took 0.61 each, 256 took 0.45 each: twice the price for the first ~20 us of single-threaded work, then
back to it (the hypervisor polls the other vCPU's core for a while after its thread goes idle;
docs/measured.md, session 29). An unrolled GRU runs about 7 us of such nodes after each step's product, and its
prices were 0.84-0.89 of its measured time at 2 threads, where they were 0.97-1.02 at one.

So at more than one thread the cost model charges each split product's shadow: ``(factor - 1) x`` the priced
single-threaded work after it, up to ``window`` seconds of it (:class:`Shadow`), both measured once per cost table
on chains of products with Tanhs between them (:func:`measure_shadow`). On a machine whose threads do not slow each
other the factor comes out 1, and nothing is charged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..ir import Node
from .copies import WallReference, per_round_differences

__all__ = ["Shadow", "product_chain", "splits_over_threads", "thread_kind", "shadow_spans", "measure_shadow", "graph_shadow"]

# MLAS splits a single-precision product over threads from this many multiply-adds on (MLAS_SGEMM_THREAD_COMPLEXITY).
SPLIT_WORK = 64 * 1024
# A node that is not a product runs on the calling thread up to this many output elements (ONNX Runtime parallelises
# an elementwise kernel by its cost; a recurrent cell's gates, up to hidden 1024, stay under it).
ALONE_ELEMENTS = 4096
STEPS = 64
SHAPE = (256, 1024)  # the calibration's product: split over threads by MLAS, 1 MB of weight
SHORT_GAP, LONG_GAP = 8, 128  # Tanhs after each product in the calibration's chains: inside the window, past it
NO_SHADOW_BELOW = 0.1  # a measured factor - 1 under this is noise: no shadow


@dataclass(frozen=True)
class Shadow:
    """Single-threaded work after a split product costs ``factor`` times its price, for its first ``window`` seconds."""

    factor: float = 1.0
    window: float = 0.0

    def extra(self, alone_seconds: float) -> float:
        """What ``alone_seconds`` of priced single-threaded work right after a split product costs beyond its price."""
        return (self.factor - 1.0) * min(alone_seconds, self.window)

    @property
    def none(self) -> bool:
        return self.factor <= 1.0 or self.window <= 0.0


def product_chain(k: int, n: int, gap: int, alternate: bool = False, steps: int = STEPS) -> bytes:
    """``steps`` products ``[1, k] x [k, n]^T``, each reading the last one's output (its first ``k`` columns, then
    ``gap + 1`` Tanhs); with ``alternate``, the products read two weights in turn."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((n, k)) * 0.05).astype(np.float32), f"W{i}") for i in range(2)]
    bounds = [numpy_helper.from_array(np.array([v], np.int64), name) for v, name in ((0, "start"), (k, "end"), (1, "axis"))]
    nodes, previous = [], "x"
    for i in range(steps):
        weight = f"W{i % 2}" if alternate else "W0"
        nodes += [helper.make_node("Gemm", [previous, weight], [f"g{i}"], transB=1),
                  helper.make_node("Slice", [f"g{i}", "start", "end", "axis"], [f"s{i}_0"])]
        nodes += [helper.make_node("Tanh", [f"s{i}_{j}"], [f"s{i}_{j + 1}"]) for j in range(gap + 1)]
        previous = f"s{i}_{gap + 1}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, k])],
                              (weights if alternate else weights[:1]) + bounds)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _elements(value: str, graph) -> int:
    return math.prod(graph.type(value).concrete().shape)


def splits_over_threads(node: Node, graph) -> bool:
    """Whether the thread pool splits ``node``'s kernel: a product or a convolution of ``SPLIT_WORK`` multiply-adds or more."""
    if node.op.name not in ("matmul", "conv2d"):
        return False
    data, weight = (graph.type(v).concrete().shape for v in node.inputs[:2])
    per_output = data[-1] if node.op.name == "matmul" else math.prod(weight[1:])
    return _elements(node.outputs[0], graph) * per_output >= SPLIT_WORK


SPLIT, ALONE, OTHER = "split", "alone", "other"


def thread_kind(node: Node, graph) -> str:
    """``SPLIT`` (:func:`splits_over_threads`), ``ALONE`` (:func:`runs_alone`) or ``OTHER`` (a large node whose threads
    are not known)."""
    if splits_over_threads(node, graph):
        return SPLIT
    return ALONE if all(_elements(v, graph) < ALONE_ELEMENTS for v in node.outputs) else OTHER


def shadow_spans(order: Iterable[Node], price: Callable[[Node], float], kind: Callable[[Node], str]) -> list[tuple[Node, float]]:
    """Each split product in run order, and the priced seconds of single-threaded nodes that run after it before the
    next node that is neither (a split product, or a large node whose threads are not known) ends its shadow."""
    spans: list[tuple[Node, float]] = []
    product, alone = None, 0.0
    for node in order:
        seconds = price(node)
        if seconds == 0.0:
            continue  # folded, or fused into its producer
        what = kind(node)
        if what == ALONE:
            alone += seconds
            continue
        if product is not None:
            spans.append((product, alone))
        product, alone = (node if what == SPLIT else None), 0.0
    if product is not None:
        spans.append((product, alone))
    return spans


def measure_shadow(threads: int, tanh_seconds: float, reference: WallReference | None = None) -> Shadow:
    """The shadow on this machine at ``threads`` threads: chains of ``SHAPE`` products with ``SHORT_GAP`` and
    ``LONG_GAP`` more Tanhs after each, against the chain with one, by the wall clock (each Tanh priced
    ``tanh_seconds`` alone). The short gap gives the factor, the long one how much work it covers."""
    feeds = {"x": np.random.default_rng(1).standard_normal((1, SHAPE[0])).astype(np.float32)}
    base = onnx.load_model_from_string(product_chain(*SHAPE, gap=0))

    def extra(gap: int) -> float:
        longer = onnx.load_model_from_string(product_chain(*SHAPE, gap=gap))
        per_step = float(np.median(per_round_differences(base, longer, STEPS, feeds, threads, None, reference)))
        return per_step - gap * tanh_seconds

    short = extra(SHORT_GAP)
    factor = 1.0 + short / (SHORT_GAP * tanh_seconds)
    if factor - 1.0 < NO_SHADOW_BELOW:
        return Shadow()
    window = max(extra(LONG_GAP), short) / (factor - 1.0)
    return Shadow(factor, min(window, LONG_GAP * tanh_seconds))


def graph_shadow(order: Iterable[Node], price: Callable[[Node], float], kind: Callable[[Node], str],
                 shadow: Shadow) -> list[tuple[Node, float]]:
    """Each split product among ``order`` with what its shadow adds to the graph's price (none where there is no shadow)."""
    if shadow.none:
        return []
    return [(node, extra) for node, alone in shadow_spans(order, price, kind) if (extra := shadow.extra(alone)) > 0.0]
