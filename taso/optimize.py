"""The optimizer's Python API: load the proved rules, search, return the best graph."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from .cost import CostModel, make_cost_model
from .errors import TasoError
from .ir import Graph
from .rules import Library, Rule
from .search import SearchConfig, SearchReport, search

__all__ = ["DEFAULT_LIBRARY", "load_rules", "optimize", "optimize_with_report"]

DEFAULT_LIBRARY = os.path.join(os.path.dirname(__file__), "data", "library.json")


def load_rules(path: str | None = None) -> list[Rule]:
    """The proved rules of a library file (default: the library shipped with taso).

    Only rules whose status is "proved" are returned: soundness is the product, and an
    unproved candidate never rewrites a model.

    Raises:
        TasoError: a missing or malformed file, or one with no proved rule.
    """
    path = path or DEFAULT_LIBRARY
    if path == DEFAULT_LIBRARY and not os.path.exists(path):
        raise TasoError(f"the shipped rule library is missing ({path}); build it with: python -m taso.verifier.build_library")
    library = Library.load(path)
    proved = [r for r in library.rules if r.status == "proved"]
    if not proved:
        raise TasoError(f"{path}: holds no proved rule ({len(library.rules)} rules, none proved); run `taso verify` on it first")
    return both_directions(proved)


def both_directions(rules: Sequence[Rule]) -> list[Rule]:
    """Each rule and its reverse (a proof of source = target proves target = source).

    The reverse is kept only when its new source reads every input (otherwise matching
    could not bind them); duplicates by content are dropped.
    """
    seen: set[str] = set()
    out: list[Rule] = []
    for rule in rules:
        for candidate in (rule, rule.reversed()):
            variables = {i.name for i in candidate.inputs}
            read = {v for n in candidate.source for v in n.inputs}
            key = candidate.canonical()
            if variables <= read and key not in seen:
                seen.add(key)
                out.append(candidate)
    return out


def optimize_with_report(
    graph: Graph,
    alpha: float = 1.05,
    budget: int = SearchConfig.budget,
    time_limit: float = SearchConfig.time_limit,
    cost: str | CostModel = "ort-cpu",
    rules: Sequence[Rule] | None = None,
    threads: int = 1,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[Graph, SearchReport]:
    """Like :func:`optimize`, and also returns the search report."""
    model = make_cost_model(cost, threads=threads) if isinstance(cost, str) else cost
    try:
        best, report = search(graph, load_rules() if rules is None else rules, model, SearchConfig(alpha, budget, time_limit), progress)
    finally:
        model.close()
    if model.name == "ort-cpu":
        best, _ = confirm_end_to_end(graph, best, threads)
    return best, report


def optimize(graph: Graph, alpha: float = 1.05, budget: int = SearchConfig.budget, time_limit: float = SearchConfig.time_limit,
             cost: str | CostModel = "ort-cpu", rules: Sequence[Rule] | None = None, threads: int = 1) -> Graph:
    """Returns an equivalent graph that the cost model prices lower (or the input itself).

    Args:
        graph: the graph to optimize.
        alpha: TASO's relaxation: graphs up to alpha x the best cost stay in the search.
        budget: the most graphs expanded.
        time_limit: wall-clock seconds for the search.
        cost: 'ort-cpu' (measured, default), 'analytic', 'cupy', or a CostModel.
        rules: the rules to apply (default: the shipped verified library).
        threads: intra-op threads the model will run with (for measured costs).
    """
    return optimize_with_report(graph, alpha, budget, time_limit, cost, rules, threads)[0]


def end_to_end_speedup(original: Graph, optimized: Graph, threads: int = 1, rounds: int = 7) -> float:
    """Measured speedup of ``optimized`` over ``original`` on ONNX Runtime (ENABLE_ALL), runs interleaved.

    The per-node cost model adds node costs; ONNX Runtime fuses across nodes. This is the
    check that the sum did not lie: the search's result is kept only when the whole model
    is measurably faster.
    """
    import statistics
    import time

    import onnxruntime as ort

    from .cost_ort import session_options
    from .onnx import export_onnx
    from .validate import random_inputs

    feeds = random_inputs(original.inputs)
    sessions = [ort.InferenceSession(export_onnx(g, check=False).SerializeToString(), session_options(threads), providers=["CPUExecutionProvider"])
                for g in (original, optimized)]
    for session in sessions:
        for _ in range(2):
            session.run(None, feeds)
    samples: list[list[float]] = [[], []]
    for _ in range(rounds):
        for session, sink in zip(sessions, samples):
            start = time.perf_counter()
            session.run(None, feeds)
            sink.append(time.perf_counter() - start)
    return statistics.median(samples[0]) / statistics.median(samples[1])


# The optimized model must beat the original by this factor end to end to be kept.
MIN_CONFIRMED_SPEEDUP = 1.02


def confirm_end_to_end(original: Graph, optimized: Graph, threads: int = 1) -> tuple[Graph, float | None]:
    """``optimized`` if ONNX Runtime runs it at least MIN_CONFIRMED_SPEEDUP faster than ``original``, else ``original``.

    Also returns the measured speedup (None when the search changed nothing). The per-node
    costs cannot see ONNX Runtime's cross-node fusions: this is where a promised gain the
    whole model does not show is refused.
    """
    if optimized is original:
        return original, None
    speedup = end_to_end_speedup(original, optimized, threads)
    return (optimized if speedup >= MIN_CONFIRMED_SPEEDUP else original), speedup
