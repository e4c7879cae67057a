"""Large models on disk (taso.onnx.files): spilled models, weights exported straight to a file, streamed output.

What a user relies on: the file taso writes from spilled weights is the model it checked, tensor
for tensor; ONNX Runtime runs a spilled model as it runs the original; and `taso optimize` on a
model whose weights are spilled writes the same result as on one held in memory.
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import onnx
import pytest
from helpers import fake_timer, patch_pipeline, run_ort
from onnx import TensorProto, helper, numpy_helper

import taso
from taso.cli import main
from taso.onnx import files
from taso.onnx.files import Scratch, embedded_weight_bytes

pipeline = importlib.import_module("taso.pipeline")


def weighted_model(seed: int = 0) -> onnx.ModelProto:
    """MatMul, Add, Gather and a Where over weights of several dtypes, large and small, and a Constant node."""
    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(48).astype(np.float16), "b16"),
        numpy_helper.from_array(rng.standard_normal((100, 48)).astype(np.float32), "table"),
        numpy_helper.from_array(rng.integers(0, 100, (3, 5)).astype(np.int64), "ids"),
        numpy_helper.from_array(rng.random((3, 5, 48)) > 0.5, "mask"),
        numpy_helper.from_array(np.float32(0.5), "half"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Cast", ["b16"], ["b"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Gather", ["table", "ids"], ["g"]),
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.full(48, 2.0, np.float32))),
        helper.make_node("Mul", ["g", "c"], ["gc"]),
        helper.make_node("Where", ["mask", "gc", "half"], ["y0"]),
        helper.make_node("Add", ["y0", "hb"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "weighted", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5, 48])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def same_model(a: onnx.ModelProto, b: onnx.ModelProto) -> bool:
    """The same graph and the same weights, bit for bit (whatever the storage fields say)."""
    def arrays(m):
        return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}

    wa, wb = arrays(a), arrays(b)
    return (list(a.graph.node) == list(b.graph.node) and list(a.graph.input) == list(b.graph.input) and list(a.graph.output) == list(b.graph.output)
            and list(wa) == list(wb) and all(wa[k].dtype == wb[k].dtype and wa[k].tobytes() == wb[k].tobytes() for k in wa))


FEEDS = {"x": np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)}


def test_a_spilled_model_holds_no_weight_bytes_and_is_written_back_tensor_for_tensor(tmp_path):
    original = weighted_model()
    model = weighted_model()
    spilled = Scratch().spill(model, "m")
    assert embedded_weight_bytes(spilled.model) < 1024, "the large tensors live in the data file only"
    assert spilled.weight_bytes >= 64 * 48 * 4
    np.testing.assert_array_equal(run_ort(spilled.path, FEEDS)[0], run_ort(original, FEEDS)[0])
    spilled.write(str(tmp_path / "out.onnx"))
    assert onnx.load(str(tmp_path / "out.onnx")) == original
    assert onnx.load_from_string(spilled.to_bytes()) == original
    assert os.listdir(tmp_path) == ["out.onnx"], "under the external-data limit: one file, weights embedded"


def test_over_the_external_data_limit_the_weights_go_beside_the_file_under_its_final_name(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "EXTERNAL_DATA_BYTES", 1000)
    spilled = Scratch().spill(weighted_model(), "m")
    spilled.write(str(tmp_path / ".tmp-123.onnx"), final_name="big.onnx")
    os.replace(tmp_path / ".tmp-123.onnx", tmp_path / "big.onnx")
    assert sorted(os.listdir(tmp_path)) == ["big.onnx", "big.onnx.data"]
    assert same_model(onnx.load(str(tmp_path / "big.onnx")), weighted_model())


def test_weights_exported_straight_to_a_file_give_the_model_export_builds_in_memory(tmp_path):
    graph = taso.load_onnx(weighted_model())
    in_memory = pipeline.export_onnx(graph)
    spilled = Scratch().export("e", lambda weights: pipeline.export_onnx(graph, weights_file=weights))
    assert embedded_weight_bytes(spilled.model) < 1024
    assert onnx.load_from_string(spilled.to_bytes()) == in_memory
    np.testing.assert_array_equal(run_ort(spilled.path, FEEDS)[0], run_ort(in_memory, FEEDS)[0])


def test_two_models_spilled_under_one_name_get_their_own_files():
    scratch = Scratch()
    first, second = scratch.spill(weighted_model(0), "m"), scratch.spill(weighted_model(1), "m")
    assert first.path != second.path
    assert not np.array_equal(run_ort(first.path, FEEDS)[0], run_ort(second.path, FEEDS)[0])


def test_the_scratch_directory_goes_with_its_last_model():
    import gc

    spilled = Scratch().spill(weighted_model(), "m")
    directory = os.path.dirname(spilled.path)
    assert os.path.isdir(directory)
    del spilled
    gc.collect()
    assert not os.path.exists(directory)


@pytest.fixture
def spill_everything(monkeypatch):
    """Every model counts as large: the input and every candidate are spilled."""
    patch_pipeline(monkeypatch, "SPILL_BYTES", 0)


def _lstm_like(steps: int = 4, hidden: int = 32) -> onnx.ModelProto:
    """Per-step products of one input by separate weights: what the shipped library merges."""
    rng = np.random.default_rng(3)
    nodes, weights, outputs = [], [], []
    for k in range(steps):
        weights.append(numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32), f"w{k}"))
        nodes += [helper.make_node("MatMul", ["x", f"w{k}"], [f"m{k}"]), helper.make_node("Tanh", [f"m{k}"], [f"y{k}"])]
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [8, hidden]))
    graph = helper.make_graph(nodes, "steps", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, hidden])], outputs, weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_optimize_with_spilled_weights_writes_what_it_writes_in_memory(tmp_path, spill_everything, monkeypatch, capsys):
    src = tmp_path / "steps.onnx"
    onnx.save(_lstm_like(hidden=96), str(src))  # 96 x 96 weights: past the inlining limit
    source = pipeline.ModelSource.from_file(str(src))
    assert source.spilled is not None and source.timing_source() == source.spilled.path
    assert embedded_weight_bytes(source.model) < 1024, "the input's proto dropped its weight bytes"
    spilled_out, memory_out = tmp_path / "spilled.onnx", tmp_path / "memory.onnx"
    assert main(["optimize", str(src), "-o", str(spilled_out), "--cost", "analytic", "--budget", "5", "--quiet"]) == 0
    patch_pipeline(monkeypatch, "SPILL_BYTES", 1 << 40)
    assert main(["optimize", str(src), "-o", str(memory_out), "--cost", "analytic", "--budget", "5", "--quiet"]) == 0
    report = capsys.readouterr().out
    assert "wrote" in report and "the input model, byte for byte unchanged" not in report, "the rewrite was kept"
    assert onnx.load(str(spilled_out)) == onnx.load(str(memory_out))
    feeds = {"x": np.random.default_rng(0).standard_normal((8, 96)).astype(np.float32)}
    for got, want in zip(run_ort(onnx.load(str(spilled_out)), feeds), run_ort(onnx.load(str(src)), feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_an_unchanged_spilled_input_is_copied_byte_for_byte(tmp_path, spill_everything, monkeypatch):
    src, out = tmp_path / "steps.onnx", tmp_path / "out.onnx"
    onnx.save(_lstm_like(), str(src))

    patch_pipeline(monkeypatch, "InterleavedTimer", fake_timer(lambda models: [1.0] + [1.5] * (len(models) - 1)))
    assert main(["optimize", str(src), "-o", str(out), "--quiet"]) == 0
    assert out.read_bytes() == src.read_bytes()


def _save_external(model: onnx.ModelProto, path) -> None:
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=path.name + ".data", size_threshold=0)


def test_external_weights_are_mapped_not_read_and_small_ones_inlined(tmp_path):
    src = tmp_path / "steps.onnx"
    _save_external(_lstm_like(hidden=96), src)  # 96 x 96 weights: past the inlining limit
    source = pipeline.ModelSource.from_file(str(src))
    assert source.uses_external_data() and source.timing_source() == str(src), "ONNX Runtime maps the user's own data file"
    weight = source.graph.weights["w0"]
    while getattr(weight, "base", None) is not None and not isinstance(weight, np.memmap):
        weight = weight.base
    assert isinstance(weight, np.memmap) or "mmap" in type(weight).__name__, "a view of the mapped file, not a copy"
    np.testing.assert_array_equal(source.graph.weights["w1"], numpy_helper.to_array(_lstm_like(hidden=96).graph.initializer[1]))


def test_an_unchanged_external_data_input_is_written_whole_or_beside_its_own_data_file(tmp_path, monkeypatch):
    (tmp_path / "in").mkdir()
    src = tmp_path / "in" / "steps.onnx"
    _save_external(_lstm_like(hidden=96), src)

    patch_pipeline(monkeypatch, "InterleavedTimer", fake_timer(lambda models: [1.0] + [1.5] * (len(models) - 1)))
    assert main(["optimize", str(src), "-o", str(tmp_path / "whole.onnx"), "--budget", "5", "--quiet"]) == 0
    assert same_model(onnx.load(str(tmp_path / "whole.onnx")), _lstm_like(hidden=96))
    monkeypatch.setattr(files, "EXTERNAL_DATA_BYTES", 1000)
    assert main(["optimize", str(src), "-o", str(tmp_path / "big.onnx"), "--budget", "5", "--quiet"]) == 0
    assert (tmp_path / "big.onnx.data").exists() and same_model(onnx.load(str(tmp_path / "big.onnx")), _lstm_like(hidden=96))


@pytest.mark.parametrize("damage,message", [
    ("missing", "no data file 'steps.onnx.data' beside the model"),
    ("truncated", "holds no 36864 bytes at offset"),
])
def test_a_missing_or_short_data_file_is_exit_2_in_one_line(tmp_path, capsys, damage, message):
    src = tmp_path / "steps.onnx"
    _save_external(_lstm_like(hidden=96), src)
    data = tmp_path / "steps.onnx.data"
    if damage == "missing":
        data.unlink()
    else:
        data.write_bytes(data.read_bytes()[:-10])
    assert main(["optimize", str(src), "-o", str(tmp_path / "out.onnx"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def _resident_file_pages_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:")) / 1024


def _mapped_weight(tmp_path) -> tuple[np.ndarray, np.ndarray]:
    """A 16 MB weight saved as external data and loaded by taso (mapped), and its values."""
    src = tmp_path / "big.onnx"
    weight = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])], [numpy_helper.from_array(weight, "w")])
    _save_external(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    return taso.load_onnx(str(src)).weights["w"], weight


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's /proc")
def test_releasing_mapped_weights_gives_their_pages_back_and_keeps_their_values(tmp_path):
    from taso.onnx.files import release_mapped_weights

    mapped, weight = _mapped_weight(tmp_path)
    total = float(mapped.sum())  # every page read
    before = _resident_file_pages_mb()
    release_mapped_weights()
    assert _resident_file_pages_mb() < before - 8, "the 16 MB read left the resident set"
    assert float(mapped.sum()) == total and np.array_equal(mapped, weight)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's /proc")
def test_a_mapped_weight_written_to_a_weights_file_leaves_the_resident_set(tmp_path):
    """A re-export after timing (which had released every mapped weight) paged them all back in while writing them:
    BERT's 0.4 GB at the run's peak. Each is let go once written."""
    from taso.onnx.files import WeightsFile

    mapped, weight = _mapped_weight(tmp_path)
    before = _resident_file_pages_mb()
    with WeightsFile(str(tmp_path / "copy.data")) as weights:
        header = weights.tensor(mapped, "w")
    assert header is not None and (tmp_path / "copy.data").stat().st_size == weight.nbytes
    assert _resident_file_pages_mb() < before + 8, "the 16 MB read to write the copy did not stay resident"
    assert np.array_equal(mapped, weight)


def test_no_room_for_the_spilled_weights_is_exit_2_in_one_line(tmp_path, spill_everything, monkeypatch, capsys):
    import tempfile

    src = tmp_path / "steps.onnx"
    onnx.save(_lstm_like(hidden=96), str(src))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-dir"))
    assert main(["optimize", str(src), "-o", str(tmp_path / "out.onnx"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "cannot write taso's temporary copy of the weights" in err and "TMPDIR" in err and err.count("\n") == 1
    assert not (tmp_path / "out.onnx").exists()
