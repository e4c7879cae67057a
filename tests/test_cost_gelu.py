"""ONNX Runtime's GeluFusion in the price: an exact GELU is one kernel, and a rewrite that takes a part of it away pays
for the four kernels it unfuses (on BERT, moving GELU's scale by 0.5 into the next product's weight was priced a gain
and measured 0.98x)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import library_rewrites
from test_cost_residency import _n, _Priced

import taso
from taso.cost.model import CostModel, Neighbourhood
from taso.cost.ort_fusions import gelu_parts
from taso.ir import Graph, TensorType

DATA = Path(__file__).parent / "data" / "symbolic"


@pytest.fixture
def priced(tmp_path, monkeypatch) -> _Priced:
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    return _Priced()


def _gelu_net(half_first: bool = False, inverse_root: bool = False, half: float = 0.5) -> Graph:
    """x W -> GELU -> V, the GELU written as exporters write it: x / sqrt(2) (or x * (1 / sqrt(2))) -> Erf -> + 1 ->
    * x -> * 0.5, or with x * 0.5 first."""
    rng = np.random.default_rng(0)
    weights = {"W": rng.standard_normal((16, 64)).astype(np.float32), "V": rng.standard_normal((64, 16)).astype(np.float32),
               "root": np.array(1 / math.sqrt(2) if inverse_root else math.sqrt(2), np.float32),
               "one": np.array(1.0, np.float32), "half": np.array(half, np.float32)}
    scale = _n("mul" if inverse_root else "div", ["h", "root"], ["d"])
    nodes = [_n("matmul", ["x", "W"], ["h"]), scale, _n("erf", ["d"], ["e"]), _n("add", ["e", "one"], ["p"])]
    if half_first:
        nodes += [_n("scalar_mul", ["h", "half"], ["hh"]), _n("mul", ["hh", "p"], ["g"])]
    else:
        nodes += [_n("mul", ["h", "p"], ["m"]), _n("scalar_mul", ["m", "half"], ["g"])]
    nodes.append(_n("matmul", ["g", "V"], ["y"]))
    return Graph({"x": TensorType((8, 16))}, weights, nodes, ["y"])


def _onnx_runtime_gelus(model: onnx.ModelProto | str, tmp_path: Path) -> int:
    """How many Gelu kernels ONNX Runtime's optimizer makes of a model (its optimized graph, written out): Gelu, or
    BiasGelu where the bias Add before it is not already part of a Gemm."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model if isinstance(model, str) else model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sum(n.op_type in ("Gelu", "BiasGelu") for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node)


@pytest.mark.parametrize("half_first", [False, True], ids=["x*(1+erf)*0.5", "(x*0.5)*(1+erf)"])
def test_an_exact_gelu_is_priced_as_its_erf_where_onnx_runtime_fuses_it(priced, tmp_path, half_first):
    graph = _gelu_net(half_first)
    around = Neighbourhood.of(graph)
    erf = next(n for n in graph.nodes if n.op.name == "erf")
    parts = gelu_parts(erf, around)
    assert parts is not None and len(parts) == 5
    assert [n.op.name for n in graph.nodes if priced.absorbed(n, around)] == [n.op.name for n in graph.nodes if n in parts and n is not erf]
    assert _onnx_runtime_gelus(taso.export_onnx(graph), tmp_path) == 1, "ONNX Runtime makes one Gelu of it"
    assert priced.graph_cost(graph) == pytest.approx(sum(priced.cost_in(n, around) for n in graph.nodes if n.op.name in ("matmul", "erf"))
                                                     + priced.parent_reads(graph)[1])


@pytest.mark.parametrize("form", ["a quarter, not a half", "times 1 / sqrt(2)"])
def test_a_gelu_onnx_runtime_does_not_fuse_is_priced_node_by_node(priced, tmp_path, form):
    graph = _gelu_net(half=0.25) if form.startswith("a quarter") else _gelu_net(inverse_root=True)
    around = Neighbourhood.of(graph)
    assert gelu_parts(next(n for n in graph.nodes if n.op.name == "erf"), around) is None
    assert not any(priced.absorbed(n, around) for n in graph.nodes)
    assert _onnx_runtime_gelus(taso.export_onnx(graph), tmp_path) == 0


@pytest.mark.parametrize("name,shapes", [("bert_hf_tiny.torchscript.onnx", {"input_ids": (2, 16), "attention_mask": (2, 16)}),
                                         ("bert_tiny.torchscript.onnx", {"input_ids": (2, 16)})])
def test_the_gelus_found_in_real_exports_are_those_onnx_runtime_fuses(name, shapes, tmp_path):
    """A transformers BERT and a PyTorch encoder, exported by TorchScript (the dynamo exports write no Erf: their GELU
    is one node)."""
    graph = taso.load_onnx(str(DATA / name), input_shapes=shapes)
    around = Neighbourhood.of(graph)
    found = sum(gelu_parts(n, around) is not None for n in graph.nodes if n.op.name == "erf")
    assert found >= 1 and found == _onnx_runtime_gelus(str(DATA / name), tmp_path)


def test_a_rewrite_that_takes_the_half_away_pays_for_the_kernels_it_unfuses(priced):
    """Moving the scale by 0.5 into the next product's weight saves a kernel node by node; priced with the fusion it
    breaks, it costs the Div, Add and Mul that then run apart. Each rewrite's price from its parent is the child's own."""
    graph = _gelu_net()
    parent_cost = priced.graph_cost(graph)
    checked = unfused = 0
    for rule, plan, child in library_rewrites(graph):
        assert priced.rewrite_cost(graph, parent_cost, plan.removed, plan.added, plan) == pytest.approx(priced.graph_cost(child), rel=1e-12), rule
        checked += 1
        after = Neighbourhood.of(child)
        if not any(priced.absorbed(n, after) for n in child.nodes):
            unfused += 1
            assert priced.graph_cost(child) > CostModel.graph_cost(priced, child) - 1e-15
    assert checked > 5 and unfused > 0
