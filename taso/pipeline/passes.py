"""The graph passes of ``taso optimize``: each takes a graph and returns ``(graph, changed)``, as onnxscript's rewriter
passes do, and keeps a report of what it did. :func:`run_passes` runs a list of them in order, each a stage of the
clock; adding a step to the pipeline is adding a pass to :func:`search_passes`, not threading a parameter through it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..cost import CostModel
from ..ir import Graph
from ..rules import Rule
from ..search import SearchConfig, SearchReport, search
from ..search.cleanup import CleanupReport, clean_up
from .stages import StageClock

__all__ = ["PassResult", "GraphPass", "CleanUpPass", "SearchPass", "run_passes", "search_passes"]


@dataclass(frozen=True)
class PassResult:
    """A pass's graph (the one it was given when nothing changed) and whether it changed it."""

    graph: Graph
    changed: bool


class GraphPass:
    """One step of the pipeline over a graph: ``name`` is its stage; ``only_after_change`` skips it when the pass before it
    changed nothing."""

    name = "pass"
    only_after_change = False

    def __call__(self, graph: Graph) -> PassResult:
        raise NotImplementedError


class CleanUpPass(GraphPass):
    """The free moves (:mod:`taso.search.cleanup`). Given the report of an earlier clean-up, it adds its steps to it: the
    result of a search is cleaned up (a projection both merged branches now share) and counted with the input's."""

    name = "clean-up"

    def __init__(self, report: CleanupReport | None = None, only_after_change: bool = False):
        self.report = report
        self.only_after_change = only_after_change

    def __call__(self, graph: Graph) -> PassResult:
        cleaned, report = clean_up(graph)
        if self.report is None:
            self.report = report
        else:
            self.report.steps.update(report.steps)
            self.report.nodes_after, self.report.weight_bytes_after = report.nodes_after, report.weight_bytes_after
        return PassResult(cleaned, cleaned is not graph)


class SearchPass(GraphPass):
    """The search (:func:`taso.search.search`) with the pipeline's rules, cost model and limits. Its report's prediction is
    against the input file, which costs ``input_overhead`` beyond its graph's price."""

    name = "search"

    def __init__(self, rules: Sequence[Rule], cost_model: CostModel, config: SearchConfig,
                 progress: Callable[[int, float], None] | None = None, input_overhead: float = 0.0):
        self.rules, self.cost_model, self.config, self.progress, self.input_overhead = rules, cost_model, config, progress, input_overhead
        self.report: SearchReport | None = None

    def __call__(self, graph: Graph) -> PassResult:
        best, self.report = search(graph, self.rules, self.cost_model, self.config, self.progress)
        self.report.input_overhead = self.input_overhead
        return PassResult(best, best is not graph)


def run_passes(graph: Graph, passes: Iterable[GraphPass], clock: StageClock | None = None) -> Graph:
    """The graph after each pass in turn (a pass that only follows a change is skipped after one that changed nothing)."""
    changed = True
    for graph_pass in passes:
        if graph_pass.only_after_change and not changed:
            continue
        with clock.stage(graph_pass.name) if clock is not None else contextlib.nullcontext():
            result = graph_pass(graph)
        graph, changed = result.graph, result.changed
    return graph


def search_passes(rules: Sequence[Rule], cost_model: CostModel, config: SearchConfig, cleanup: CleanupReport,
                  progress: Callable[[int, float], None] | None = None, input_overhead: float = 0.0) -> tuple[SearchPass, CleanUpPass]:
    """The passes after the input's clean-up: the search, then a clean-up of what it changed (counted in ``cleanup``)."""
    return SearchPass(rules, cost_model, config, progress, input_overhead), CleanUpPass(cleanup, only_after_change=True)
