"""What every `taso bench` runtime shares: a row of results, the models it reads, taso optimize's own pipeline run on
each, and how a chart ends."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import onnx

from ..errors import TasoError

__all__ = ["VARIANTS", "BenchRow", "load_model", "optimize_for_bench", "finish_chart"]

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
    timing: str = ""  # how the device runtime timed this row ("cuda-graphs", "wall-clock"; empty on ONNX Runtime)
    series: tuple = ()  # the speedups of this model's series in fresh processes (a device run's report)
    peers: dict = field(default_factory=dict)  # peer -> its model's speedup over the input, both with ENABLE_ALL (--peers)
    peer_notes: dict = field(default_factory=dict)  # peer -> why it was not timed (not installed, failed, differs)


def load_model(name: str, batch: int) -> tuple[str, onnx.ModelProto, str | None]:
    """The label, the model and its file (None for a zoo model built in memory)."""
    if os.path.exists(name) or name.endswith(".onnx"):
        from ..onnx import read_model

        return os.path.basename(name), read_model(name), name
    from .. import models

    if name not in models.names():
        raise TasoError(f"{name!r} is neither an .onnx file nor a zoo model ({', '.join(models.names())})")
    return name, models.build(name, batch=batch), None


def optimize_for_bench(model: onnx.ModelProto, path: str | None, cost: str, threads: int, args):
    """The model through taso optimize's own pipeline (search, output check, end-to-end guard with measured CPU costs)."""
    from ..onnx import load_onnx
    from ..pipeline.library import for_target, load_rules
    from ..pipeline.run import optimize_model
    from ..pipeline.source import ModelSource
    from ..search import SearchConfig

    target = getattr(args, "target", "onnx")
    source = ModelSource(load_onnx(model), model, path).for_target(target)
    return source, optimize_model(source, for_target(load_rules(args.library), target), cost, SearchConfig(args.alpha, args.budget, args.time_limit), threads)


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
