"""The run's wake-up at its first kernel split over the threads (taso.cost.wake): which kernels split, and how the
ort-cpu cost model charges it once per run."""

from __future__ import annotations

import numpy as np
import pytest

from taso import ops
from taso.cost.cache import CALIBRATION
from taso.cost.model import node_key
from taso.cost.ort_cpu import OrtCpuCost
from taso.cost.wake import SPLITS, splits_over_threads
from taso.ir import Graph, Node, TensorType


def _kernel(name: str, blocks: list[int]) -> dict:
    stats = {"main_thread": {"block_size": blocks, "Run": 10}, "sub_threads": {"1": {"num_run": len(blocks)}}}
    return {"cat": "Node", "name": f"{name}_kernel_time", "dur": 10, "args": {"op_name": "MatMul", "thread_scheduling_stats": stats}}


def test_a_kernel_splits_when_the_profiler_lists_the_blocks_it_handed_the_pool():
    """At 2 threads ONNX Runtime ran [1,128] x [128,384] on one thread (no blocks) and split [16,128] x [128,384]."""
    own = lambda name: not name.startswith("__taso")  # noqa: E731
    assert not splits_over_threads([_kernel("MatMul_0", [])], own)
    assert splits_over_threads([_kernel("MatMul_0", [1])], own)
    assert not splits_over_threads([_kernel("__taso_reference", [1]), _kernel("MatMul_0", [])], own), "only the node's own kernels"
    assert not splits_over_threads([{"cat": "Node", "name": "MatMul_0_kernel_time", "args": {}}], own), "a profile without the stats"


def _n(op, inputs, outputs, **params):
    o = ops.get(op)
    return Node(o, o.make_params(**params), tuple(inputs), tuple(outputs), outputs[0])


def _priced(model: OrtCpuCost, graph: Graph, splitting: set[str]) -> None:
    """Every node at 1 us; the nodes named in ``splitting`` recorded as splitting their kernel."""
    model.node_cost = lambda node, graph, consts: 1e-6
    model.measure_ahead = lambda nodes: 0  # nothing to measure: every price is planted
    consts = graph.constant_values()
    for node in graph.nodes:
        model._table[node_key(node, graph, consts) + SPLITS] = 1.0 if node.name in splitting else 0.0


def _graphs() -> tuple[Graph, Graph, list[Node], list[Node]]:
    """A step's product and Tanh, and the same with another product in place of the Tanh (the one said to split)."""
    small, tanh = _n("matmul", ["x", "w"], ["y"]), _n("tanh", ["y"], ["z"])
    big = _n("matmul", ["y", "v"], ["z"])
    weights = {"w": np.zeros((128, 16), np.float32), "v": np.zeros((16, 16), np.float32)}  # small: no weight-read penalties
    types = {"x": TensorType((1, 128)), "w": TensorType((128, 16)), "v": TensorType((16, 16))}
    parent = Graph(types, weights, [small, tanh], ["z"])
    child = Graph(types, weights, [small, big], ["z"])
    return parent, child, [tanh], [big]


def test_a_graph_pays_the_wake_once_per_run_if_any_kernel_splits_and_a_rewrite_is_priced_alike(tmp_path, monkeypatch):
    """Merging an unrolled GRU h128's input projections made the run's first split kernel: the rewrite pays the
    wake-up the input never did, once, however many kernels split."""
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    model = OrtCpuCost(threads=2)
    model._table[f"{CALIBRATION}wake"] = 12e-6
    parent, child, removed, added = _graphs()
    _priced(model, parent, set())
    _priced(model, child, {added[0].name})
    assert model.graph_cost(parent) == pytest.approx(2e-6)
    assert model.graph_cost(child) == pytest.approx(2e-6 + 12e-6)
    assert model.rewrite_cost(parent, model.graph_cost(parent), removed, added, child) == pytest.approx(model.graph_cost(child))
    assert model.rewrite_cost(child, model.graph_cost(child), added, removed, parent) == pytest.approx(model.graph_cost(parent))
    model._splitting.clear()
    _priced(model, child, {added[0].name, "y"})  # both split: still one wake-up per run
    assert model.graph_cost(child) == pytest.approx(2e-6 + 12e-6)

    single = OrtCpuCost(threads=1)
    _priced(single, child, {added[0].name})
    assert single.graph_cost(child) == pytest.approx(2e-6) and single.wake() == 0.0, "one thread: no workers to wake"


def test_the_search_prices_the_wake_on_its_plans_as_on_the_graphs_it_builds(tmp_path, monkeypatch):
    """The search prices a rewrite on its plan of the child (no graph yet): the wake is charged there as graph_cost
    charges it on the graph built (a plan has no constant_values of its own: every rewrite of the search once failed)."""
    from taso.pipeline.library import load_rules
    from taso.search import SearchConfig, search

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    mm, relu = ops.get("matmul"), ops.get("relu")
    nodes = [Node(mm, mm.make_params(), ("x", "w"), ("y",), "mm"), Node(relu, relu.make_params(), ("y",), ("z",), "relu")]
    graph = Graph({"x": TensorType((1, 64))}, {"w": np.ones((64, 64), np.float32)}, nodes, ["z"])
    model = OrtCpuCost(threads=2)
    model._table[f"{CALIBRATION}wake"] = 12e-6
    _priced(model, graph, {"mm"})
    best, report = search(graph, load_rules(), model, SearchConfig(time_limit=2.0))
    assert report.initial_cost == pytest.approx(2e-6 + 12e-6)
    assert report.best_cost == pytest.approx(model.graph_cost(best)) and report.best_cost >= 12e-6
