"""size_dispatch: one ONNX model that picks among equivalent models by the size of one input dimension."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from taso.errors import TasoError
from taso.onnx.dispatch import size_dispatch

OPSET = 17
RNG = np.random.default_rng(0)
W = RNG.standard_normal((8, 8)).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], initializers: dict[str, np.ndarray], opset: int = OPSET, output: str = "y") -> onnx.ModelProto:
    """A model from x: float32 [steps, batch, 8] to ``output``: float32 [steps, batch, 8], checked."""
    graph = helper.make_graph(
        nodes, "branch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["steps", "batch", 8])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["steps", "batch", 8])],
        [numpy_helper.from_array(array, name) for name, array in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def _scaled(factor: float) -> onnx.ModelProto:
    """y = x * factor."""
    return _model([helper.make_node("Mul", ["x", "k"], ["y"], name="scale")], {"k": np.array(factor, np.float32)})


def _dispatch(branches: list[onnx.ModelProto], thresholds: list[int]) -> onnx.ModelProto:
    """The dispatch over ``branches`` on the batch axis, checked in full."""
    model = size_dispatch(branches, "x", 1, thresholds)
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The model's only output on ONNX Runtime's CPU provider, every graph optimization on."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _input(batch: int, steps: int = 3) -> np.ndarray:
    return RNG.standard_normal((steps, batch, 8)).astype(np.float32)


def _initializers(graph: onnx.GraphProto) -> list[str]:
    return [tensor.name for tensor in graph.initializer]


def _if_subgraphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """The branch subgraphs of the dispatch's nested Ifs, in branch order."""
    node = next(node for node in graph.node if node.op_type == "If")
    then, otherwise = (helper.get_attribute_value(next(a for a in node.attribute if a.name == name)) for name in ("then_branch", "else_branch"))
    if otherwise.node and otherwise.node[0].op_type == "If" and otherwise.node[0].name.startswith("dispatch/"):
        return [then, *_if_subgraphs(otherwise)]
    return [then, otherwise]


def _matmul_relu() -> onnx.ModelProto:
    """relu(x @ W), with value_info for h (and for the weight W)."""
    model = _model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])], {"W": W})
    model.graph.value_info.extend([helper.make_tensor_value_info("h", TensorProto.FLOAT, ["steps", "batch", 8]),
                                   helper.make_tensor_value_info("W", TensorProto.FLOAT, [8, 8])])
    return model


def _matmul_add_zero_relu() -> onnx.ModelProto:
    """relu(x @ W) computed another way: W split in two column halves, an Add of zero and an Identity."""
    nodes = [
        helper.make_node("MatMul", ["x", "W_left"], ["left"]),
        helper.make_node("MatMul", ["x", "W_right"], ["right"]),
        helper.make_node("Concat", ["left", "right"], ["h"], axis=-1),
        helper.make_node("Add", ["h", "zero"], ["h0"]),
        helper.make_node("Identity", ["h0"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["y"]),
    ]
    return _model(nodes, {"W_left": W[:, :4].copy(), "W_right": W[:, 4:].copy(), "zero": np.zeros(8, np.float32)})


@pytest.mark.parametrize("batch", [1, 4, 5, 64])
def test_equivalent_branches_match_numpy(batch):
    model = _dispatch([_matmul_relu(), _matmul_add_zero_relu()], [4])
    x = _input(batch)
    np.testing.assert_allclose(_run(model, x), np.maximum(x @ W, 0), rtol=1e-5, atol=1e-5)


def test_structure():
    model = _dispatch([_matmul_relu(), _matmul_add_zero_relu()], [4])
    assert [node.op_type for node in model.graph.node] == ["Shape", "Gather", "Less", "If"]
    assert [value.name for value in model.graph.input] == ["x"] and [value.name for value in model.graph.output] == ["y"]
    assert model.producer_name == "taso" and model.ir_version == 8
    assert [(opset.domain, opset.version) for opset in model.opset_import] == [("", OPSET)]
    first, second = _if_subgraphs(model.graph)
    assert [value.name for value in first.value_info] == ["b0/h", "b0/W"] and not second.value_info  # W differs: not hoisted
    for k, subgraph in enumerate((first, second)):
        assert not subgraph.input
        assert all(node.output[0].startswith(f"b{k}/") for node in subgraph.node)
        assert all(value.name.startswith(f"b{k}/") for value in subgraph.output)


@pytest.mark.parametrize(("batch", "factor"), [(1, 2), (4, 2), (5, 3), (64, 3)])
def test_the_branch_for_the_size_runs(batch, factor):
    model = _dispatch([_scaled(2), _scaled(3)], [4])
    x = _input(batch)
    np.testing.assert_allclose(_run(model, x), x * factor, rtol=1e-6)


@pytest.mark.parametrize(("batch", "factor"), [(1, 2), (2, 2), (3, 3), (16, 3), (17, 5), (40, 5)])
def test_three_branches(batch, factor):
    model = _dispatch([_scaled(2), _scaled(3), _scaled(5)], [2, 16])
    assert len(_if_subgraphs(model.graph)) == 3
    x = _input(batch)
    np.testing.assert_allclose(_run(model, x), x * factor, rtol=1e-6)


def test_shared_weights_are_stored_once():
    def branch(bias: float) -> onnx.ModelProto:
        nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["y"])]
        model = _model(nodes, {"W": W, "B": np.full(8, bias, np.float32)})
        model.graph.value_info.extend([helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("W", "B")])
        return model

    model = _dispatch([branch(1.0), branch(-1.0)], [4])
    assert [name for name in _initializers(model.graph) if not name.startswith("dispatch/")] == ["W"]
    subgraphs = _if_subgraphs(model.graph)
    assert [_initializers(subgraph) for subgraph in subgraphs] == [["b0/B"], ["b1/B"]]
    assert [[value.name for value in subgraph.value_info] for subgraph in subgraphs] == [["b0/B"], ["b1/B"]]
    x = _input(4)
    np.testing.assert_allclose(_run(model, x), x @ W + 1, rtol=1e-5, atol=1e-5)
    x = _input(5)
    np.testing.assert_allclose(_run(model, x), x @ W - 1, rtol=1e-5, atol=1e-5)


def test_constant_nodes_are_renamed():
    def branch(factor: float) -> onnx.ModelProto:
        constant = helper.make_node("Constant", [], ["k"], name="k", value=numpy_helper.from_array(np.array(factor, np.float32)))
        return _model([constant, helper.make_node("Mul", ["x", "k"], ["y"])], {})

    model = _dispatch([branch(2), branch(3)], [4])
    x = _input(5)
    np.testing.assert_allclose(_run(model, x), x * 3, rtol=1e-6)


def _nested_if(factor: float) -> onnx.ModelProto:
    """h = x @ W; y = (h @ W) * factor when sum(h) > 0, else -h: a branch holding its own If, whose subgraphs read the
    branch's values (h), the shared weight W and the branch's initializer, and reuse one local name (t)."""
    then = helper.make_graph(
        [helper.make_node("MatMul", ["h", "W"], ["t"], name="inner"), helper.make_node("Mul", ["t", "factor"], ["r"], name="scaled")],
        "then", [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    otherwise = helper.make_graph(
        [helper.make_node("Neg", ["h"], ["t"], name="inner"), helper.make_node("Identity", ["t"], ["r"], name="scaled")],
        "else", [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="project"),
        helper.make_node("ReduceSum", ["h"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], name="choose", then_branch=then, else_branch=otherwise),
    ]
    return _model(nodes, {"W": W, "zero": np.array(0, np.float32), "factor": np.array(factor, np.float32)})


@pytest.mark.parametrize(("batch", "factor"), [(4, 2), (5, 3)])
def test_branches_with_their_own_if(batch, factor):
    model = _dispatch([_nested_if(2), _nested_if(3)], [4])
    inner = next(node for node in _if_subgraphs(model.graph)[0].node if node.op_type == "If")
    then = next(attribute.g for attribute in inner.attribute if attribute.name == "then_branch")
    assert inner.name == "b0/choose" and [list(node.input) for node in then.node] == [["b0/h", "W"], ["b0/t", "b0/factor"]]
    for sign in (1, -1):
        x = sign * np.broadcast_to(W.sum(axis=1), (3, batch, 8)).astype(np.float32)  # sum(x @ W) has the sign of ``sign``
        h = x @ W
        assert np.sign(h.sum()) == sign
        expected = (h @ W) * factor if sign > 0 else -h
        np.testing.assert_allclose(_run(model, x), expected, rtol=1e-4, atol=1e-4)


def test_an_initializer_returned_as_output():
    ones = _model([], {"y": np.ones((1, 1, 8), np.float32)})
    zeros = _model([helper.make_node("Mul", ["x", "k"], ["y"])], {"k": np.array(0, np.float32)})
    model = _dispatch([ones, zeros], [4])
    np.testing.assert_array_equal(_run(model, _input(1, steps=1)), np.ones((1, 1, 8), np.float32))
    np.testing.assert_array_equal(_run(model, _input(5, steps=1)), np.zeros((1, 5, 8), np.float32))
    same = _dispatch([ones, ones], [4])  # an output every branch holds as the same initializer is not hoisted
    assert [name for name in _initializers(same.graph) if not name.startswith("dispatch/")] == []
    np.testing.assert_array_equal(_run(same, _input(1, steps=1)), np.ones((1, 1, 8), np.float32))


def test_branch_names_that_look_like_dispatch_names():
    def branch(factor: float) -> onnx.ModelProto:
        nodes = [helper.make_node("Mul", ["x", "b1/k"], ["dispatch/dim"], name="dispatch/if0"), helper.make_node("Identity", ["dispatch/dim"], ["y"])]
        return _model(nodes, {"b1/k": np.array(factor, np.float32)})

    model = _dispatch([branch(2), branch(3)], [4])
    x = _input(4)
    np.testing.assert_allclose(_run(model, x), x * 2, rtol=1e-6)


def _with_output(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in model.graph.node:
        node.output[:] = [name if output == "y" else output for output in node.output]
    model.graph.output[0].name = name
    return model


def _with_function(model: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.functions.add().CopyFrom(helper.make_function("local", "f", ["a"], ["b"], [helper.make_node("Identity", ["a"], ["b"])], []))
    return model


def _with_external_weight(model: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    tensor = model.graph.initializer[0]
    external_data_helper.set_external_data(tensor, "weights.bin", offset=0, length=4)
    tensor.data_location = TensorProto.EXTERNAL
    tensor.ClearField("raw_data")
    return model


@pytest.mark.parametrize(("branches", "input_name", "axis", "thresholds", "message"), [
    ([_scaled(2)], "x", 1, [], "at least 2 branches"),
    ([_scaled(2), _scaled(3)], "x", 1, [], "need 1 thresholds"),
    ([_scaled(2), _scaled(3), _scaled(5)], "x", 1, [4], "need 2 thresholds"),
    ([_scaled(2), _scaled(3), _scaled(5)], "x", 1, [4, 4], "strictly increasing"),
    ([_scaled(2), _scaled(3)], "x", 1, [0], "positive"),
    ([_scaled(2), _with_output(_scaled(3), "z")], "x", 1, [4], "outputs"),
    ([_scaled(2), _scaled(3)], "batch", 1, [4], "no graph input named 'batch'"),
    ([_scaled(2), _scaled(3)], "x", 3, [4], "out of range"),
    ([_scaled(2), _with_function(_scaled(3))], "x", 1, [4], "not supported"),
    ([_scaled(2), _with_external_weight(_scaled(3))], "x", 1, [4], "not supported"),
])
def test_bad_arguments(branches, input_name, axis, thresholds, message):
    with pytest.raises(TasoError, match=message) as raised:
        size_dispatch(branches, input_name, axis, thresholds)
    assert "\n" not in str(raised.value)


def test_branches_of_other_opsets_are_converted_to_the_newest():
    """An optimized branch may hold an operator of a newer opset than the input's graph (ONNX's Attention, 23): the
    older branch is converted, its ReduceMean's axes attribute (17) becoming an input (18)."""
    mean = _model([helper.make_node("ReduceMean", ["x"], ["m"], axes=[2], keepdims=1), helper.make_node("Sub", ["x", "m"], ["y"])], {})
    newer = _model([helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1), helper.make_node("Sub", ["x", "m"], ["y"])],
                   {"axes": np.array([2], np.int64)}, opset=18)
    model = _dispatch([mean, newer], [4])
    assert [(opset.domain, opset.version) for opset in model.opset_import] == [("", 18)]
    for batch in (2, 7):
        x = _input(batch)
        np.testing.assert_allclose(_run(model, x), x - x.mean(axis=2, keepdims=True), rtol=1e-5, atol=1e-6)


def test_a_branch_the_version_converter_cannot_take_is_refused_in_one_line(monkeypatch):
    """The converter's own message (a C++ assertion, as it raises for a node it has no adapter for) in one line."""
    from onnx import version_converter

    def no_adapter(model, version):
        raise RuntimeError("/project/onnx/version_converter/BaseConverter.h:66: adapter_lookup: Assertion `false` failed: "
                           "No Adapter From Version $17 for Mul\nmore detail")

    monkeypatch.setattr(version_converter, "convert_version", no_adapter)
    newer = _model([helper.make_node("Mul", ["x", "k"], ["y"])], {"k": np.array(3, np.float32)}, opset=18)
    with pytest.raises(TasoError, match="branch 0 imports opset 17 and cannot be converted to opset 18: .*No Adapter") as raised:
        size_dispatch([_scaled(2), newer], "x", 1, [4])
    assert "\n" not in str(raised.value)


def test_negative_axis():
    model = size_dispatch([_scaled(2), _scaled(3)], "x", -2, [4])
    onnx.checker.check_model(model, full_check=True)
    x = _input(5)
    np.testing.assert_allclose(_run(model, x), x * 3, rtol=1e-6)
