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
from taso.pipeline.library import DEFAULT_LIBRARY, ORT_FUSIONS, RUNTIME_FORMS, for_target, load_rules
from taso.rules import Library


def _fusions() -> list:
    return Library.load(ORT_FUSIONS).rules


def _run(model, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_every_shipped_fusion_is_proved_by_the_skip_layer_norm_definition():
    rules = _fusions()
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


def test_the_onnx_target_adds_the_runtime_forms_and_the_ort_target_the_fusions_too():
    shipped = load_rules(DEFAULT_LIBRARY)
    forms = len(load_rules(RUNTIME_FORMS).slots)
    assert len(for_target(shipped, "onnx").slots) == len(shipped.slots) + forms
    with_fusions = for_target(shipped, "ort")
    assert len(with_fusions.slots) == len(shipped.slots) + forms + len(load_rules(ORT_FUSIONS).slots)
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
