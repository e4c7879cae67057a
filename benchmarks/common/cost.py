"""taso's measured cost model for a benchmark that sets its prices beside wall-clock timings."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def ort_cpu_cost(threads: int, cache: str | None = None) -> Iterator:
    """``OrtCpuCost`` at ``threads`` on the cost cache in ``cache``, or on a scratch one the first prices fill (removed after)."""
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["TASO_CACHE_DIR"] = cache or scratch
        from taso.cost.ort_cpu import OrtCpuCost  # after the cache directory is set

        model = OrtCpuCost(threads=threads)
        try:
            yield model
        finally:
            model.close()
