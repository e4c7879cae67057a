"""The Python API: :func:`optimize` a graph, :func:`save_onnx` it after checking it against the graph it came from."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..cost import CostModel
from ..errors import TasoError
from ..ir import Graph
from ..rules import Rule
from ..search import ENGINES, SearchConfig, SearchReport
from .checks import require_match
from .run import optimize_model, validate_search_settings
from .source import ModelSource, export_onnx, model_bytes, write_model

__all__ = ["optimize_with_report", "optimize", "save_onnx"]


@dataclass
class _Provenance:
    """What an optimized graph remembers: its original, and the exact model that passed the output check."""

    original: Graph
    checked: bytes | None


_PROVENANCE: weakref.WeakKeyDictionary[Graph, _Provenance] = weakref.WeakKeyDictionary()


def optimize_with_report(
    graph: Graph,
    alpha: float = 1.05,
    budget: int = SearchConfig.budget,
    time_limit: float = SearchConfig.time_limit,
    cost: str | CostModel = "ort-cpu",
    rules: Sequence[Rule] | None = None,
    threads: int = 1,
    progress: Callable[[int, float], None] | None = None,
    check: bool = True,
    confirm: bool | None = None,
    search: str = SearchConfig.engine,
) -> tuple[Graph, SearchReport]:
    """Like :func:`optimize`, and also returns the search report."""
    validate_search_settings(alpha, budget, time_limit, threads)
    if search not in ENGINES:
        raise TasoError(f"search must be one of {', '.join(ENGINES)}, got {search!r}")
    outcome = optimize_model(ModelSource.from_graph(graph), rules, cost, SearchConfig(alpha, budget, time_limit, engine=search), threads, confirm,
                             check, progress=progress)
    if outcome.graph is not graph:
        _PROVENANCE[outcome.graph] = _Provenance(graph, model_bytes(outcome.model) if check and outcome.model is not None else None)
    return outcome.graph, outcome.report


def optimize(graph: Graph, alpha: float = 1.05, budget: int = SearchConfig.budget, time_limit: float = SearchConfig.time_limit,
             cost: str | CostModel = "ort-cpu", rules: Sequence[Rule] | None = None, threads: int = 1, check: bool = True,
             confirm: bool | None = None, search: str = SearchConfig.engine) -> Graph:
    """Returns an equivalent graph that runs faster (or the input graph itself when nothing pays).

    The result went through the same checks as ``taso optimize``: its outputs match the
    input's on ONNX Runtime (``check``), and with measured costs it was timed against the
    input end to end (``confirm``). It remembers its original, so :func:`save_onnx` can check
    it again before writing.

    Args:
        graph: the graph to optimize.
        alpha: TASO's relaxation: graphs up to alpha x the best cost stay in the search.
        budget: the most graphs expanded.
        time_limit: wall-clock seconds for the search.
        cost: 'ort-cpu' (measured, default), 'analytic', 'cupy', or a CostModel.
        rules: the rules to apply (default: the shipped verified library).
        threads: intra-op threads the model will run with (for measured costs).
        check: compare the result with the input on ONNX Runtime.
        confirm: time the result against the input end to end (default: with 'ort-cpu' costs).
        search: 'backtracking' (TASO's search, default) or 'eqsat' (equality saturation, :mod:`taso.search.eqsat`).

    Raises:
        OutputMismatchError: the optimized graph disagrees with the input on ONNX Runtime.
    """
    return optimize_with_report(graph, alpha, budget, time_limit, cost, rules, threads, check=check, confirm=confirm, search=search)[0]


def save_onnx(graph: Graph, path: str | os.PathLike, opset: int | None = None, check: bool = True) -> None:
    """Writes a graph as ONNX, atomically; a graph returned by :func:`optimize` is first checked against its original.

    Raises:
        OutputMismatchError: the graph's outputs differ from its original's on ONNX Runtime
            (nothing is written); ``check=False`` skips the comparison.
        TasoError: the model cannot be exported or the path cannot be written.
    """
    model = export_onnx(graph, opset)
    provenance = _PROVENANCE.get(graph)
    if check and provenance is not None and provenance.checked != model.SerializeToString():
        from ..measure.inputs import random_input_sets
        from ..measure.outputs import run_reference

        original = ModelSource.from_graph(provenance.original)
        require_match(model, run_reference(original.timing_source(), random_input_sets(original.graph, model=original.model)), threads=1)
    write_model(model, os.fspath(path))
