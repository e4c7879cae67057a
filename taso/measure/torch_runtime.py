"""The PyTorch runtime: taso's graphs on the kernels a deployment runs, timed in device time.

Each operator runs its PyTorch implementation (``Op.torch_impl``): cuDNN convolutions and pooling, cuBLAS products,
torch's fused elementwise and normalization kernels. On a GPU a graph is captured once in a CUDA graph and replayed;
CUDA events around a batch of replays give device time, with the launch gaps the GPU sees and none of Python's
dispatch. Without a GPU the same runtime runs torch's CPU kernels and times them with the wall clock: a dry run of
the device path, whose figures are CPU figures.

The device is an object (:class:`CudaDevice`, :class:`CpuDevice`, or a test's stand-in) with four jobs: where
tensors live, synchronizing, capturing a function into something replayable, and timing a replay.
"""

from __future__ import annotations

import ctypes
import gc
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType

import numpy as np

from ..errors import TasoError
from ..ir import Graph, TensorType
from ..ir.dims import concrete

__all__ = ["torch_or_none", "require_torch", "Device", "CudaDevice", "CpuDevice", "default_device", "TorchRuntime", "TorchGraph",
           "Replay", "interleaved_replay_times", "EndToEndTimer", "TIMING_EAGER", "driver_version"]

TIMING_EAGER = "eager, events"  # a graph that could not be captured (an operator ran on the host): timed run by run


def torch_or_none() -> ModuleType | None:
    """PyTorch when it is installed, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def require_torch() -> ModuleType:
    torch = torch_or_none()
    if torch is None:
        raise TasoError("the torch runtime needs PyTorch: pip install 'taso[gpu]' (on a GPU machine, the torch build for its CUDA)")
    return torch


class Device:
    """Where the runtime's tensors live and how it times them."""

    name = "cpu"
    timing = "wall-clock"

    def __init__(self, torch: ModuleType):
        self.torch = torch

    @property
    def torch_device(self) -> str:
        return self.name

    def synchronize(self) -> None:
        """Waits until every queued kernel finished (nothing to wait for on the CPU)."""

    def capture(self, fn: Callable[[], object]) -> Callable[[], None] | None:
        """``fn`` (whose tensors are all static) as a replayable graph, or None where this device cannot capture."""
        return None

    def seconds(self, call: Callable[[], object], repeat: int) -> float:
        """Seconds per call of ``call``, over ``repeat`` calls in a row."""
        start = time.perf_counter()
        for _ in range(repeat):
            call()
        self.synchronize()
        return (time.perf_counter() - start) / repeat

    def fingerprint(self) -> str:
        """What measured costs depend on: the device, its libraries and their versions."""
        torch = self.torch
        return f"torch|cpu|{platform.processor() or platform.machine()}|threads {torch.get_num_threads()}|torch {torch.__version__}"


class CpuDevice(Device):
    """torch's CPU kernels on one thread (as taso times ONNX Runtime), timed with the wall clock: no capture, the
    dry run of the device path."""

    def __init__(self, torch: ModuleType, threads: int = 1):
        super().__init__(torch)
        torch.set_num_threads(threads)


class CudaDevice(Device):
    """A CUDA GPU: graphs captured in CUDA graphs, replays timed with CUDA events.

    FP32 stays FP32 (TF32 off), as ONNX Runtime computes it; cuDNN picks its fastest algorithm per shape
    (``cudnn.benchmark``), as a tuned deployment does."""

    name = "cuda"
    timing = "cuda-graphs"

    def __init__(self, torch: ModuleType):
        super().__init__(torch)
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def capture(self, fn: Callable[[], object]) -> Callable[[], None] | None:
        cuda = self.torch.cuda
        side = cuda.Stream()
        side.wait_stream(cuda.current_stream())
        with cuda.stream(side):  # warm-up on a side stream, as capture requires (cuDNN's choices, workspaces)
            for _ in range(3):
                fn()
        cuda.current_stream().wait_stream(side)
        graph = cuda.CUDAGraph()
        with cuda.graph(graph):
            outputs = fn()
        return _Captured(graph, outputs)

    def seconds(self, call: Callable[[], object], repeat: int) -> float:
        cuda = self.torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeat):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / repeat

    def fingerprint(self) -> str:
        torch = self.torch
        properties = torch.cuda.get_device_properties(torch.cuda.current_device())
        return (f"torch|cuda|{properties.name}|driver {driver_version()}|cuda {torch.version.cuda}|"
                f"cudnn {torch.backends.cudnn.version()}|torch {torch.__version__}")


class _Captured:
    """A CUDA graph and the outputs its capture allocated: each replay writes them in place, so they live with it."""

    def __init__(self, graph, outputs):
        self.graph, self.outputs = graph, outputs

    def __call__(self) -> None:
        self.graph.replay()


def driver_version() -> str:
    """The CUDA driver's version (``cuDriverGetVersion``), or "unknown"."""
    try:
        version = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(version))
        return f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        return "unknown"


def default_device() -> Device:
    """The GPU when torch sees one, else the CPU; ``$TASO_TORCH_DEVICE`` (``cpu`` or ``cuda``) chooses (a dry run of the
    device path on a GPU machine's CPU, or a refusal where the GPU is missing)."""
    torch = require_torch()
    wanted = os.environ.get("TASO_TORCH_DEVICE", "").strip().lower()
    if wanted not in ("", "cpu", "cuda"):
        raise TasoError(f"TASO_TORCH_DEVICE={wanted!r}: expected cpu or cuda")
    if wanted == "cuda" and not torch.cuda.is_available():
        raise TasoError("TASO_TORCH_DEVICE=cuda, but torch sees no CUDA GPU (is the torch build for this machine's CUDA?)")
    return CudaDevice(torch) if torch.cuda.is_available() and wanted != "cpu" else CpuDevice(torch)


class TorchRuntime:
    """What an operator's PyTorch implementation is handed: torch, its functional module, and constants built once on
    the device (an index, a divisor table), so that a captured graph copies nothing from the host."""

    def __init__(self, device: Device):
        self.device = device
        self.torch = device.torch
        self.F = device.torch.nn.functional
        self._constants: dict[object, object] = {}

    def dtype(self, name: str):
        """The torch dtype of a NumPy dtype name."""
        return getattr(self.torch, "bool" if name == "bool" else np.dtype(name).name)

    def tensor(self, array: np.ndarray):
        """A host array as a tensor on the device (its own copy where the array is read-only)."""
        return self.torch.from_numpy(np.require(array, requirements=("C", "W"))).to(self.device.torch_device)

    def const(self, key: object, make: Callable[[], np.ndarray]):
        """The device tensor of ``make()``, built the first time ``key`` is asked for (before any capture: the first
        run is always eager)."""
        hit = self._constants.get(key)
        if hit is None:
            hit = self._constants[key] = self.tensor(make())
        return hit


class TorchGraph:
    """A graph on the device: weights and constant-producing nodes resident, each node run by its PyTorch
    implementation, or on the host where it has none (which keeps the graph from being captured)."""

    def __init__(self, graph: Graph, device: Device | None = None):
        self.graph = graph
        self.device = device or default_device()
        self.rt = TorchRuntime(self.device)
        self.order = graph.topological_order()
        self.values: dict[str, object] = {k: self.rt.tensor(v) for k, v in graph.weights.items()}
        self.host_nodes: set[str] = set()  # nodes run on the host: no PyTorch implementation, or a case it refused
        for node in self.order:
            if not node.inputs:  # a constant (fill, eye, dims ...): evaluated once
                for name, value in zip(node.outputs, node.op.evaluate([], node.params)):
                    self.values[name] = self.rt.tensor(np.asarray(value))
            elif node.op.torch_impl is None:
                self.host_nodes.add(node.name)
        self._last_use = {v: i for i, node in enumerate(self.order) for v in node.inputs}

    @property
    def capturable(self) -> bool:
        return not self.host_nodes

    def __call__(self, feeds: Mapping[str, object]) -> list[object]:
        """The graph's outputs, in order, for device tensors by input name."""
        env = dict(self.values)
        env.update(feeds)
        keep = set(self.graph.outputs)
        for i, node in enumerate(self.order):
            if not node.inputs:
                continue
            args = [env[v] for v in node.inputs]
            results = self._run(node, args)
            for name, value in zip(node.outputs, results):
                declared = self.graph.type(name)
                if not isinstance(declared, TensorType):  # an opaque node's sequence, map or optional: host values
                    env[name] = value
                    continue
                if tuple(value.shape) != concrete(declared.shape):
                    raise TasoError(f"{node.op.name} node {node.name!r} produced shape {tuple(value.shape)} on torch, its type says {declared}")
                wanted = self.rt.dtype(declared.dtype)
                env[name] = value if value.dtype == wanted else value.to(wanted)
            for v in node.inputs:
                if self._last_use.get(v) == i and v not in keep and v not in self.values and v not in feeds:
                    env.pop(v, None)
        return [env[o] for o in self.graph.outputs]

    def _run(self, node, args: list) -> list:
        if node.name not in self.host_nodes:
            try:
                out = node.op.torch_impl(self.rt, args, node.params)
                return list(out) if isinstance(out, (list, tuple)) else [out]
            except NotImplementedError:
                self.host_nodes.add(node.name)
        host = [a.cpu().numpy() if hasattr(a, "cpu") else a for a in args]
        return [self.rt.tensor(r) if isinstance(r, np.ndarray) and r.dtype.kind in "biuf" else r for r in node.op.evaluate(host, node.params)]

    def run_host(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Host outputs by export name, for host inputs."""
        outputs = self({k: self.rt.tensor(v) for k, v in inputs.items()})
        names = self.graph.meta.output_names or self.graph.outputs
        return {name: value.cpu().numpy() for name, value in zip(names, outputs)}


class Replay:
    """A graph ready to be timed: its inputs in static device buffers, run once eagerly (constants built, host-only
    nodes found), then captured where the device and the graph allow it."""

    def __init__(self, graph: TorchGraph, inputs: Mapping[str, np.ndarray]):
        self.graph, self.device = graph, graph.device
        self.feeds = {k: graph.rt.tensor(v) for k, v in inputs.items()}
        graph(self.feeds)  # eager: whatever a capture must not do (building constants, host fallbacks) happens here
        self.device.synchronize()
        captured = self.device.capture(lambda: graph(self.feeds)) if graph.capturable else None
        self.call = captured if captured is not None else (lambda: graph(self.feeds))
        self.timing = self.device.timing if captured is not None or self.device.name == "cpu" else TIMING_EAGER

    def seconds(self, repeat: int = 20) -> float:
        """Seconds per run, over ``repeat`` runs in a row (the collector paused, as ``timeit`` does)."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self.device.seconds(self.call, repeat)
        finally:
            if collecting:
                gc.enable()


def interleaved_replay_times(replays: Sequence[Replay], rounds: int, repeat: int = 20) -> list[float]:
    """Seconds per run of each replay: each round times every one in turn; each one's median over the rounds."""
    from .timing import interleaved_medians

    for replay in replays:  # one untimed batch each: clocks up, caches warm
        replay.seconds(repeat)
    return interleaved_medians([lambda r=r: r.seconds(repeat) for r in replays], rounds)


class EndToEndTimer:
    """Two graphs on the torch runtime, timed side by side in interleaved rounds (device time on a GPU)."""

    def __init__(self, original: Graph, optimized: Graph, device: Device | None = None):
        from .inputs import random_inputs

        device = device or default_device()
        feeds = random_inputs(original)
        self.replays = [Replay(TorchGraph(g, device), feeds) for g in (original, optimized)]

    def speedup(self, rounds: int = 7) -> float:
        """One series: the original's median over the optimized graph's."""
        before, after = interleaved_replay_times(self.replays, rounds)
        return before / after
