"""What the pipeline decided about one model: the graph and file kept, the report, what was measured and why."""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from ..ir import Graph
from ..search import SearchReport
from ..search.cleanup import CleanupReport
from .stages import StageClock

__all__ = ["Outcome"]


@dataclass
class Outcome:
    """What the pipeline decided.

    Attributes:
        graph: the graph the output holds (the source graph itself when nothing was kept).
        model: the model to write, or None: write the input unchanged.
        kept: "optimized", "re-export" (the cleaned-up graph without rewrites, measured faster) or "input".
        report: the search's report.
        cleanup: what clean-up did before the search and to its result (:mod:`taso.search.cleanup`).
        clock: each stage's seconds and peak memory (:mod:`taso.pipeline.stages`).
        comparison: the output check of the kept model (None when the input is kept unchanged
            and no candidate was checked).
        speedups: measured end-to-end speedup of each timed candidate over the input.
        input_seconds: the input's seconds per run in the last timed series (0 when none was timed).
        remembered: the candidates whose speedup and verdict an earlier run on this machine measured
            (:mod:`taso.pipeline.verdicts`), not timed again.
        check_seconds: time spent in the output check.
        notes: what the user should know (a candidate dropped and why).
        checked_sizes: the valuations of the size symbols the output check ran at besides the
            measurement sizes (empty for a static model).
        size_speedups: with a size range (:mod:`taso.pipeline.size_guard`), each candidate's speedup at each size,
            by the size's label (``batch=128``); ``speedups`` then holds each candidate's slowest.
        dispatch: the plan of the size-choosing file, when one was built ("batch<=11: optimized; above: input").
    """

    graph: Graph
    model: onnx.ModelProto | None
    kept: str
    report: SearchReport
    comparison: object | None = None
    speedups: dict[str, float] = field(default_factory=dict)
    remembered: set[str] = field(default_factory=set)
    input_seconds: float = 0.0
    check_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    checked_sizes: list[dict[str, int]] = field(default_factory=list)
    size_speedups: dict[str, dict[str, float]] = field(default_factory=dict)
    dispatch: str | None = None
    cleanup: CleanupReport | None = None
    clock: StageClock = field(default_factory=StageClock)


