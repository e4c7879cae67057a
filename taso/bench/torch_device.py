"""`taso bench --runtime torch`: end-to-end speedups on the torch runtime, beside TASO's and Tensat's published ones.

Each model goes through `taso optimize`'s own pipeline with torch costs (the search priced in device time, the output
check on ONNX Runtime, the guard timing on the torch runtime). The original and the graph taso keeps then run on the
torch runtime, each captured once in a CUDA graph (on a GPU), and are timed side by side in interleaved rounds of
replays between CUDA events; their outputs are compared there too. Without a GPU the same run uses torch's CPU
kernels and the wall clock, which the report says (its "timing" field).
"""

from __future__ import annotations

import math
import os
import statistics

import numpy as np
import onnx

from ..pipeline.checks import OutputMismatchError

__all__ = ["TASO_V100", "TENSAT", "bench_model_torch", "kept_file", "torch_markdown", "torch_chart", "runtime_facts"]

# TASO's end-to-end speedups on a V100 (SOSP'19, Figure 7).
TASO_V100 = {"resnet50": 1.0, "nasnet_a": 1.3, "resnext50": 2.8, "nasrnn": 1.4, "bert": 1.4, "inception_v3": 1.1, "squeezenet": 1.3}
# Tensat's table of runtime speedups (MLSys'21, Table 2), as (TASO's, Tensat's): 1 + the percentage it gives.
TENSAT = {"bert": (1.085, 1.092), "resnext50": (1.055, 1.088), "nasnet_a": (1.019, 1.073), "nasrnn": (1.454, 1.689),
          "inception_v3": (1.063, 1.100), "squeezenet": (1.067, 1.245), "vgg19": (1.089, 1.089)}


def runtime_facts(device) -> dict:
    """What bench.json records of the runtime: the device, its driver and libraries, how it timed."""
    from ..measure.torch_runtime import driver_version

    torch = device.torch
    facts = {"runtime": f"torch {torch.__version__}", "device": device.name, "timing": device.timing, "fingerprint": device.fingerprint()}
    if device.name == "cuda" and torch.cuda.is_available():
        facts.update(device=torch.cuda.get_device_name(), driver=driver_version(), cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    return facts


def kept_file(out: str, name: str) -> str:
    """Where ``taso bench --runtime torch`` writes the model taso kept for ``name`` (to be timed again elsewhere)."""
    return os.path.join(out, f"{name.removesuffix('.onnx')}.taso.onnx")


def bench_model_torch(name: str, model: onnx.ModelProto, args, path: str | None = None, device=None, out: str | None = None):
    """Original against what taso keeps, on the torch runtime; the row records the outputs' largest difference there.
    With ``out``, the kept model is written there (:func:`kept_file`) when it is not the input."""
    from ..measure.inputs import random_inputs
    from ..measure.torch_runtime import Replay, TorchGraph, default_device, interleaved_replay_times
    from ..pipeline.source import as_written
    from .rows import BenchRow, optimize_for_bench

    device = device or default_device()
    cost = "torch" if args.cost.startswith("ort-cpu") else args.cost
    source, outcome = optimize_for_bench(model, path, cost, 1, args)
    original, kept, report = source.graph, outcome.graph, outcome.report
    feeds = random_inputs(original)
    graphs = {"torch_original": TorchGraph(original, device)}
    if outcome.kept != "input":
        kept = as_written(kept, outcome.model) if outcome.model is not None else kept  # the file, as a deployment loads it
        graphs["torch_taso"] = TorchGraph(kept, device)
        if out is not None and outcome.model is not None:
            from ..onnx.files import write_bytes_atomically
            from ..pipeline.source import model_bytes

            write_bytes_atomically(kept_file(out, name), model_bytes(outcome.model))
    error = _largest_difference(graphs, feeds, name)
    replays = {key: Replay(g, feeds) for key, g in graphs.items()}
    seconds = interleaved_replay_times(list(replays.values()), args.rounds)
    ms = {key: s * 1e3 for key, s in zip(replays, seconds)}
    ms.setdefault("torch_taso", ms["torch_original"])  # the input kept: the user's file is the input's bytes
    speedup = ms["torch_original"] / ms["torch_taso"]
    timing = sorted({r.timing for r in replays.values()})
    return BenchRow(name, "torch", 1, len(original), len(kept), round(report.seconds, 2), round(report.predicted_speedup, 3), ms,
                    speedup, math.nan, dict(report.applied) if outcome.kept == "optimized" else {},
                    kept=outcome.kept, guard_speedup=outcome.speedups.get("optimized"), max_abs_error=error, timing=", ".join(timing))


def _largest_difference(graphs: dict, feeds: dict, name: str) -> float:
    """The largest absolute difference between the kept graph's outputs and the original's on the runtime.

    Raises:
        OutputMismatchError: they differ beyond the output check's tolerance.
    """
    from ..measure.outputs import compare_outputs

    if len(graphs) == 1:
        return 0.0
    want, got = graphs["torch_original"].run_host(feeds), graphs["torch_taso"].run_host(feeds)
    comparison = compare_outputs(want, dict(zip(want, got.values())))
    if not comparison.ok:
        raise OutputMismatchError(f"{name}: on the torch runtime, the optimized graph's {comparison.describe()}")
    return comparison.worst_abs


def _published(model: str) -> tuple[str, str]:
    taso = TASO_V100.get(model)
    tensat = TENSAT.get(model)
    return ("" if taso is None else f"{taso:.1f}x", "" if tensat is None else f"{tensat[0]:.3f}x / {tensat[1]:.3f}x")


def torch_markdown(rows, hardware: str, facts: dict | None = None) -> str:
    facts = facts or {}
    timing = facts.get("timing") or ", ".join(sorted({r.timing for r in rows}))
    lines = [f"Hardware: {hardware}", "",
             f"Runtime: {facts.get('runtime', 'torch')} on {facts.get('device', '?')}; timing: {timing} (interleaved rounds).", "",
             "| model | input (ms) | taso (ms) | speedup | series in fresh processes | kept | TASO on V100 (published) | "
             "TASO / Tensat (Tensat's paper) | nodes | search (s) | largest output difference |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        taso, tensat = _published(r.model.removesuffix(".onnx"))
        kept = r.kept if r.guard_speedup is None else f"{r.kept} (guard measured the search's graph {r.guard_speedup:.2f}x)"
        series = ", ".join(f"{x:.3f}x" for x in r.series) or "-"
        lines.append(f"| {r.model} | {r.ms['torch_original']:.3f} | {r.ms['torch_taso']:.3f} | {r.speedup_vs_ortall:.2f}x | {series} | {kept} | {taso} | "
                     f"{tensat} | {r.nodes_before} -> {r.nodes_after} | {r.search_seconds:.1f} | {r.max_abs_error:.2g} |")
    if rows:
        lines.append(f"\nGeometric mean speedup on the torch runtime: {statistics.geometric_mean([r.speedup_vs_ortall for r in rows]):.3f}x "
                     f"over {len(rows)} models")
    return "\n".join(lines) + "\n"


def torch_chart(rows, hardware: str, path: str) -> None:
    import matplotlib

    from .rows import finish_chart

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows)), 4))
    x = np.arange(len(rows))
    names = [r.model.removesuffix(".onnx") for r in rows]
    ax.bar(x - 0.27, [r.speedup_vs_ortall for r in rows], 0.27, label="taso (this project), torch runtime")
    ax.bar(x, [TASO_V100.get(n, np.nan) for n in names], 0.27, label="TASO on V100 (published)")
    ax.bar(x + 0.27, [TENSAT.get(n, (np.nan, np.nan))[1] for n in names], 0.27, label="Tensat (published)")
    finish_chart(fig, ax, list(x), names, "speedup over the original graph", f"taso on {hardware}", path, title_size=8, rotation=30, ha="right")
