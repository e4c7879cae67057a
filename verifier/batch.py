"""Running one check over many rules: an even sample, and a map over worker processes."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["sample_evenly", "process_map"]

T = TypeVar("T")


def sample_evenly(items: Sequence[T], about: int) -> list[T]:
    """Every k-th item, k chosen to leave about ``about`` of them (all of them when ``about`` is 0)."""
    return list(items) if about <= 0 else list(items[:: max(1, len(items) // about)])


def process_map(fn: Callable[[Any], T], work: Sequence[Any], jobs: int, chunksize: int = 8) -> list[T]:
    """``[fn(w) for w in work]``, in ``jobs`` spawned processes when ``jobs`` > 1 (``fn`` and ``work`` must pickle)."""
    if jobs <= 1:
        return [fn(w) for w in work]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        return pool.map(fn, work, chunksize=chunksize)
