"""`taso info` and the CLI's handling of bad input: one clear line on stderr, exit 2, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from helpers import model_from_text
from onnx import TensorProto, helper

import taso
from taso.cli import main

LIGHT_RESNET = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_resnet50.onnx")


def _save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


def _symbolic_model() -> onnx.ModelProto:
    return model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3] x) => (float[N, 3] y) { y = Relu (x) }
    """)


def test_info_prints_inputs_outputs_histogram_and_parameters(capsys):
    assert main(["info", LIGHT_RESNET]) == 0
    out = capsys.readouterr().out
    assert "data_0: float32[1,3,224,224]" in out
    assert "conv2d" in out and "batch_norm" in out and "parameters" in out


def test_info_json_is_machine_readable(capsys):
    assert main(["info", LIGHT_RESNET, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"] == [{"name": "gpu_0/data_0", "shape": [1, 3, 224, 224], "dtype": "float32"}]
    assert summary["ops"]["conv2d"] == 53 and summary["opaque"] == {}
    assert summary["parameters"] > 0


def test_info_lists_opaque_operators(tmp_path, capsys):
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 4, 5, 5] x) => (float[1, 4, 5, 5] y) { y = LRN <size = 3> (x) }
    """)
    assert main(["info", _save(model, tmp_path / "m.onnx"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["opaque"] == {"LRN": 1}


def test_input_shape_gives_the_measurement_size_of_symbolic_dimensions(tmp_path, capsys):
    path = _save(_symbolic_model(), tmp_path / "sym.onnx")
    assert main(["info", path, "--input-shape", "x=2,3", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"][0]["shape"] == ["N", 3] and summary["measurement_sizes"] == {"N": 2}


def _truncated(tmp_path):
    data = open(LIGHT_RESNET, "rb").read()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 3])
    return str(path)


def _not_onnx(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a model\n" * 20)
    return str(path)


def _cycle(tmp_path):
    nodes = [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Add", ["x", "a"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "cycle.onnx")


def _undefined(tmp_path):
    graph = helper.make_graph([helper.make_node("Add", ["x", "ghost"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "undefined.onnx")


def _future_opset(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    future = onnx.defs.onnx_opset_version() + 1
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", future)]), tmp_path / "future.onnx")


@pytest.mark.parametrize("make, message", [
    (lambda tmp: str(tmp / "missing.onnx"), "no such file"),
    (_not_onnx, "not a valid ONNX model"),
    (_truncated, "not a valid ONNX model"),
    (_cycle, "cycle"),
    (_undefined, "ghost"),
    (_future_opset, "is newer than this onnx"),
], ids=["missing", "not-onnx", "truncated", "cycle", "undefined-tensor", "future-opset"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, make, message):
    assert main(["info", make(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_symbolic_dims_are_described_by_info_and_kept_by_optimize(tmp_path, capsys):
    path = _save(_symbolic_model(), tmp_path / "sym.onnx")
    assert main(["info", path]) == 0
    assert "x: float32[N,3]" in capsys.readouterr().out
    out = tmp_path / "out.onnx"
    assert main(["optimize", path, "-o", str(out), "--cost", "analytic"]) == 0
    assert [d.dim_param or d.dim_value for d in onnx.load(str(out)).graph.input[0].type.tensor_type.shape.dim] == ["N", 3]


def test_bad_input_shape_option_is_explained(capsys):
    assert main(["info", LIGHT_RESNET, "--input-shape", "data_0"]) == 2
    assert "NAME=D0,D1" in capsys.readouterr().err


def test_console_script_exits_2_without_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "taso", "info", str(tmp_path / "nope.onnx")], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "no such file" in result.stderr


def test_external_data_models_load(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
                              initializer=[onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="ext.data", size_threshold=0)
    assert (tmp_path / "ext.data").exists()
    g = taso.load_onnx(path)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(g.run({"x": x})["y"], x @ w, rtol=1e-5)
