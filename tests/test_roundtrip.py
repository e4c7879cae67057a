"""Every model the onnx wheel ships is imported, exported, checked and compared on ONNX Runtime."""

from __future__ import annotations

import glob
import os
import re

import numpy as np
import onnx
import pytest
from helpers import assert_close, random_feeds, run_ort

import taso

_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
LIGHT = sorted(glob.glob(os.path.join(_DATA, "light", "*.onnx")))
REAL = sorted(glob.glob(os.path.join(_DATA, "real", "*", "*.onnx")))
# Small one-operator PyTorch and "simple" models: many operators, opsets (1 to 13) and attribute forms.
SMALL = [p for d in ("simple", "pytorch-converted", "pytorch-operator") for p in sorted(glob.glob(os.path.join(_DATA, d, "*", "model.onnx")))]


def _name(path: str) -> str:
    return os.path.basename(os.path.dirname(path))


# The models taso reads but cannot type without running them (Unsupported: `taso optimize` writes them unchanged),
# by name, with what it says. Any other TasoError, on these files or the rest, is a failure.
EXPECTED_UNSUPPORTED = {
    "test_sequence_model1": "SequenceAt node '' and it does not run on random inputs",
}


def _onnx_runtime_loads(path: str) -> bool:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        return True
    except Exception:  # noqa: BLE001 - onnxruntime raises its own exception types
        return False


# Opset 1 to 6 models whose operator versions ONNX Runtime has no kernel for (Add-6, BatchNormalization-6...):
# taso still reads and writes them (every node opaque at those versions), tested below without running them.
LEGACY = [p for p in SMALL if not _onnx_runtime_loads(p)]
RUNNABLE = [p for p in SMALL if p not in LEGACY]


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
    expected = run_ort(original, feeds)
    for got, want, vi in zip(run_ort(exported, feeds), expected, original.graph.output):
        assert_close(got, want, 1e-4, f"{os.path.basename(path)}:{vi.name}")


def test_the_wheel_ships_light_models():
    assert len(LIGHT) >= 9


@pytest.mark.parametrize("path", LIGHT + REAL, ids=os.path.basename)
def test_light_model_roundtrips_on_onnxruntime(path):
    _roundtrip(path)


@pytest.mark.parametrize("path", RUNNABLE, ids=_name)
def test_small_model_roundtrips_on_onnxruntime(path):
    expected = EXPECTED_UNSUPPORTED.get(_name(path))
    if expected is not None:
        with pytest.raises(taso.Unsupported, match=re.escape(expected)):
            taso.load_onnx(path)
        return
    _roundtrip(path)


def test_the_expected_refusals_name_existing_models():
    assert set(EXPECTED_UNSUPPORTED) <= {_name(p) for p in RUNNABLE}


def test_enough_small_models_run_on_onnxruntime():
    assert len(RUNNABLE) >= 90 and len(LEGACY) <= 50, (len(RUNNABLE), len(LEGACY))


@pytest.mark.parametrize("path", LEGACY, ids=_name)
def test_a_legacy_opset_model_is_read_and_written_node_for_node(path):
    """Operator versions before opset 7 mean other things (Add-6 broadcasts only with ``broadcast=1``): each node
    stays opaque, and the export writes the original's nodes back as they were."""
    original = onnx.load(path)
    graph = taso.load_onnx(path)
    exported = taso.export_onnx(graph, check=False)
    written = {(n.op_type, tuple(n.input), tuple(n.output), tuple(a.SerializeToString() for a in n.attribute)) for n in exported.graph.node}
    for node in original.graph.node:
        if node.op_type != "Constant":
            assert (node.op_type, tuple(node.input), tuple(node.output), tuple(a.SerializeToString() for a in node.attribute)) in written, node.op_type
    assert [o.name for o in exported.graph.output] == [o.name for o in original.graph.output]


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
