"""Layer norm and RMS norm as exporters write them: ONNX's LayerNormalization and RMSNormalization (and ONNX Runtime's
SimplifiedLayerNormalization) defined by their decompositions and checked against ONNX Runtime's kernels, the proved
rules from the written-out forms into them, the operators written at any opset, and ONNX Runtime's LayerNormFusion and
SimplifiedLayerNormFusion known to the cost model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import run_ort
from onnx import TensorProto, helper, numpy_helper

import taso
from taso.cost.model import Neighbourhood
from taso.cost.ort_fusions import norm_parts
from taso.ir import Graph, Node, TensorType
from taso.ops import get
from taso.pipeline.library import EXPORTER_FORMS, for_target, load_rules
from taso.rules import Library
from taso.search.rewrite import CompiledRule, apply_match, find_matches
from taso.specs import AXIOMS
from taso.verifier.axiom_check import validate_axiom

DATA = Path(__file__).parent / "data" / "symbolic"
D = 32


def _norm_rules() -> list:
    return [r for r in Library.load(EXPORTER_FORMS).rules if r.target[0].op in ("layer_norm", "rms_norm")]


def _rule(name: str):
    return next(r for r in for_target(load_rules(), "onnx") if r.name == name)


def _optimized_op_types(model: onnx.ModelProto, tmp_path: Path) -> list[str]:
    """The operators ONNX Runtime runs the model as, at ENABLE_ALL on the CPU."""
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node]


# ---- the definitions, against the NumPy semantics and ONNX Runtime's kernels ------------------------------------------


@pytest.mark.parametrize("name", [a.name for a in AXIOMS if "-definition-3d" in a.name or a.name == "reciprocal-is-div"])
def test_each_norm_definition_holds_on_the_numpy_semantics(name):
    axiom = next(a for a in AXIOMS if a.name == name)
    for dtype in ("float64", "float32"):
        report = validate_axiom(axiom, dtype=dtype)
        assert not report.failures and report.sampled_defined >= 20, report


def _one_node(op_type: str, opset: int, inputs=("x", "g"), **attrs) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(D)).astype(np.float32), "g"),
               numpy_helper.from_array((0.1 * rng.standard_normal(D)).astype(np.float32), "b")]
    graph = helper.make_graph([helper.make_node(op_type, list(inputs), ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights[:len(inputs) - 1])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("rule_name,op_type,opset", [
    ("rms-norm-torchlib-3d[1e-06]", "RMSNormalization", 23), ("rms-norm-torchscript-3d[1e-05]", "SimplifiedLayerNormalization", 17),
    ("layer-norm-python-3d[1e-12]", "LayerNormalization", 17), ("layer-norm-torchscript-3d[0]", "LayerNormalization", 17)])
def test_onnx_runtimes_norm_kernels_are_the_definitions(rule_name, op_type, opset):
    """Each kernel against the rule's source (the written-out form, as standard operators) and taso's NumPy semantics."""
    rule = _rule(rule_name)
    op, epsilon = rule.target[0].op, rule.target[0].params["epsilon"]
    model = _one_node(op_type, opset, ("x", "g", "b") if op == "layer_norm" else ("x", "g"), axis=-1, epsilon=epsilon)
    x = np.random.default_rng(1).standard_normal((3, 8, D)).astype(np.float32) * 2
    weights = {w.name: numpy_helper.to_array(w) for w in model.graph.initializer}
    source = rule.side_graph("source", {i.name: (3, 8, D) if i.name == "x" else (D,) for i in rule.inputs})
    written_out = run_ort(taso.export_onnx(source), {"x": x, **weights})[0]
    kernel = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(kernel, written_out, rtol=1e-5, atol=1e-5)
    reference = get(op).evaluate([x, *weights.values()][:len(model.graph.initializer) + 1], get(op).make_params(axis=2, epsilon=epsilon))[0]
    np.testing.assert_allclose(kernel, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op_type,opset", [("RMSNormalization", 23), ("SimplifiedLayerNormalization", 17)])
def test_an_rms_norm_in_a_file_is_read_and_written_back_equal(op_type, opset):
    """ONNX's RMSNormalization, and what ONNX Runtime's optimizer writes (SimplifiedLayerNormalization in ONNX's domain)."""
    model = _one_node(op_type, opset, epsilon=1e-6)
    graph = taso.load_onnx(model, input_shapes={"x": (2, 8, D)})
    assert [n.op.name for n in graph.nodes] == ["rms_norm"]
    x = np.random.default_rng(2).standard_normal((2, 8, D)).astype(np.float32)
    np.testing.assert_allclose(run_ort(taso.export_onnx(graph), {"x": x})[0], run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("inputs,outputs,attrs", [(["x", "s", "g"], ["y"], {}), (["x", "s", "g", "b"], ["y", "", "", "sum"], {"epsilon": 1e-6}),
                                                   (["x", "s", "g"], ["y", "", "", "sum"], {"epsilon": 1e-5})],
                         ids=["default epsilon", "bias and sum", "sum"])
def test_onnx_runtimes_skip_rms_norm_in_a_file_is_read_and_written_back_equal(inputs, outputs, attrs):
    """com.microsoft.SkipSimplifiedLayerNormalization (the transformers optimizer's for T5 and Llama) reads as the
    residual Add (and bias Add) and an rms_norm, its sum an output where the file reads it."""
    rng = np.random.default_rng(8)
    weights = [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(D)).astype(np.float32), "g"),
               numpy_helper.from_array((0.1 * rng.standard_normal(D)).astype(np.float32), "b")]
    graph = helper.make_graph([helper.make_node("SkipSimplifiedLayerNormalization", inputs, outputs, domain="com.microsoft", **attrs)], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8, D]) for n in "xs"],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    read = taso.load_onnx(model)
    assert [n.op.name for n in read.nodes] == ["add"] * (len(inputs) - 2) + ["rms_norm"]
    feeds = {n: rng.standard_normal((2, 8, D)).astype(np.float32) for n in "xs"}
    for got, want in zip(run_ort(taso.export_onnx(read), feeds), run_ort(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,opset,written,fused", [
    ("rms_norm", 20, "Pow", "SimplifiedLayerNormalization"), ("rms_norm", 23, "RMSNormalization", "RMSNormalization"),
    ("layer_norm", 14, "ReduceMean", "LayerNormalization"), ("layer_norm", 17, "LayerNormalization", "LayerNormalization")])
def test_a_norm_is_written_at_any_opset_in_a_form_onnx_runtime_runs_as_one_kernel(tmp_path, op, opset, written, fused):
    """Below the operator's opset, the decomposition that defines it; ONNX Runtime makes that one kernel again at load."""
    rng = np.random.default_rng(3)
    weights = {"g": (1 + 0.1 * rng.standard_normal(D)).astype(np.float32), "b": (0.1 * rng.standard_normal(D)).astype(np.float32)}
    vectors = ["g", "b"] if op == "layer_norm" else ["g"]
    node = Node(get(op), get(op).make_params(axis=2, epsilon=1e-6), ("x", *vectors), ("y",))
    graph = Graph({"x": TensorType((2, 8, D))}, {v: weights[v] for v in vectors}, [node], ["y"])
    model = taso.export_onnx(graph, opset=opset)
    assert model.graph.node[0].op_type == written and _optimized_op_types(model, tmp_path) == [fused]
    x = rng.standard_normal((2, 8, D)).astype(np.float32)
    np.testing.assert_allclose(run_ort(model, {"x": x})[0], graph.run({"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_a_runtime_other_than_onnx_runtime_times_the_norm_as_its_file_holds_it():
    """The guard of the torch runtime times the candidate as its file reads back: below opset 23 an rms_norm is written
    as its definition, so there it is not one kernel."""
    from taso.pipeline.source import as_written, export_onnx

    node = Node(get("rms_norm"), get("rms_norm").make_params(axis=2, epsilon=1e-6), ("x", "g"), ("y",))
    for opset, ops in ((20, {"pow", "reduce_mean", "add", "sqrt", "div", "mul"}), (23, {"rms_norm"})):
        graph = Graph({"x": TensorType((2, 8, D))}, {"g": np.ones(D, np.float32) * 1.1}, [node], ["y"])
        graph = Graph(graph.inputs, graph.weights, graph.nodes, graph.outputs, meta=type(graph.meta)(**{**graph.meta.__dict__, "opset": opset}))
        assert {n.op.name for n in as_written(graph, export_onnx(graph)).nodes} == ops


# ---- the rules -------------------------------------------------------------------------------------------------------


def test_every_written_out_norm_is_proved_from_the_definitions():
    rules = _norm_rules()
    assert len(rules) == 36 and all(r.status == "proved" for r in rules)
    for rule in rules:
        assert any(f"{rule.target[0].op}-definition" in a for a in rule.proof["axioms"]), rule.name


def test_a_norm_rule_at_another_epsilon_is_not_proved():
    from taso.verifier.verify import Settings, verify_rules

    rule = _rule("layer-norm-python-3d[1e-05]")
    target = rule.target[0]
    wrong = type(target)(target.op, {**target.params, "epsilon": 1e-6}, target.inputs, target.outputs)
    candidate = Library([type(rule)(inputs=rule.inputs, source=rule.source, target=(wrong,), outputs=rule.outputs)]).rules
    assert verify_rules(candidate, Settings(timeout_s=10))[0].status != "proved"


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_the_rules_take_in_the_norms_of_real_exports(exporter):
    """models/symbolic_exports.py's written_out_norms by both exporters: transformers' BERT-era layer norm (its + 1e-12
    dropped by the dynamo exporter's optimizer) and Llama's RMS norm become one layer_norm and one rms_norm; the rewritten
    model runs equal on ONNX Runtime."""
    path = DATA / f"written_out_norms.{exporter}.onnx"
    graph = taso.load_onnx(str(path), input_shapes={"x": (3, 8, D)})
    crules = [CompiledRule(r) for r in _norm_rules()]
    rewritten = graph
    for crule in crules:
        while (match := next(iter(find_matches(rewritten, crule)), None)) is not None:
            rewritten = apply_match(rewritten, match)
    ops = [n.op.name for n in rewritten.nodes]
    assert ops.count("layer_norm") == 1 and ops.count("rms_norm") == 1 and "sqrt" not in ops
    x = np.random.default_rng(4).standard_normal((3, 8, D)).astype(np.float32)
    np.testing.assert_allclose(run_ort(taso.export_onnx(rewritten), {"x": x})[0], run_ort(str(path), {"x": x})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_the_rules_take_in_transformers_own_rms_norms(tmp_path, exporter):
    """transformers' LlamaRMSNorm and T5LayerNorm classes (their casts included) by both exporters: two rms_norms, equal
    on ONNX Runtime. ONNX Runtime fuses the TorchScript forms at load and not the dynamo ones (the Reciprocal)."""
    path = DATA / f"transformers_rms_norms.{exporter}.onnx"
    graph = taso.load_onnx(str(path), input_shapes={"x": (3, 8, D)})
    rewritten = graph
    for crule in [CompiledRule(r) for r in _norm_rules() if r.target[0].op == "rms_norm"]:
        while (match := next(iter(find_matches(rewritten, crule)), None)) is not None:
            rewritten = apply_match(rewritten, match)
    assert [n.op.name for n in rewritten.nodes].count("rms_norm") == 2 and "sqrt" not in {n.op.name for n in rewritten.nodes}
    x = np.random.default_rng(6).standard_normal((3, 8, D)).astype(np.float32)
    np.testing.assert_allclose(run_ort(taso.export_onnx(rewritten), {"x": x})[0], run_ort(str(path), {"x": x})[0], rtol=1e-4, atol=1e-5)
    fused = _optimized_op_types(onnx.load(str(path)), tmp_path).count("SimplifiedLayerNormalization")
    assert fused == (2 if exporter == "torchscript" else 0)


def test_a_form_and_its_reverse_applied_back_and_forth_reuse_the_constants_the_reverse_wrote():
    """Every target gets the forms both ways. The reverse writes the definition's constants, which the forward rule
    keeps (a constant may be shared); written again at the same place, they are the same nodes, not a second
    definition of their values (which broke a torch-runtime bench of transformers_rms_norms)."""
    from taso.pipeline.library import both_directions

    forward, reverse = [CompiledRule(r) for r in both_directions([_rule("rms-norm-torchlib-3d[1e-06]")])]
    graph = taso.load_onnx(str(DATA / "transformers_rms_norms.dynamo.onnx"), input_shapes={"x": (3, 8, D)})
    x = np.random.default_rng(7).standard_normal((3, 8, D)).astype(np.float32)
    want = graph.run({"x": x})["output"]
    sizes = []
    for _ in range(3):
        for crule in (forward, reverse):
            graph = apply_match(graph, next(iter(find_matches(graph, crule))))
            sizes.append(len(graph.nodes))
    assert sizes[4:] == sizes[2:4], sizes  # from the second round on, no node is added again
    np.testing.assert_allclose(graph.run({"x": x})["output"], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("search", ["backtracking", "eqsat"])
def test_both_search_engines_write_the_norms(search):
    graph = taso.load_onnx(str(DATA / "written_out_norms.dynamo.onnx"), input_shapes={"x": (3, 8, D)})
    optimized = taso.optimize(graph, cost="analytic", rules=_norm_rules(), search=search, time_limit=20, confirm=False)
    ops = [n.op.name for n in optimized.nodes]
    assert ops.count("layer_norm") == 1 and ops.count("rms_norm") == 1


# ---- ONNX Runtime's LayerNormFusion and SimplifiedLayerNormFusion in the price ---------------------------------------


def _written_out(tail: list[tuple], outputs=("y",), eps: bool = True) -> onnx.ModelProto:
    """t^2 -> mean -> (+ eps) -> Sqrt, t = x - mean(x) for a layer norm (the names ``d``), then ``tail``."""
    rng = np.random.default_rng(5)
    weights = [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in (("two", 2.0), ("eps", 1e-5), ("one", 1.0))]
    weights += [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(D)).astype(np.float32), "g"),
                numpy_helper.from_array((0.1 * rng.standard_normal(D)).astype(np.float32), "b"),
                numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    t = "d" if any("d" in n[1] for n in tail) else "x"
    nodes = [("ReduceMean", ["x", "axes"], ["m"]), ("Sub", ["x", "m"], ["d"])] if t == "d" else []
    nodes += [("Pow", [t, "two"], ["p"]), ("ReduceMean", ["p", "axes"], ["v"])]
    nodes += [("Add", ["v", "eps"], ["ve"]), ("Sqrt", ["ve"], ["s"])] if eps else [("Sqrt", ["v"], ["s"])]
    graph = helper.make_graph([helper.make_node(op, i, o) for op, i, o in nodes + tail], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, D])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


_LAYER_NORM = [("Div", ["d", "s"], ["n"]), ("Mul", ["n", "g"], ["ng"]), ("Add", ["ng", "b"], ["y"])]
_RMS_NORM = [("Div", ["one", "s"], ["q"]), ("Mul", ["x", "q"], ["n"]), ("Mul", ["g", "n"], ["y"])]
VARIANTS = {
    "layer norm": (_written_out(_LAYER_NORM), "LayerNormalization"),
    "layer norm, gamma first": (_written_out([("Div", ["d", "s"], ["n"]), ("Mul", ["g", "n"], ["ng"]), ("Add", ["b", "ng"], ["y"])]), "LayerNormalization"),
    "layer norm, no beta": (_written_out([("Div", ["d", "s"], ["n"]), ("Mul", ["n", "g"], ["y"])]), "SimplifiedLayerNormalization"),
    "layer norm, x - mean also an output": (_written_out(_LAYER_NORM, outputs=("y", "d")), "SimplifiedLayerNormalization"),
    "layer norm, x also read by a Relu": (_written_out(_LAYER_NORM + [("Relu", ["x"], ["z"])], outputs=("y", "z")), "LayerNormalization"),
    "layer norm, no + eps": (_written_out(_LAYER_NORM, eps=False), None),
    "layer norm, no scale": (_written_out([("Div", ["d", "s"], ["y"])]), None),
    "rms norm, 1 / sqrt": (_written_out(_RMS_NORM), "SimplifiedLayerNormalization"),
    "rms norm, x also read by a Relu": (_written_out(_RMS_NORM + [("Relu", ["x"], ["z"])], outputs=("y", "z")), "SimplifiedLayerNormalization"),
    "rms norm, x / sqrt": (_written_out([("Div", ["x", "s"], ["n"]), ("Mul", ["n", "g"], ["y"])]), "SimplifiedLayerNormalization"),
    "rms norm, Reciprocal": (_written_out([("Reciprocal", ["s"], ["q"]), ("Mul", ["x", "q"], ["n"]), ("Mul", ["g", "n"], ["y"])]), None),
    "rms norm, no scale": (_written_out([("Div", ["x", "s"], ["y"])]), None),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_norms_found_are_those_onnx_runtime_fuses(tmp_path, variant):
    model, kernel = VARIANTS[variant]
    fused = [t for t in _optimized_op_types(model, tmp_path) if t.endswith("LayerNormalization")]
    assert fused == ([kernel] if kernel else [])
    graph = taso.load_onnx(model, input_shapes={"x": (2, 8, D)})
    around = Neighbourhood.of(graph)
    found = [parts.kernel for n in graph.nodes if n.op.name == "sqrt" and (parts := norm_parts(n, around)) is not None]
    assert found == ({"LayerNormalization": ["layer_norm"], "SimplifiedLayerNormalization": ["rms_norm"]}[kernel] if kernel else [])


def test_a_written_out_norm_onnx_runtime_fuses_is_priced_as_one_kernel_and_its_rule_gains_nothing(tmp_path, monkeypatch):
    from test_cost_residency import _Priced

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    priced = _Priced()
    graph = taso.load_onnx(_written_out(_LAYER_NORM), input_shapes={"x": (2, 8, D)})
    around = Neighbourhood.of(graph)
    sqrt = next(n for n in graph.nodes if n.op.name == "sqrt")
    assert {n.op.name for n in graph.nodes if priced.absorbed(n, around)} == {"reduce_mean", "sub", "pow", "add", "div", "mul"}
    assert not priced.absorbed(sqrt, around) and priced.shared_price(sqrt, around) is not None
    fused = Graph(graph.inputs, {k: graph.weights[k] for k in ("g", "b")},
                  [Node(get("layer_norm"), get("layer_norm").make_params(axis=2, epsilon=1e-5), ("x", "g", "b"), tuple(graph.outputs))],
                  list(graph.outputs))
    assert priced.graph_cost(graph) == pytest.approx(priced.graph_cost(fused), rel=1e-6)


def test_a_rewrite_that_breaks_the_fusion_reprices_every_part(tmp_path, monkeypatch):
    """A rewrite of the scale alone (here into a Relu: the fusion needs a scale) unfuses the whole norm: the search's
    incremental price of the child is its full price."""
    from test_cost_residency import _Priced

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    priced = _Priced()
    parent = taso.load_onnx(_written_out(_RMS_NORM), input_shapes={"x": (2, 8, D)})
    scale = next(n for n in parent.nodes if n.outputs == tuple(parent.outputs))
    relu = Node(get("relu"), get("relu").make_params(), (next(v for v in scale.inputs if v not in parent.weights),), scale.outputs)
    child = parent.replace(remove=[scale], add=[relu])
    assert priced.graph_cost(child) > priced.graph_cost(parent)  # the parts now run one by one
    incremental = priced.rewrite_cost(parent, priced.graph_cost(parent), [scale], [relu], child)
    assert incremental == pytest.approx(priced.graph_cost(child), rel=1e-6)


def test_a_norm_whose_scale_is_computed_from_weights_is_priced_as_one_kernel(tmp_path, monkeypatch):
    """A scale that is a node over weights (ONNX Runtime folds it, then fuses) is the fused node's input when priced."""
    from test_cost_residency import _Priced

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    graph = taso.load_onnx(_written_out(_RMS_NORM), input_shapes={"x": (2, 8, D)})
    scale = next(n for n in graph.nodes if n.outputs == tuple(graph.outputs))
    computed = _n_node("mul", ("g", "one"), ("g_computed",))
    rescaled = Node(scale.op, scale.params, tuple("g_computed" if v == "g" else v for v in scale.inputs), scale.outputs)
    graph = graph.replace(remove=[scale], add=[computed, rescaled])
    around = Neighbourhood.of(graph)
    sqrt = next(n for n in graph.nodes if n.op.name == "sqrt")
    assert norm_parts(sqrt, around).affine == ("g_computed",)
    assert _Priced().shared_price(sqrt, around) is not None


def _n_node(op: str, inputs, outputs) -> Node:
    return Node(get(op), get(op).make_params(), tuple(inputs), tuple(outputs))


def test_taso_info_lists_each_norm_form_by_name_with_its_proof():
    from taso.cli.info import describe_library, format_library

    text = format_library(describe_library(Library.load(EXPORTER_FORMS)), "exporter forms")
    for rule in _norm_rules():
        line = next(line for line in text.splitlines() if rule.id in line)
        assert rule.name in line and "[proved by " in line and "-definition-" in line, line
