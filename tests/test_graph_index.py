"""The search's lookups over a graph: per-op index, ancestry, search keys; none keeps its graph alive."""

from __future__ import annotations

import gc
import weakref

import numpy as np
from taso.models import build

from taso import ops
from taso.ir import Graph, Node, TensorType
from taso.onnx import load_onnx


def _node(op_name: str, inputs, outputs, **params) -> Node:
    op = ops.get(op_name)
    return Node(op, op.make_params(**params), tuple(inputs), tuple(outputs), outputs[0])


def _chain() -> Graph:
    nodes = [_node("matmul", ["x", "w"], ["h"]), _node("relu", ["h"], ["r"]), _node("matmul", ["r", "w"], ["y"]), _node("tanh", ["y"], ["t"])]
    return Graph({"x": TensorType((2, 4))}, {"w": np.ones((4, 4), np.float32)}, nodes, ["t"])


def test_nodes_of_and_op_params_list_what_the_graph_holds():
    graph = _chain()
    assert [n.outputs[0] for n in graph.index.nodes_of("matmul")] == ["h", "y"] and graph.index.nodes_of("conv2d") == []
    relu = ops.get("relu").make_params()
    assert ("relu", relu) in graph.index.op_params and len(graph.index.op_params) == 3


def test_depends_on_agrees_with_graph_reachability():
    # The search's cycle check: "is any of these values computed from any of those?"
    import networkx as nx

    graph = load_onnx(build("nasrnn", steps=2))
    dag = nx.DiGraph()
    for node in graph.nodes:
        dag.add_node(node.outputs[0])
        for v in node.inputs:
            if graph.producer(v) is not None:
                dag.add_edge(graph.producer(v).outputs[0], node.outputs[0])
    values = [n.outputs[0] for n in graph.nodes]
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b = rng.choice(values, 2, replace=False)
        assert graph.index.depends_on([a], {b}) == nx.has_path(dag, b, a)


def test_closes_cycle_when_an_added_node_reads_what_depends_on_its_own_output():
    graph = _chain()
    assert graph.index.closes_cycle([_node("relu", ["y"], ["h2"])]) is False
    # A node redefining h (which y is computed from) while reading y would close a cycle.
    assert graph.index.closes_cycle([_node("relu", ["y"], ["h"])]) is True


def test_search_key_after_is_the_key_of_the_built_graph():
    graph = _chain()
    old = graph.producer("r")
    new = _node("sigmoid", ["h"], ["r"])
    built = graph.replace(remove=[old], add=[new])
    assert graph.index.search_key_after([old], [new]) == built.index.search_key()
    assert built.index.search_key() != graph.index.search_key()
    reordered = Graph(graph.inputs, graph.weights, reversed(graph.nodes), graph.outputs)
    assert reordered.index.search_key() == graph.index.search_key()  # independent of node order
    assert graph.index.search_key_after([], [], outputs=["y"]) == graph.with_outputs(["y"]).index.search_key()


def test_an_index_does_not_keep_its_graph_alive():
    # The search turns automatic garbage collection off: a graph and its index must be freed by reference counting.
    graph = _chain()
    graph.index.nodes_of("relu")
    graph.index.depends_on(["t"], {"h"})
    alive = weakref.ref(graph)
    gc.disable()
    try:
        del graph
        assert alive() is None
    finally:
        gc.enable()
