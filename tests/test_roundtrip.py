"""Every model the onnx wheel ships is imported, exported, checked and compared on ONNX Runtime."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from helpers import assert_close, random_feeds, run_ort

import taso

_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
LIGHT = sorted(glob.glob(os.path.join(_DATA, "light", "*.onnx")))
REAL = sorted(glob.glob(os.path.join(_DATA, "real", "*", "*.onnx")))
# Small one-operator PyTorch and "simple" models: many operators, opsets and attribute forms.
# Only those within taso's opsets (most are opset 6) are collected.
def _in_opset_range(path: str) -> bool:
    versions = [o.version for o in onnx.load(path, load_external_data=False).opset_import if o.domain in ("", "ai.onnx")]
    return bool(versions) and taso.onnx.MIN_OPSET <= max(versions) <= taso.onnx.MAX_OPSET


SMALL = [p for d in ("simple", "pytorch-converted", "pytorch-operator") for p in sorted(glob.glob(os.path.join(_DATA, d, "*", "model.onnx")))]
SMALL = [p for p in SMALL if _in_opset_range(p)]


def _shipped_inputs(path: str, graph) -> dict[str, np.ndarray] | None:
    """The inputs of the model's own test_data_set_0, when it has one (shape tensors need real values)."""
    files = sorted(glob.glob(os.path.join(os.path.dirname(path), "test_data_set_0", "input_*.pb")))
    if not files:
        return None
    arrays = []
    for f in files:
        tensor = onnx.TensorProto()
        with open(f, "rb") as fh:
            tensor.ParseFromString(fh.read())
        arrays.append(onnx.numpy_helper.to_array(tensor))
    return dict(zip(graph.inputs, arrays))


def _roundtrip(path: str) -> None:
    original = onnx.load(path)
    graph = taso.load_onnx(path)
    exported = taso.export_onnx(graph)  # runs onnx.checker with full_check
    assert [i.name for i in exported.graph.input][: len(graph.inputs)] == list(graph.inputs)
    assert [o.name for o in exported.graph.output] == [o.name for o in original.graph.output]
    assert {o.version for o in exported.opset_import if o.domain in ("", "ai.onnx")} == {graph.meta.opset}
    feeds = _shipped_inputs(path, graph) or random_feeds(graph)
    try:
        expected = run_ort(original, feeds)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"ONNX Runtime cannot run the original model: {str(e).splitlines()[0][:120]}")
    for got, want, vi in zip(run_ort(exported, feeds), expected, original.graph.output):
        assert_close(got, want, 1e-4, f"{os.path.basename(path)}:{vi.name}")


def test_the_wheel_ships_light_models():
    assert len(LIGHT) >= 9


@pytest.mark.parametrize("path", LIGHT + REAL, ids=os.path.basename)
def test_light_model_roundtrips_on_onnxruntime(path):
    _roundtrip(path)


@pytest.mark.parametrize("path", SMALL, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_small_model_roundtrips_on_onnxruntime(path):
    try:
        taso.load_onnx(path)
    except taso.TasoError as e:
        pytest.skip(f"outside taso's scope: {e}")
    _roundtrip(path)


@pytest.mark.parametrize("path", [p for p in LIGHT if "squeezenet" not in p and "densenet" not in p], ids=os.path.basename)
def test_numpy_executor_matches_onnxruntime_on_light_models(path):
    # NOTE: squeezenet and densenet's constant "light" weights make logits of 1e9 and beyond:
    # softmax turns float rounding into O(1) differences there, so they are not compared.
    graph = taso.load_onnx(path)
    feeds = random_feeds(graph)
    want = run_ort(onnx.load(path), feeds)
    for got, w in zip(graph.run(feeds).values(), want):
        assert_close(got, w, 1e-4, os.path.basename(path))


def test_roundtrip_preserves_an_opaque_node_with_a_subgraph():
    from helpers import model_from_text

    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2,3] x, bool c) => (float[2,3] y) {
            k = Constant <value = float[1] {2.0}> ()
            y = If (c) <
                then_branch = t () => (float[2,3] a) { a = Mul (x, k) },
                else_branch = e () => (float[2,3] b) { b = Add (x, k) }
            >
        }
    """)
    graph = taso.load_onnx(model)
    assert graph.op_histogram()["opaque"] == 1
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for cond, want in ((True, x * 2), (False, x + 2)):
        feeds = {"x": x, "c": np.array(cond)}
        np.testing.assert_allclose(graph.run(feeds)["y"], want)
        np.testing.assert_allclose(run_ort(taso.export_onnx(graph), feeds)[0], want)
