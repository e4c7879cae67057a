"""`taso bench`: taso optimize's output timed against the input on a runtime, side by side, and written up.

| module | job |
|---|---|
| :mod:`.rows` | a row of results, the models read, taso optimize's pipeline run on each, how a chart ends |
| :mod:`.cpu` | ONNX Runtime on the CPU: the input without and with ENABLE_ALL against taso's output |
| :mod:`.peers` | the optimizers a user would otherwise run (onnxslim, onnxsim, ONNX Runtime's transformers optimizer, onnxscript), for ``--peers`` |
| :mod:`.torch_device` | the torch runtime (device time on a GPU), beside TASO's and Tensat's published speedups |
| :mod:`.gpu` | the CuPy executor on the GPU, beside TASO's published V100 speedups |

:func:`write_results` writes bench.json, bench.md and bench.png for either.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict

from ..onnx.files import write_text_atomically
from .cpu import bench_model, cpu_chart, cpu_markdown
from .gpu import bench_model_gpu, gpu_chart, gpu_markdown
from .rows import VARIANTS, BenchRow, load_model
from .torch_device import TASO_V100, TENSAT, bench_model_torch, torch_chart, torch_markdown

__all__ = ["BenchRow", "VARIANTS", "TASO_V100", "TENSAT", "bench_model", "bench_model_gpu", "bench_model_torch", "load_model", "markdown",
           "chart", "write_results"]


def _runtime(rows: list[BenchRow]) -> str:
    return rows[0].runtime if rows else "ort-cpu"


def markdown(rows: list[BenchRow], hardware: str, facts: dict | None = None) -> str:
    """The rows as bench.md: the torch or CuPy table for those rows, the CPU one otherwise."""
    runtime = _runtime(rows)
    if runtime == "torch":
        return torch_markdown(rows, hardware, facts)
    return gpu_markdown(rows, hardware) if runtime == "cupy" else cpu_markdown(rows, hardware)


def chart(rows: list[BenchRow], hardware: str, path: str) -> None:
    """The rows as a PNG chart at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    {"torch": torch_chart, "cupy": gpu_chart}.get(_runtime(rows), cpu_chart)(rows, hardware, path)


def write_results(rows: list[BenchRow], hardware: str, out: str, facts: dict | None = None) -> str:
    """Writes bench.json, bench.md and bench.png into ``out`` (each atomically); returns the Markdown. ``facts``: what
    bench.json records of a device runtime (device, driver, runtime, timing method)."""
    record = {"hardware": hardware, **(facts or {}), "rows": [asdict(r) for r in rows]}
    write_text_atomically(os.path.join(out, "bench.json"), json.dumps(record, indent=2))
    table = markdown(rows, hardware, facts)
    write_text_atomically(os.path.join(out, "bench.md"), table)
    chart(rows, hardware, os.path.join(out, "bench.png"))
    return table
