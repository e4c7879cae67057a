"""ONNX Runtime's SkipLayerNormFusion in the price: the residual Add before a LayerNormalization runs as one
SkipLayerNormalization kernel where ONNX Runtime's conditions hold, priced as that kernel; the proved rule that writes
the Add as a Sum keeps the two apart (on an AMD EPYC core the fused kernel is 4-7x slower than the pair:
benchmarks/costs/bench_fused_kernels.py, and the dynamo BERT export measured 1.30x so)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import library_rewrites
from test_cost_residency import _n, _Priced

import taso
from taso.cost.model import Neighbourhood
from taso.cost.ort_fusions import skip_norm_of, skip_norm_parts
from taso.ir import Graph, TensorType
from taso.ir.dims import symbol
from taso.pipeline.library import RUNTIME_FORMS
from taso.rules import Library

HIDDEN = 16


@pytest.fixture
def priced(tmp_path, monkeypatch) -> _Priced:
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    return _Priced()


def _residual_norm(form: str) -> Graph:
    """x + s -> LayerNormalization over the last axis, in the forms ONNX Runtime's fusion does and does not take."""
    rng = np.random.default_rng(0)
    weights = {"g": rng.standard_normal(HIDDEN).astype(np.float32), "b": rng.standard_normal(HIDDEN).astype(np.float32),
               "bias": rng.standard_normal(HIDDEN).astype(np.float32)}
    shape = {"2-D": (8, HIDDEN), "symbolic batch": (symbol("batch", 2), 8, HIDDEN)}.get(form, (2, 8, HIDDEN))
    inputs = {"x": TensorType(shape), "s": TensorType((1, 8, HIDDEN) if form == "skip broadcast" else shape)}
    nodes, outputs = [], ["y"]
    x, s = "x", "s"
    if form.startswith("bias Add"):  # a product's bias the exporter left as an Add: ONNX Runtime takes it in too
        nodes.append(_n("add", ["x", "bias"], ["xb"]))
        x, s = ("xb", "s") if form == "bias Add first" else ("s", "xb")
    nodes.append(_n("sum" if form == "written as Sum" else "add", [x, s], ["r"]))
    nodes.append(_n("layer_norm", ["r", "g", "b"], ["y"], axis=len(shape) - 1, epsilon=1e-5))
    if form == "sum read again":
        nodes.append(_n("relu", ["r"], ["z"]))
        outputs.append("z")
    if form == "sum an output":
        outputs.append("r")
    return Graph(inputs, weights, nodes, outputs)


def _onnx_runtime_skip_norms(graph: Graph, tmp_path: Path) -> list[int]:
    """The inputs of each SkipLayerNormalization ONNX Runtime's optimizer makes of the graph written as ONNX."""
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(taso.export_onnx(graph).SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [sum(bool(v) for v in n.input) for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node
            if n.op_type == "SkipLayerNormalization"]


FUSED = {"3-D": 1, "symbolic batch": 1, "bias Add first": 2, "bias Add second": 2}
UNFUSED = ["2-D", "skip broadcast", "sum read again", "sum an output", "written as Sum"]


@pytest.mark.parametrize("form", [*FUSED, *UNFUSED])
def test_the_residual_adds_found_are_those_onnx_runtime_fuses(form, tmp_path):
    graph = _residual_norm(form)
    around = Neighbourhood.of(graph)
    norm = next(n for n in graph.nodes if n.op.name == "layer_norm")
    parts = skip_norm_parts(norm, around)
    fused = _onnx_runtime_skip_norms(graph, tmp_path)
    if form in FUSED:
        assert parts is not None and len(parts) == FUSED[form]
        assert fused == [4 + (len(parts) - 1)], "ONNX Runtime makes one SkipLayerNormalization, with the bias as its fifth input"
        assert all(skip_norm_of(add, around) is norm for add in parts)
    else:
        assert parts is None and fused == []
        assert not any(skip_norm_of(n, around) for n in graph.nodes)


def test_a_fused_pair_is_priced_as_the_kernel_onnx_runtime_runs(priced):
    graph = _residual_norm("3-D")
    around = Neighbourhood.of(graph)
    add, norm = graph.nodes
    assert priced.cost_in(add, around) == 0.0
    fused = _n("skip_layer_norm", ["x", "s", "g", "b"], ["y"], epsilon=1e-5)
    alone = Graph({"x": graph.type("x"), "skip": graph.type("s")}, {k: graph.weights[k] for k in "gb"},
                  [_n("skip_layer_norm", ["x", "skip", "g", "b"], ["y"], epsilon=1e-5)], ["y"])
    assert priced.cost_in(norm, around) == pytest.approx(priced.node_cost(alone.nodes[0], alone))
    assert fused.op.name == "skip_layer_norm"
    plain = _residual_norm("written as Sum")
    there = Neighbourhood.of(plain)
    assert priced.graph_cost(plain) == pytest.approx(sum(priced.node_cost(n, plain) for n in plain.nodes) + priced.parent_reads(plain)[1])
    assert all(priced.cost_in(n, there) == priced.node_cost(n, plain) for n in plain.nodes)


@pytest.mark.parametrize("form", ["3-D", "bias Add first", "sum read again"])
def test_each_rewrite_is_priced_from_its_parent_as_the_built_child(priced, form):
    """Writing the residual as a Sum unfuses the pair; any other rewrite near it may make or break the fusion. Each
    rewrite's price from its parent is the child's own."""
    graph = _residual_norm(form)
    parent_cost = priced.graph_cost(graph)
    names = []
    for rule, plan, child in library_rewrites(graph, target="onnx"):
        assert priced.rewrite_cost(graph, parent_cost, plan.removed, plan.added, plan) == pytest.approx(priced.graph_cost(child), rel=1e-12), rule
        names.append(rule.name)
    assert ("residual-sum-before-layer-norm[1e-05]" in names) == (form != "sum read again")


def test_the_shipped_runtime_forms_are_the_rule_file_proved():
    """taso/data/runtime_forms.jsonl.gz is `taso verify specs/rules/runtime_forms.json`'s output, each rule proved by
    the definition of sum alone (every target gets them: tests/test_ort_target.py)."""
    candidates = Library.load(str(Path(__file__).resolve().parents[1] / "specs" / "rules" / "runtime_forms.json")).rules
    shipped = Library.load(RUNTIME_FORMS).rules
    assert [r.id for r in candidates] == [r.id for r in shipped] and len(shipped) == 6
    assert all(r.status == "proved" and r.proof["axioms"] == ["sum-is-add"] for r in shipped)


def test_a_sum_runs_on_onnx_runtime_as_the_add_it_stands_for():
    graph = _residual_norm("written as Sum")
    model = taso.export_onnx(graph)
    assert [n.op_type for n in model.graph.node] == ["Sum", "LayerNormalization"]
    rng = np.random.default_rng(1)
    feeds = {v: rng.standard_normal(graph.type(v).concrete().shape).astype(np.float32) for v in graph.inputs}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = graph.run(feeds)
    np.testing.assert_allclose(session.run(None, feeds)[0], expected["y"], rtol=1e-5, atol=1e-5)


class _FusedCheaper(_Priced):
    """The roofline's prices, the fused kernel a quarter of its own: a machine where --target ort would pay."""

    def measure(self, node, graph, key, consts):
        seconds = super().measure(node, graph, key, consts)
        return seconds / 4 if node.op.name == "skip_layer_norm" else seconds


def test_the_report_says_what_the_ort_target_would_add_where_the_fused_kernel_is_priced_faster(tmp_path, monkeypatch):
    from taso.pipeline.targets import ort_gain

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    graph = _residual_norm("sum read again")  # the sum read on: ONNX Runtime does not fuse it at load, a rule can
    cheaper = ort_gain(graph, _FusedCheaper())
    assert cheaper.places >= 1 and cheaper.seconds > 0 and "--target ort" in cheaper.note()
    slower = ort_gain(graph, _Slower())
    assert slower.places == 0 and slower.note() is None


class _Slower(_Priced):
    def measure(self, node, graph, key, consts):
        seconds = super().measure(node, graph, key, consts)
        return seconds * 5 if node.op.name == "skip_layer_norm" else seconds
