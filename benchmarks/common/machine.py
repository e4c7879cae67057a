"""What this (shared) machine can give a benchmark right now: how much parallel speed-up is on offer."""

from __future__ import annotations

import multiprocessing
import time

__all__ = ["available_speedup"]


def _spin(n: int) -> float:
    start, total = time.perf_counter(), 0
    for i in range(n):
        total += i
    return time.perf_counter() - start


def available_speedup(jobs: int, n: int = 10_000_000) -> float:
    """How much faster ``jobs`` copies of a loop finish in ``jobs`` processes than one after another."""
    alone = _spin(n)
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        start = time.perf_counter()
        pool.map(_spin, [n] * jobs)
        together = time.perf_counter() - start
    return jobs * alone / together
