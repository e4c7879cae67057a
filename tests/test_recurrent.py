"""ONNX's LSTM and GRU as operators (taso.ops.recurrent): their two defining laws against the NumPy semantics, the ops
against ONNX Runtime's and torch's kernels, the four proved rules that take an unrolled nn.LSTMCell / nn.GRUCell loop
into one node a cell at a time, and the fold on both exporters' files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import assert_close, run_ort
from onnx import numpy_helper

import taso
from taso.onnx import to_onnx_model
from taso.pipeline.library import EXPORTER_FORMS
from taso.rules import Library
from taso.search.rewrite import CompiledRule
from taso.search.sequences import folded_loops
from taso.specs import AXIOMS
from taso.verifier.axiom_check import validate_axiom

DATA = Path(__file__).parent / "data" / "symbolic"
LOOPS = [("lstm_cell_loop", 4), ("gru_cell_loop", 3)]
EXPORTERS = ["dynamo", "torchscript"]


def _cell_rules() -> list:
    return [r for r in Library.load(EXPORTER_FORMS).rules if r.name.startswith(("lstm-cell-", "gru-cell-"))]


def _feeds(rule, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal(i.type.shape).astype(np.float32) for i in rule.inputs}


# ---- the definitions -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [a.name for a in AXIOMS if a.name.startswith(("lstm-", "gru-"))])
def test_each_recurrent_law_holds_on_the_numpy_semantics(name):
    axiom = next(a for a in AXIOMS if a.name == name)
    report = validate_axiom(axiom, dtype="float64")
    assert not report.failures and report.sampled_defined >= 20, report


# ---- the rules -------------------------------------------------------------------------------------------------------


def test_the_four_cell_rules_are_proved_from_the_laws():
    rules = {r.name: r for r in _cell_rules()}
    assert set(rules) == {"lstm-cell-start", "lstm-cell-extend", "gru-cell-start", "gru-cell-extend"}
    for name, rule in rules.items():
        kind = name.split("-")[0]
        assert rule.status == "proved", name
        assert any(a.startswith(f"{kind}-one-step") for a in rule.proof["axioms"]), name
        assert ("extend" in name) == any(a.startswith(f"{kind}-sequence") for a in rule.proof["axioms"]), name


def test_a_start_rule_with_its_states_swapped_is_not_proved():
    """The verifier can fail: h and c of the fused LSTM taken the wrong way round."""
    from taso.verifier.verify import Settings, verify_rules

    rule = next(r for r in _cell_rules() if r.name == "lstm-cell-start")
    (h, hv), (c, cv) = rule.outputs
    swapped = type(rule)(inputs=rule.inputs, source=rule.source, target=rule.target, outputs=((h, cv), (c, hv)))
    assert verify_rules(Library([swapped]).rules, Settings(timeout_s=10))[0].status != "proved"


@pytest.mark.parametrize("opset", [11, 17, 21])
def test_each_rule_s_sides_run_equal_on_onnx_runtime(opset):
    """The target's LSTM / GRU is ONNX Runtime's own kernel (the weights reordered to its gate order); the source is
    the cells written out. Both equal the NumPy semantics."""
    for rule in _cell_rules():
        feeds = _feeds(rule)
        source, target = rule.side_graph("source"), rule.side_graph("target")
        model = to_onnx_model(target, opset=opset)
        assert {n.op_type for n in model.graph.node} & {"LSTM", "GRU"}, rule.name
        want = run_ort(to_onnx_model(source, opset=opset), feeds)
        got = run_ort(model, feeds)
        assert_close(got, want, what=f"{rule.name} at opset {opset}")
        reference = target.run(feeds)
        assert_close(got, [reference[o] for o in target.outputs], what=f"{rule.name}: NumPy")


def test_the_ops_run_on_torch_s_sequence_kernels_equal_to_numpy():
    torch = pytest.importorskip("torch")
    from taso.measure.outputs import compare_outputs
    from taso.measure.torch_runtime import CpuDevice, TorchGraph

    for rule in _cell_rules():
        target, feeds = rule.side_graph("target"), _feeds(rule, seed=1)
        runtime = TorchGraph(target, CpuDevice(torch))
        comparison = compare_outputs(target.run(feeds), runtime.run_host(feeds))
        assert comparison.ok, f"{rule.name}: {comparison.describe()}"


# ---- the fold on exporters' files ------------------------------------------------------------------------------------


def _compiled() -> list[CompiledRule]:
    return [CompiledRule(r) for r in _cell_rules()]


def _batch_feeds(model: onnx.ModelProto, batch: int) -> dict:
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    return {"x": np.random.default_rng(batch).standard_normal((batch, *dims)).astype(np.float32)}


@pytest.mark.parametrize("name,steps", LOOPS)
@pytest.mark.parametrize("exporter", EXPORTERS)
def test_an_exported_cell_loop_folds_into_one_node_equal_at_every_batch(name, steps, exporter):
    model = onnx.load(str(DATA / f"{name}.{exporter}.onnx"))
    graph = taso.load_onnx(model)
    folded, applied = folded_loops(graph, _compiled())
    kind = name.split("_")[0]
    assert applied == [f"{kind}-cell-start"] + [f"{kind}-cell-extend"] * (steps - 1)
    ops = folded.op_histogram()
    assert ops[kind] == 1 and "matmul" not in ops and "sigmoid" not in ops, ops
    written = taso.export_onnx(folded)
    for batch in (1, 8):
        feeds = _batch_feeds(model, batch)
        assert_close(run_ort(written, feeds), run_ort(model, feeds), what=f"batch {batch}")


def _with_last_cell_s_weight_changed(model: onnx.ModelProto, weight: str) -> onnx.ModelProto:
    """The model with the last cell reading its own copy of ``weight``, of other values: a loop that is not one."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    last = [n for n in model.graph.node if weight in n.input][-1]
    original = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == weight))
    model.graph.initializer.append(numpy_helper.from_array((original * 0.5 + 0.01).astype(original.dtype), weight + ".last"))
    last.input[list(last.input).index(weight)] = weight + ".last"
    return model


@pytest.mark.parametrize("name,steps", LOOPS)
def test_a_cell_with_other_weights_ends_the_fold(name, steps):
    """The extend rule needs the very weights the sequence node reads: a last cell of its own is left unrolled."""
    model = _with_last_cell_s_weight_changed(onnx.load(str(DATA / f"{name}.torchscript.onnx")), "cell.weight_hh")
    folded, applied = folded_loops(taso.load_onnx(model), _compiled())
    kind = name.split("_")[0]
    assert applied == [f"{kind}-cell-start"] + [f"{kind}-cell-extend"] * (steps - 2)
    assert folded.op_histogram()[kind] == 1 and "sigmoid" in folded.op_histogram()
    written = taso.export_onnx(folded)
    for batch in (1, 5):
        feeds = _batch_feeds(model, batch)
        assert_close(run_ort(written, feeds), run_ort(model, feeds), what=f"batch {batch}")


@pytest.mark.parametrize("search", ["backtracking", "eqsat"])
def test_both_searches_reach_the_fused_node(search):
    for name, _ in LOOPS:
        graph = taso.load_onnx(str(DATA / f"{name}.dynamo.onnx"))
        best = taso.optimize(graph, cost="analytic", search=search, time_limit=20, confirm=False)
        assert best.op_histogram().get(name.split("_")[0]) == 1, (name, best.op_histogram())


def test_the_report_cuts_a_long_rule_and_the_json_report_keeps_it_whole(tmp_path, capsys):
    """An LSTM cell written out is 800-1,100 characters: the printed report cuts it, ``--report`` has it whole."""
    import json

    from taso.cli import main

    path, out, report = DATA / "lstm_cell_loop.dynamo.onnx", tmp_path / "out.onnx", tmp_path / "report.json"
    assert main(["optimize", str(path), "-o", str(out), "--cost", "analytic", "--time-limit", "5", "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    applied = [line for line in printed.splitlines() if "lstm-cell-" in line]
    assert len(applied) == 2 and all(len(line) <= 180 and "--report's rule_texts" in line for line in applied), applied
    texts = json.loads(report.read_text())["rule_texts"]
    assert len(texts["lstm-cell-extend"]) > 800 and "lstm(xs, h, c, wi, bi, wh, bh)" in texts["lstm-cell-extend"]
