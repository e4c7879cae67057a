"""The search: rewrites of a graph by proved rules, chosen by a cost model.

| module | job |
|---|---|
| :mod:`.core` | limits, the typed report, the rules a search admits (what every engine shares) |
| :mod:`.backtracking` | TASO's cost-based backtracking search (the default engine) |
| :mod:`.eqsat` | equality saturation over the same rules, with exact extraction (Tensat's) |
| :mod:`.rewrite` | matching a rule and planning its rewrite: the engine both engines rewrite with |
| :mod:`.groups` | group merges: k sites of one kind rewritten in one proved step |
| :mod:`.cleanup` | the free moves: simplifications that instantiate proved equalities |
| :mod:`.explain` | why a rule does or does not apply at each place its operators occur |

Engines are found by name in :data:`ENGINES` and import only :mod:`.core` and the shared modules, never each other.
"""

from __future__ import annotations

import gc
import importlib
import time
from collections.abc import Callable, Iterable

from ..cost import CostModel
from ..errors import TasoError
from ..ir import Graph
from ..rules import Rule
from .core import CLEAN_UP, EqsatStats, Expansion, LazyRules, RuleSlot, SearchConfig, SearchReport, Step, StopReason
from .rewrite import CompiledRule

__all__ = ["ENGINES", "CLEAN_UP", "SearchConfig", "SearchReport", "StopReason", "Step", "Expansion", "EqsatStats", "search", "RuleSlot",
           "LazyRules"]

# The engines by name (``--search``): the module and function of each, imported only when chosen.
ENGINES = {"backtracking": ("taso.search.backtracking", "backtracking_search"), "eqsat": ("taso.search.eqsat", "eqsat_search")}


def search(
    graph: Graph,
    rules: Iterable[Rule | CompiledRule],
    cost_model: CostModel,
    config: SearchConfig = SearchConfig(),
    progress: Callable[[int, float], None] | None = None,
) -> tuple[Graph, SearchReport]:
    """Finds a cheaper equivalent graph with the engine ``config.engine`` names.

    Args:
        graph: the starting graph.
        rules: proved rules (or rules already compiled for matching, or :class:`LazyRules`); each is
            compiled only once its source operators occur in a graph the search expands.
        cost_model: prices graphs.
        config: the engine, alpha, budget, time limit.
        progress: called after each expansion with (expanded, best cost) (the backtracking engine).

    Returns:
        The best graph found (never costlier than the input) and the search report.

    Raises:
        TasoError: an unknown engine, or one whose libraries are not installed.
    """
    if config.engine not in ENGINES:
        raise TasoError(f"unknown search engine {config.engine!r}; the engines are {', '.join(ENGINES)}")
    module_name, function = ENGINES[config.engine]
    try:
        engine = getattr(importlib.import_module(module_name), function)
    except ImportError as e:
        raise TasoError(f"the {config.engine} search needs egglog and highspy ({e}): pip install 'taso[eqsat]'") from None
    # NOTE: the queue holds millions of long-lived objects on a big model, and the cyclic GC's full
    # collections walked them all every few expansions (half of NASNet-A's search time). Automatic
    # collection is off during the search; each expansion collects the young generations, where
    # the cycles the search makes (matching closures) die.
    collecting = gc.isenabled()
    gc.disable()
    # Pricing counts against the time limit: past it, a measured cost model estimates the nodes it has not measured.
    cost_model.deadline = time.perf_counter() + config.time_limit
    try:
        return engine(graph, rules, cost_model, config, progress)
    finally:
        cost_model.deadline = float("inf")
        if config.engine == "eqsat":
            # The e-graph (0.3-0.5 GB of egglog's memory on BERT) is held by cycles among the extraction's objects: collected
            # now, its memory goes back to the system with the stage's heap trim, before the export builds the model on top.
            gc.collect()
        if collecting:
            gc.enable()
