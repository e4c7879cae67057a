"""A stand-in CUDA device for the torch runtime, on torch's CPU kernels, as strict as a CUDA graph capture.

The runtime's capture, replay and event timing run in CI through it. While it captures, what a real capture
forbids raises: reading a tensor on the host (``.cpu()``, ``.numpy()``, ``.item()``, ``.tolist()``) and building a
tensor from host data (``torch.from_numpy``, ``torch.as_tensor``, ``torch.tensor``). A replay re-runs what was
captured, under the same rules, and must return tensors of the captured outputs' shapes and dtypes.
"""

from __future__ import annotations

import contextlib
import time

import torch

from taso.measure.torch_runtime import Device


class CaptureError(RuntimeError):
    """What a CUDA graph capture would have failed on."""


_TENSOR_READS = ("cpu", "numpy", "item", "tolist")
_HOST_BUILDERS = ("from_numpy", "as_tensor", "tensor")


@contextlib.contextmanager
def forbidding_host_traffic(what: str):
    """Inside: every host read of a tensor and every tensor built from host data raises CaptureError."""
    saved = {name: getattr(torch.Tensor, name) for name in _TENSOR_READS} | {f"torch.{n}": getattr(torch, n) for n in _HOST_BUILDERS}

    def refuse(name):
        def refused(*args, **kwargs):
            raise CaptureError(f"{name} during {what}: a CUDA graph cannot hold host traffic")
        return refused

    for name in _TENSOR_READS:
        setattr(torch.Tensor, name, refuse(f"Tensor.{name}"))
    for name in _HOST_BUILDERS:
        setattr(torch, name, refuse(f"torch.{name}"))
    try:
        yield
    finally:
        for name in _TENSOR_READS:
            setattr(torch.Tensor, name, saved[name])
        for name in _HOST_BUILDERS:
            setattr(torch, name, saved[f"torch.{name}"])


class StandInCuda(Device):
    """Captures by recording the function; replays it under capture rules; times with a fake event pair."""

    name = "cuda"
    timing = "cuda-graphs"

    def __init__(self):
        super().__init__(torch)
        self.captures = 0
        self.replays = 0
        self.timed_batches = 0

    @property
    def torch_device(self) -> str:
        return "cpu"

    def capture(self, fn):
        for _ in range(3):  # the real one warms up on a side stream first
            fn()
        with forbidding_host_traffic("capture"):
            outputs = fn()
        self.captures += 1
        signature = [(tuple(t.shape), t.dtype) for t in outputs]

        def replay():
            self.replays += 1
            with forbidding_host_traffic("replay"):
                again = fn()
            if [(tuple(t.shape), t.dtype) for t in again] != signature:
                raise CaptureError("a replay produced other outputs than the capture")

        return replay

    def seconds(self, call, repeat: int) -> float:
        self.timed_batches += 1
        start = time.perf_counter()  # the "events": recorded around the batch of replays
        for _ in range(repeat):
            call()
        return (time.perf_counter() - start) / repeat

    def fingerprint(self) -> str:
        return f"torch|cuda|stand-in|torch {torch.__version__}"
