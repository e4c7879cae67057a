"""The shadow a product split over threads casts over the single-threaded nodes after it (taso.cost.shadow)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from taso.cost import shadow as sh
from taso.cost.ort_cpu import OrtCpuCost
from taso.cost.residency import graph_run_order
from taso.ir import Graph, Node, TensorType
from taso.ops import get


def _n(op: str, inputs, outputs) -> Node:
    return Node(get(op), get(op).make_params(), tuple(inputs), tuple(outputs))


def _cell(hidden: int, steps: int = 2) -> Graph:
    """``steps`` steps of a product ``[1, hidden] x [hidden, 3 hidden]`` and three small nodes on its first columns."""
    weights = {"W": np.ones((hidden, 3 * hidden), np.float32) * 0.01}
    nodes, previous = [], "x"
    for i in range(steps):
        nodes += [_n("matmul", [previous, "W"], [f"p{i}"]),
                  Node(get("slice"), get("slice").make_params(starts=(0,), ends=(hidden,), axes=(1,), steps=(1,)), (f"p{i}",), (f"s{i}",)),
                  _n("tanh", [f"s{i}"], [f"t{i}"]), _n("sigmoid", [f"t{i}"], [f"h{i}"])]
        previous = f"h{i}"
    return Graph({"x": TensorType((1, hidden))}, weights, nodes, [previous])


def test_a_split_product_shades_the_small_nodes_after_it_up_to_the_next():
    graph = _cell(256)
    products = [n for n in graph.nodes if n.op.name == "matmul"]
    assert all(sh.splits_over_threads(p, graph) for p in products), "256 x 768 multiply-adds: MLAS splits it"
    price = {"matmul": 10.0, "slice": 1.0, "tanh": 2.0, "sigmoid": 3.0}
    spans = sh.shadow_spans(graph_run_order(graph), lambda n: price[n.op.name], lambda n: sh.thread_kind(n, graph))
    assert [(p.outputs[0], alone) for p, alone in spans] == [("p0", 6.0), ("p1", 6.0)]


def test_a_product_too_small_to_split_runs_alone_and_casts_no_shadow():
    graph = _cell(64)  # 64 x 192 multiply-adds: under MLAS's 64K
    assert not any(sh.splits_over_threads(n, graph) for n in graph.nodes)
    assert {sh.thread_kind(n, graph) for n in graph.nodes} == {sh.ALONE}
    assert sh.shadow_spans(graph_run_order(graph), lambda n: 1.0, lambda n: sh.thread_kind(n, graph)) == []


def test_the_shadow_charges_its_factor_over_the_window_only():
    shadow = sh.Shadow(factor=2.2, window=12e-6)
    assert shadow.extra(5e-6) == pytest.approx(1.2 * 5e-6)
    assert shadow.extra(40e-6) == pytest.approx(1.2 * 12e-6)
    assert sh.Shadow().none and sh.Shadow().extra(1.0) == 0.0


def _chains_costing(shadow: sh.Shadow, tanh: float):
    """A fake of the chains' wall-clock differences: per step, the longer chain's Tanhs at their price and their shadow."""
    def differences(base, more, per, feeds, threads, in_place, reference=None):
        gap = sum(n.op_type == "Tanh" for n in more.graph.node) // sh.STEPS - 1
        return [gap * tanh + shadow.extra(gap * tanh)] * 7

    return differences


def test_the_calibration_reads_the_factor_from_the_short_gap_and_the_window_from_the_long(monkeypatch):
    tanh = 0.4e-6
    monkeypatch.setattr(sh, "per_round_differences", _chains_costing(sh.Shadow(factor=2.0, window=12e-6), tanh))
    measured = sh.measure_shadow(2, tanh)
    assert measured.factor == pytest.approx(2.0) and measured.window == pytest.approx(12e-6)
    monkeypatch.setattr(sh, "per_round_differences", _chains_costing(sh.Shadow(), tanh))
    assert sh.measure_shadow(2, tanh).none, "Tanhs that cost their price after a product: no shadow"


def test_the_calibration_chain_runs_on_onnx_runtime():
    ort = pytest.importorskip("onnxruntime")
    model = sh.product_chain(16, 32, gap=2, alternate=True, steps=3)
    proto = onnx.load_model_from_string(model)
    assert [n.op_type for n in proto.graph.node].count("Tanh") == 9
    assert {n.input[1] for n in proto.graph.node if n.op_type == "Gemm"} == {"W0", "W1"}
    (y,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": np.ones((1, 16), np.float32)})
    assert y.shape == (1, 16) and np.all(np.abs(y) <= 1)


def test_at_one_thread_nothing_is_measured_or_charged(monkeypatch, tmp_path):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sh, "measure_shadow", lambda *a, **k: pytest.fail("measured at one thread"))
    assert OrtCpuCost(threads=1).shadow().none


def test_with_threads_the_graph_pays_each_products_shadow_as_a_surcharge(monkeypatch, tmp_path):
    from taso.cost import ort_cpu

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    model = OrtCpuCost(threads=2)
    prices = {"matmul": 20e-6, "slice": 0.5e-6, "tanh": 0.4e-6, "sigmoid": 0.5e-6}
    monkeypatch.setattr(OrtCpuCost, "cost_in", lambda self, node, around: prices[node.op.name])
    monkeypatch.setattr(OrtCpuCost, "_read_penalties", lambda self, reads, graph, consts: 0.0)
    monkeypatch.setattr(ort_cpu, "measure_shadow", lambda *a, **k: sh.Shadow(2.0, 1e-6))
    monkeypatch.setattr(OrtCpuCost, "node_cost", lambda self, *a, **k: 0.4e-6)
    monkeypatch.setattr(OrtCpuCost, "wall_reference", lambda self: None)
    graph = _cell(256, steps=3)
    plain = 3 * sum(prices.values())
    assert model.graph_cost(graph) == pytest.approx(plain + 3 * 1e-6), "1.4 us after each product, 1 us of it shaded"
    products = [n for n in graph.nodes if n.op.name == "matmul"]
    assert model.surcharges(graph) == {id(p): pytest.approx(1e-6) for p in products}
    model.close()
    monkeypatch.setattr(ort_cpu, "measure_shadow", lambda *a, **k: pytest.fail("measured again"))
    assert OrtCpuCost(threads=2).shadow() == sh.Shadow(2.0, 1e-6), "measured once per table"
