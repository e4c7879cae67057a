"""The end-to-end guard's verdicts: decided on independent pairs of sessions for a short model, remembered per
(input, candidate) pair on this machine, and timed again on request."""

from __future__ import annotations

import importlib
import json

import numpy as np
import onnx
from helpers import fake_timer, patch_pipeline
from onnx import TensorProto, helper, numpy_helper
from test_cli_robustness import _save, matmul_relu_model

from taso.cli import main
from taso.pipeline.verdicts import GuardVerdict, VerdictCache, layout_digest

pipeline = importlib.import_module("taso.pipeline")

SHORT = 0.001  # an input's seconds per run, under the guard's short-run bound


def _counting_timer(monkeypatch, speedups):
    """A fake timer whose k-th series times the input at SHORT seconds and the candidate SHORT / speedups[k]; the
    list of models each series timed is returned for counting."""
    series, timed = iter(speedups), []

    def times(models):
        timed.append(list(models))
        return [SHORT, SHORT / next(series)]

    patch_pipeline(monkeypatch, "InterleavedTimer", fake_timer(times))
    return timed


def _optimize(src, library_path, **options):
    return pipeline.optimize_model(pipeline.ModelSource.from_file(src), pipeline.load_rules(library_path), "analytic",
                                          confirm=True, **options)


def test_a_short_model_outlier_pair_is_outvoted_by_fresh_pairs(tmp_path, library, monkeypatch):
    """The same LSTMCell merge measured 0.60x in one pair of sessions and 1.04-1.18x in eight others."""
    timed = _counting_timer(monkeypatch, [0.6, 1.1, 1.08])
    outcome = _optimize(_save(tmp_path, matmul_relu_model(), "mr.onnx"), library)
    assert outcome.kept == "optimized" and outcome.speedups["optimized"] == 1.08  # the median of the three pairs
    assert len(timed) == 3


def test_a_short_model_lucky_pair_is_outvoted_too(tmp_path, library, monkeypatch):
    timed = _counting_timer(monkeypatch, [1.5, 0.97, 0.99, 1.0, 1.0])  # optimized: one lucky pair; then the re-export
    outcome = _optimize(_save(tmp_path, matmul_relu_model(), "mr.onnx"), library)
    assert outcome.kept == "input" and outcome.speedups["optimized"] == 0.99
    # The optimized model was predicted a clear gain, so its rejection is not remembered, and the re-export (the same
    # model but for names: the fused product is written as MatMul + Relu again) is timed on its own.
    assert len(timed) == 5 and not outcome.remembered and outcome.speedups["re-export"] == 1.0


def test_two_agreeing_pairs_decide_a_short_model(tmp_path, library, monkeypatch):
    timed = _counting_timer(monkeypatch, [1.1, 1.2])
    outcome = _optimize(_save(tmp_path, matmul_relu_model(), "mr.onnx"), library)
    assert outcome.kept == "optimized" and len(timed) == 2


def test_a_verdict_is_remembered_for_the_same_pair_and_timed_again_on_request(tmp_path, library, monkeypatch):
    src = _save(tmp_path, matmul_relu_model(), "mr.onnx")
    timed = _counting_timer(monkeypatch, [1.1, 1.2])
    first = _optimize(src, library)
    assert first.kept == "optimized" and len(timed) == 2 and not first.remembered
    again = _optimize(src, library)  # no series left: timing now would fail
    assert again.kept == "optimized" and again.remembered == {"optimized"} and len(timed) == 2
    assert again.speedups["optimized"] == first.speedups["optimized"]
    timed = _counting_timer(monkeypatch, [0.9, 0.95, 1.0, 1.0])  # measured again: slower now, and the re-export 1x
    retimed = _optimize(src, library, retime=True)
    assert retimed.kept == "input" and not retimed.remembered and len(timed) == 4
    assert _optimize(src, library).kept == "input", "the new verdict replaced the old"


def test_a_remembered_verdict_is_not_used_on_another_machine_or_timing_size(tmp_path):
    cache = VerdictCache("machine A", str(tmp_path / "v.json"))
    cache.put("in>out", GuardVerdict(1.3, True))
    assert VerdictCache("machine A", str(tmp_path / "v.json")).get("in>out") == GuardVerdict(1.3, True)
    assert VerdictCache("machine B", str(tmp_path / "v.json")).get("in>out") is None
    (tmp_path / "bad.json").write_text("{not json")
    broken = VerdictCache("machine A", str(tmp_path / "bad.json"))
    assert broken.get("in>out") is None
    broken.put("in>out", GuardVerdict(0.9, False))
    assert json.loads((tmp_path / "bad.json").read_text())["machine A"]["in>out"] == {"kept": False, "speedup": 0.9}


def test_verdicts_of_two_runs_saved_in_turn_are_both_kept(tmp_path):
    first, second = VerdictCache("m", str(tmp_path / "v.json")), VerdictCache("m", str(tmp_path / "v.json"))
    first.put("a", GuardVerdict(1.1, True))
    second.put("b", GuardVerdict(0.9, False))
    assert VerdictCache("m", str(tmp_path / "v.json")).get("a") == GuardVerdict(1.1, True)


def _two_products(weight_scale: float = 1.0, swap: bool = False, bias_value: float = 0.0) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    big = [numpy_helper.from_array((rng.standard_normal((64, 64)) * weight_scale).astype(np.float32), f"w{i}") for i in range(2)]
    small = numpy_helper.from_array(np.full(64, bias_value, np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["p0"]), helper.make_node("MatMul", ["x", "w1"], ["p1"])]
    nodes = nodes[::-1] if swap else nodes
    nodes += [helper.make_node("Add", ["p0", "p1"], ["s"]), helper.make_node("Add", ["s", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])], [*big, small])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_layout_is_named_by_what_decides_its_speed():
    base = layout_digest(_two_products())
    assert layout_digest(_two_products(weight_scale=2.0)) == base, "large weights' values do not change a kernel's speed"
    assert layout_digest(_two_products(swap=True)) != base, "node order decides ONNX Runtime's run order"
    assert layout_digest(_two_products(bias_value=1.0)) != base, "small constants decide its no-op eliminations"
    renamed = _two_products()
    for node in renamed.graph.node:
        node.name = f"renamed_{node.op_type}"
        node.input[:] = [{"p0": "q0", "p1": "q1", "s": "t"}.get(v, v) for v in node.input]
        node.output[:] = [{"p0": "q0", "p1": "q1", "s": "t"}.get(v, v) for v in node.output]
    assert layout_digest(renamed) == base, "the names of nodes and of the values they compute do not"


def test_the_cli_says_a_verdict_was_remembered(tmp_path, library, monkeypatch, capsys):
    src, out = _save(tmp_path, matmul_relu_model(), "mr.onnx"), str(tmp_path / "out.onnx")
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    _counting_timer(monkeypatch, [1.1, 1.2])
    args = ["optimize", src, "-o", out, "--library", library, "--budget", "3", "--quiet"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 0
    assert "remembered from an earlier run on this machine, --retime times it again" in capsys.readouterr().out


def test_a_predicted_gain_rejected_by_the_guard_is_timed_again_next_run_not_replayed(tmp_path, library, monkeypatch):
    """A GRU h128x16 merge at 2 threads, predicted 1.19x, measured 1.017x in one guard and 1.21-1.23x in every guard
    after: a rejection that contradicts a clear prediction is not remembered; the next run times it again."""
    patch_pipeline(monkeypatch, "FRESH_LOOK_PREDICTED", 0.0)  # every prediction counts as a clear gain here
    src = _save(tmp_path, _two_products(), "two.onnx")  # optimized, its layout is not the re-export's
    timed = _counting_timer(monkeypatch, [0.9, 0.95])  # optimized: two pairs below the margin
    first = _optimize(src, library)
    assert first.kept == "input" and len(timed) == 2
    assert any("not remembered" in note for note in first.notes)
    timed = _counting_timer(monkeypatch, [1.2, 1.25])
    second = _optimize(src, library)
    assert second.kept == "optimized" and "optimized" not in second.remembered and len(timed) == 2
    assert _optimize(src, library).remembered == {"optimized"}, "a kept verdict is remembered as before"
