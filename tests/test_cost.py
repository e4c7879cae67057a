"""Cost models: measured costs are positive, cached per hardware and reused; analytic costs follow the work."""

from __future__ import annotations

import json

import numpy as np

from taso import ops
from taso.cli import main
from taso.cost import AnalyticCost, CostCache, node_key
from taso.cost_ort import OrtCpuCost
from taso.ir import Graph, Node, TensorType


def _graph(n: int = 64) -> Graph:
    mm, relu = ops.get("matmul"), ops.get("relu")
    nodes = [Node(mm, mm.make_params(), ("x", "w"), ("y",), "mm"), Node(relu, relu.make_params(), ("y",), ("z",), "relu")]
    return Graph({"x": TensorType((1, n))}, {"w": np.ones((n, n), np.float32)}, nodes, ["z"])


def test_node_key_distinguishes_constant_inputs():
    g = _graph()
    mm = g.producer("y")
    as_input = Graph({"x": TensorType((1, 64)), "w": TensorType((64, 64))}, {}, [mm], ["y"])
    assert node_key(mm, g) != node_key(mm, as_input)


def test_analytic_cost_grows_with_work():
    model = AnalyticCost()
    small, big = _graph(64), _graph(512)
    assert model.graph_cost(big) > model.graph_cost(small) > 0


def test_weight_only_nodes_cost_nothing():
    tr = ops.get("transpose")
    g = _graph()
    folded = g.replace(add=[Node(tr, tr.make_params(perm=(1, 0)), ("w",), ("wt",), "t")])
    assert AnalyticCost().graph_cost(folded) == AnalyticCost().graph_cost(g)


def test_measured_costs_are_cached_per_hardware_and_reused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    first = OrtCpuCost(threads=1)
    cost = first.graph_cost(_graph())
    first.close()
    assert cost > 0 and first.measured == 2
    second = OrtCpuCost(threads=1)
    assert second.graph_cost(_graph()) == cost and second.measured == 0  # nothing measured twice
    tables = json.loads((tmp_path / "costs.json").read_text())
    (fingerprint,) = tables
    assert "onnxruntime" in fingerprint and "threads=1" in fingerprint
    assert main(["info", "--costs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tables"][fingerprint] == len(tables[fingerprint])


def test_a_damaged_cache_is_ignored(tmp_path):
    path = tmp_path / "costs.json"
    path.write_text("{broken")
    assert CostCache(str(path)).summary() == {}
