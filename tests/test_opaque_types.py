"""Nodes taso does not model (:mod:`taso.onnx.opaque_types`): typed by inference after folding, probes checked and never
zeros, value-dependent dims as fresh symbols, If nodes typed by the branch that runs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from helpers import assert_close, run_ort
from onnx import TensorProto, helper, numpy_helper
from test_realworld_import import FLOAT, INT64, _const, _declared, _float_feeds, _init, _model, _roundtrip, _sample_rate_model

import taso
from taso.errors import ExportError, ImportError_
from taso.ir.dims import Dim
from taso.measure.inputs import integer_choices, random_input_sets
from taso.measure.outputs import compare_models

# ---- 8. opaque nodes: shapes from inference after folding; probes checked, never zeros ---------------------


def test_opaque_node_typed_by_shape_inference_after_folding():
    """Tile's repeats come through ConstantOfShape -> Where, which the model-wide inference cannot follow."""
    nodes = [
        _const("n", [2]), _const("target", [2, 3]), _const("minus1", -1),
        helper.make_node("ConstantOfShape", ["n"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.int64))),
        helper.make_node("Mul", ["ones", "minus1"], ["minus_ones"]),
        helper.make_node("Equal", ["target", "minus_ones"], ["is_minus"]),
        helper.make_node("Where", ["is_minus", "ones", "target"], ["repeats"]),
        helper.make_node("Tile", ["x", "repeats"], ["tiled"]),
        helper.make_node("Add", ["tiled", "bias"], ["y"]),
    ]
    model = _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [2, 4])], [helper.make_tensor_value_info("y", FLOAT, [4, 12])],
                   [_init("bias", np.arange(48).reshape(4, 12))])
    graph, _ = _roundtrip(model, _float_feeds({"x": (2, 4)}))
    assert str(graph.type("tiled")) == "float32[4,12]"


@pytest.mark.parametrize("op_type", ["Pad", "Unique", "NonZero"])
def test_value_dependent_shape_gets_fresh_size_symbols_not_a_guess_from_zeros(op_type):
    """Pads read from an input at run time (a zero-filled probe typed this Pad as the identity),
    or a shape set by which values are equal or nonzero (distinct random floats hid it): each dim the
    values set is a fresh size symbol, of which nothing is assumed, and the file round-trips."""
    x = helper.make_tensor_value_info("x", FLOAT, [1, 4])
    if op_type == "Pad":
        node = helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant")
        inputs = [x, helper.make_tensor_value_info("pads", INT64, [4])]
    else:
        node = helper.make_node(op_type, ["x"], ["p"])
        inputs = [x]
    elem = INT64 if op_type == "NonZero" else FLOAT
    model = _model([node, helper.make_node("Identity", ["p"], ["y"])], inputs, [helper.make_tensor_value_info("y", elem, ["rows", "columns"][: 1 if op_type == "Unique" else 2])])
    graph = taso.load_onnx(model)
    shape = graph.type("p").shape
    fixed = {"Pad": [], "Unique": [], "NonZero": [0]}[op_type]  # NonZero's rows are the input's rank
    assert [axis for axis, d in enumerate(shape) if isinstance(d, Dim)] == [a for a in range(len(shape)) if a not in fixed], str(graph.type("p"))
    exported = taso.export_onnx(graph)
    x = np.asarray([[0.0, 1.5, 1.5, -2.0]], np.float32)
    feeds = {"x": x, "pads": np.asarray([0, 1, 2, 0], np.int64)} if op_type == "Pad" else {"x": x}
    for got, want in zip(run_ort(exported, feeds), run_ort(model, feeds)):
        np.testing.assert_array_equal(got, want)


def _if_model(condition_nodes, condition_input) -> onnx.ModelProto:
    then_graph = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["out_then"], axis=1)], "then", [],
                                   [helper.make_tensor_value_info("out_then", FLOAT, [1, 8])])
    else_graph = helper.make_graph([helper.make_node("Identity", ["x"], ["out_else"])], "else", [],
                                   [helper.make_tensor_value_info("out_else", FLOAT, [1, 4])])
    nodes = condition_nodes + [helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph, name="sr_switch")]
    return _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [1, 4]), condition_input], [helper.make_tensor_value_info("y", FLOAT, [1, "width"])])


@pytest.mark.parametrize("condition", ["bool-input", "sample-rate"])
def test_if_on_a_runtime_condition_with_branches_of_different_shapes_gets_a_fresh_size_symbol(condition):
    """silero-vad switches on ``sr == 16000``: a probe (zeros before, small integers now) takes the else branch. The
    branches give [1, 8] and [1, 4]: the dim they disagree on is a fresh symbol, and both branches still run."""
    if condition == "bool-input":
        model = _if_model([], helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
        switches = [{"cond": np.asarray(v)} for v in (True, False)]
    else:
        model = _if_model([_const("rate", 16000), helper.make_node("Equal", ["sr", "rate"], ["cond"])], helper.make_tensor_value_info("sr", INT64, []))
        switches = [{"sr": np.asarray(v, np.int64)} for v in (16000, 8000)]
    graph = taso.load_onnx(model)
    width = graph.type(graph.outputs[0]).shape[1]
    assert isinstance(width, Dim) and not width.symbols & {"width"}, str(graph.type(graph.outputs[0]))
    exported = taso.export_onnx(graph)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    for switch in switches:
        np.testing.assert_array_equal(run_ort(exported, {"x": x, **switch})[0], run_ort(model, {"x": x, **switch})[0])


def test_if_on_a_constant_condition_is_typed_by_its_branch():
    model = _if_model([_const("rate", 16000), _const("sr", 16000), helper.make_node("Equal", ["sr", "rate"], ["cond"])],
                      helper.make_tensor_value_info("unused", FLOAT, [1]))
    graph, _ = _roundtrip(model, _float_feeds({"x": (1, 4), "unused": (1,)}))
    assert str(graph.type(graph.outputs[0])) == "float32[1,8]"






def _run(model: onnx.ModelProto, samples: int, sr: int) -> np.ndarray:
    x = np.random.default_rng(samples + sr).standard_normal((1, samples)).astype(np.float32)
    return run_ort(model, {"x": x, "sr": np.asarray(sr, np.int64)})[0]


@pytest.mark.parametrize("samples,rate", [(512, 16000), (256, 8000)])
def test_if_on_the_sample_rate_is_typed_by_the_branch_that_runs_at_the_fixed_length(samples, rate):
    """silero-vad (issue 10, defect 8): typed by the branch that runs; exported with x declared as the original
    declared it, so ONNX Runtime loads it (declared [1,512], it infers the 8 kHz branch at load and refuses)."""
    model = _sample_rate_model()
    graph = taso.load_onnx(model, {"x": (1, samples)})
    assert str(graph.type(graph.outputs[0])) == "float32[1,4]"
    exported = taso.export_onnx(graph)
    assert [_declared(vi) for vi in exported.graph.input] == [[1, "samples"], []]
    input_sets = random_input_sets(graph)
    assert [int(feeds["sr"]) for feeds in input_sets] == [16000, 16000], "sr draws from the constant the If compares it with"
    assert compare_models(model, exported, [{**feeds, "sr": np.asarray(rate, np.int64)} for feeds in input_sets]).ok


def test_if_on_the_sample_rate_takes_the_other_branch_as_the_original_does():
    """Soundness: the 16 kHz branch's types are not baked in for a value that takes the 8 kHz branch. At the fixed
    length sr=8000 fails on ONNX Runtime exactly as the original does (no 16 kHz answer), and at 256 samples the
    export computes what the original computes (nothing but the verbatim If reads x)."""
    model = _sample_rate_model()
    exported = taso.export_onnx(taso.load_onnx(model, {"x": (1, 512)}))
    for m in (model, exported):
        with pytest.raises(Exception, match="MatMul"):
            _run(m, 512, 8000)
    assert_close(_run(exported, 256, 8000), _run(model, 256, 8000), 1e-6, "y")
    assert_close(_run(exported, 512, 16000), _run(model, 512, 16000), 1e-6, "y")


def test_if_on_the_sample_rate_whose_branches_both_run_stays_static():
    """silero_vad_op18_ifless and openwakeword's silero: both branches run at 512 samples with one output type,
    so nothing is relaxed and both sample rates round-trip."""
    model = _sample_rate_model(both_run=True)
    graph = taso.load_onnx(model, {"x": (1, 512)})
    exported = taso.export_onnx(graph)
    assert [_declared(vi) for vi in exported.graph.input] == [[1, "samples"], []]
    for samples, rate in ((512, 16000), (512, 8000), (256, 8000)):
        assert_close(_run(exported, samples, rate), _run(model, samples, rate), 1e-6, "y")


def test_if_on_the_sample_rate_with_neither_branch_running_is_refused():
    with pytest.raises(ImportError_, match=r"If node 'sr_switch': neither branch runs at the fixed input shapes"):
        taso.load_onnx(_sample_rate_model(), {"x": (1, 384)})


def test_if_output_read_by_a_taso_node_is_refused_at_export_in_one_line(tmp_path):
    """A node taso models (typed for the fixed shapes) reads the If's output: declaring x as the original did
    would let it run at other lengths on values of other shapes, and declared [1,512] ONNX Runtime refuses the
    file. Export says so rather than write either (and `taso optimize` exits 2 in one line)."""
    model = _sample_rate_model(post="Relu")
    graph = taso.load_onnx(model, {"x": (1, 512)})
    assert any(n.op.name == "relu" for n in graph.nodes)
    with pytest.raises(ExportError, match=r"relu node reads 'speech', which depends on input\(s\) \['x'\]"):
        taso.export_onnx(graph)
    path = tmp_path / "vad.onnx"
    onnx.save(model, str(path))
    proc = subprocess.run([sys.executable, "-m", "taso", "optimize", str(path), "-o", str(tmp_path / "out.onnx"), "--cost", "analytic",
                           "--time-limit", "2", "--quiet", "--input-shape", "x=1,512"], capture_output=True, text=True, timeout=300)
    # The file itself runs at 512 samples only (its If branch's MatMul is fixed), which the output check's
    # pre-run finds before the search: exit 2, one line, pointing at --static.
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "does not run at samples=513 nor at samples=1024 nor at samples=256" in proc.stderr, proc.stderr


def test_integer_choices_only_for_inputs_that_select_a_branch():
    """An integer compared with a constant that decides an If draws from the constants; a token id compared with the
    padding id to build a mask does not (all-padding inputs would mask everything)."""
    assert integer_choices(_sample_rate_model()) == {"sr": (16000,)}
    # dynamo's silero_vad_op18_ifless: sr -> Reshape([-1]) -> Gather(0) -> Equal(16000), here negated on its way to the If.
    model = _sample_rate_model()
    nodes = [_const("flat", [-1]), helper.make_node("Reshape", ["sr", "flat"], ["sr_1d"]), _const("first", 0),
             helper.make_node("Gather", ["sr_1d", "first"], ["sr_0"]), helper.make_node("Equal", ["sr_0", "rate"], ["is_16k"]),
             helper.make_node("Not", ["is_16k"], ["cond"])]
    kept = [model.graph.node[0], *nodes, *model.graph.node[2:]]  # the rate constant, this condition, the If
    del model.graph.node[:]
    model.graph.node.extend(kept)
    assert integer_choices(model) == {"sr": (16000,)}
    nodes = [_const("pad", 0), helper.make_node("Equal", ["ids", "pad"], ["mask"])]
    model = _model(nodes, [helper.make_tensor_value_info("ids", INT64, [1, 8])], [helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 8])])
    assert integer_choices(model) == {}


