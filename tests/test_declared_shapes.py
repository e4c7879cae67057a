"""Shapes a file declares in value_info: which values only they size for ONNX Runtime (taso.onnx.sizing), what that
costs (taso.cost.declared) and how the prediction counts it against the input file (SearchReport.input_overhead)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso.cost import ort_cpu
from taso.cost.declared import declared_shape_seconds
from taso.cost.model import AnalyticCost
from taso.cost.ort_cpu import OrtCpuCost
from taso.onnx.probes import state_chain
from taso.onnx.sizing import _constant_values, declared_only
from taso.pipeline.run import optimize_model
from taso.pipeline.source import ModelSource
from taso.search import SearchConfig, SearchReport, StopReason

EXPORTS = os.path.join(os.path.dirname(__file__), "data", "symbolic")


def _static(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its symbolic batch fixed at 1, in its inputs, outputs and declarations alike."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    g = fixed.graph
    for value in (*g.input, *g.output, *g.value_info):
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                dim.dim_value = 1
    return fixed


def test_a_value_only_its_declaration_sizes_is_counted_and_nothing_else_is():
    assert declared_only(state_chain(10, declared=True)) == 10, "the zeros and the 9 values computed from them"
    assert declared_only(state_chain(10, declared=False)) == 0, "nothing declared"
    assert declared_only(_static(state_chain(10, declared=True))) == 0, \
        "a static batch: ONNX Runtime folds Shape(x) into a constant and sizes the chain itself"


def test_the_dynamo_exports_declare_what_their_torchscript_twins_leave_unsized():
    for name in ("gru_cell_loop", "lstm_cell_loop", "transformer_decoder"):
        dynamo = onnx.load(os.path.join(EXPORTS, f"{name}.dynamo.onnx"))
        torchscript = onnx.load(os.path.join(EXPORTS, f"{name}.torchscript.onnx"))
        outputs = sum(len(n.output) for n in dynamo.graph.node)
        assert 0 < declared_only(dynamo) <= outputs, name
        assert declared_only(torchscript) == 0, f"{name}: TorchScript declares nothing"


def test_a_value_computed_from_weights_alone_is_folded_but_an_overridable_weight_is_not():
    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "W")
    graph = helper.make_graph([helper.make_node("Neg", ["W"], ["folded"]), helper.make_node("Add", ["folded", "x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])], [w])
    assert _constant_values(graph, ir_version=8) == {"W", "folded"}
    graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [2, 2]))
    assert _constant_values(graph, ir_version=8) == set(), "from IR 4 on, a weight listed as an input can be overridden"
    assert _constant_values(graph, ir_version=3) == {"W", "folded"}, "IR 3 lists every weight as an input"


def test_the_two_chains_compute_the_same_and_a_declared_shape_costs_under_a_microsecond():
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(1).standard_normal((3, 128)).astype(np.float32)
    runs = [ort.InferenceSession(state_chain(40, d).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            for d in (False, True)]
    assert np.array_equal(runs[0], runs[1])
    assert abs(declared_shape_seconds(threads=1)) < 1e-6


def test_the_input_overhead_is_the_declared_values_at_the_price_measured_once_per_table(tmp_path, monkeypatch):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    measured = []
    monkeypatch.setattr(ort_cpu, "declared_shape_seconds", lambda threads, reference=None: measured.append(threads) or 7e-8)
    monkeypatch.setattr(OrtCpuCost, "wall_reference", lambda self: None)
    model = OrtCpuCost(threads=1)
    assert model.input_overhead(state_chain(10, declared=False)) == 0.0 and not measured, "nothing declared: nothing measured"
    assert model.input_overhead(state_chain(10, declared=True)) == pytest.approx(10 * 7e-8)
    model.close()
    again = OrtCpuCost(threads=1)
    assert again.input_overhead(state_chain(4, declared=True)) == pytest.approx(4 * 7e-8)
    again.close()
    assert measured == [1], "the table keeps the price"


def test_the_prediction_is_against_the_input_file_overhead_included():
    report = SearchReport(StopReason.SATURATED, initial_cost=1.0, best_cost=0.5, input_overhead=0.1)
    assert report.predicted_speedup == pytest.approx(2.2)
    assert report.to_json()["input_overhead_s"] == pytest.approx(0.1)


class _DeclaredAnalytic(AnalyticCost):
    """Analytic prices, and a microsecond for each value the file declares."""

    def input_overhead(self, model) -> float:
        return 1e-6 * len(model.graph.value_info)


def test_optimize_prices_the_input_file_it_was_given():
    path = os.path.join(EXPORTS, "gru_cell_loop.dynamo.onnx")
    source = ModelSource.from_file(path)
    outcome = optimize_model(source, cost=_DeclaredAnalytic(), config=SearchConfig(budget=2, time_limit=5), confirm=False)
    declared = len(onnx.load(path).graph.value_info)
    assert outcome.report.input_overhead == pytest.approx(declared * 1e-6)
    report = outcome.report
    assert report.predicted_speedup == pytest.approx((report.initial_cost + declared * 1e-6) / report.best_cost)


def test_a_graph_onnx_cannot_infer_counts_nothing(monkeypatch):
    from taso.onnx import sizing

    def fails(model, data_prop=False):
        raise onnx.shape_inference.InferenceError("an op ONNX does not know")

    monkeypatch.setattr(sizing.shape_inference, "infer_shapes", fails)
    assert declared_only(state_chain(10, declared=True)) == 0, "unknown is not counted as unsized"


def test_the_region_model_prices_the_input_file_as_its_per_node_model_does():
    from taso.cost.region import RegionCost

    region = RegionCost(_DeclaredAnalytic())
    assert region.input_overhead(state_chain(10, declared=True)) == pytest.approx(1e-6 * 10)
