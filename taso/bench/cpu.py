"""`taso bench` on the CPU: end-to-end speedups on ONNX Runtime against its own optimizer.

For each model (a zoo name or an .onnx file) and each thread count, three variants run on
ONNX Runtime's CPU provider: the original with graph optimizations off, the original with
ENABLE_ALL, and the taso-optimized model (from ``taso optimize``'s own pipeline,
:func:`taso.pipeline.optimize_model`) with ENABLE_ALL. After warm-up, rounds are interleaved
in a rotating order (so machine noise hits all three alike), each round's fastest run is
kept (:mod:`taso.measure.timing`), and the medians over rounds and their ratios are the result. Writes JSON, a Markdown table and a PNG chart, tagged with the hardware.
"""

from __future__ import annotations

import statistics

import onnx

from .rows import VARIANTS, BenchRow, finish_chart, optimize_for_bench

__all__ = ["bench_model", "cpu_markdown", "cpu_chart"]

def bench_model(name: str, model: onnx.ModelProto, threads: int, args, path: str | None = None) -> BenchRow:
    """Optimizes one model for one thread count exactly as `taso optimize` would, and times the three variants side by side."""
    from ..measure.inputs import random_inputs
    from ..measure.timing import interleaved_times
    from ..pipeline.source import model_bytes

    source, outcome = optimize_for_bench(model, path, args.cost, threads, args)
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


def cpu_markdown(rows: list[BenchRow], hardware: str) -> str:
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


def cpu_chart(rows: list[BenchRow], hardware: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.model}\n{r.threads}t" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    x = range(len(rows))
    width = 0.27
    for i, (variant, title) in enumerate(zip(VARIANTS, ("ORT no-opt", "ORT ENABLE_ALL", "taso + ORT ENABLE_ALL"))):
        base = [r.ms["original_ortall"] / r.ms[variant] for r in rows]
        ax.bar([xi + (i - 1) * width for xi in x], base, width, label=title)
    finish_chart(fig, ax, list(x), labels, "speedup over ORT ENABLE_ALL", f"taso on {hardware}", path)


