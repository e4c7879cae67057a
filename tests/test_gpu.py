"""GPU support: the device path of the executor (exercised on the CPU with NumPy as the device) and,
on a machine with a GPU and CuPy, the CuPy executor and cost model."""

from __future__ import annotations

import numpy as np
import pytest

import taso
import taso.models
from taso.cli import main
from taso.gpu import cupy_or_none

CUPY = cupy_or_none()
needs_gpu = pytest.mark.skipif(CUPY is None, reason="no GPU with CuPy on this machine (pip install 'taso[gpu]')")


@pytest.mark.parametrize("name, options", [("resnet50", {"image_size": 64}), ("bert", {"layers": 1, "seq": 8}), ("nasnet_a", {"cells": 1, "image_size": 64})])
def test_device_path_matches_the_host_path(name, options):
    """The executor's device path (copy in, run, copy out) with NumPy standing in for the device."""
    graph = taso.load_onnx(taso.models.build(name, **options))
    feeds = {k: np.random.default_rng(0).standard_normal(t.shape).astype(t.dtype) for k, t in graph.inputs.items()}
    host = graph.run(feeds)
    device = graph.run(feeds, device=np)
    for k in host:
        np.testing.assert_allclose(device[k], host[k], rtol=1e-6)


def test_cupy_cost_model_without_a_gpu_is_a_clear_error(capsys, tmp_path):
    if CUPY is not None:
        pytest.skip("a GPU is present")
    src = tmp_path / "m.onnx"
    import onnx

    onnx.save(taso.models.build("nasrnn", steps=1, hidden=16), str(src))
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--cost", "cupy", "--quiet"]) == 2
    assert "GPU" in capsys.readouterr().err


@needs_gpu
@pytest.mark.parametrize("name, options", [("resnet50", {"image_size": 64}), ("bert", {"layers": 1, "seq": 8}), ("nasrnn", {"steps": 2})])
def test_cupy_executor_matches_numpy(name, options):
    from taso.gpu import DeviceGraph

    graph = taso.load_onnx(taso.models.build(name, **options))
    feeds = {k: np.random.default_rng(0).standard_normal(t.shape).astype(t.dtype) for k, t in graph.inputs.items()}
    host = graph.run(feeds)
    gpu = DeviceGraph(graph, CUPY).run_host(feeds)
    for k in host:
        np.testing.assert_allclose(gpu[k], host[k], rtol=1e-3, atol=1e-4)


@needs_gpu
def test_cupy_costs_are_positive_and_cached(tmp_path, monkeypatch):
    from taso.cost_cupy import CupyCost

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    graph = taso.load_onnx(taso.models.build("nasrnn", steps=1, hidden=64))
    first = CupyCost()
    cost = first.graph_cost(graph)
    first.close()
    second = CupyCost()
    assert cost > 0 and second.graph_cost(graph) == cost and second.measured == 0
