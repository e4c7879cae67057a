"""`taso bench`: taso optimize's output timed against the input on a runtime, side by side, and written up.

| module | job |
|---|---|
| :mod:`.rows` | a row of results, the models read, taso optimize's pipeline run on each, how a chart ends |
| :mod:`.cpu` | ONNX Runtime on the CPU: the input without and with ENABLE_ALL against taso's output |
| :mod:`.gpu` | the CuPy runtime on the GPU, beside TASO's published V100 speedups |

:func:`write_results` writes bench.json, bench.md and bench.png for either.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict

from ..onnx.files import write_text_atomically
from .cpu import bench_model, cpu_chart, cpu_markdown
from .gpu import TASO_V100, bench_model_gpu, gpu_chart, gpu_markdown
from .rows import VARIANTS, BenchRow, load_model

__all__ = ["BenchRow", "VARIANTS", "TASO_V100", "bench_model", "bench_model_gpu", "load_model", "markdown", "chart", "write_results"]


def markdown(rows: list[BenchRow], hardware: str) -> str:
    """The rows as bench.md: the GPU table for CuPy rows, the CPU one otherwise."""
    return gpu_markdown(rows, hardware) if rows and rows[0].runtime == "cupy" else cpu_markdown(rows, hardware)


def chart(rows: list[BenchRow], hardware: str, path: str) -> None:
    """The rows as a PNG chart at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    (gpu_chart if rows and rows[0].runtime == "cupy" else cpu_chart)(rows, hardware, path)


def write_results(rows: list[BenchRow], hardware: str, out: str) -> str:
    """Writes bench.json, bench.md and bench.png into ``out`` (each atomically); returns the Markdown."""
    write_text_atomically(os.path.join(out, "bench.json"), json.dumps({"hardware": hardware, "rows": [asdict(r) for r in rows]}, indent=2))
    table = markdown(rows, hardware)
    write_text_atomically(os.path.join(out, "bench.md"), table)
    chart(rows, hardware, os.path.join(out, "bench.png"))
    return table
