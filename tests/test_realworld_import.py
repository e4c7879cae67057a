"""Models shaped like what real exporters emit: import -> export -> checker -> ONNX Runtime equality.

Each test builds, with onnx.helper, the node pattern an exporter writes (PyTorch's TorchScript
and dynamo exporters, paddle2onnx, old converters) for one defect of issue 10, so that the
pattern stays covered without shipping binary models.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from helpers import assert_close, run_ort
from onnx import TensorProto, helper, numpy_helper

import taso
from taso.errors import ImportError_

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64
Feeds = Callable[[np.random.Generator], dict[str, np.ndarray]]


def _model(nodes, inputs, outputs, initializers=(), opset: int = 17, ir_version: int = 8) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "exported", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="pytorch")
    model.ir_version = ir_version
    onnx.checker.check_model(model, full_check=True)
    return model


def _const(name: str, value, dtype=np.int64) -> onnx.NodeProto:
    """A Constant node, as TorchScript writes for every literal."""
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, dtype), name))


def _init(name: str, value, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _weight(rng: np.random.Generator, name: str, *shape: int) -> onnx.TensorProto:
    return _init(name, rng.standard_normal(shape) * 0.3)


def _float_feeds(shapes: dict[str, tuple[int, ...]]) -> Feeds:
    return lambda rng: {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


def _roundtrip(model: onnx.ModelProto, feeds: Feeds, input_shapes=None, static: bool = False) -> tuple[taso.Graph, onnx.ModelProto]:
    """Imports, exports (full checker inside), and compares with the original on two random input sets."""
    graph = taso.load_onnx(model, input_shapes, static=static)
    exported = taso.export_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    for seed in (0, 1):
        inputs = feeds(np.random.default_rng(seed))
        for got, want, vi in zip(run_ort(exported, inputs), run_ort(model, inputs), model.graph.output):
            assert_close(got, want, 1e-4, vi.name)
    return graph, exported


def _opaque_types(graph: taso.Graph) -> list[str]:
    return [n.params["op_type"] for n in graph.nodes if n.op.name == "opaque"]


# ---- 1. a rank-0 initializer stays rank 0 ------------------------------------------------------------


def test_dynamo_bert_pooler_scalar_gather_index_stays_rank_0():
    """dynamo writes BERT's pooler as Gather(axis=1) with a scalar index, then Gemm and Tanh."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Gather", ["last_hidden_state", "val_0"], ["select"], axis=1),
        helper.make_node("Gemm", ["select", "pooler.dense.weight", "pooler.dense.bias"], ["addmm"], transB=1),
        helper.make_node("Tanh", ["addmm"], ["pooler_output"]),
    ]
    model = _model(nodes, [helper.make_tensor_value_info("last_hidden_state", FLOAT, [2, 7, 16])],
                   [helper.make_tensor_value_info("pooler_output", FLOAT, [2, 16])],
                   [_init("val_0", 0, np.int64), _weight(rng, "pooler.dense.weight", 16, 16), _weight(rng, "pooler.dense.bias", 16)], opset=18)
    _, exported = _roundtrip(model, _float_feeds({"last_hidden_state": (2, 7, 16)}))
    assert [list(t.dims) for t in exported.graph.initializer if t.name == "val_0"] == [[]]


# ---- 2. LSTMCell unrolled over time ------------------------------------------------------------------


def _lstm_cell_unrolled(steps: int = 3, inputs: int = 8, hidden: int = 32) -> onnx.ModelProto:
    """TorchScript's nn.LSTMCell loop: x[t] by a scalar Gather, Gemm + Gemm -> Add -> Split in four gates."""
    rng = np.random.default_rng(1)
    weights = [_weight(rng, "cell.weight_ih", 4 * hidden, inputs), _weight(rng, "cell.weight_hh", 4 * hidden, hidden),
               _weight(rng, "cell.bias_ih", 4 * hidden), _weight(rng, "cell.bias_hh", 4 * hidden)]
    nodes = [_const("zeros", np.zeros((1, hidden)), np.float32), _const("gates_split", [hidden] * 4)]
    h, c = "zeros", "zeros"
    for t in range(steps):
        p = f"/cell_{t}/"
        nodes += [
            _const(p + "t", t),
            helper.make_node("Gather", ["x", p + "t"], [p + "x_t"], axis=0),
            helper.make_node("Gemm", [h, "cell.weight_hh", "cell.bias_hh"], [p + "gh"], transB=1),
            helper.make_node("Gemm", [p + "x_t", "cell.weight_ih", "cell.bias_ih"], [p + "gi"], transB=1),
            helper.make_node("Add", [p + "gh", p + "gi"], [p + "gates"]),
            helper.make_node("Split", [p + "gates", "gates_split"], [p + g for g in "ifgo"], axis=1),
            helper.make_node("Sigmoid", [p + "i"], [p + "si"]),
            helper.make_node("Sigmoid", [p + "f"], [p + "sf"]),
            helper.make_node("Tanh", [p + "g"], [p + "tg"]),
            helper.make_node("Sigmoid", [p + "o"], [p + "so"]),
            helper.make_node("Mul", [p + "sf", c], [p + "fc"]),
            helper.make_node("Mul", [p + "si", p + "tg"], [p + "ig"]),
            helper.make_node("Add", [p + "fc", p + "ig"], [p + "c"]),
            helper.make_node("Tanh", [p + "c"], [p + "tc"]),
            helper.make_node("Mul", [p + "so", p + "tc"], [p + "h"]),
        ]
        h, c = p + "h", p + "c"
    nodes.append(helper.make_node("Identity", [h], ["h"]))
    return _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [steps, 1, inputs])],
                  [helper.make_tensor_value_info("h", FLOAT, [1, hidden])], weights)


def test_unrolled_lstm_cell_roundtrips_on_onnxruntime():
    graph, exported = _roundtrip(_lstm_cell_unrolled(), _float_feeds({"x": (3, 1, 8)}))
    assert not _opaque_types(graph)
    assert all(len(t.dims) == 0 for t in exported.graph.initializer if t.data_type == INT64 and t.name.startswith("/cell_"))


# ---- 3. TorchScript BERT: shape computations fold, Expand is native --------------------------------------


def _torchscript_bert_embeddings(vocab: int = 50, hidden: int = 16, heads: int = 2, max_len: int = 32) -> onnx.ModelProto:
    """TorchScript's BERT embeddings and head split with dynamic axes: Shape -> Gather -> Unsqueeze ->
    Concat -> Reshape, the token-type buffer's expand (ConstantOfShape -> Mul -> Equal -> Where -> Expand),
    position ids by Range, and the attention mask's (1 - mask) * min."""
    rng = np.random.default_rng(2)
    weights = [_weight(rng, "word", vocab, hidden), _weight(rng, "pos", max_len, hidden), _weight(rng, "type", 2, hidden),
               _weight(rng, "q.weight", hidden, hidden), _init("token_type_ids", np.zeros((1, max_len)), np.int64)]
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["shape"]),
        _const("c0", 0), _const("c1", 1), _const("c1v", [1]), _const("c0v", [0]), _const("c2", [2]), _const("minus1", -1),
        helper.make_node("Gather", ["shape", "c0"], ["batch"], axis=0),
        helper.make_node("Gather", ["shape", "c1"], ["seq"], axis=0),
        # position_ids = arange(seq)
        helper.make_node("Range", ["c0", "seq", "c1"], ["position_ids"]),
        helper.make_node("Unsqueeze", ["position_ids", "c0v"], ["position_ids_2d"]),
        # token_type_ids[:, :seq].expand(batch, seq)
        helper.make_node("Unsqueeze", ["seq", "c0v"], ["seq_1"]),
        helper.make_node("Slice", ["token_type_ids", "c0v", "seq_1", "c1v"], ["tt_sliced"]),
        helper.make_node("Unsqueeze", ["batch", "c0v"], ["batch_1"]),
        helper.make_node("Concat", ["batch_1", "seq_1"], ["bs"], axis=0),
        helper.make_node("ConstantOfShape", ["c2"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.int64))),
        helper.make_node("Mul", ["ones", "minus1"], ["minus_ones"]),
        helper.make_node("Equal", ["bs", "minus_ones"], ["is_minus"]),
        helper.make_node("Where", ["is_minus", "ones", "bs"], ["expand_shape"]),
        helper.make_node("Expand", ["tt_sliced", "expand_shape"], ["tt"]),
        helper.make_node("Gather", ["word", "input_ids"], ["we"]),
        helper.make_node("Gather", ["pos", "position_ids_2d"], ["pe"]),
        helper.make_node("Gather", ["type", "tt"], ["te"]),
        helper.make_node("Add", ["we", "pe"], ["e1"]),
        helper.make_node("Add", ["e1", "te"], ["emb"]),
        # q = emb @ W viewed as (batch, seq, heads, hidden / heads)
        helper.make_node("MatMul", ["emb", "q.weight"], ["q"]),
        _const("heads", [heads]), _const("head_dim", [hidden // heads]),
        helper.make_node("Concat", ["batch_1", "seq_1", "heads", "head_dim"], ["view_shape"], axis=0),
        helper.make_node("Reshape", ["q", "view_shape"], ["q_view"]),
        helper.make_node("Transpose", ["q_view"], ["q_heads"], perm=[0, 2, 1, 3]),
        # extended mask = (1 - mask[:, None, None, :].float()) * finfo.min
        _const("axes12", [1, 2]), _const("one", 1.0, np.float32), _const("fmin", np.finfo(np.float32).min, np.float32),
        helper.make_node("Unsqueeze", ["attention_mask", "axes12"], ["mask4"]),
        helper.make_node("Cast", ["mask4"], ["maskf"], to=FLOAT),
        helper.make_node("Sub", ["one", "maskf"], ["inv"]),
        helper.make_node("Mul", ["inv", "fmin"], ["ext_mask"]),
        helper.make_node("Transpose", ["q_heads"], ["q_heads_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q_heads", "q_heads_t"], ["scores"]),
        helper.make_node("Add", ["scores", "ext_mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
    ]
    inputs = [helper.make_tensor_value_info("input_ids", INT64, ["batch", "sequence"]),
              helper.make_tensor_value_info("attention_mask", INT64, ["batch", "sequence"])]
    outputs = [helper.make_tensor_value_info("probs", FLOAT, ["batch", heads, "sequence", "sequence"])]
    return _model(nodes, inputs, outputs, weights)


def _bert_feeds(batch: int, seq: int, vocab: int = 50) -> Feeds:
    def feeds(rng):
        mask = np.ones((batch, seq), np.int64)
        mask[:, seq - rng.integers(1, seq):] = 0
        return {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64), "attention_mask": mask}

    return feeds


def test_torchscript_bert_shape_computations_fold_once_input_shapes_are_fixed():
    graph, exported = _roundtrip(_torchscript_bert_embeddings(), _bert_feeds(2, 7), {"input_ids": (2, 7), "attention_mask": (2, 7)}, static=True)
    assert not _opaque_types(graph)
    kept = {n.op_type for n in exported.graph.node}
    assert not kept & {"Shape", "ConstantOfShape", "Equal", "Where", "Range", "Concat"}, kept


def test_expand_is_a_native_op_that_broadcasts_both_ways():
    nodes = [_const("shape", [3, 1, 4]), helper.make_node("Expand", ["x", "shape"], ["e"]), helper.make_node("Relu", ["e"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [2, 1])], [helper.make_tensor_value_info("y", FLOAT, [3, 2, 4])])
    graph, _ = _roundtrip(model, _float_feeds({"x": (2, 1)}))
    assert [n.op.name for n in graph.nodes] == ["expand", "relu"]
    assert graph.nodes[0].params["shape"] == (3, 2, 4)


def test_masked_fill_attention_mask_is_native_equal_and_where():
    """masked_fill(mask[:, None, None, :] == 0, -inf) between the scores' MatMul and Softmax."""
    nodes = [
        _const("axes12", [1, 2]), _const("zero", 0), _const("neg_inf", -np.inf, np.float32),
        helper.make_node("MatMul", ["q", "k"], ["scores"]),
        helper.make_node("Unsqueeze", ["mask", "axes12"], ["mask4"]),
        helper.make_node("Equal", ["mask4", "zero"], ["masked_out"]),
        helper.make_node("Where", ["masked_out", "neg_inf", "scores"], ["filled"]),
        helper.make_node("Softmax", ["filled"], ["probs"], axis=-1),
    ]
    inputs = [helper.make_tensor_value_info("q", FLOAT, [2, 2, 5, 4]), helper.make_tensor_value_info("k", FLOAT, [2, 2, 4, 5]),
              helper.make_tensor_value_info("mask", INT64, [2, 5])]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("probs", FLOAT, [2, 2, 5, 5])])

    def feeds(rng):
        mask = (rng.random((2, 5)) < 0.7).astype(np.int64)
        mask[:, 0] = 1
        return {"q": rng.standard_normal((2, 2, 5, 4)).astype(np.float32), "k": rng.standard_normal((2, 2, 4, 5)).astype(np.float32), "mask": mask}

    graph, _ = _roundtrip(model, feeds)
    assert not _opaque_types(graph)
    assert {"equal", "where"} <= {n.op.name for n in graph.nodes}


@pytest.mark.parametrize("seq", [64, 512])
def test_an_expanded_causal_mask_is_not_materialised_in_the_file(seq):
    """Expand of a constant [1, 1, S, S] mask to [batch, heads, S, S]: folding it would multiply the file by 24."""
    mask = np.triu(np.full((1, 1, seq, seq), -1e4, np.float32), 1)
    nodes = [_const("shape", [2, 12, seq, seq]), helper.make_node("Expand", ["mask", "shape"], ["m"]), helper.make_node("Add", ["scores", "m"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("scores", FLOAT, [2, 12, seq, seq])], [helper.make_tensor_value_info("y", FLOAT, [2, 12, seq, seq])],
                   [_init("mask", mask)])
    _, exported = _roundtrip(model, _float_feeds({"scores": (2, 12, seq, seq)}))
    assert exported.ByteSize() < 2 * model.ByteSize()


# ---- 4. TorchScript NASNet: computed pads, then an Add of two branches -------------------------------------


def _torchscript_zero_pad(prefix: str, x: str, pads: list[int], out: str) -> list[onnx.NodeProto]:
    """TorchScript's nn.ZeroPad2d at opset >= 11: pads reordered through ConstantOfShape, Concat,
    Reshape, a reversing Slice, Transpose, Reshape and Cast before Pad."""
    p = prefix
    return [
        _const(p + "n", [4]), _const(p + "pads", pads),
        helper.make_node("ConstantOfShape", [p + "n"], [p + "zeros"], value=numpy_helper.from_array(np.zeros(1, np.int64))),
        helper.make_node("Concat", [p + "pads", p + "zeros"], [p + "all"], axis=0),
        _const(p + "pairs", [-1, 2]),
        helper.make_node("Reshape", [p + "all", p + "pairs"], [p + "paired"]),
        _const(p + "s0", [0]), _const(p + "sm1", [-1]), _const(p + "smin", [np.iinfo(np.int64).min + 1]),
        helper.make_node("Slice", [p + "paired", p + "sm1", p + "smin", p + "s0", p + "sm1"], [p + "reversed"]),
        helper.make_node("Transpose", [p + "reversed"], [p + "t"], perm=[1, 0]),
        helper.make_node("Reshape", [p + "t", p + "sm1"], [p + "flat"]),
        helper.make_node("Cast", [p + "flat"], [p + "onnx_pads"], to=INT64),
        helper.make_node("Pad", [x, p + "onnx_pads", ""], [out], mode="constant"),
    ]


def _torchscript_nasnet_cell(channels: int = 4, size: int = 8) -> onnx.ModelProto:
    """NASNet's MaxPoolPad (ZeroPad2d((1, 0, 1, 0)), MaxPool, x[:, :, 1:, 1:]) added to a separable
    convolution branch padded by ZeroPad2d((2, 2, 2, 2))."""
    rng = np.random.default_rng(3)
    out = size // 2
    nodes = _torchscript_zero_pad("/pool/pad/", "x", [1, 0, 1, 0], "padded")
    nodes += [
        helper.make_node("MaxPool", ["padded"], ["pooled"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        _const("one", [1]), _const("big", [np.iinfo(np.int64).max]), _const("axes23", [2, 3]), _const("ones", [1, 1]), _const("bigs", [np.iinfo(np.int64).max] * 2),
        helper.make_node("Slice", ["pooled", "ones", "bigs", "axes23", "ones"], ["pool_branch"]),
        helper.make_node("Relu", ["x"], ["r"]),
    ]
    nodes += _torchscript_zero_pad("/sep/pad/", "r", [2, 2, 2, 2], "r_padded")
    nodes += [
        helper.make_node("Conv", ["r_padded", "dw"], ["dw_out"], kernel_shape=[5, 5], strides=[2, 2], group=channels),
        helper.make_node("Conv", ["dw_out", "pw"], ["sep_branch"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["pool_branch", "sep_branch"], ["y"]),
    ]
    weights = [_weight(rng, "dw", channels, 1, 5, 5), _weight(rng, "pw", channels, channels, 1, 1)]
    return _model(nodes, [helper.make_tensor_value_info("x", FLOAT, ["batch", channels, "h", "w"])],
                  [helper.make_tensor_value_info("y", FLOAT, ["batch", channels, out, out])], weights)


def test_torchscript_nasnet_cell_with_computed_pads_imports_natively():
    graph, _ = _roundtrip(_torchscript_nasnet_cell(), _float_feeds({"x": (1, 4, 8, 8)}), {"x": (1, 4, 8, 8)}, static=True)
    assert not _opaque_types(graph)
    assert [n.params["pads"] for n in graph.nodes if n.op.name == "pad"] == [(0, 0, 1, 1, 0, 0, 0, 0), (0, 0, 2, 2, 0, 0, 2, 2)]


def test_an_add_of_shapes_that_do_not_broadcast_says_so():
    """Why an Add went opaque in NASNet: its inputs' types; the error now shows them, not the evaluator's 'Issues with types'."""
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="/cell_stem_0/Add")]
    model = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", FLOAT, [1, 8, 5, 5]),
                                                              helper.make_tensor_value_info("b", FLOAT, [1, 8, 4, 4])],
                                                [helper.make_tensor_value_info("y", FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ImportError_, match=r"Add node '/cell_stem_0/Add' does not accept its input types: .*1,8,5,5.*1,8,4,4"):
        taso.load_onnx(model)


# ---- 5. Resize: empty optional inputs stay empty ------------------------------------------------------


def _paddle_resize(opset: int, roi: str, scales: str, sizes: bool) -> onnx.ModelProto:
    """paddle2onnx's upsampling: output sizes = Shape(x)[:2] ++ target (h, w), roi and scales unused."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]), _const("s0", [0]), _const("s2", [2]), _const("hw", [16, 12]),
        helper.make_node("Slice", ["shape", "s0", "s2"], ["nc"]),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
        _const("empty_roi", np.zeros(0), np.float32), _const("empty_scales", np.zeros(0), np.float32),
        _const("scale_values", [1, 1, 2, 1.5], np.float32),
    ]
    inputs = ["x", roi, scales] + (["sizes"] if sizes else [])
    nodes.append(helper.make_node("Resize", inputs, ["r"], mode="nearest" if sizes else "linear"))
    nodes.append(helper.make_node("Relu", ["r"], ["y"]))
    return _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [1, 3, 8, 8])],
                  [helper.make_tensor_value_info("y", FLOAT, [1, 3, 16, 12])], opset=opset, ir_version=7 if opset < 14 else 8)


@pytest.mark.parametrize("opset, roi, scales, sizes", [
    (11, "empty_roi", "empty_scales", True),   # opset 11: roi and scales are required, written as empty tensors
    (13, "", "", True),                         # opset 13+: omitted optional inputs are ""
    (18, "", "", True),
    (13, "", "scale_values", False),
], ids=["opset11-empty-tensors", "opset13-empty-names", "opset18-empty-names", "opset13-scales"])
def test_paddle_resize_keeps_empty_optional_inputs_empty(opset, roi, scales, sizes):
    model = _paddle_resize(opset, roi, scales, sizes)
    _, exported = _roundtrip(model, _float_feeds({"x": (1, 3, 8, 8)}))
    (resize,) = [n for n in exported.graph.node if n.op_type == "Resize"]
    original = [n for n in model.graph.node if n.op_type == "Resize"][0]
    assert [bool(name) for name in resize.input] == [bool(name) for name in original.input]
    initializers = {t.name: t for t in exported.graph.initializer}
    constants = {t.name: t for t in initializers.values()}
    for slot in (1, 2):
        if slot < len(original.input) and original.input[slot].startswith("empty"):
            assert list(constants[resize.input[slot]].dims) == [0]


def test_paddle_resize_is_native_and_its_measured_cost_uses_its_real_sizes(tmp_path, monkeypatch):
    """Defect 5: the ort-cpu cost model timed the opaque Resize with sizes = 0 ('Scale value should
    be greater than 0'); a native resize carries its sizes as parameters and is timed with them."""
    from taso.cost.ort_cpu import OrtCpuCost

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    graph = taso.load_onnx(_paddle_resize(13, "", "", True))
    assert [n.op.name for n in graph.nodes] == ["resize", "relu"]
    assert OrtCpuCost(threads=1).graph_cost(graph) > 0


def test_measured_cost_of_an_opaque_resize_uses_its_real_sizes(tmp_path, monkeypatch):
    """An opaque Resize (tf_crop_and_resize) is timed with its real sizes: random constants (zeros for integers) made ONNX Runtime refuse it."""
    from taso.cost.ort_cpu import OrtCpuCost

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    nodes = [_const("roi", [0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9], np.float32), _const("sizes", [1, 3, 6, 6]),
             helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="linear", coordinate_transformation_mode="tf_crop_and_resize")]
    model = _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info("y", FLOAT, [1, 3, 6, 6])])
    graph = taso.load_onnx(model)
    assert _opaque_types(graph) == ["Resize"]
    assert OrtCpuCost(threads=1).graph_cost(graph) > 0


@pytest.mark.parametrize("mode, coordinates, nearest, given", [
    ("nearest", "asymmetric", "floor", "scales"),              # PyTorch's F.interpolate(scale_factor=2)
    ("nearest", "half_pixel", "round_prefer_ceil", "sizes"),   # TensorFlow converters
    ("linear", "pytorch_half_pixel", "round_prefer_floor", "sizes"),
    ("linear", "align_corners", "round_prefer_floor", "sizes"),
    ("linear", "half_pixel", "round_prefer_floor", "scales"),
    ("cubic", "half_pixel", "round_prefer_floor", "scales"),
    ("nearest", "asymmetric", "round_prefer_ceil", "sizes"),   # exact halves: 7 -> 4 puts x = 2 at 3.5
])
def test_native_resize_matches_onnxruntime(mode, coordinates, nearest, given):
    x_shape, out = (1, 2, 5, 7), (1, 2, 8, 4)
    factors = np.array([1, 1, 1.6, 0.6], np.float32)
    nodes = [_const("factors", factors, np.float32), _const("sizes", out)]
    inputs = ["x", "", "factors"] if given == "scales" else ["x", "", "", "sizes"]
    attrs = {"nearest_mode": nearest} if mode == "nearest" else {}
    nodes.append(helper.make_node("Resize", inputs, ["r"], mode=mode, coordinate_transformation_mode=coordinates, **attrs))
    nodes.append(helper.make_node("Relu", ["r"], ["y"]))
    model = _model(nodes, [helper.make_tensor_value_info("x", FLOAT, list(x_shape))], [helper.make_tensor_value_info("y", FLOAT, list(out))])
    graph, _ = _roundtrip(model, _float_feeds({"x": x_shape}))
    assert [n.op.name for n in graph.nodes] == ["resize", "relu"]
    feeds = _float_feeds({"x": x_shape})(np.random.default_rng(5))
    assert_close(graph.run(feeds)["y"], run_ort(model, feeds)[0], 1e-5, "NumPy semantics vs ONNX Runtime")


@pytest.mark.parametrize("opset, mode", [(9, "nearest"), (9, "linear"), (10, "nearest"), (10, "linear")])
def test_old_exporters_upsample_is_native_and_written_back_as_it_was(opset, mode):
    """keras2onnx / old PyTorch: Upsample (opset 9) or Resize-10 with constant scales, asymmetric coordinates."""
    op_type = "Upsample" if opset == 9 else "Resize"
    nodes = [helper.make_node(op_type, ["x", "scales"], ["u"], mode=mode), helper.make_node("Relu", ["u"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [1, 2, 5, 7])], [helper.make_tensor_value_info("y", FLOAT, [1, 2, 10, 18])],
                   [_init("scales", [1, 1, 2, 2.7])], opset=opset, ir_version=5)
    graph, exported = _roundtrip(model, _float_feeds({"x": (1, 2, 5, 7)}))
    assert [n.op.name for n in graph.nodes] == ["resize", "relu"]
    assert [n.op_type for n in exported.graph.node] == [op_type, "Relu"]


# ---- helpers the If tests share (tests/test_opaque_types.py) --------------------------------------------


def _sample_rate_model(post: str = "", both_run: bool = False) -> onnx.ModelProto:
    """silero-vad in miniature: ``If(sr == 16000)`` between two networks that each run only at their own length.

    Each branch frames the samples into 4 rows (``Reshape(x, [4, -1])``) and projects the summed frame
    with a weight sized for its own length (16 kHz: 512 samples, 8 kHz: 256), so the 8 kHz branch fails
    at 512 samples (a MatMul of [1,128] by [64,4]), and ONNX Runtime, which infers shapes inside both
    branches at load, refuses the model once ``x`` is declared [1,512]. ``both_run``: the 8 kHz branch
    pools to a fixed width first, so both run at any length (silero_vad_op18_ifless, openwakeword's).
    ``post``: an op taso models applied to the If's output.
    """
    rng = np.random.default_rng(10)

    def branch(tag: str, length: int) -> onnx.GraphProto:
        width = 128 if both_run else length // 4
        nodes = [_const(f"{tag}_frame", [4, -1]), helper.make_node("Reshape", ["x", f"{tag}_frame"], [f"{tag}_frames"]),
                 _const(f"{tag}_axes", [0]), helper.make_node("ReduceSum", [f"{tag}_frames", f"{tag}_axes"], [f"{tag}_sum"], keepdims=1)]
        if both_run and tag == "k8":
            nodes += [_const("k8_pooled", [1, 128]), helper.make_node("Resize", [f"{tag}_sum", "", "", "k8_pooled"], ["k8_wide"], mode="nearest")]
        nodes += [helper.make_node("Constant", [], [f"{tag}_w"], value=_init(f"{tag}_w", rng.standard_normal((width, 4)) * 0.1)),
                  helper.make_node("MatMul", ["k8_wide" if both_run and tag == "k8" else f"{tag}_sum", f"{tag}_w"], [f"{tag}_out"])]
        return helper.make_graph(nodes, tag, [], [helper.make_tensor_value_info(f"{tag}_out", FLOAT, [1, 4])])

    nodes = [_const("rate", 16000), helper.make_node("Equal", ["sr", "rate"], ["cond"]),
             helper.make_node("If", ["cond"], ["speech" if post else "y"], then_branch=branch("k16", 512), else_branch=branch("k8", 256), name="sr_switch")]
    if post:
        nodes.append(helper.make_node(post, ["speech"], ["y"]))
    return _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [1, "samples"]), helper.make_tensor_value_info("sr", INT64, [])],
                  [helper.make_tensor_value_info("y", FLOAT, [1, 4])])


def _declared(vi: onnx.ValueInfoProto) -> list:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]


# ---- 9. dimensions declared -1, IR versions from the future ------------------------------------------------


def _minus_one_model() -> onnx.ModelProto:
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", FLOAT, [-1, 3, "height", "width"])],
                  [helper.make_tensor_value_info("y", FLOAT, [-1, 4, "height", "width"])], [_weight(rng, "w", 4, 3, 3, 3)], opset=11, ir_version=6)


def test_minus_one_dimension_is_a_symbol_of_its_own():
    """An old converter's -1 is a dynamic dim with no name: it becomes the symbol x_dim0, measured at 1 (axis 0)."""
    graph = taso.load_onnx(_minus_one_model())
    assert str(graph.inputs["x"]) == "float32[x_dim0,3,height,width]"
    assert dict(graph.meta.sizes) == {"x_dim0": 1, "height": 128, "width": 128}
    _, exported = _roundtrip(_minus_one_model(), _float_feeds({"x": (2, 3, 5, 6)}), {"x": (2, 3, 5, 6)})
    assert _declared(exported.graph.input[0]) == ["x_dim0", 3, "height", "width"]
    assert taso.load_onnx(_minus_one_model(), {"x": (1, 3, 8, 8)}, static=True).inputs["x"].shape == (1, 3, 8, 8)


def test_info_describes_a_model_with_dynamic_dimensions_and_its_measurement_sizes(tmp_path, capsys):
    """Defect 9: `taso info` printed a -1 as a static size; now it shows each dynamic dim as a symbol, and where it is measured."""
    from taso.cli import main

    path = str(tmp_path / "minus_one.onnx")
    onnx.save(_minus_one_model(), path)
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "x: float32[x_dim0,3,height,width]" in out and "conv2d  1" in out and "measured at: height=128, width=128, x_dim0=1" in out
    assert main(["info", path, "--input-shape", "x=1,3,8,8"]) == 0
    assert "measured at: height=8, width=8, x_dim0=1" in capsys.readouterr().out


def test_minus_one_dimension_is_optimized_and_stays_dynamic_on_the_cli(tmp_path, capsys):
    from taso.cli import main

    path, out = str(tmp_path / "minus_one.onnx"), str(tmp_path / "out.onnx")
    onnx.save(_minus_one_model(), path)
    assert main(["optimize", path, "--cost", "analytic", "-o", out, "--input-shape", "x=1,3,16,16", "--budget", "5"]) == 0
    report = capsys.readouterr().out
    assert "at height=16,17; width=16,17; x_dim0=1,2" in report
    assert _declared(onnx.load(out).graph.input[0]) == ["x_dim0", 3, "height", "width"]


def test_ir_version_from_the_future_is_refused_at_load(tmp_path, capsys):
    from taso.cli import main

    model = _lstm_cell_unrolled()
    model.ir_version = 99
    with pytest.raises(ImportError_, match="IR version 99 is newer"):
        taso.load_onnx(model)
    path = str(tmp_path / "future.onnx")
    onnx.save(model, path)
    assert main(["optimize", path, "-o", str(tmp_path / "out.onnx"), "--cost", "analytic"]) == 2
    err = capsys.readouterr().err
    assert "IR version 99" in err and err.count("\n") == 1
    assert not (tmp_path / "out.onnx").exists()


def test_constant_whose_data_does_not_fit_its_dims_is_a_clear_error():
    """A converter's empty Constant written without dims (rank 0, no data): one line, not a ValueError."""
    broken = onnx.TensorProto()
    broken.data_type = FLOAT
    nodes = [helper.make_node("Constant", [], ["c"], value=broken, name="empty_scales"), helper.make_node("Add", ["x", "c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", FLOAT, [2])], [helper.make_tensor_value_info("y", FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ImportError_, match="Constant node 'empty_scales' holds a tensor that cannot be read"):
        taso.load_onnx(model)


def test_linear_layers_applied_per_time_step_read_one_transposed_weight():
    """Issue 12: an unrolled nn.LSTMCell exports one Gemm(x_t, W, b, transB=1) per step. Each used to
    import with a transpose node of its own, so no two products shared a weight and no merge rule
    could match; now the transposed weight is one initializer that every step's matmul reads."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "b")
    nodes = [helper.make_node("Gemm", [f"x{t}", "W", "b"], [f"y{t}"], transB=1) for t in range(3)]
    model = _model(nodes, [helper.make_tensor_value_info(f"x{t}", FLOAT, [1, 4]) for t in range(3)],
                   [helper.make_tensor_value_info(f"y{t}", FLOAT, [1, 8]) for t in range(3)], [w, b])
    graph = taso.load_onnx(model)
    assert "transpose" not in {n.op.name for n in graph.nodes}
    weights = {n.inputs[1] for n in graph.nodes if n.op.name == "matmul"}
    assert len(weights) == 1 and np.array_equal(graph.weights[weights.pop()], numpy_helper.to_array(w).T)
    feeds = {f"x{t}": rng.standard_normal((1, 4)).astype(np.float32) for t in range(3)}
    exported = taso.export_onnx(graph)
    for want, got in zip(run_ort(model, feeds), run_ort(exported, feeds)):
        assert_close(got, want)


def test_the_measured_cost_model_prices_an_if_that_cannot_run_alone(tmp_path, monkeypatch):
    """silero_vad with the default ort-cpu cost crashed with a traceback: its If, timed as a one-node model on a
    random sample rate, takes the branch that cannot run at the fixed length. An opaque node taso never rewrites
    costs the same in every candidate, so it is priced as a node being there, and `taso optimize` exits 0."""
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "vad.onnx"
    onnx.save(_sample_rate_model(), str(path))
    proc = subprocess.run([sys.executable, "-m", "taso", "optimize", str(path), "-o", str(tmp_path / "out.onnx"), "--time-limit", "2",
                           "--quiet", "--input-shape", "x=1,512", "--static"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TASO_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_symbol_the_model_pins_to_one_size_is_exit_2_in_one_line(tmp_path):
    """silero-vad declares its sample count symbolic but its 16 kHz network runs at 512 samples only: the check at
    513, 1024 and 256 fails on the input itself, which is said in one line (with the way out) before any search."""
    path = tmp_path / "vad.onnx"
    onnx.save(_sample_rate_model(), str(path))
    proc = subprocess.run([sys.executable, "-m", "taso", "optimize", str(path), "-o", str(tmp_path / "out.onnx"), "--cost", "analytic",
                           "--quiet", "--input-shape", "x=1,512"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.startswith("taso: error: the input model declares symbolic dims (measured at samples=512) but does not run at samples=513 "
                                  "nor at samples=1024 nor at samples=256")
    assert "--static" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "out.onnx").exists()


def test_a_model_taso_cannot_type_at_symbolic_sizes_is_written_unchanged(tmp_path, capsys):
    """Silero VAD's If squeezes when the batch is 1: the output's rank depends on a size. Named with the measurement
    sizes, the reason stays Unsupported, so `taso optimize` writes the input unchanged (exit 0), not a refusal."""
    then_graph = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", FLOAT, None)])
    else_graph = helper.make_graph([_const("axes", [0]), helper.make_node("Squeeze", ["x", "axes"], ["e"])], "else", [],
                                   [helper.make_tensor_value_info("e", FLOAT, None)])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), _const("zero", [0]), helper.make_node("Gather", ["shape", "zero"], ["batch"]),
             _const("one", [1]), helper.make_node("Greater", ["batch", "one"], ["many"]), _const("squeeze_first", [0]),
             helper.make_node("Squeeze", ["many", "squeeze_first"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph, name="decoder_if")]
    graph = helper.make_graph(nodes, "vad", [helper.make_tensor_value_info("x", FLOAT, ["batch", 4])], [helper.make_tensor_value_info("y", FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])  # the output's rank is undeclared: it depends on the batch
    model.ir_version = 8
    assert run_ort(model, {"x": np.ones((1, 4), np.float32)})[0].shape == (4,)
    with pytest.raises(taso.Unsupported, match="at the measurement sizes batch=1"):
        taso.load_onnx(model)
    source, out = tmp_path / "vad.onnx", tmp_path / "out.onnx"
    onnx.save(model, str(source))
    from taso.cli import main

    assert main(["optimize", str(source), "-o", str(out), "--cost", "analytic", "--quiet"]) == 0, capsys.readouterr().err
    assert out.read_bytes() == source.read_bytes()
