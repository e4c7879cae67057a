"""`taso bench` on the CPU: end-to-end speedups on ONNX Runtime against its own optimizer.

For each model (a zoo name or an .onnx file) and each thread count, three variants run on
ONNX Runtime's CPU provider: the original with graph optimizations off, the original with
ENABLE_ALL, and the taso-optimized model (from ``taso optimize``'s own pipeline,
:func:`taso.pipeline.optimize_model`) with ENABLE_ALL; with ``--peers``, each peer's model of the input
(:mod:`taso.bench.peers`) too, with ENABLE_ALL, in the same interleaved run. After warm-up, rounds are interleaved
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
    from .peers import run_peer

    source, outcome = optimize_for_bench(model, path, args.cost, threads, args)
    report = outcome.report
    original = source.timing_source()
    optimized = original if outcome.model is None else model_bytes(outcome.model)
    feeds = random_inputs(source.graph)
    peers, notes = {}, {}
    for peer in getattr(args, "peers", None) or ():
        result, note = run_peer(peer, source.model, [feeds])
        if result is None:
            notes[peer] = note
        else:
            peers[peer] = result.SerializeToString()
    labels = ("the original model (ONNX Runtime optimizations off)", "the original model", "the taso-optimized model",
              *(f"{peer}'s model" for peer in peers))
    seconds = interleaved_times([original, original, optimized, *peers.values()], feeds, threads, args.rounds, labels=labels,
                                optimize=(False, True, True, *(True for _ in peers)), min_runs=7, min_seconds=0.05)
    medians = dict(zip((*VARIANTS, *(f"{peer}_ortall" for peer in peers)), seconds))
    ms = {k: v * 1e3 for k, v in medians.items()}
    return BenchRow(name, args.cost, threads, len(source.graph), len(outcome.graph), round(report.seconds, 2), round(report.predicted_speedup, 3), ms,
                    medians["original_ortall"] / medians["taso_ortall"], medians["original_noopt"] / medians["taso_ortall"],
                    dict(report.applied) if outcome.kept == "optimized" else {},
                    peers={peer: medians["original_ortall"] / medians[f"{peer}_ortall"] for peer in peers}, peer_notes=notes)


def cpu_markdown(rows: list[BenchRow], hardware: str) -> str:
    peers = list(dict.fromkeys(p for r in rows for p in (*r.peers, *r.peer_notes)))
    lines = [f"Hardware: {hardware}", "",
             "| model | threads | ORT no-opt (ms) | ORT all (ms) | taso + ORT all (ms) | speedup vs ORT all | "
             + "".join(f"{p} + ORT all | " for p in peers) + "nodes | search (s) |",
             "|---|---|---|---|---|---|" + "---|" * len(peers) + "---|---|"]
    for r in rows:
        cells = "".join(f"{r.peers[p]:.2f}x | " if p in r.peers else "— | " for p in peers)
        lines.append(f"| {r.model} | {r.threads} | {r.ms['original_noopt']:.3f} | {r.ms['original_ortall']:.3f} | {r.ms['taso_ortall']:.3f} | "
                     f"{r.speedup_vs_ortall:.2f}x | {cells}{r.nodes_before} -> {r.nodes_after} | {r.search_seconds:.1f} |")
    by_threads: dict[int, list[float]] = {}
    for r in rows:
        by_threads.setdefault(r.threads, []).append(r.speedup_vs_ortall)
    for threads, speedups in sorted(by_threads.items()):
        lines.append(f"\nGeometric mean speedup vs ORT ENABLE_ALL, {threads} thread(s): {statistics.geometric_mean(speedups):.3f}x over {len(speedups)} models")
    notes = [f"- {r.model}: {note}" for r in rows for note in r.peer_notes.values()]
    if notes:
        lines += ["", "Peers not timed (—):", *dict.fromkeys(notes)]
    return "\n".join(lines) + "\n"


def cpu_chart(rows: list[BenchRow], hardware: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.model}\n{r.threads}t" for r in rows]
    peers = list(dict.fromkeys(p for r in rows for p in r.peers))
    bars = [*zip(VARIANTS, ("ORT no-opt", "ORT ENABLE_ALL", "taso + ORT ENABLE_ALL")), *((f"{p}_ortall", f"{p} + ORT ENABLE_ALL") for p in peers)]
    fig, ax = plt.subplots(figsize=(max(6, 0.4 * len(bars) * len(rows)), 4))
    x = range(len(rows))
    width = 0.8 / len(bars)
    for i, (variant, title) in enumerate(bars):
        base = [r.ms["original_ortall"] / r.ms[variant] if variant in r.ms else 0.0 for r in rows]
        ax.bar([xi + (i - (len(bars) - 1) / 2) * width for xi in x], base, width, label=title)
    finish_chart(fig, ax, list(x), labels, "speedup over ORT ENABLE_ALL", f"taso on {hardware}", path)


