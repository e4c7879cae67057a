"""`taso bench`: end-to-end speedups on ONNX Runtime against its own optimizer.

For each model (a zoo name or an .onnx file) and each thread count, three variants run on
ONNX Runtime's CPU provider: the original with graph optimizations off, the original with
ENABLE_ALL, and the taso-optimized model (from ``taso optimize``'s own pipeline,
:func:`taso.pipeline.optimize_model`) with ENABLE_ALL. After warm-up, rounds are interleaved
in a rotating order (so machine noise hits all three alike), each round's fastest run is
kept (:mod:`taso.measure.timing`), and the medians over rounds and their ratios are the result. Writes JSON, a Markdown table and a PNG chart, tagged with the hardware.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import onnx
import onnxruntime as ort

from .errors import TasoError

__all__ = ["add_parser", "run", "BenchRow", "bench_model"]

VARIANTS = ("original_noopt", "original_ortall", "taso_ortall")


@dataclass
class BenchRow:
    model: str
    runtime: str
    threads: int
    nodes_before: int
    nodes_after: int
    search_seconds: float
    predicted_speedup: float
    ms: dict  # variant -> median milliseconds
    speedup_vs_ortall: float
    speedup_vs_noopt: float
    rules_applied: dict
    kept: str = "optimized"  # what taso wrote: "optimized", "re-export" or "input"
    guard_speedup: float | None = None  # the search's graph measured end to end by the guard (GPU runs)
    max_abs_error: float = 0.0  # the kept graph's outputs against the original's on the device (GPU runs)


def _load_model(name: str, batch: int) -> tuple[str, onnx.ModelProto, str | None]:
    """The label, the model and its file (None for a zoo model built in memory)."""
    if os.path.exists(name) or name.endswith(".onnx"):
        from .onnx import read_model

        return os.path.basename(name), read_model(name), name
    from . import models

    if name not in models.names():
        raise TasoError(f"{name!r} is neither an .onnx file nor a zoo model ({', '.join(models.names())})")
    return name, models.build(name, batch=batch), None


def bench_model(name: str, model: onnx.ModelProto, threads: int, args, path: str | None = None) -> BenchRow:
    """Optimizes one model for one thread count exactly as `taso optimize` would, and times the three variants side by side."""
    from .pipeline.source import model_bytes
    from .measure.timing import interleaved_times
    from .measure.inputs import random_inputs

    source, outcome = _optimize(model, path, args.cost, threads, args)
    report = outcome.report
    original = source.timing_source()
    optimized = original if outcome.model is None else model_bytes(outcome.model)
    labels = ("the original model (ONNX Runtime optimizations off)", "the original model", "the taso-optimized model")
    seconds = interleaved_times([original, original, optimized], random_inputs(source.graph), threads, args.rounds, labels=labels,
                                optimize=(False, True, True), min_runs=7, min_seconds=0.05)
    medians = dict(zip(VARIANTS, seconds))
    ms = {k: v * 1e3 for k, v in medians.items()}
    return BenchRow(name, args.cost, threads, len(source.graph), len(outcome.graph), round(report.seconds, 2), round(report.predicted_speedup, 3), ms,
                    medians["original_ortall"] / medians["taso_ortall"], medians["original_noopt"] / medians["taso_ortall"],
                    dict(report.applied) if outcome.kept == "optimized" else {})


def _optimize(model: onnx.ModelProto, path: str | None, cost: str, threads: int, args):
    """The model through taso optimize's own pipeline (search, output check, end-to-end guard with measured CPU costs)."""
    from .onnx import load_onnx
    from .pipeline.source import ModelSource
    from .pipeline.library import load_rules
    from .pipeline.run import optimize_model
    from .search import SearchConfig

    source = ModelSource(load_onnx(model), model, path)
    return source, optimize_model(source, load_rules(args.library), cost, SearchConfig(args.alpha, args.budget, args.time_limit), threads)


def _markdown(rows: list[BenchRow], hardware: str) -> str:
    if rows and rows[0].runtime == "cupy":
        from .bench_gpu import gpu_markdown

        return gpu_markdown(rows, hardware)
    lines = [f"Hardware: {hardware}", "",
             "| model | threads | ORT no-opt (ms) | ORT all (ms) | taso + ORT all (ms) | speedup vs ORT all | nodes | search (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.model} | {r.threads} | {r.ms['original_noopt']:.3f} | {r.ms['original_ortall']:.3f} | {r.ms['taso_ortall']:.3f} | "
                     f"{r.speedup_vs_ortall:.2f}x | {r.nodes_before} -> {r.nodes_after} | {r.search_seconds:.1f} |")
    by_threads: dict[int, list[float]] = {}
    for r in rows:
        by_threads.setdefault(r.threads, []).append(r.speedup_vs_ortall)
    for threads, speedups in sorted(by_threads.items()):
        lines.append(f"\nGeometric mean speedup vs ORT ENABLE_ALL, {threads} thread(s): {statistics.geometric_mean(speedups):.3f}x over {len(speedups)} models")
    return "\n".join(lines) + "\n"


def _chart(rows: list[BenchRow], hardware: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if rows and rows[0].runtime == "cupy":
        from .bench_gpu import gpu_chart

        gpu_chart(rows, hardware, path)
        return

    labels = [f"{r.model}\n{r.threads}t" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    x = range(len(rows))
    width = 0.27
    for i, (variant, title) in enumerate(zip(VARIANTS, ("ORT no-opt", "ORT ENABLE_ALL", "taso + ORT ENABLE_ALL"))):
        base = [r.ms["original_ortall"] / r.ms[variant] for r in rows]
        ax.bar([xi + (i - 1) * width for xi in x], base, width, label=title)
    finish_chart(fig, ax, list(x), labels, "speedup over ORT ENABLE_ALL", f"taso on {hardware}", path)


def finish_chart(fig, ax, ticks: list, labels: list[str], ylabel: str, title: str, path: str, title_size: int = 9,
                 **tick_style) -> None:
    """What every bench chart ends with: a line at 1x, its labels and legend, the PNG written and the figure closed."""
    import matplotlib.pyplot as plt

    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(ticks, labels, fontsize=8, **tick_style)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=title_size)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def add_parser(sub) -> None:
    from .cost import COST_MODELS
    from .search import SearchConfig

    p = sub.add_parser("bench", help="measure end-to-end speedups against ONNX Runtime's optimizer")
    p.add_argument("models", nargs="+", metavar="MODEL", help="zoo model names (see `taso models list`) or .onnx files")
    p.add_argument("--threads", default="1", help="comma-separated intra-op thread counts (default 1)")
    p.add_argument("--out", default="bench-results", help="directory for bench.json, bench.md and bench.png (default %(default)s)")
    p.add_argument("--library", help="a verified rule library (default: the shipped one)")
    p.add_argument("--cost", choices=COST_MODELS, default="ort-cpu")
    p.add_argument("--alpha", type=float, default=SearchConfig.alpha)
    p.add_argument("--budget", type=int, default=SearchConfig.budget)
    p.add_argument("--time-limit", type=float, default=SearchConfig.time_limit)
    p.add_argument("--rounds", type=int, default=10, help="interleaved timing rounds per variant (default %(default)s)")
    p.add_argument("--batch", type=int, default=1, help="batch size for zoo models (default 1)")
    p.add_argument("--runtime", choices=("ort-cpu", "cupy"), default="ort-cpu",
                   help="ort-cpu: ONNX Runtime on the CPU vs its own optimizer; cupy: the CuPy executor on the GPU (costs from --cost, default cupy)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .cost.ort_cpu import cpu_name

    try:
        threads = [int(t) for t in str(args.threads).split(",") if t.strip()]
    except ValueError:
        threads = []
    if not threads or any(t < 1 for t in threads):
        raise TasoError(f"--threads {args.threads!r}: expected comma-separated positive integers, e.g. 1,2")
    _check_settings(args)
    _make_out_dir(args.out)
    if args.runtime == "cupy":
        from .measure.cupy_runtime import gpu_fingerprint, require_cupy

        hardware = gpu_fingerprint(require_cupy())
    else:
        hardware = f"{cpu_name()}, onnxruntime {ort.__version__}"
    rows = []
    for name in args.models:
        label, model, path = _load_model(name, args.batch)
        if args.runtime == "cupy":
            from .bench_gpu import bench_model_gpu

            row = bench_model_gpu(label, model, args, path)
            rows.append(row)
            print(f"{label:<16} CuPy {row.ms['cupy_original']:.3f} ms -> {row.ms['cupy_taso']:.3f} ms  {row.speedup_vs_ortall:.2f}x", file=sys.stderr)
            continue
        for t in threads:
            started = time.perf_counter()
            row = bench_model(label, model, t, args, path)
            rows.append(row)
            print(f"{label:<16} threads={t}  ORT all {row.ms['original_ortall']:.3f} ms  taso {row.ms['taso_ortall']:.3f} ms  "
                  f"{row.speedup_vs_ortall:.2f}x  ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    result = {"hardware": hardware, "rows": [asdict(r) for r in rows]}
    _atomic_write(os.path.join(args.out, "bench.json"), json.dumps(result, indent=2))
    markdown = _markdown(rows, hardware)
    _atomic_write(os.path.join(args.out, "bench.md"), markdown)
    _chart(rows, hardware, os.path.join(args.out, "bench.png"))
    print(markdown)
    return 0


def _check_settings(args: argparse.Namespace) -> None:
    """Settings the timing or the search cannot honour are refused before any model is built."""
    from .pipeline.run import validate_search_settings

    if args.rounds < 1 or args.batch < 1:
        raise TasoError(f"--rounds and --batch must be at least 1, got {args.rounds} and {args.batch}")
    validate_search_settings(args.alpha, args.budget, args.time_limit)


def _make_out_dir(path: str) -> None:
    """Creates --out up front: a bench that ran for an hour must not fail at its last step."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise TasoError(f"--out {path}: cannot create the directory ({e.strerror or e})") from None
    if not os.access(path, os.W_OK):
        raise TasoError(f"--out {path}: not writable")


def _atomic_write(path: str, text: str) -> None:
    from .pipeline.source import write_model

    write_model(text.encode("utf-8"), path)
