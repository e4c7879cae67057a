"""ONNX export: fused activations become nodes, interfaces are preserved, weight-only subgraphs are folded."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import assert_close, model_from_text, run_ort

import taso
from taso import ops
from taso.errors import ExportError
from taso.ir import Node


def _conv_model() -> onnx.ModelProto:
    return model_from_text("""
        <ir_version: 8, opset_import: ["" : 13]>
        g (float[1, 4, 6, 6] x) => (float[1, 8, 6, 6] out) <float[8, 4, 3, 3] w = {""" + ",".join(["0.1"] * 288) + """}> {
            c = Conv <pads = [1, 1, 1, 1]> (x, w)
            out = Relu (c)
        }
    """)


def _fuse_relu(graph):
    conv, relu = graph.producer("c"), graph.producer("out")
    fused = Node(conv.op, conv.params.replace(activation="relu"), conv.inputs, relu.outputs, conv.name)
    return graph.replace(remove=[conv, relu], add=[fused])


def test_fused_activation_is_exported_as_its_own_node():
    graph = _fuse_relu(taso.load_onnx(_conv_model()))
    assert graph.op_histogram() == {"conv2d": 1}
    model = taso.export_onnx(graph)
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu"]
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    assert_close(run_ort(model, {"x": x})[0], run_ort(_conv_model(), {"x": x})[0])


def test_export_keeps_opset_and_interface():
    model = taso.export_onnx(taso.load_onnx(_conv_model()))
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 13)]
    assert [i.name for i in model.graph.input] == ["x"] and [o.name for o in model.graph.output] == ["out"]


def test_export_to_a_declared_opset():
    model = taso.export_onnx(taso.load_onnx(_conv_model()), opset=17)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]


def test_weight_only_subgraphs_are_folded_into_initializers():
    graph = taso.load_onnx(_conv_model())
    w = graph.producer("c").inputs[1]
    concat = Node(ops.get("concat"), ops.get("concat").make_params(axis=0), (w, w), ("w2",), "merge")
    conv = graph.producer("c")
    wide = Node(conv.op, conv.params, ("x", "w2"), ("c2",), "conv2")
    split = Node(ops.get("split"), ops.get("split").make_params(axis=1, sizes=(8, 8)), ("c2",), ("c", "unused"), "split")
    merged = graph.replace(remove=[conv], add=[concat, wide, split])
    model = taso.export_onnx(merged)
    assert "Concat" not in [n.op_type for n in model.graph.node]
    assert any(init.name == "w2" and list(init.dims) == [16, 4, 3, 3] for init in model.graph.initializer)
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    assert_close(run_ort(model, {"x": x})[0], run_ort(_conv_model(), {"x": x})[0])


def test_taso_constants_export_as_initializers():
    graph = taso.load_onnx(model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[3, 4] x) => (float[3, 4] y) { y = Relu (x) }
    """))
    eye = Node(ops.get("eye"), ops.get("eye").make_params(n=4), (), ("i4",), "eye")
    relu = graph.producer("y")
    mm = Node(ops.get("matmul"), ops.get("matmul").make_params(), ("x", "i4"), ("xi",), "mm")
    new = graph.replace(remove=[relu], add=[eye, mm, Node(relu.op, relu.params, ("xi",), ("y",), "relu")])
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(run_ort(taso.export_onnx(new), {"x": x})[0], np.maximum(x, 0), rtol=1e-6)


def test_layer_norm_with_its_statistics_cannot_be_written_below_opset_17():
    """(Without them, it is written as its decomposition: tests/test_norm_forms.py.)"""
    graph = taso.load_onnx(model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4] x, float[4] s) => (float[2, 4] y, float[2, 1] mean, float[2, 1] inv) { y, mean, inv = LayerNormalization (x, s) }
    """))
    with pytest.raises(ExportError, match="opset >= 17"):
        taso.export_onnx(graph, opset=13)


def test_save_onnx_writes_atomically_and_reports_bad_paths(tmp_path):
    graph = taso.load_onnx(_conv_model())
    path = tmp_path / "out.onnx"
    taso.save_onnx(graph, path)
    assert onnx.load(str(path)).graph.output[0].name == "out"
    assert [p.name for p in tmp_path.iterdir()] == ["out.onnx"]
    with pytest.raises(taso.TasoError, match="does not exist"):
        taso.save_onnx(graph, tmp_path / "missing-dir" / "out.onnx")


def test_the_export_check_sees_large_weights_by_their_types_without_copying_them():
    """onnx.checker runs on the model's skeleton (large initializers declared as typed inputs): what it rejects in
    a large weight's type or shape it still rejects, and a sound model with large weights passes."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from taso.errors import ExportError
    from taso.onnx.exporter import _check, weightless

    def model(weight: np.ndarray) -> onnx.ModelProto:
        graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 256])], [numpy_helper.from_array(weight, "w")])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    good = model(np.ones((256, 256), np.float32))
    assert len(weightless(good).graph.initializer) == 0 and weightless(good).graph.input[-1].name == "w"
    _check(good)
    for bad in (np.ones((256, 256), np.float64), np.ones((128, 256), np.float32)):  # a double weight; a shape MatMul rejects
        with pytest.raises(ExportError):
            _check(model(bad))


def _linear_model(bias_dims: str, bias_values: str, extra_reader: bool = False) -> onnx.ModelProto:
    reader = "\n            z = Relu (m)" if extra_reader else ""
    outputs = "float[N, 3] y, float[N, 3] z" if extra_reader else "float[N, 3] y"
    return model_from_text(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 4] x) => ({outputs}) <float[4, 3] w = {{{",".join(str(i / 10) for i in range(12))}}}, float{bias_dims} b = {{{bias_values}}}> {{
            m = MatMul (x, w)
            y = Add (m, b){reader}
        }}
    """)


@pytest.mark.parametrize("bias_dims", ["[3]", "[1, 3]"])
def test_a_2d_product_and_its_bias_row_are_written_as_one_gemm(bias_dims):
    """ONNX Runtime fuses MatMul + Add into a Gemm numbered after every node of the file, which changes the order it
    runs them in (an LSTMCell loop re-exported as MatMul + Add ran 0.62x as fast as the file); written as a Gemm,
    the pair keeps the file's place."""
    model = _linear_model(bias_dims, "1, 2, 3")
    written = taso.export_onnx(taso.load_onnx(model))
    assert [n.op_type for n in written.graph.node] == ["Gemm"]
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        assert_close(run_ort(written, {"x": x})[0], run_ort(model, {"x": x})[0])


def test_a_product_read_twice_or_a_bias_that_is_not_a_row_stays_matmul_and_add():
    twice = taso.export_onnx(taso.load_onnx(_linear_model("[3]", "1, 2, 3", extra_reader=True)))
    assert sorted(n.op_type for n in twice.graph.node) == ["Add", "MatMul", "Relu"]
    scalar = taso.export_onnx(taso.load_onnx(_linear_model("[1, 1]", "2")))
    assert sorted(n.op_type for n in scalar.graph.node) == ["Add", "MatMul"], "a [1, 1] addend is not the bias row Gemm takes here"
