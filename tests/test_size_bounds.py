"""Sizes a file implies (taso.onnx.size_bounds): a table sliced or gathered up to a symbol bounds it, no symbol is
measured past its bound, and taso info says why."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from helpers import run_ort
from onnx import TensorProto, helper, numpy_helper

import taso
from taso.cli import main
from taso.onnx.symbolic import DEFAULT_SIZE, implied_size_bounds
from taso.pipeline.sizes import SizeRange

DATA = os.path.join(os.path.dirname(__file__), "data", "symbolic")


def _positions(table: int, how: str, opset: int = 17) -> onnx.ModelProto:
    """y = x + positions[:seq] for x ``[batch, seq, 8]``, the rows read as BERT slices them (``slice``), as GPT-2
    gathers them (``gather``), or (``none``) x + x."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((table, 8)).astype(np.float32), "positions"),
               numpy_helper.from_array(np.array([0], np.int64), "zero"), numpy_helper.from_array(np.array(0, np.int64), "zero_scalar"),
               numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array([1], np.int64), "axis_one")]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0)]
    if how == "slice":
        nodes += [helper.make_node("Unsqueeze", ["seq", "zero"], ["end"]),
                  helper.make_node("Slice", ["positions", "zero", "end", "zero"], ["rows"]), helper.make_node("Add", ["x", "rows"], ["y"])]
    elif how == "gather":
        nodes += [helper.make_node("Range", ["zero_scalar", "seq", "one"], ["ids"]),
                  helper.make_node("Gather", ["positions", "ids"], ["rows"], axis=0), helper.make_node("Add", ["x", "rows"], ["y"])]
    else:
        nodes += [helper.make_node("Add", ["x", "x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 8])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("how", ["slice", "gather"])
def test_a_table_read_up_to_a_symbol_bounds_its_measurement_size(how):
    model = _positions(48, how)
    assert implied_size_bounds(model)["seq"][0] == 48
    graph = taso.load_onnx(model)
    assert dict(graph.meta.sizes) == {"batch": 1, "seq": 48}
    x = np.ones((1, 48, 8), np.float32)
    assert run_ort(model, {"x": x})[0].shape == (1, 48, 8)  # it runs at the size measured
    with pytest.raises(Exception):  # noqa: B017 - and not one past it (ONNX Runtime's own error)
        run_ort(model, {"x": np.ones((1, 49, 8), np.float32)})


def test_a_table_longer_than_the_default_size_and_no_table_leave_the_default():
    assert dict(taso.load_onnx(_positions(512, "slice")).meta.sizes)["seq"] == DEFAULT_SIZE
    assert implied_size_bounds(_positions(8, "none")) == {}
    assert dict(taso.load_onnx(_positions(8, "none")).meta.sizes)["seq"] == DEFAULT_SIZE


def test_a_size_given_is_kept_even_past_the_bound():
    """--input-shape is the user's word: the bound only changes a default."""
    assert dict(taso.load_onnx(_positions(48, "slice"), input_shapes={"x": (2, 64, 8)}).meta.sizes) == {"batch": 2, "seq": 64}


@pytest.mark.parametrize("name,table,why", [
    ("bert_hf_tiny.dynamo", 64, "'bert.embeddings.position_ids' is sliced up to it"),
    ("bert_hf_tiny.torchscript", 64, "is sliced up to it"),
    ("bert_tiny.dynamo", 32, "of the 32-long 'positions.weight' are gathered"),
    ("bert_tiny.torchscript", 32, "of the 32-long 'positions.weight' are gathered")])
def test_the_exporters_position_tables_bound_seq_and_taso_info_says_why(capsys, name, table, why):
    """transformers' BERT (64 positions) slices its position ids, the hand-written one (32) gathers rows of its table; both
    were measured at seq 128 before, where neither runs."""
    path = os.path.join(DATA, f"{name}.onnx")
    graph = taso.load_onnx(path)
    assert dict(graph.meta.sizes)["seq"] == table
    seq = next(s for s in SizeRange.of(graph).symbols if s.symbol == "seq")
    assert seq.sizes == (table,) and why in seq.why
    assert main(["info", path]) == 0
    assert f"seq (input_ids axis 1): {table}: the largest the file runs at: " in capsys.readouterr().out


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_table_sliced_up_to_its_bound_keeps_the_symbol_so_what_follows_is_taso_s(exporter):
    """Sliced to ``[:, :seq]`` with seq at most the table's length, BERT's position ids are ``[1, seq]`` at every size the
    file runs at: the embeddings' sum, the attention's reshapes and products after it are taso's operators, not opaque
    nodes of sizes of their own; the model reads back equal at another size."""
    path = os.path.join(DATA, f"bert_hf_tiny.{exporter}.onnx")
    graph = taso.load_onnx(path)
    opaque = {onnx.NodeProto.FromString(n.params["proto"]).op_type for n in graph.nodes if n.op.name == "opaque"}
    assert not opaque & {"Add", "MatMul", "Reshape", "Expand", "Slice"}, opaque
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 100, (3, 40)).astype(np.int64), "attention_mask": np.ones((3, 40), np.int64)}
    feeds["attention_mask"][1, 30:] = 0
    np.testing.assert_allclose(run_ort(taso.export_onnx(graph), feeds)[0], run_ort(path, feeds)[0], rtol=1e-5, atol=1e-5)
