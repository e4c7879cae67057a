"""Seconds and peak memory per stage of a run: what ``taso optimize`` reports beside its search.

The search keeps to its time limit; a user waits for everything around it too (loading,
checking, timing, writing). :class:`StageClock` times each stage and reads the process's peak
resident memory during it. On Linux the kernel's high-water mark (``VmHWM``) is reset at each
stage's start (``/proc/self/clear_refs``), so each stage gets its own peak; elsewhere, or where
the reset is refused, the peak is the process's peak so far (``ru_maxrss``), and the report says
so. Between stages, the C heap's freed memory goes back to the system (:func:`return_freed_memory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Stage", "StageClock", "return_freed_memory"]


@dataclass
class Stage:
    """One stage: its name, wall seconds and peak resident bytes (None where unknown)."""

    name: str
    seconds: float
    peak_bytes: int | None

    def to_json(self) -> dict:
        return {"name": self.name, "seconds": self.seconds, "peak_bytes": self.peak_bytes}


def _reset_peak() -> bool:
    """Resets the kernel's peak-RSS mark of this process; False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def return_freed_memory() -> None:
    """Gives the C heap's free memory back to the system (glibc's ``malloc_trim``; nothing elsewhere).

    glibc keeps what a large allocation freed once its threshold for mapping allocations apart has
    grown past that size: an ONNX Runtime session of a 400 MB model with its weights in the file left
    0.45 GB resident once closed, and the next stage's sessions came on top (zoo BERT under eqsat:
    1.49 GB at the peak, 1.15 GB with the heap trimmed between stages).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc (musl has no malloc_trim)


def _peak_bytes() -> int:
    """The process's peak resident memory: VmHWM (since the last reset) on Linux, else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@dataclass
class StageClock:
    """Records stages in order; a stage entered twice is recorded twice (the report sums them by name)."""

    stages: list[Stage] = field(default_factory=list)
    per_stage_peaks: bool = True  # False once a reset was refused: peaks are the process's so far
    # Told the name of each stage as it starts (a progress display); None: nobody listens.
    on_start: Callable[[str], None] | None = None

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if self.on_start is not None:
            self.on_start(name)
        self.per_stage_peaks = _reset_peak() and self.per_stage_peaks
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages.append(Stage(name, time.perf_counter() - start, _peak_bytes()))
            return_freed_memory()

    def totals(self) -> list[Stage]:
        """One entry per name, in first-seen order: seconds summed, the highest peak."""
        merged: dict[str, Stage] = {}
        for s in self.stages:
            if s.name in merged:
                m = merged[s.name]
                peaks = [p for p in (m.peak_bytes, s.peak_bytes) if p is not None]
                merged[s.name] = Stage(s.name, m.seconds + s.seconds, max(peaks) if peaks else None)
            else:
                merged[s.name] = Stage(s.name, s.seconds, s.peak_bytes)
        return list(merged.values())

    def describe(self) -> str:
        """``load 0.4 s (1.2 GB), search 9.0 s (1.3 GB), ...``: a line for people."""
        parts = [f"{s.name} {s.seconds:.1f} s" + (f" ({_gigabytes(s.peak_bytes)})" if s.peak_bytes is not None else "") for s in self.totals()]
        note = "" if self.per_stage_peaks else " (peak memory: the process's peak so far)"
        return ", ".join(parts) + f"; total {sum(s.seconds for s in self.stages):.1f} s" + note

    def to_json(self) -> dict:
        return {"stages": [s.to_json() for s in self.totals()], "per_stage_peaks": self.per_stage_peaks}


def _gigabytes(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"
