"""Measuring in bulk: one session of many nodes runs each as it runs alone, the entries land in the table as measured
ones, and the search hands the cost model what it would otherwise measure one by one."""

from __future__ import annotations

import time

import numpy as np
import onnx
import onnxruntime as ort

from taso import ops
from taso.cost import AnalyticCost, CostCache, node_key
from taso.cost.bulk import BULK_BYTES, Single, bulk_model
from taso.cost.copies import Pair, many_round_differences, with_copies
from taso.cost.ort_cpu import OrtCpuCost
from taso.ir import Graph, Node, TensorType
from taso.onnx.probes import REFERENCE


def _n(op, inputs, outputs, **params):
    o = ops.get(op)
    return Node(o, o.make_params(**params), tuple(inputs), tuple(outputs), outputs[0])


def _cell_step(width: int = 256) -> Graph:
    """A step of an LSTM cell at batch 1: a product, a bias, a Split into gates, their activations, products and sums."""
    nodes = [_n("matmul", ["x", "w"], ["y"]), _n("add", ["y", "b"], ["yb"]),
             _n("split", ["yb"], ["i", "f", "g", "o"], axis=1, sizes=(width,) * 4),
             _n("sigmoid", ["i"], ["si"]), _n("tanh", ["g"], ["tg"]), _n("mul", ["si", "tg"], ["m"]), _n("add", ["m", "f"], ["z"])]
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((width, 4 * width)).astype(np.float32), "b": np.zeros(4 * width, np.float32)}
    return Graph({"x": TensorType((1, width))}, weights, nodes, ["z", "o"])


def _singles(model: OrtCpuCost, graph: Graph) -> list[Single]:
    consts = graph.constant_values()
    return [Single(*model._single_model(node, graph, consts)) for node in graph.nodes]


def test_the_bulk_session_runs_every_node_as_its_own_model_does(tmp_path):
    """Chained after one another (each copy waits on what ran before it by adding a zero), the nodes still compute what
    they compute alone: cold and warm copies alike."""
    model = OrtCpuCost(1, CostCache(str(tmp_path / "costs.json")))
    singles = _singles(model, _cell_step(64))
    built = bulk_model([onnx.load_model_from_string(s.model) for s in singles])
    assert built is not None
    bulk, prefixes = built
    feeds = {f"{REFERENCE}_x": np.ones((128, 256), np.float32)}
    for i, (single, prefix) in enumerate(zip(singles, prefixes)):
        feeds.update({prefix + name: value for name, value in single.feeds.items()})
        feeds[f"__taso_bulk{i}/floor_x"] = np.ones(1, np.float32)
    outputs = [o.name for o in bulk.graph.output]
    ran = dict(zip(outputs, ort.InferenceSession(bulk.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)))
    for single, prefix in zip(singles, prefixes):
        alone = ort.InferenceSession(single.model, providers=["CPUExecutionProvider"])
        for output, value in zip(alone.get_outputs(), alone.run(None, single.feeds)):
            np.testing.assert_allclose(ran[prefix + output.name], value, rtol=1e-6)
            np.testing.assert_allclose(ran[f"{prefix}{output.name}~warm"], value, rtol=1e-6)


def test_a_node_without_a_computed_input_to_chain_by_is_not_put_in_a_bulk_session():
    g = onnx.helper.make_graph([onnx.helper.make_node("Not", ["x"], ["y"])], "g",
                               [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.BOOL, [4])],
                               [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.BOOL, [4])])
    assert bulk_model([onnx.helper.make_model(g)]) is None


def test_nodes_measured_ahead_are_in_the_table_with_their_bands_and_are_not_measured_again(tmp_path, monkeypatch):
    graph = _cell_step(64)
    model = OrtCpuCost(1, CostCache(str(tmp_path / "costs.json")))
    measured = model.measure_graph_ahead(graph)
    consts = graph.constant_values()
    keys = {node_key(node, graph, consts) for node in graph.nodes}
    assert measured == len(keys) == model.measured  # the two Adds differ (a weight, a computed value): 7 keys
    for key in keys:
        assert model._table[key] > 0 and model.cache.entry(model.fingerprint, key).band is not None

    def not_again(*args, **kwargs):
        raise AssertionError("measured alone after it was measured ahead")

    monkeypatch.setattr(model, "fresh", not_again)
    assert model.graph_cost(graph) > 0
    assert model.measure_graph_ahead(graph) == 0, "nothing left to measure"


def test_a_node_too_large_for_a_shared_session_is_left_to_be_measured_alone(tmp_path):
    width = 256  # [256, 1024] floats: a 1 MB weight
    graph = _cell_step(width)
    model = OrtCpuCost(1, CostCache(str(tmp_path / "costs.json")))
    assert 4 * width * 4 * width > BULK_BYTES
    model.measure_graph_ahead(graph)
    product = node_key(graph.nodes[0], graph, graph.constant_values())
    assert product not in model._table and len(model._table) > 2


def test_past_the_searchs_deadline_nothing_is_measured_ahead(tmp_path):
    graph = _cell_step(64)
    model = OrtCpuCost(1, CostCache(str(tmp_path / "costs.json")))
    model.deadline = time.perf_counter() - 1.0
    assert model.measure_graph_ahead(graph) == 0


def test_pairs_timed_together_give_each_pair_its_own_rounds():
    """Two pairs in the same rounds: copies of a 64-float Neg against one, and of a 4096-float one (a larger kernel)."""
    def negation(n: int) -> onnx.ModelProto:
        g = onnx.helper.make_graph([onnx.helper.make_node("Neg", ["x"], ["y"])], "neg",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [n])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [n])])
        return onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)])

    pairs = [Pair(negation(n), with_copies(negation(n), 9), 8, {"x": np.ones(n, np.float32)}) for n in (64, 1 << 16)]
    small, large = many_round_differences(pairs, threads=1)
    assert len(small) == len(large) == 7
    assert np.median(large) > np.median(small)  # 64K floats negated take longer than 64: each pair is its own


class _Counting(AnalyticCost):
    """A roofline that counts what the search asks it to measure ahead."""

    def __init__(self):
        super().__init__()
        self.ahead: list[int] = []

    def measure_ahead(self, nodes) -> int:
        self.ahead.append(len(list(nodes)))
        return 0


def test_the_search_measures_the_input_and_each_expansions_new_nodes_ahead():
    from taso.pipeline.library import load_rules
    from taso.search import SearchConfig, search

    model = _Counting()
    _, report = search(_cell_step(64), load_rules(), model, SearchConfig(budget=5, time_limit=30))
    assert model.ahead[0] == len(_cell_step(64).nodes), "the input's nodes first"
    assert len(model.ahead) > report.expanded >= 1 and sum(model.ahead[1:]) > 0


def test_a_fused_activation_is_measured_ahead_as_its_plain_op_and_the_activation(tmp_path):
    """As measure() prices it: MatMul + Relu runs as a product and a Relu (ONNX Runtime fuses no Relu into a MatMul)."""
    graph = Graph({"x": TensorType((1, 64))}, {"w": np.ones((64, 64), np.float32)},
                  [_n("matmul", ["x", "w"], ["y"], activation="relu")], ["y"])
    model = OrtCpuCost(1, CostCache(str(tmp_path / "costs.json")))
    assert model.measure_graph_ahead(graph) == 2
