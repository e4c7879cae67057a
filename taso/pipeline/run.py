"""The optimizer: load the proved rules, search, check on ONNX Runtime, confirm end to end.

One pipeline (:func:`optimize_model`) serves ``taso optimize``, ``taso bench`` and the Python
API (:func:`optimize`, :func:`save_onnx`), so none of them can skip the output check or the
end-to-end guard:

1. search the rewrites the cost model prices lower;
2. compare the optimized model with the original on ONNX Runtime (a mismatch raises
   :class:`OutputMismatchError`, exit 3: nothing is written);
3. with measured costs, time the candidates against the input *as given* (the user's file,
   same session options, interleaved: :mod:`taso.measure.timing`): the optimized model, and taso's plain re-export of
   the unchanged graph (its cleaning steps: IR/opset bump, Dropout removal). A candidate is
   kept only when it is at least MIN_CONFIRMED_SPEEDUP faster than the input; otherwise the
   output is the input's bytes, unchanged. With GPU costs (``torch``, ``cupy``) the deployment is that runtime:
   the optimized graph is timed beside the input there instead (the cost model's ``end_to_end_timer``).
"""


from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx

from ..cost import CostModel, make_cost_model
from ..errors import TasoError
from ..ir import Graph
from ..rules import Rule
from ..search import SearchConfig, SearchReport
from ..search.cleanup import CleanupReport
from .checks import Checks, OutputMismatchError, check_candidate, check_into
from .guard import Verdicts, keep_fastest, keep_if_faster_on_device, reexport_matches
from .library import for_target, load_rules
from .outcome import Outcome
from .passes import CleanUpPass, run_passes, search_passes
from .size_guard import keep_fastest_at_sizes
from .sizes import label
from .source import CandidateModel, ModelSource, add_candidate
from .stages import StageClock

__all__ = ["optimize_model", "validate_search_settings"]


def validate_search_settings(alpha: float, budget: int, time_limit: float, threads: int = 1) -> None:
    """Rejects settings the search cannot honour (NaN compares false to everything, so it must be named).

    Raises:
        TasoError: alpha not a finite number >= 1, budget or threads < 1, time limit not > 0.
    """
    if not (np.isfinite(alpha) and alpha >= 1.0):
        raise TasoError(f"--alpha must be a finite number >= 1, got {alpha}")
    if not (time_limit > 0):  # inf is allowed (no limit), nan is not
        raise TasoError(f"--time-limit must be a positive number of seconds, got {time_limit}")
    if budget < 1 or threads < 1:
        raise TasoError(f"--budget and --threads must be at least 1, got {budget} and {threads}")


def optimize_model(
    source: ModelSource,
    rules: Sequence[Rule] | None = None,
    cost: str | CostModel = "ort-cpu",
    config: SearchConfig | None = None,
    threads: int = 1,
    confirm: bool | None = None,
    check: bool = True,
    extra_inputs: Mapping[str, np.ndarray] | None = None,
    progress: Callable[[int, float], None] | None = None,
    clock: StageClock | None = None,
    remember: bool = True,
    retime: bool = False,
) -> Outcome:
    """Searches, checks the result on ONNX Runtime and keeps it only when it beats the input as given.

    Args:
        confirm: time candidates against the input end to end (default: when the cost model
            is measured: ort-cpu or ort-cpu-region time on ONNX Runtime on this CPU, torch on the torch
            runtime (device time on a GPU), cupy on the GPU with the CuPy executor).
        check: compare outputs on ONNX Runtime (two seeded random input sets, plus
            ``extra_inputs``) before anything is kept.
        clock: where to record each stage's seconds and peak memory (clean-up, search, export,
            check, timing).
        remember: on ONNX Runtime's CPU, reuse the end-to-end verdict an earlier run on this machine gave the
            same input and candidate, and record each new one (:mod:`taso.pipeline.verdicts`).
        retime: time every candidate even when a verdict is remembered (the new verdict replaces it).

    Raises:
        OutputMismatchError: the optimized model disagrees with the input, or ONNX Runtime cannot run it.
        TasoError: ONNX Runtime cannot run the input model.
    """
    clock = clock if clock is not None else StageClock()
    model = make_cost_model(cost, threads=threads) if isinstance(cost, str) else cost
    confirm = (model.name.startswith("ort-cpu") or model.deployed_elsewhere) if confirm is None else confirm
    # Several sizes are searched and timed where the guard times on ONNX Runtime and the outputs are checked.
    sized = source.sizes.valuations()[1:] if confirm and check and not model.deployed_elsewhere else []
    with clock.stage("check"):
        checks = Checks.prepare(source, extra_inputs, threads, check, sized)
    config = config or SearchConfig()
    rules = for_target(load_rules(), "onnx") if rules is None else rules
    input_clean_up = CleanUpPass()
    start = run_passes(source.graph, [input_clean_up], clock)
    cleanup = input_clean_up.report
    try:
        searcher = ConfiguredSearch(rules, model, config, progress, model.input_overhead(source.model))
        best, report = searcher.run(start, cleanup, clock)
        outcome = Outcome(source.graph, None, "input", report, checked_sizes=checks.valuations, cleanup=cleanup, clock=clock)
        if model.estimated:
            outcome.notes.append(f"the search's time limit passed while nodes were still being measured: {model.estimated} node "
                                 "costs were estimated from the nodes measured (a longer --time-limit measures them, and the cost "
                                 "cache keeps them for the next run)")
        candidates: dict[str, tuple[Graph, CandidateModel]] = {}
        if best is not source.graph:
            with clock.stage("export"):
                add_candidate(outcome, source, candidates, "optimized", best)
            if check and candidates:
                with clock.stage("check"):
                    best = _checked_or_searched_again(outcome, source, start, candidates, searcher, checks, threads)
        if checks.sized_feeds:
            _search_other_sizes(outcome, source, candidates, searcher, checks, threads, clock)
    finally:
        model.close()
    if not confirm:
        if candidates:
            outcome.graph, outcome.model, outcome.kept = best, candidates["optimized"][1], "optimized"
        return outcome
    if model.deployed_elsewhere:  # a GPU runtime: the guard times there
        keep_if_faster_on_device(outcome, source, candidates, clock, model.end_to_end_timer)
        return outcome
    # The re-export is only a fallback: exported when the optimized model did not pay (else "optimized" is the cleaned-up graph).
    fallback = start if source.path is not None and (best is not start or start is source.graph) else None
    if checks.sized_feeds:
        if not candidates and fallback is not None and start is not source.graph:
            add_candidate(outcome, source, candidates, "re-export", start)
            if "re-export" in candidates and not reexport_matches(outcome, candidates["re-export"][1], checks, threads):
                del candidates["re-export"]
        keep_fastest_at_sizes(outcome, source, candidates, checks, threads, clock)
        return outcome
    verdicts = Verdicts.of(source, checks, threads, retime) if remember else None
    keep_fastest(outcome, source, candidates, fallback, checks, threads, clock, verdicts)
    return outcome


def _search_other_sizes(outcome: Outcome, source: ModelSource, candidates: dict, searcher: ConfiguredSearch, checks: Checks,
                        threads: int, clock: StageClock) -> None:
    """Searches the model measured at each further size of its range (:mod:`taso.pipeline.sizes`); each result that
    differs from the candidates already made is one more, ``optimized@batch=128``, checked like the first."""
    from .verdicts import layout_digest

    valuations = source.sizes.valuations()
    made = {layout_digest(model) for _, model in candidates.values() if isinstance(model, onnx.ModelProto)}
    for position in sorted(checks.sized_feeds):
        valuation = valuations[position + 1]
        with clock.stage("load"):
            graph = source.at_sizes(valuation)
        clean_up = CleanUpPass()
        start = run_passes(graph, [clean_up], clock)
        best, _ = searcher.run(start, clean_up.report, clock)
        if best is start:  # no rewrite paid at this size
            continue
        name = f"optimized@{label(valuation, source.sizes)}"
        with clock.stage("export"):
            add_candidate(outcome, source, candidates, name, best)
        model = candidates.get(name, (None, None))[1]
        if isinstance(model, onnx.ModelProto) and layout_digest(model) in made:
            del candidates[name]
            continue
        if name in candidates:
            made.add(layout_digest(model) if isinstance(model, onnx.ModelProto) else name)
            with clock.stage("check"):
                check_into(outcome, model, checks, threads, name)
    outcome.checked_sizes += [valuations[position + 1] for position in sorted(checks.sized_feeds)]
    for valuation, reason in checks.dropped:
        outcome.notes.append(f"not timed at {label(valuation, source.sizes)}: the input model does not run there ({reason})")


@dataclass(frozen=True)
class ConfiguredSearch:
    """The search as one run configures it: the rules, the cost model, the settings, the progress callback and what
    the input costs to start; run from a cleaned-up graph, it gives the search passes' best graph and its report."""

    rules: Sequence[Rule]
    model: CostModel
    config: SearchConfig
    progress: Callable[[int, float], None] | None
    input_overhead: float

    def run(self, start: Graph, cleanup: CleanupReport, clock: StageClock | None = None,
            excluded: frozenset[str] = frozenset()) -> tuple[Graph, SearchReport]:
        """The passes (:func:`taso.pipeline.passes.search_passes`) from ``start``, without the rules in ``excluded``."""
        config = replace(self.config, excluded=self.config.excluded | excluded) if excluded else self.config
        passes = search_passes(self.rules, self.model, config, cleanup, self.progress, self.input_overhead)
        best = run_passes(start, passes, clock)
        return best, passes[0].report


def _checked_or_searched_again(outcome: Outcome, source: ModelSource, start: Graph, candidates: dict, searcher: ConfiguredSearch,
                               checks: Checks, threads: int) -> Graph:
    """The optimized graph once its output check passes.

    A mismatch at the measurement sizes raises, as always (a wrong rule: nothing is written). One
    only at other sizes of the symbolic dims means a rewrite held at the measurement sizes alone
    (a taso bug: rules fire only when their constraints hold at every size): the rules the
    search applied are rejected, it runs again without them, and the report says so.

    Raises:
        OutputMismatchError: a mismatch at the measurement sizes, or again after the second search.
    """
    graph, candidate = candidates["optimized"]
    try:
        check_into(outcome, candidate, checks, threads, "optimized")
        return graph
    except OutputMismatchError:
        applied = frozenset(outcome.report.applied)
        if not applied or not checks.other_sizes or not check_candidate(candidate, checks.at_measurement_sizes(), threads).ok:
            raise
        from ..measure.inputs import describe_sizes

        elsewhere = check_candidate(candidate, checks.at_other_sizes(), threads)
        best, report = searcher.run(start, outcome.cleanup, excluded=applied)
        checked = [dict(source.graph.meta.sizes), *outcome.checked_sizes]
        outcome.notes.append(f"the optimized model matched at the measurement sizes but not at {describe_sizes(checked)} "
                             f"({elsewhere.describe()}); the search ran again without the rules it applied ({', '.join(sorted(applied))})")
        outcome.report = report
        del candidates["optimized"]
        if best is source.graph:
            return best
        add_candidate(outcome, source, candidates, "optimized", best)
        if "optimized" in candidates:
            check_into(outcome, candidates["optimized"][1], checks, threads, "optimized")
        return best

