"""GELU as exporters write it: ONNX's Gelu and ONNX Runtime's FastGelu defined by their decompositions (checked against
ONNX Runtime's kernels), the proved rules from the exporters' forms into them, constants matched by value, and ONNX
Runtime's FastGeluFusion known to the cost model."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import run_ort
from onnx import TensorProto, helper

import taso
from taso.cost.model import Neighbourhood
from taso.cost.ort_fusions import gelu_parts
from taso.ir import Graph, Node, TensorType
from taso.ops import get
from taso.pipeline.library import EXPORTER_FORMS, ORT_FUSIONS, for_target, load_rules
from taso.rules import Library
from taso.search.rewrite import CompiledRule, apply_match, find_matches
from taso.specs import axiom
from taso.verifier.axiom_check import validate_axiom

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "symbolic"
CONSTANTS = {"half": 0.5, "one": 1.0, "three": 3.0, "c": 0.044715, "k": math.sqrt(2 / math.pi)}


def _forms() -> list:
    return [r for r in Library.load(EXPORTER_FORMS).rules if r.name.startswith("gelu-")]


def _n(op: str, inputs, outputs, **params) -> Node:
    return Node(get(op), get(op).make_params(**params), tuple(inputs), tuple(outputs))


def _gpt2_gelu(constants: dict | None = None, graph_output: bool = False) -> Graph:
    """x W -> transformers' gelu_new as both exporters write it (a Mul by a scalar read as a scale) -> V; the constant 1
    also read by another node, as a dynamo export shares it."""
    values = {**CONSTANTS, **(constants or {})}
    rng = np.random.default_rng(0)
    weights = {k: np.array(v, np.float32) for k, v in values.items()}
    weights.update(W=rng.standard_normal((16, 64)).astype(np.float32) / 4, V=rng.standard_normal((64, 16)).astype(np.float32) / 8)
    nodes = [_n("matmul", ["x", "W"], ["h"]), _n("pow", ["h", "three"], ["p"]), _n("scalar_mul", ["p", "c"], ["q"]), _n("add", ["h", "q"], ["r"]),
             _n("scalar_mul", ["r", "k"], ["s"]), _n("tanh", ["s"], ["t"]), _n("add", ["t", "one"], ["u"]), _n("scalar_mul", ["h", "half"], ["hh"]),
             _n("mul", ["hh", "u"], ["g"]), _n("add", ["x", "one"], ["x1"])]
    if graph_output:
        return Graph({"x": TensorType((2, 8, 16))}, weights, nodes, ["g", "x1"])
    nodes.append(_n("matmul", ["g", "V"], ["y"]))
    return Graph({"x": TensorType((2, 8, 16))}, weights, nodes, ["y", "x1"])


def _rule(name: str):
    return next(r for r in for_target(load_rules(), "onnx") if r.name == name)


# ---- the definitions, against the NumPy semantics and ONNX Runtime's kernels ------------------------------------------


@pytest.mark.parametrize("name", ["gelu-erf", "gelu-tanh", "fast_gelu-is-gelu-tanh"])
def test_each_gelu_definition_holds_on_the_numpy_semantics(name):
    for dtype in ("float64", "float32"):
        report = validate_axiom(axiom(name), dtype=dtype)
        assert not report.failures and report.sampled_defined >= 20, report


def _one_node(op_type: str, domain: str = "", inputs=("x",), **attrs) -> onnx.ModelProto:
    typed = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 64]) for n in ("x", "y")]
    extra = [helper.make_tensor_value_info("b", TensorProto.FLOAT, [64])] if "b" in inputs else []
    imports = [helper.make_opsetid("", 20)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    graph = helper.make_graph([helper.make_node(op_type, list(inputs), ["y"], domain=domain, **attrs)], "g", typed[:1] + extra, typed[1:])
    return helper.make_model(graph, opset_imports=imports)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_onnx_runtimes_gelu_kernels_are_the_decomposition(approximate):
    """ONNX's Gelu-20 and ONNX Runtime's FastGelu against the taso definition's own graph (the rule's source, written as
    standard operators) and its NumPy semantics."""
    rule = _rule(f"gelu-{'erf-torchlib' if approximate == 'none' else 'tanh-gpt2'}-2d")
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32) * 3
    source = rule.side_graph("source", {"x": (5, 64)})
    decomposed = run_ort(taso.export_onnx(source), {"x": x})[0]
    gelu = run_ort(_one_node("Gelu", approximate=approximate), {"x": x})[0]
    np.testing.assert_allclose(gelu, decomposed, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gelu, get("gelu").evaluate([x], get("gelu").make_params(approximate=approximate))[0], rtol=1e-5, atol=1e-6)
    if approximate == "tanh":
        np.testing.assert_allclose(run_ort(_one_node("FastGelu", "com.microsoft"), {"x": x})[0], gelu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_type,inputs", [("FastGelu", ("x",)), ("FastGelu", ("x", "b")), ("Gelu", ("x",)), ("BiasGelu", ("x", "b"))])
def test_onnx_runtimes_gelu_nodes_in_a_file_are_read_and_written_back_equal(op_type, inputs):
    """What ONNX Runtime's transformers optimizer writes: read as a GELU (of x plus the bias), written back, run equal."""
    model = _one_node(op_type, "com.microsoft", inputs)
    graph = taso.load_onnx(model, input_shapes={"x": (3, 64)})
    assert {n.op.name for n in graph.nodes} & {"gelu", "fast_gelu"} and "opaque" not in {n.op.name for n in graph.nodes}
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((3, 64)).astype(np.float32), "b": rng.standard_normal(64).astype(np.float32)}
    np.testing.assert_allclose(run_ort(taso.export_onnx(graph), feeds)[0], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [17, 20])
def test_a_tanh_gelu_is_written_at_any_opset(opset):
    """Below opset 20, ONNX has no Gelu: the node is written as its definition."""
    graph = Graph({"x": TensorType((4, 8))}, {}, [_n("gelu", ["x"], ["y"], approximate="tanh")], ["y"])
    model = taso.export_onnx(graph, opset=opset)
    assert ("Gelu" in {n.op_type for n in model.graph.node}) == (opset >= 20)
    x = np.linspace(-4, 4, 32, dtype=np.float32).reshape(4, 8)
    np.testing.assert_allclose(run_ort(model, {"x": x})[0], graph.run({"x": x})["y"], rtol=1e-5, atol=1e-6)


# ---- the rules -------------------------------------------------------------------------------------------------------


def test_every_exporter_form_is_proved_from_the_gelu_definitions():
    rules = _forms()
    assert len(rules) == 12 and all(r.status == "proved" for r in rules)
    for rule in rules:
        assert [n.op for n in rule.target] == ["gelu"]
        assert any(a.startswith("gelu-") for a in rule.proof["axioms"]), rule.name


def test_the_shipped_forms_are_what_the_rule_file_builder_writes():
    spec = importlib.util.spec_from_file_location("exporter_forms", ROOT / "specs" / "rules" / "exporter_forms.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    written = Library.load(ROOT / "specs" / "rules" / "exporter_forms.json").rules
    assert [r.id for r in builder.rules()] == [r.id for r in written]
    shipped = Library.load(EXPORTER_FORMS).rules  # (a rule proved with added shape constraints has a new id)
    assert [(r.name, r.source, r.target) for r in shipped] == [(r.name, r.source, r.target) for r in written]


def test_a_form_whose_constant_is_not_the_definitions_is_not_proved():
    from taso.verifier.verify import Settings, verify_rules

    rule = next(r for r in _forms() if r.name == "gelu-tanh-gpt2-3d")
    nodes = [n if n.params.get("value") != float(np.float32(math.sqrt(2 / math.pi))) else type(n)(n.op, {**n.params, "value": 0.7978}, n.inputs, n.outputs)
             for n in rule.source]
    assert nodes != list(rule.source)
    wrong = Library([type(rule)(inputs=rule.inputs, source=tuple(nodes), target=rule.target, outputs=rule.outputs)]).rules
    assert verify_rules(wrong, Settings(timeout_s=10))[0].status != "proved"


def test_fast_gelu_rules_are_proved_by_its_definition():
    rules = [r for r in Library.load(ORT_FUSIONS).rules if r.target[0].op == "fast_gelu"]
    assert len(rules) == 3 and all(r.status == "proved" and r.proof["axioms"] == ["fast_gelu-is-gelu-tanh"] for r in rules)


# ---- constants matched by value --------------------------------------------------------------------------------------


def test_a_form_matches_by_its_constants_values_and_keeps_a_shared_constant():
    graph = _gpt2_gelu()
    crule = CompiledRule(_rule("gelu-tanh-gpt2-3d"))
    matches = list(find_matches(graph, crule))
    assert len(matches) == 1
    child = apply_match(graph, matches[0])
    assert [n.op.name for n in child.nodes].count("gelu") == 1 and "tanh" not in {n.op.name for n in child.nodes}
    assert "one" in child.weights, "the 1 another node reads stays"
    x = np.random.default_rng(3).standard_normal((2, 8, 16)).astype(np.float32)
    np.testing.assert_allclose(child.run({"x": x})["y"], graph.run({"x": x})["y"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("constants", [{"half": 0.25}, {"c": 0.0447}, {"three": 2.0}], ids=["a quarter", "0.0447", "a square"])
def test_a_constant_of_another_value_does_not_match(constants):
    assert not list(find_matches(_gpt2_gelu(constants), CompiledRule(_rule("gelu-tanh-gpt2-3d"))))


def test_a_constant_the_graph_computes_is_not_a_constant_of_that_value():
    graph = _gpt2_gelu()
    nodes = [n if n.outputs != ("t",) else _n("tanh", ["s"], ["t"]) for n in graph.nodes]
    nodes = [n if n.outputs != ("u",) else _n("add", ["t", "one2"], ["u"]) for n in nodes] + [_n("relu", ["one"], ["one2"])]
    varied = Graph(graph.inputs, dict(graph.weights), nodes, list(graph.outputs))
    assert not list(find_matches(varied, CompiledRule(_rule("gelu-tanh-gpt2-3d"))))


@pytest.mark.parametrize("search", ["backtracking", "eqsat"])
def test_both_search_engines_write_the_gelu(search):
    graph = _gpt2_gelu()
    rules = [_rule("gelu-tanh-gpt2-3d")]
    optimized = taso.optimize(graph, cost="analytic", rules=rules, search=search, time_limit=20, confirm=False)
    assert [n.op.name for n in optimized.nodes].count("gelu") == 1


def test_the_rules_take_in_the_gelus_of_a_torchscript_export():
    """transformers' BERT exported by TorchScript below opset 20: its GELUs, x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5,
    are each one gelu after the rewrites, and the model runs equal on ONNX Runtime."""
    path = DATA / "bert_hf_tiny.torchscript.onnx"
    graph = taso.load_onnx(str(path), input_shapes={"input_ids": (2, 16), "attention_mask": (2, 16)})
    erfs = sum(n.op.name == "erf" for n in graph.nodes)
    assert erfs >= 1
    crules = [CompiledRule(r) for r in _forms() if r.name.startswith("gelu-erf")]
    rewritten = graph
    for crule in crules:
        while (match := next(iter(find_matches(rewritten, crule)), None)) is not None:
            rewritten = apply_match(rewritten, match)
    assert sum(n.op.name == "gelu" for n in rewritten.nodes) == erfs and not any(n.op.name == "erf" for n in rewritten.nodes)
    rng = np.random.default_rng(4)
    feeds = {"input_ids": rng.integers(0, 100, (2, 16)).astype(np.int64), "attention_mask": np.ones((2, 16), np.int64)}
    for got, want in zip(run_ort(taso.export_onnx(rewritten), feeds), run_ort(str(path), feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ---- ONNX Runtime's FastGeluFusion in the price ----------------------------------------------------------------------


def _fast_gelus(model: onnx.ModelProto, tmp_path: Path) -> int:
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sum(n.op_type == "FastGelu" for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node)


@pytest.mark.parametrize("graph_output", [False, True], ids=["read by a product", "a graph output"])
@pytest.mark.parametrize("constants", [{}, {"k": 0.7}], ids=["gelu_new", "another constant"])
def test_the_tanh_gelus_found_are_those_onnx_runtime_fuses(tmp_path, graph_output, constants):
    """FastGeluFusion leaves a GELU whose result is a graph output alone (GeluFusion does not), and one of other constants."""
    graph = _gpt2_gelu(constants, graph_output)
    around = Neighbourhood.of(graph)
    found = sum(gelu_parts(n, around) is not None for n in graph.nodes if n.op.name == "tanh")
    assert found == _fast_gelus(taso.export_onnx(graph), tmp_path) == (0 if graph_output or constants else 1)


def test_a_tanh_gelu_is_priced_as_one_fast_gelu(tmp_path, monkeypatch):
    from test_cost_residency import _Priced

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    priced = _Priced()
    graph = _gpt2_gelu()
    around = Neighbourhood.of(graph)
    tanh = next(n for n in graph.nodes if n.op.name == "tanh")
    parts = gelu_parts(tanh, around)
    assert parts is not None and len(parts) == 8
    assert {n.op.name for n in graph.nodes if n in parts and priced.absorbed(n, around)} == {"pow", "scalar_mul", "add", "mul"}
    assert not priced.absorbed(tanh, around) and priced.shared_price(tanh, around) is not None


def test_taso_info_lists_each_form_by_name_with_its_proof():
    from taso.cli.info import describe_library, format_library

    text = format_library(describe_library(Library.load(EXPORTER_FORMS)), "exporter forms")
    for rule in _forms():
        line = next(line for line in text.splitlines() if rule.id in line)
        assert rule.name in line and "[proved by " in line and ("gelu-erf" in line or "gelu-tanh" in line), line
