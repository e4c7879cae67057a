"""GPU support through CuPy: device detection, the device executor, CUDA-event timing, the GPU fingerprint.

Everything here imports CuPy lazily, so taso installs and runs without a GPU; functions
that need one raise a TasoError that says how to get it: the CuPy wheel matching the driver's
CUDA major version, ``pip install 'taso[gpu]'`` (cupy-cuda13x) or ``'taso[gpu-cuda12]'``.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType

import numpy as np

from ..errors import TasoError
from ..ir import Graph
from ..ir.execute import run_values, to_host

__all__ = ["cupy_or_none", "require_cupy", "gpu_fingerprint", "time_cuda", "DeviceGraph", "EndToEndTimer", "interleaved_device_times"]


def cupy_or_none() -> ModuleType | None:
    """CuPy when it is installed and sees at least one GPU, else None."""
    try:
        import cupy

        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # noqa: BLE001 - ImportError, CUDA driver errors, no device
        return None


def require_cupy() -> ModuleType:
    cp = cupy_or_none()
    if cp is None:
        raise TasoError("no usable GPU: install CuPy for your driver's CUDA major version (pip install 'taso[gpu]' for "
                        "CUDA 13, 'taso[gpu-cuda12]' for CUDA 12) on a machine with an NVIDIA GPU")
    return cp


def gpu_fingerprint(cp: ModuleType) -> str:
    """GPU name, driver, CUDA runtime and CuPy versions: what measured GPU costs depend on."""
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return f"cupy|{name}|driver {cp.cuda.runtime.driverGetVersion()}|cuda {cp.cuda.runtime.runtimeGetVersion()}|cupy {cp.__version__}"


def time_cuda(cp: ModuleType, fn: Callable[[], object], warmup: int = 3, repeat: int = 20) -> float:
    """Median seconds of ``fn`` measured with CUDA events (device time, launch gaps included).

    The garbage collector is paused while timing, as ``timeit`` does: the executor dispatches from Python, and a
    collection landing in one variant's runs would be charged to it.
    """
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    finally:
        if collecting:
            gc.enable()
    return statistics.median(times)


class DeviceGraph:
    """A graph with its weights resident on the device, ready to run many times without host round trips."""

    def __init__(self, graph: Graph, cp: ModuleType):
        self.graph, self.cp = graph, cp
        self.weights = {k: cp.asarray(v) for k, v in graph.weights.items()}

    def __call__(self, inputs: Mapping[str, object]) -> dict[str, object]:
        """Runs on device inputs; returns device outputs by value name."""
        return run_values(self.graph, inputs, device=self.cp, weights=self.weights)

    def run_host(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self({k: self.cp.asarray(v) for k, v in inputs.items()})
        names = self.graph.meta.output_names or self.graph.outputs
        return {n: to_host(values[v]) for n, v in zip(names, self.graph.outputs)}


class EndToEndTimer:
    """Two graphs resident on the device, timed side by side with CUDA events in interleaved rounds (clock and thermal
    drift hit both alike). The executor dispatches each op from Python, so a run's time is mostly host time: the
    collector is kept out of the timed runs, and each series is a fresh verdict."""

    def __init__(self, original: Graph, optimized: Graph):
        from .inputs import random_inputs

        self.cp = require_cupy()
        self.feeds = {k: self.cp.asarray(v) for k, v in random_inputs(original).items()}
        self.runners = [DeviceGraph(g, self.cp) for g in (original, optimized)]

    def speedup(self, rounds: int = 7) -> float:
        """One series: the original's median over the optimized graph's."""
        before, after = interleaved_device_times(self.cp, self.runners, self.feeds, rounds)
        return before / after


def interleaved_device_times(cp: ModuleType, runners: Sequence[DeviceGraph], feeds: Mapping[str, object], rounds: int) -> list[float]:
    """Seconds per run of each graph on the same device inputs: each round times every graph once (CUDA events, the
    median of 10 runs), in turn; the result is each graph's median over the rounds."""
    from .timing import interleaved_medians

    return interleaved_medians([lambda r=r: time_cuda(cp, lambda: r(feeds), repeat=10) for r in runners], rounds)

