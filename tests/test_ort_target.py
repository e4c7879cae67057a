"""`--target ort`: ONNX Runtime's SkipLayerNormalization, its definition checked against ONNX Runtime's kernel, the
proved rules into it, and the runs that may use it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

from taso.errors import TasoError
from taso.onnx import to_onnx_model
from taso.pipeline.library import DEFAULT_LIBRARY, EXPORTER_FORMS, ORT_FUSIONS, RUNTIME_FORMS, for_target, load_rules
from taso.rules import Library


def _fusions() -> list:
    return Library.load(ORT_FUSIONS).rules


def _run(model, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_every_shipped_fusion_is_proved_by_the_skip_layer_norm_definition():
    rules = [r for r in _fusions() if r.target[0].op != "fast_gelu"]  # (FastGelu's: tests/test_gelu_forms.py)
    assert len(rules) == 24 and all(r.status == "proved" for r in rules)
    for rule in rules:
        assert [n.op for n in rule.target] == ["skip_layer_norm"]
        assert all(a.startswith("skip_layer_norm") for a in rule.proof["axioms"]), rule.name


@pytest.mark.parametrize("name", ["skip-layer-norm-3d[1e-05]", "skip-layer-norm-2d-no-beta[1e-12]", "skip-layer-norm-3d-sum[1e-06]",
                                  "skip-layer-norm-2d-no-beta-sum[1e-05]"])
def test_the_fused_side_runs_on_onnx_runtime_as_the_plain_side_does(name):
    """Each side of a rule written as ONNX and run by ONNX Runtime: its com.microsoft kernel against the standard
    operators, at the rule's example shapes (this checks the NumPy definition the proofs rest on, too)."""
    rule = next(r for r in _fusions() if r.name == name)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.type.shape).astype(np.float32) for i in rule.inputs}
    plain, fused = (to_onnx_model(rule.side_graph(side), opset=17) for side in ("source", "target"))
    assert {o.domain for o in fused.opset_import} == {"", "com.microsoft"}
    assert [n.op_type for n in fused.graph.node if n.domain == "com.microsoft"] == ["SkipLayerNormalization"]
    numpy_side = rule.side_graph("target")
    by_numpy = numpy_side.run(feeds)
    expected = [by_numpy[v] for v in numpy_side.outputs]
    for a, b, c in zip(_run(plain, feeds), _run(fused, feeds), expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(b, c, rtol=1e-4, atol=1e-5)


def test_a_fusion_whose_epsilons_differ_is_not_proved():
    from taso.verifier.verify import Settings, verify_rules

    rule = next(r for r in _fusions() if r.name == "skip-layer-norm-3d[1e-05]")
    wrong = Library([_with_target_epsilon(rule, 1e-6)]).rules
    (result,) = verify_rules(wrong, Settings(timeout_s=10.0), 1)
    assert result.status != "proved"


def _with_target_epsilon(rule, epsilon: float):
    """The rule, its fused side at another epsilon, as an unproved candidate."""
    from dataclasses import replace

    target = tuple(replace(n, params={**n.params, "epsilon": epsilon}) for n in rule.target)
    return replace(rule, target=target, status="candidate", proof=None)


def test_the_onnx_target_undoes_the_fusions_and_the_ort_target_makes_them_too():
    """Both targets get the runtime forms; --target onnx only the fusions' reverses (a file's SkipLayerNormalization
    taken apart, never one made), --target ort the fusions both ways."""
    shipped = load_rules(DEFAULT_LIBRARY)
    forms, fusions = len(load_rules(RUNTIME_FORMS).slots) + len(load_rules(EXPORTER_FORMS).slots), len(load_rules(ORT_FUSIONS).slots)
    for_onnx = for_target(shipped, "onnx")
    assert len(for_onnx.slots) == len(shipped.slots) + forms + fusions // 2
    added = list(for_onnx)[len(list(shipped)):]
    assert not any(n.op in ("skip_layer_norm", "fast_gelu") for rule in added for n in rule.target)
    assert sum(any(n.op in ("skip_layer_norm", "fast_gelu") for n in rule.source) for rule in added) == len(_fusions())
    with_fusions = for_target(shipped, "ort")
    assert len(with_fusions.slots) == len(shipped.slots) + forms + fusions
    with pytest.raises(TasoError, match="unknown target"):
        for_target(shipped, "tensorrt")


def test_an_unknown_target_is_one_line_and_a_non_zero_exit(tmp_path):
    done = subprocess.run([sys.executable, "-m", "taso", "optimize", "in.onnx", "-o", str(tmp_path / "o.onnx"), "--target", "trt"],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "Traceback" not in done.stderr and "--target" in done.stderr


def test_the_shipped_fusions_are_the_rule_file_proved():
    """taso/data/ort_fusions.jsonl.gz is `taso verify specs/rules/ort_fusions.json`'s output: the same rules, none left out."""
    from pathlib import Path

    candidates = Library.load(str(Path(__file__).resolve().parents[1] / "specs" / "rules" / "ort_fusions.json")).rules
    assert [r.id for r in candidates] == [r.id for r in _fusions()]


def _skip_layer_norm_file(with_bias: bool, with_sum: bool, beta: bool = True):
    """A file holding a com.microsoft SkipLayerNormalization as ONNX Runtime's transformers optimizer writes one."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {n: rng.standard_normal(8).astype(np.float32) for n in ("g", "b", "bias")}
    inputs = ["x", "s", "g", "b" if beta else "", "bias" if with_bias else ""]
    while not inputs[-1]:
        inputs.pop()
    outputs = ["y", "", "", "r"] if with_sum else ["y"]
    node = helper.make_node("SkipLayerNormalization", inputs, outputs, domain="com.microsoft", epsilon=1e-5)
    typed = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4, 8]) for n in ("x", "s", *[o for o in outputs if o])]
    graph = helper.make_graph([node], "sln", typed[:2], typed[2:], initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)], ir_version=10), onnx


@pytest.mark.parametrize("with_bias,with_sum,beta", [(False, False, True), (False, True, True), (True, False, True), (True, True, False)],
                         ids=["plain", "with the sum", "with a bias", "bias, sum, no beta"])
def test_a_files_skip_layer_norm_is_read_into_taso_and_written_back_equal(with_bias, with_sum, beta):
    """ONNX Runtime's transformers optimizer writes SkipLayerNormalization into files; taso reads it (its bias as an
    Add before it) so that the fusions' reverses can take it apart, and writes it back running as the file does."""
    import taso

    model, _ = _skip_layer_norm_file(with_bias, with_sum, beta)
    graph = taso.load_onnx(model)
    assert [n.op.name for n in graph.nodes] == ["add"] * with_bias + ["skip_layer_norm"]
    assert graph.nodes[-1].params["sum"] == int(with_sum) and graph.nodes[-1].params["epsilon"] == 1e-5
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((2, 4, 8)).astype(np.float32) for n in ("x", "s")}
    for a, b in zip(_run(model, feeds), _run(taso.export_onnx(graph), feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_a_skip_layer_norm_with_its_statistics_outputs_stays_opaque():
    import taso
    from onnx import helper

    model, _ = _skip_layer_norm_file(False, False)
    node = model.graph.node[0]
    node.output.extend(["mean"])
    model.graph.output.append(helper.make_tensor_value_info("mean", 1, None))
    assert [n.op.name for n in taso.load_onnx(model).nodes] == ["opaque"]


def test_an_opaque_contrib_node_gets_its_domain_declared_where_the_file_left_it_out():
    """ONNX Runtime's transformers optimizer writes FastGelu without importing com.microsoft (ONNX Runtime runs it); the
    written file declares the domain, so onnx.checker passes once the rewrites took every SkipLayerNormalization out."""
    import onnx
    from onnx import TensorProto, helper

    import taso

    node = helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft")
    typed = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8]) for n in ("x", "y")]
    model = helper.make_model(helper.make_graph([node], "g", typed[:1], typed[1:]), opset_imports=[helper.make_opsetid("", 17)])
    written = taso.export_onnx(taso.load_onnx(model))
    assert ("com.microsoft", 1) in [(o.domain, o.version) for o in written.opset_import]
    onnx.checker.check_model(written)
