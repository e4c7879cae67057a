"""ONNX Runtime's MultiHeadAttention, Attention and FusedMatMul (com.microsoft), as its transformers optimizer and its
offline optimizations write them: read into taso's operators, and each definition checked against ONNX Runtime's own
kernel, at the file's opset (the written-out form) and at 23 (ONNX's Attention)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import run_ort
from onnx import TensorProto, helper, numpy_helper

import taso
from taso.pipeline.targets import ORT_OPSET, with_opset_limit

MS = "com.microsoft"
RNG = np.random.default_rng(0)
BATCH, QUERIES, KEYS, WIDTH, HEADS = 2, 5, 7, 32, 4


def _model(node: onnx.NodeProto, inputs: dict[str, list], output: list, weights: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph([node], "contrib", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)],
                              [numpy_helper.from_array(w, n) for n, w in (weights or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=8)


def _feeds(model: onnx.ModelProto, batch: int = BATCH) -> dict[str, np.ndarray]:
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value or batch for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = RNG.standard_normal(shape).astype(np.float32)
    return feeds


def _check_read(model: onnx.ModelProto, ops: set[str], batches=(BATCH, 3)) -> None:
    """taso reads the node into ``ops`` (nothing opaque), and what it writes, at the file's opset and at 23, runs equal
    to ONNX Runtime's kernel on the file, as does taso's NumPy semantics of the graph it read."""
    graph = taso.load_onnx(model)
    read = {n.op.name for n in graph.nodes}
    assert "opaque" not in read and ops <= read, read
    for written in (taso.export_onnx(graph), taso.export_onnx(with_opset_limit(graph, ORT_OPSET))):
        assert all(n.domain in ("", "ai.onnx") for n in written.graph.node)
        for batch in batches:
            feeds = _feeds(model, batch)
            (want,) = run_ort(model, feeds)
            (got,) = run_ort(written, feeds)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert any(n.op_type == "Attention" for n in written.graph.node) == ("attention" in ops)
    feeds = _feeds(model, 1)  # (the reference executor runs at the measurement sizes)
    by_numpy = graph.run(feeds)[graph.outputs[0]]
    np.testing.assert_allclose(by_numpy, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-5)


def _multi_head(bias: bool = False, attention_bias: list | None = None, **attrs) -> onnx.ModelProto:
    inputs = {"q": ["batch", QUERIES, WIDTH], "k": ["batch", KEYS, WIDTH], "v": ["batch", KEYS, WIDTH]}
    names = ["q", "k", "v", "bias" if bias else ""]
    if attention_bias is not None:
        inputs["mask"] = attention_bias
        names += ["", "mask"]
    weights = {"bias": RNG.standard_normal(3 * WIDTH).astype(np.float32)} if bias else {}
    node = helper.make_node("MultiHeadAttention", [n for n in names], ["y"], domain=MS, num_heads=HEADS, **attrs)
    return _model(node, inputs, ["batch", QUERIES, WIDTH], weights)


@pytest.mark.parametrize("bias,attention_bias,attrs", [
    (False, None, {}),
    (True, None, {}),
    (False, None, {"scale": 0.3}),
    (True, ["batch", 1, QUERIES, KEYS], {}),  # a padding mask per sequence, as BERT's
    (False, [1, HEADS, QUERIES, KEYS], {}),  # a bias per head (ALiBi, relative positions)
])
def test_multi_head_attention_is_read_as_attention_and_runs_as_the_kernel_does(bias, attention_bias, attrs):
    _check_read(_multi_head(bias, attention_bias, **attrs), {"attention"})


@pytest.mark.parametrize("bias,hidden_sizes", [(True, None), (False, None), (True, (WIDTH,) * 3)])
def test_the_packed_attention_is_read_as_its_projection_then_attention(bias, hidden_sizes):
    attrs = {"qkv_hidden_sizes": list(hidden_sizes)} if hidden_sizes else {}
    weights = {"w": RNG.standard_normal((WIDTH, 3 * WIDTH)).astype(np.float32) / 4}
    if bias:
        weights["b"] = RNG.standard_normal(3 * WIDTH).astype(np.float32)
    node = helper.make_node("Attention", ["x", "w", "b" if bias else ""], ["y"], domain=MS, num_heads=HEADS, **attrs)
    _check_read(_model(node, {"x": ["batch", QUERIES, WIDTH]}, ["batch", QUERIES, WIDTH], weights), {"attention", "matmul", "split"})


@pytest.mark.parametrize("node,inputs,weights", [
    (helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain=MS, num_heads=HEADS, unidirectional=1),
     {"q": [BATCH, QUERIES, WIDTH], "k": [BATCH, QUERIES, WIDTH], "v": [BATCH, QUERIES, WIDTH]}, {}),
    (helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "pad"], ["y"], domain=MS, num_heads=HEADS),
     {"q": [BATCH, QUERIES, WIDTH], "k": [BATCH, KEYS, WIDTH], "v": [BATCH, KEYS, WIDTH]}, {"pad": np.ones((BATCH, KEYS), np.int32)}),
    (helper.make_node("Attention", ["x", "w", "", "index"], ["y"], domain=MS, num_heads=HEADS),
     {"x": [BATCH, QUERIES, WIDTH]}, {"w": np.ones((WIDTH, 3 * WIDTH), np.float32), "index": np.full(BATCH, QUERIES, np.int32)}),
])
def test_what_attention_does_not_model_stays_opaque(node, inputs, weights):
    """The causal flag, a key padding mask, a mask index: the node is kept as it is, and the file still reads."""
    graph = taso.load_onnx(_model(node, inputs, [BATCH, QUERIES, WIDTH], weights))
    assert [n.op.name for n in graph.nodes] == ["opaque"]


@pytest.mark.parametrize("attrs,a_shape,b_shape,b_weight", [
    ({"alpha": 0.125}, ["batch", 6, 8], [8, 5], True),
    ({"transB": 1}, ["batch", 6, 8], [5, 8], True),
    ({"transA": 1, "alpha": 2.0}, ["batch", 8, 6], ["batch", 8, 5], False),
    ({"transA": 1, "transB": 1, "alpha": 0.5}, ["batch", 8, 6], ["batch", 5, 8], False),
])
def test_fused_matmul_is_read_as_transpose_matmul_and_scale(attrs, a_shape, b_shape, b_weight):
    weights = {"b": RNG.standard_normal(b_shape).astype(np.float32)} if b_weight else {}
    inputs = {"a": a_shape, **({} if b_weight else {"b": b_shape})}
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, **attrs)
    _check_read(_model(node, inputs, ["batch", 6, 5], weights), {"matmul"})


def test_fused_matmul_over_batch_transposes_stays_opaque():
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, transBatchA=1)
    graph = taso.load_onnx(_model(node, {"a": [2, 6, 8], "b": [8, 5]}, [6, 2, 5]))
    assert [n.op.name for n in graph.nodes] == ["opaque"]
