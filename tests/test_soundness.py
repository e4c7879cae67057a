"""Soundness end to end: a rule applies only where its proof holds, and the output check cannot be fooled.

The first case is the one an audit found: ``ids:int64[4,4] -> Cast -> x``,
``y = mul(matmul(x, w1), matmul(x, w2))``. Rule r-bc3f90ab56 was proved with a bias
*vector* b1; the engine bound b1 to the 4x4 matrix ``matmul(x, w1)`` and rewrote, and the
output check passed because it fed zeros to every integer input.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from taso.verifier.apply_fuzz import fuzz_rule, fuzz_rules

import taso.search.rewrite as rewrite
from taso import load_onnx
from taso.measure.inputs import integer_ranges, random_inputs
from taso.measure.outputs import compare_models
from taso.onnx import to_onnx_model
from taso.pipeline.library import load_rules
from taso.rules import Library, Rule
from taso.search.rewrite import CompiledRule, plans, rewrites


def _cast_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1, w2 = (numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), n) for n in ("w1", "w2"))
    nodes = [helper.make_node("Cast", ["ids"], ["x"], to=TensorProto.FLOAT), helper.make_node("MatMul", ["x", "w1"], ["a"]),
             helper.make_node("MatMul", ["x", "w2"], ["b"]), helper.make_node("Mul", ["a", "b"], ["y"])]
    graph = helper.make_graph(nodes, "cast", [helper.make_tensor_value_info("ids", TensorProto.INT64, [4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def directed_rules() -> dict[str, Rule]:
    return {r.id: r for r in load_rules()}


def test_a_rule_proved_with_a_vector_never_binds_a_matrix(directed_rules):
    graph = load_onnx(_cast_model())
    assert list(plans(graph, CompiledRule(directed_rules["r-bc3f90ab56"]))) == []


def test_the_output_check_catches_that_wrong_rewrite_where_zeros_did_not(directed_rules, monkeypatch):
    model = _cast_model()
    graph = load_onnx(model)
    monkeypatch.setattr(rewrite, "_within_proof", lambda *args: True)  # the engine as it was: no check of the
    monkeypatch.setattr(rewrite, "_kinds_fit", lambda *args: True)     # proof's ranks and kinds, complete or partial
    wrong = to_onnx_model(next(rewrites(graph, CompiledRule(directed_rules["r-bc3f90ab56"]))))
    zeros = {"ids": np.zeros((4, 4), np.int64)}
    assert compare_models(model, wrong, [zeros]).ok  # what the old check saw
    result = compare_models(model, wrong, [random_inputs(model, seed) for seed in (0, 1)])
    assert not result.ok and result.worst_abs > 0.1


def test_another_vector_rule_and_a_proved_example_decline_other_ranks(directed_rules):
    rule = directed_rules["r-d29bdc89c1"]  # matmul(x1, mul(w1, b1)) => mul(b1, matmul(x1, w1)), b1 of shape (4,)
    graph = rule.side_graph("source", {"x1": (2, 4), "w1": (4, 4), "b1": (4, 4)})
    assert list(plans(graph, CompiledRule(rule))) == []
    assert list(plans(rule.side_graph("source"), CompiledRule(rule)))  # and it does apply where proved


def test_a_float64_model_still_matches_float32_rules(directed_rules):
    rule = directed_rules["r-d29bdc89c1"]
    graph = rule.side_graph("source")
    from taso.ir import Graph, TensorType

    as64 = Graph({k: TensorType(t.shape, "float64") for k, t in graph.inputs.items()}, {}, graph.nodes, graph.outputs, meta=graph.meta)
    assert list(plans(as64, CompiledRule(rule)))


# ---- inputs that exercise the graph ---------------------------------------------------------------------


def _gather_model(vocab: int) -> onnx.ModelProto:
    table = numpy_helper.from_array(np.arange(vocab * 3, dtype=np.float32).reshape(vocab, 3), "table")
    nodes = [helper.make_node("Unsqueeze", ["ids", "axes"], ["ids2"]), helper.make_node("Gather", ["table", "ids2"], ["e"], axis=0)]
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    graph = helper.make_graph(nodes, "gather", [helper.make_tensor_value_info("ids", TensorProto.INT64, [5]),
                                                helper.make_tensor_value_info("mask", TensorProto.INT32, [5])],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 5, 3])], [table, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_integer_inputs_stay_inside_the_range_they_index():
    model = _gather_model(vocab=7)
    assert integer_ranges(model) == {"ids": (0, 7), "mask": (0, 3)}
    values = np.concatenate([random_inputs(model, seed)["ids"] for seed in range(20)])
    assert values.min() >= 0 and values.max() < 7 and len(set(values.tolist())) > 3


def test_random_inputs_of_a_taso_graph_use_the_same_ranges():
    graph = load_onnx(_gather_model(vocab=2))
    feeds = random_inputs(graph, 0)
    assert feeds["ids"].max() < 2 and feeds["ids"].dtype == np.int64


def _constant_output_model(value: float) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    c = numpy_helper.from_array(np.array([value, 1.0], np.float32), "c")
    graph = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"])], "inf", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [c])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_identical_special_values_agree(value):
    model = _constant_output_model(value)
    assert compare_models(model, model, [random_inputs(model, 0)]).ok


def test_an_infinity_against_a_finite_value_differs():
    assert not compare_models(_constant_output_model(np.inf), _constant_output_model(1.0), [random_inputs(_constant_output_model(1.0), 0)]).ok


# ---- apply-fuzz: the engine applies proved rules only where they are true ----------------------------------


def test_apply_fuzz_sample_of_the_shipped_library_finds_no_wrong_application():
    rules = load_rules()
    sample = rules[:: max(1, len(rules) // 250)]
    reports = fuzz_rules(sample, shapes=5, seed=1)
    assert sum(r.applied for r in reports) >= 4 * len(sample)
    assert [r for r in reports if r.wrong] == []


def test_apply_fuzz_catches_a_false_rule():
    false = Rule.from_json({
        "inputs": [{"name": "x", "class": "mat", "shape": [2, 2], "dtype": "float32"}, {"name": "y", "class": "mat", "shape": [2, 2], "dtype": "float32"}],
        "source": [{"op": "matmul", "params": {}, "inputs": ["x", "y"], "outputs": ["s"]}],
        "target": [{"op": "matmul", "params": {}, "inputs": ["y", "x"], "outputs": ["t"]}],
        "outputs": [["s", "t"]], "status": "proved"})
    assert fuzz_rule(false).wrong


# ---- integrity: a library edited by hand is refused ------------------------------------------------------


def _small_library(tmp_path, status="proved"):
    rule = load_rules()[0]
    path = tmp_path / "lib.json"
    Library([rule.with_status(status, {"prover": "z3"} if status == "proved" else None)]).save(path)
    return path


def test_a_status_flipped_by_hand_is_refused(tmp_path):
    import json

    from taso.errors import TasoError

    path = _small_library(tmp_path, status="candidate")
    data = json.loads(path.read_text())
    data["rules"][0]["status"] = "proved"
    path.write_text(json.dumps(data))
    with pytest.raises(TasoError, match="digest"):
        load_rules(str(path))
    assert len(Library.load(path, check_digest=False)) == 1  # taso verify may still re-prove it


def test_a_library_without_a_digest_is_not_trusted(tmp_path):
    import json

    from taso.errors import TasoError

    path = _small_library(tmp_path)
    data = json.loads(path.read_text())
    del data["header"]["digest"]
    path.write_text(json.dumps(data))
    with pytest.raises(TasoError, match="no integrity digest"):
        load_rules(str(path))


def test_the_shipped_library_carries_a_matching_digest():
    from taso.pipeline.library import DEFAULT_LIBRARY

    library = Library.load(DEFAULT_LIBRARY)
    assert library.header["digest"] == library.digest()


# ---- vacuity: no proof rests on contradictory facts ---------------------------------------------------------


def test_sample_of_shipped_rules_has_consistent_facts():
    from taso.verifier.vacuity import contradiction

    from taso.pipeline.library import DEFAULT_LIBRARY

    rules = Library.load(DEFAULT_LIBRARY).rules
    assert [r.id for r in rules[:: len(rules) // 30] if contradiction(r, timeout_s=2.0)] == []


def test_vacuity_check_names_an_axiom_that_changes_shapes():
    from taso.specs import AXIOMS, Axiom
    from taso.specs.terms import op, tensors
    from taso.verifier.vacuity import contradiction

    x, y = tensors("x y")
    lie = Axiom("add-is-concat", op("add")(x, y), op("concat")(x, y, axis=0), lambda rng: {"x": (2, 2), "y": (2, 2)})
    rule = Rule.from_json({
        "inputs": [{"name": "x", "class": "mat", "shape": [2, 2], "dtype": "float32"}, {"name": "y", "class": "mat", "shape": [2, 2], "dtype": "float32"}],
        "source": [{"op": "add", "params": {}, "inputs": ["x", "y"], "outputs": ["s"]}, {"op": "concat", "params": {"axis": 0}, "inputs": ["s", "x"], "outputs": ["u"]}],
        "target": [{"op": "add", "params": {}, "inputs": ["y", "x"], "outputs": ["t"]}, {"op": "concat", "params": {"axis": 0}, "inputs": ["t", "x"], "outputs": ["v"]}],
        "outputs": [["u", "v"]]})
    assert contradiction(rule, timeout_s=5.0) is None
    assert "add-is-concat" in (contradiction(rule, [*AXIOMS, lie], timeout_s=5.0) or [])


def test_an_interrupted_library_save_leaves_no_temporary_file(tmp_path, monkeypatch):
    library = Library([load_rules()[0]])

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Library, "dumps", interrupted)
    with pytest.raises(KeyboardInterrupt):
        library.save(tmp_path / "lib.json")
    assert list(tmp_path.iterdir()) == []
