"""`taso bench --runtime cupy`: end-to-end speedups on the GPU, beside TASO's published V100 figures.

Each model goes through `taso optimize`'s own pipeline with GPU-measured costs (the search, the
output check on ONNX Runtime, the guard that keeps the input unless the optimized graph is faster on
the GPU). The graph taso keeps and the original then run on the CuPy executor, both resident on the
device, timed with CUDA events in interleaved rounds, and their outputs are compared on the GPU
too. Where ONNX Runtime's CUDA provider is installed, the two files are also timed on it: an
independent runtime's view of the same rewrite.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import onnx
import onnxruntime as ort

from ..pipeline.checks import OutputMismatchError
from .torch_device import TASO_V100

__all__ = ["bench_model_gpu", "gpu_markdown", "gpu_chart"]

def bench_model_gpu(name: str, model: onnx.ModelProto, args, path: str | None = None):
    """Original against what taso keeps, on the CuPy executor; the row records the GPU outputs' largest difference."""
    from ..measure.cupy_runtime import DeviceGraph, interleaved_device_times, require_cupy
    from ..measure.inputs import random_inputs
    from ..measure.timing import interleaved_times
    from ..pipeline.source import model_bytes
    from .rows import BenchRow, optimize_for_bench

    cp = require_cupy()
    source, outcome = optimize_for_bench(model, path, "cupy" if args.cost.startswith("ort-cpu") else args.cost, 1, args)
    original, kept, report = source.graph, outcome.graph, outcome.report
    host_feeds = random_inputs(original)
    feeds = {k: cp.asarray(v) for k, v in host_feeds.items()}
    runners = {"cupy_original": DeviceGraph(original, cp)}
    if outcome.kept != "input":
        runners["cupy_taso"] = DeviceGraph(kept, cp)
    error = _largest_difference(runners, feeds, name)
    seconds = interleaved_device_times(cp, list(runners.values()), feeds, args.rounds)
    ms = {k: s * 1e3 for k, s in zip(runners, seconds)}
    ms.setdefault("cupy_taso", ms["cupy_original"])  # the input kept: the user's file is the input's bytes
    if "CUDAExecutionProvider" in ort.get_available_providers() and outcome.model is not None:
        optimized = model_bytes(outcome.model)
        cross = interleaved_times([model.SerializeToString(), optimized], host_feeds, rounds=args.rounds,
                                  labels=("the original model", "the taso-optimized model"), providers=("CUDAExecutionProvider",))
        ms.update({key: s * 1e3 for key, s in zip(("ort_cuda_original", "ort_cuda_taso"), cross)})
    speedup = ms["cupy_original"] / ms["cupy_taso"]
    cross_speedup = ms.get("ort_cuda_original", float("nan")) / ms.get("ort_cuda_taso", float("nan"))
    return BenchRow(name, "cupy", 1, len(original), len(kept), round(report.seconds, 2), round(report.predicted_speedup, 3), ms,
                    speedup, cross_speedup, dict(report.applied) if outcome.kept == "optimized" else {},
                    kept=outcome.kept, guard_speedup=outcome.speedups.get("optimized"), max_abs_error=error)


def _largest_difference(runners: dict, feeds: dict, name: str) -> float:
    """The largest absolute difference between the kept graph's GPU outputs and the original's (0 when the input is kept).

    Raises:
        OutputMismatchError: they differ beyond the output check's tolerance (:mod:`taso.measure.inputs`).
    """
    from ..ir.execute import to_host
    from ..measure.outputs import compare_outputs

    if len(runners) == 1:
        return 0.0
    original, kept = runners["cupy_original"], runners["cupy_taso"]
    before, after = original(feeds), kept(feeds)
    want = {o: to_host(before[o]) for o in original.graph.outputs}
    got = {o: to_host(after[k]) for o, k in zip(original.graph.outputs, kept.graph.outputs)}
    comparison = compare_outputs(want, got)
    if not comparison.ok:
        raise OutputMismatchError(f"{name}: on the GPU, the optimized graph's {comparison.describe()}")
    return comparison.worst_abs


def gpu_markdown(rows, hardware: str) -> str:
    lines = [f"Hardware: {hardware}", "", "Runtime: taso's CuPy executor on the GPU (CUDA events, interleaved rounds).", "",
             "| model | CuPy original (ms) | CuPy taso (ms) | speedup | kept | TASO on V100 (published) | ORT-CUDA (cross-check) | nodes | search (s) | largest output difference |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        published = TASO_V100.get(r.model)
        cross = "n/a (no CUDA provider)" if math.isnan(r.speedup_vs_noopt) else f"{r.speedup_vs_noopt:.2f}x"
        kept = r.kept if r.guard_speedup is None else f"{r.kept} (guard measured the search's graph {r.guard_speedup:.2f}x)"
        lines.append(f"| {r.model} | {r.ms['cupy_original']:.3f} | {r.ms['cupy_taso']:.3f} | {r.speedup_vs_ortall:.2f}x | {kept} | "
                     f"{'' if published is None else f'{published:.1f}x'} | {cross} | {r.nodes_before} -> {r.nodes_after} | "
                     f"{r.search_seconds:.1f} | {r.max_abs_error:.2g} |")
    lines.append(f"\nGeometric mean speedup on the CuPy executor: {statistics.geometric_mean([r.speedup_vs_ortall for r in rows]):.3f}x over {len(rows)} models")
    return "\n".join(lines) + "\n"


def gpu_chart(rows, hardware: str, path: str) -> None:
    import matplotlib

    from .rows import finish_chart

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r.speedup_vs_ortall for r in rows], 0.4, label="taso (this project), CuPy executor")
    ax.bar(x + 0.2, [TASO_V100.get(r.model, np.nan) for r in rows], 0.4, label="TASO on V100 (published)")
    finish_chart(fig, ax, list(x), [r.model.removesuffix(".onnx") for r in rows], "speedup over the original graph", f"taso on {hardware}",
                 path, title_size=8, rotation=30, ha="right")
