"""The torch runtime (taso.measure.torch_runtime): every operator's PyTorch implementation equal to ONNX Runtime, and
the capture, replay and device-time logic of a GPU run exercised through a stand-in device (tests/strict_torch_device.py).

Models run on torch's CPU kernels here; a lent GPU runs the same code on CUDA (benchmarks/gpu/gpu_device_run.sh).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import taso.models as zoo  # noqa: E402

import taso  # noqa: E402
from taso.measure.inputs import random_input_sets, random_inputs  # noqa: E402
from taso.measure.outputs import compare_outputs  # noqa: E402
from taso.measure.torch_runtime import TIMING_EAGER, CpuDevice, Replay, TorchGraph, interleaved_replay_times  # noqa: E402
from taso.ops.base import registry  # noqa: E402
from tests.strict_torch_device import CaptureError, StandInCuda, forbidding_host_traffic  # noqa: E402

DATA = Path(__file__).parent / "data" / "symbolic"
# Operators the runtime evaluates on the host, and why: an opaque node is ONNX Runtime's (a one-node session).
HOST_ONLY = {"opaque"}
ZOO = [("squeezenet", {}), ("nasrnn", {}), ("resnet50", {"image_size": 64}), ("resnext50", {"image_size": 64}),
       ("inception_v3", {"image_size": 96}), ("nasnet_a", {"image_size": 64}), ("bert", {"layers": 2}), ("vgg19", {"image_size": 32})]


def _onnx_runtime(model: onnx.ModelProto, feeds: dict) -> dict:
    """ONNX Runtime's outputs, its graph optimizations off: the operators' meaning, not its fusions' (1.32's Pad
    fusion removes a Pad that feeds a Conv's kernel input and leaves the kernel undefined)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def _assert_equal_on_torch(model: onnx.ModelProto, graph: taso.Graph | None = None) -> TorchGraph:
    """The model's outputs on the torch runtime (torch's CPU kernels) equal ONNX Runtime's on random inputs. Where
    ONNX Runtime's are not finite (a rule instance's batch norm drawn a negative variance, which taso's semantics
    takes as |var|), the NumPy reference semantics is the oracle."""
    graph = graph or taso.load_onnx(model)
    (feeds,) = random_input_sets(graph, (0,), model=model)
    runtime = TorchGraph(graph, CpuDevice(torch))
    want = _onnx_runtime(model, feeds)
    if not all(np.isfinite(v).all() for v in want.values() if v.dtype.kind == "f"):
        want = graph.run(feeds)
    comparison = compare_outputs(want, runtime.run_host(feeds))
    assert comparison.ok, comparison.describe()
    return runtime


def test_every_operator_runs_on_torch_or_is_a_constant():
    """An operator without inputs is a constant, evaluated once; the others need their torch kernel, or a reason."""
    missing = sorted(name for name, op in registry().items() if op.torch_impl is None and op.arity[0] > 0 and name not in HOST_ONLY)
    assert not missing, missing


@pytest.mark.parametrize("name, options", ZOO, ids=[name for name, _ in ZOO])
def test_the_zoo_runs_on_torch_equal_to_onnx_runtime(name, options):
    runtime = _assert_equal_on_torch(zoo.build(name, **options))
    assert runtime.capturable, f"{name}: {sorted(runtime.host_nodes)} ran on the host"


def _small_sizes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every input's shape with its symbolic dims at 2 (axis 0) or 16 (elsewhere): sizes every file here runs at (the
    tiny BERTs' position tables hold 32 and 64 rows)."""
    return {i.name: tuple(d.dim_value if d.HasField("dim_value") else (2 if axis == 0 else 16)
                          for axis, d in enumerate(i.type.tensor_type.shape.dim)) for i in model.graph.input}


@pytest.mark.parametrize("path", sorted(DATA.glob("*.onnx")), ids=lambda p: p.name)
def test_exported_files_run_on_torch_equal_to_onnx_runtime(path):
    """The exporters' files (PyTorch dynamo and TorchScript)."""
    model = onnx.load(str(path))
    _assert_equal_on_torch(model, taso.load_onnx(model, _small_sizes(model)))


def _rule_instances():
    """One instance of each distinct (operator, parameters) the shipped rules use, with the rule it came from."""
    from taso.verifier.numeric import SideMemo, random_shapes

    from taso.pipeline.library import DEFAULT_LIBRARY
    from taso.rules import Library

    seen = {}
    for rule in Library.load(DEFAULT_LIBRARY).rules:
        for side in ("source", "target"):
            for node in getattr(rule, side):
                seen.setdefault((node.op, tuple(sorted((k, str(v)) for k, v in node.params.items()))), (rule, side))
    rng = np.random.default_rng(0)
    for (op, _), (rule, side) in sorted(seen.items(), key=lambda item: str(item[0])):
        (shapes,) = random_shapes(rule, rng, 1) or [None]
        yield op, SideMemo(rule).graph(side, shapes)


def test_every_operator_of_the_shipped_rules_runs_on_torch_equal_to_onnx_runtime():
    checked = set()
    for op, graph in _rule_instances():
        model = taso.onnx.to_onnx_model(graph)
        _assert_equal_on_torch(model, taso.load_onnx(model))
        checked.add(op)
    assert len(checked) >= 20, checked


def test_a_graph_is_captured_once_and_replayed_in_device_time():
    device = StandInCuda()
    graph = taso.load_onnx(zoo.build("squeezenet"))
    replay = Replay(TorchGraph(graph, device), random_inputs(graph))
    assert replay.timing == "cuda-graphs" and device.captures == 1
    seconds = replay.seconds(repeat=4)
    assert seconds > 0 and device.replays == 4 and device.timed_batches == 1


def test_the_stand_in_refuses_host_traffic_during_a_capture():
    """The checks above can fail: a kernel that reads a tensor on the host breaks a capture."""
    x = torch.ones(3)
    with forbidding_host_traffic("capture"), pytest.raises(CaptureError, match="Tensor.item"):
        x.sum().item()
    with forbidding_host_traffic("capture"), pytest.raises(CaptureError, match="torch.from_numpy"):
        torch.from_numpy(np.ones(2))
    assert x.sum().item() == 3.0  # restored after


def test_constants_are_built_before_the_capture():
    """An average pool whose divisors vary (asymmetric padding) builds its divisor table on the device in the eager run."""
    from onnx import TensorProto, helper

    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[0, 0, 1, 2], strides=[2, 2])
    model = helper.make_model(helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 7, 7])],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(model)
    _assert_equal_on_torch(model)
    device = StandInCuda()
    graph = taso.load_onnx(model)
    assert Replay(TorchGraph(graph, device), random_inputs(graph)).timing == "cuda-graphs" and device.captures == 1


def _resize_model(mode: str, coordinates: str, scales=(1, 1, 2, 2), size=(1, 2, 3, 3)) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    out = [int(d * s) for d, s in zip(size, scales)]
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode=coordinates)
    scales = onnx.numpy_helper.from_array(np.asarray(scales, np.float32), "scales")
    return helper.make_model(helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(size))],
                                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], [scales]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coordinates", ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"])
def test_resize_runs_on_torch_equal_to_onnx_runtime_and_is_captured(mode, coordinates):
    model = _resize_model(mode, coordinates, scales=(1, 1, 2.5, 1.5), size=(1, 2, 4, 6))
    _assert_equal_on_torch(model)
    device = StandInCuda()
    graph = taso.load_onnx(model)
    assert Replay(TorchGraph(graph, device), random_inputs(graph)).timing == "cuda-graphs" and device.captures == 1


def test_a_node_torch_cannot_run_runs_on_the_host_and_the_graph_is_not_captured():
    """A kernel that refuses a case (NotImplementedError) hands the node to the host; the graph is then timed run by run."""
    import taso.ops.resize as resize

    def refuses(rt, xs, p):
        raise NotImplementedError("not this case")

    object.__setattr__(resize.resize, "torch_impl", refuses)  # an Op is frozen: monkeypatch cannot set it
    try:
        runtime = _assert_equal_on_torch(_resize_model("nearest", "asymmetric"))
        assert not runtime.capturable
        device = StandInCuda()
        graph = taso.load_onnx(_resize_model("nearest", "asymmetric"))
        replay = Replay(TorchGraph(graph, device), random_inputs(graph))
        assert replay.timing == TIMING_EAGER and device.captures == 0 and replay.seconds(2) > 0
    finally:
        object.__setattr__(resize.resize, "torch_impl", resize._resize_torch)


def test_interleaved_replays_time_each_graph_in_every_round():
    device = StandInCuda()
    graphs = [taso.load_onnx(zoo.build("nasrnn", steps=2, hidden=32)) for _ in range(2)]
    feeds = random_inputs(graphs[0])
    replays = [Replay(TorchGraph(g, device), feeds) for g in graphs]
    times = interleaved_replay_times(replays, rounds=3, repeat=2)
    assert len(times) == 2 and all(t > 0 for t in times) and device.timed_batches == 2 + 2 * 3


def test_node_costs_are_copies_in_one_capture_cached_per_device(tmp_path, monkeypatch):
    from taso.cost.torch_device import TorchCost

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    graph = taso.load_onnx(zoo.build("nasrnn", steps=1, hidden=32))
    device = StandInCuda()
    first = TorchCost(device=device, copies=4)
    cost = first.graph_cost(graph)
    first.close()
    distinct = first.measured
    assert cost > 0 and distinct >= 3 and device.captures == distinct, "each distinct node measured in one capture of its copies"
    second = TorchCost(device=StandInCuda(), copies=4)
    assert second.graph_cost(graph) == cost and second.measured == 0, "the second run reads the cache"
    assert "stand-in" in second.fingerprint and "copies 4" in second.fingerprint
    other = TorchCost(device=CpuDevice(torch), copies=4)
    assert other.fingerprint != second.fingerprint, "costs are cached per device"


@pytest.mark.parametrize("series, kept", [((1.10, 1.08), "optimized"), ((1.10, 0.97), "input"), ((0.95,), "input")])
def test_with_torch_costs_the_guard_times_on_the_torch_runtime(series, kept, tmp_path, monkeypatch):
    """The deployment is the torch runtime: the optimized graph is kept only when two series there find it 2% faster."""
    from taso.cost import AnalyticCost
    from taso.cost.torch_device import TorchCost
    from taso.measure.torch_runtime import EndToEndTimer
    from taso.pipeline.run import optimize_model
    from taso.pipeline.source import ModelSource
    from taso.search import SearchConfig

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    measured, made = iter(series), []
    monkeypatch.setattr(EndToEndTimer, "speedup", lambda self, rounds=7: next(measured))

    class AnalyticOnTorch(AnalyticCost):  # deterministic prices; the pipeline treats it as the torch runtime's
        name = "torch"
        deployed_elsewhere = True

        def end_to_end_timer(self, original, optimized):
            made.append(1)
            return EndToEndTimer(original, optimized, StandInCuda())

    model = zoo.build("nasrnn", steps=2, hidden=32)
    outcome = optimize_model(ModelSource(taso.load_onnx(model), model, None), cost=AnalyticOnTorch(), config=SearchConfig(budget=20))
    assert outcome.report.best_cost < outcome.report.initial_cost, "the search found a cheaper graph: the guard's subject"
    assert outcome.kept == kept and made == [1] and outcome.speedups["optimized"] == min(series)
    assert TorchCost.deployed_elsewhere


def test_bench_on_the_torch_runtime_writes_the_runtime_and_its_timing(tmp_path, monkeypatch, capsys):
    from taso.cli import main

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TASO_TORCH_DEVICE", "cpu")
    out = tmp_path / "out"
    assert main(["bench", str(DATA / "lstm_cell_loop.torchscript.onnx"), "--runtime", "torch", "--time-limit", "1", "--rounds", "2",
                 "--out", str(out)]) == 0
    import json

    report = json.loads((out / "bench.json").read_text())
    assert report["runtime"].startswith("torch ") and report["timing"] == "wall-clock" and report["device"] == "cpu"
    (row,) = report["rows"]
    assert row["runtime"] == "torch" and row["kept"] in ("optimized", "input") and row["ms"]["torch_original"] > 0
    assert "TASO / Tensat" in (out / "bench.md").read_text() and (out / "bench.png").stat().st_size > 0
    kept = out / "lstm_cell_loop.torchscript.taso.onnx"
    assert kept.exists() == (row["kept"] != "input"), "the kept model is written beside the results, for a second series"


def test_the_device_script_runs_end_to_end_on_the_cpu(tmp_path):
    """`DRY_RUN=cpu OUT=DIR bash benchmarks/gpu/gpu_device_run.sh MODEL`: what a lent GPU will run, on the CPU."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "DRY_RUN": "cpu", "OUT": str(tmp_path / "out"), "SKIP_TESTS": "1", "TIME_LIMIT": "1", "ROUNDS": "2",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "benchmarks/gpu/gpu_device_run.sh", "tests/data/symbolic/gru_cell_loop.dynamo.onnx"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert report["timing"] == "wall-clock" and report["runtime"].startswith("torch ")
    (row,) = report["rows"]
    assert row["model"] == "gru_cell_loop.dynamo.onnx" and len(row["series"]) == 2 and "series_agree" in report
    assert row["max_abs_error"] < 1e-3, "the kept graph's outputs equal the input's on the runtime"


def test_the_cuda_device_warms_up_on_a_side_stream_captures_once_and_times_between_events():
    """CudaDevice against a recording stand-in of torch.cuda: the calls a real capture and timing make, in order."""
    import contextlib
    import types

    from taso.measure.torch_runtime import CudaDevice

    log = []

    class Stream:
        def wait_stream(self, other):
            log.append("wait")

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.at = None

        def record(self):
            self.at = len([e for e in log if e == "replay"])
            log.append("record")

        def synchronize(self):
            log.append("sync")

        def elapsed_time(self, end):
            return 2.0 * (end.at - self.at)  # 2 ms a replay

    class CUDAGraph:
        def replay(self):
            log.append("replay")

    @contextlib.contextmanager
    def capturing(graph):
        log.append("capture-begin")
        yield
        log.append("capture-end")

    cuda = types.SimpleNamespace(Stream=Stream, Event=Event, CUDAGraph=CUDAGraph, graph=capturing, current_stream=Stream,
                                 stream=lambda s: contextlib.nullcontext())
    flags = types.SimpleNamespace(cudnn=types.SimpleNamespace(), cuda=types.SimpleNamespace(matmul=types.SimpleNamespace()))
    device = CudaDevice(types.SimpleNamespace(cuda=cuda, backends=flags))
    assert flags.cudnn.benchmark and not flags.cudnn.allow_tf32 and not flags.cuda.matmul.allow_tf32, "FP32 as ONNX Runtime computes it"
    replay = device.capture(lambda: log.append("run") or ["out"])
    assert log == ["wait", "run", "run", "run", "wait", "capture-begin", "run", "capture-end"]
    assert replay.outputs == ["out"], "the captured outputs live with the replay"
    log.clear()
    assert device.seconds(replay, 5) == pytest.approx(2e-3)
    assert log == ["record", *["replay"] * 5, "record", "sync"]


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU for torch here (the device run has one)")


@needs_cuda
@pytest.mark.parametrize("name, options", ZOO, ids=[name for name, _ in ZOO])
def test_on_the_gpu_the_zoo_is_captured_equal_to_onnx_runtime(name, options):
    from taso.measure.torch_runtime import CudaDevice

    model = zoo.build(name, **options)
    graph = taso.load_onnx(model)
    (feeds,) = random_input_sets(graph, (0,), model=model)
    runtime = TorchGraph(graph, CudaDevice(torch))
    comparison = compare_outputs(_onnx_runtime(model, feeds), runtime.run_host(feeds))
    assert comparison.ok, comparison.describe()
    replay = Replay(runtime, feeds)
    assert replay.timing == "cuda-graphs" and replay.seconds(5) > 0
    assert compare_outputs(_onnx_runtime(model, feeds), runtime.run_host(feeds)).ok, "still equal after the capture and its replays"


@needs_cuda
def test_on_the_gpu_node_costs_are_device_time_and_cached(tmp_path, monkeypatch):
    from taso.cost.torch_device import TorchCost
    from taso.measure.torch_runtime import CudaDevice

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    graph = taso.load_onnx(zoo.build("nasrnn", steps=1, hidden=64))
    first = TorchCost(device=CudaDevice(torch))
    cost = first.graph_cost(graph)
    first.close()
    second = TorchCost(device=CudaDevice(torch))
    assert 0 < cost < 1.0 and second.graph_cost(graph) == cost and second.measured == 0
    assert "torch|cuda|" in second.fingerprint and "driver " in second.fingerprint and "cudnn " in second.fingerprint


@pytest.mark.parametrize("command", [["optimize", "{model}", "-o", "{out}", "--cost", "torch"], ["bench", "{model}", "--runtime", "torch", "--out", "{dir}"]])
def test_without_torch_the_torch_runtime_is_one_line_and_exit_2(command, tmp_path, monkeypatch, capsys):
    import sys

    from taso.cli import main

    model = tmp_path / "m.onnx"
    model.write_bytes(zoo.build("nasrnn", steps=1, hidden=8).SerializeToString())
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails, as where it is not installed
    args = [a.format(model=model, out=tmp_path / "o.onnx", dir=tmp_path / "b") for a in command]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "pip install 'taso[gpu]'" in err and err.count("\n") == 1 and not (tmp_path / "o.onnx").exists()


def test_a_wrong_torch_device_choice_is_one_line(monkeypatch):
    from taso.errors import TasoError
    from taso.measure.torch_runtime import default_device

    monkeypatch.setenv("TASO_TORCH_DEVICE", "tpu")
    with pytest.raises(TasoError, match="expected cpu or cuda"):
        default_device()
    if not torch.cuda.is_available():
        monkeypatch.setenv("TASO_TORCH_DEVICE", "cuda")
        with pytest.raises(TasoError, match="sees no CUDA GPU"):
            default_device()


def test_the_second_series_times_the_same_two_files_again(tmp_path):
    """benchmarks/gpu/retime.py, as the device run calls it: the input and a kept file, equal, timed in a fresh process."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    source = DATA / "gru_cell_loop.dynamo.onnx"
    out = tmp_path / "retime.json"
    env = {**os.environ, "TASO_TORCH_DEVICE": "cpu"}
    done = subprocess.run([sys.executable, "benchmarks/gpu/retime.py", str(source), str(source), "--rounds", "2", "--out", str(out)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["speedup"] > 0 and result["timing"] == "wall-clock" and result["ms"]["torch_original"] > 0
