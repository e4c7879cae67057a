"""The end-to-end guard at every size of a model's range: each candidate timed against the input at each size, one file
kept that is slower at none, and where the best graph differs between sizes, one file that chooses by size.

The single-size guard (:mod:`taso.pipeline.guard`) times one set of feeds. A file with a symbolic batch ships for
every batch, and a merge that pays at batch 1 can lose at 128 (a GRUCell loop: 2.54x at 1, 0.91x at 128). Here a
candidate is kept only when it is not slower than the input at any size of the range and beats the input by the
margin at one; among those, the fastest by the geometric mean of
its speedups, each the median of three series in fresh pairs of sessions. Where each size has another winner (the batch-1 search's graph at 1, the input at 128), the winners
become one file that picks by the symbol's value at run time (:func:`taso.onnx.dispatch.size_dispatch`): checked
at every size of the range like any candidate, timed at each, and kept when it beats the best single file.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from ..errors import TasoError
from ..onnx.files import SPILL_BYTES, SpilledModel, embedded_weight_bytes
from .checks import Checks, OutputMismatchError, check_into
from .guard import MIN_CONFIRMED_SPEEDUP, _time_beside_input
from .outcome import Outcome
from .sizes import SizeRange, label
from .source import CandidateModel, ModelSource, runnable
from .stages import StageClock

__all__ = ["NEVER_SLOWER", "SINGLE_NEVER_SLOWER", "keep_fastest_at_sizes", "choose_single", "size_winners", "dispatch_beats", "Dispatch"]

# A single file is kept only where it measured at least the input's speed at every size. A size-choosing file runs, at
# each size, a graph measured MIN_CONFIRMED_SPEEDUP faster there or the input's own graph, so it is held to the
# noise of timing a model against itself: NEVER_SLOWER (0.98x).
SINGLE_NEVER_SLOWER = 1.0
NEVER_SLOWER = 1 / MIN_CONFIRMED_SPEEDUP
INPUT = "input"


@dataclass(frozen=True)
class Dispatch:
    """A size-choosing file's plan: ``branches[k]`` runs up to ``thresholds[k]`` of ``symbol`` (the last one above)."""

    branches: tuple[str, ...]
    thresholds: tuple[int, ...]

    def branch_at(self, size: int) -> str:
        """The branch the file runs at ``size``."""
        return next((name for name, t in zip(self.branches, self.thresholds) if size <= t), self.branches[-1])

    def describe(self, symbol: str) -> str:
        parts = [f"{symbol}<={t}: {name}" for name, t in zip(self.branches, self.thresholds)]
        return "; ".join([*parts, f"above: {self.branches[-1]}"])


def keep_fastest_at_sizes(outcome: Outcome, source: ModelSource, candidates: dict, checks: Checks, threads: int,
                          clock: StageClock) -> None:
    """Times every candidate at every size of ``source.sizes`` the input runs at, keeps the best that is slower at none,
    or a size-choosing file of each size's winner when that is faster (see the module docstring)."""
    sizes = _timed_sizes(source.sizes, checks)
    labels = [label(valuation, source.sizes) for _, valuation, _ in sizes]
    with clock.stage("timing"):
        for name, (_, model) in candidates.items():
            checks.sessions.pop(name, None)
            outcome.size_speedups[name] = dict(zip(labels, (_speedup_at(outcome, source, name, model, feeds, checks, threads)
                                                            for _, _, feeds in sizes)))
    best = choose_single({name: list(row.values()) for name, row in outcome.size_speedups.items()})
    ranged = source.sizes.ranged
    if len(ranged) == 1:
        winners = size_winners({name: list(row.values()) for name, row in outcome.size_speedups.items()})
        if len(set(winners)) > 1:
            symbol = ranged[0]
            plan = _plan(outcome, source, candidates, checks, threads, clock, winners, [v[symbol.symbol] for _, v, _ in sizes])
            if plan is not None and _dispatch_kept(outcome, source, candidates, checks, threads, clock, plan, sizes, labels, best):
                return
    if best is not None:
        outcome.graph, outcome.model, outcome.kept = *candidates[best], best
    for name, row in outcome.size_speedups.items():
        outcome.speedups[name] = min(row.values())


def choose_single(rows: Mapping[str, Sequence[float]]) -> str | None:
    """The candidate to keep as one file: not slower than the input at any size and faster by the margin at one, the
    fastest of those by the geometric mean of its speedups; None when no candidate is."""
    kept = [name for name, row in rows.items() if min(row) >= SINGLE_NEVER_SLOWER and max(row) >= MIN_CONFIRMED_SPEEDUP]
    return max(kept, key=lambda name: _geomean(rows[name]), default=None)


def size_winners(rows: Mapping[str, Sequence[float]]) -> list[str]:
    """Each size's fastest candidate, or the input where none beats it by the margin."""
    count = len(next(iter(rows.values()))) if rows else 0
    winners = []
    for k in range(count):
        name = max(rows, key=lambda n: rows[n][k])
        winners.append(name if rows[name][k] >= MIN_CONFIRMED_SPEEDUP else INPUT)
    return winners


def dispatch_beats(dispatch: Sequence[float], single: Sequence[float], shared: Sequence[bool] | None = None) -> bool:
    """Whether the size-choosing file's speedups at each size beat the best single file's: slower than the input at no
    size, faster by the margin at one, and at least as fast by the geometric mean of the confirmed gains at the sizes
    where the two run different graphs (``shared[k]``: at size k the dispatch runs the single file's own graph, and
    choosing costs microseconds; there the two readings differ only by the timer's noise, 2% at batch 1).

    A gain within the margin is read as none, on both sides: there the dispatch runs the input's own graph and the
    single file a graph no faster within the timer's noise (an LSTM loop's fused file measured 1.01x at batch 128 in
    the guard, 0.94x by the benchmark's timer, and was kept over the dispatch by a geometric mean 0.001 higher).
    """
    def credited(row: Sequence[float]) -> list[float]:
        return [1.0 if NEVER_SLOWER <= s < MIN_CONFIRMED_SPEEDUP else s for s in row]

    apart = [k for k in range(len(dispatch)) if not (shared and shared[k])]
    if min(dispatch) < NEVER_SLOWER or max(dispatch) < MIN_CONFIRMED_SPEEDUP:
        return False
    return not apart or _geomean(credited([dispatch[k] for k in apart])) >= _geomean(credited([single[k] for k in apart]))


def _in_memory(branch: CandidateModel) -> onnx.ModelProto:
    """A branch with its weights in the proto: one ``If`` holds every branch, and ONNX Runtime reads a file's external
    data only beside that file (a dynamo export keeps its weights in a ``.data`` file; the spilled candidates in a
    scratch directory of their own). A size-choosing file that large is spilled again as a whole."""
    if isinstance(branch, SpilledModel):
        return branch.loaded()
    return branch


def _geomean(row: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(max(s, 1e-9)) for s in row))


def _timed_sizes(range_: SizeRange, checks: Checks) -> list[tuple[int, dict[str, int], dict]]:
    """(position, valuation, feeds) of each size of the range the input runs at: the measurement sizes' timing feeds
    first, then the check's set at each further valuation."""
    valuations = range_.valuations()
    out = [(0, valuations[0], checks.timing_feeds)]
    out += [(k + 1, valuations[k + 1], feeds) for k, feeds in sorted(checks.sized_feeds.items())]
    return out


SERIES = 3  # fresh pairs of sessions per candidate and size: the median decides


def _speedup_at(outcome: Outcome, source: ModelSource, name: str, model, feeds: dict, checks: Checks, threads: int,
                series: int = SERIES) -> float:
    """The candidate's speedup over the input on ``feeds``: the median of ``series`` series, each in a fresh pair of
    sessions (a pair can run a model 10-40% apart from the next pair for as long as both live: docs/measured.md)."""
    scratch = Outcome(source.graph, None, INPUT, outcome.report)
    speedups = []
    for _ in range(series):
        timer = _time_beside_input(scratch, source, None, name, runnable(model), feeds, threads)
        if timer is None:
            return 0.0
        speedups.append(scratch.speedups[name])
        timer.close(0)
        timer.close(1)
    outcome.notes.extend(note for note in scratch.notes if note not in outcome.notes)
    return statistics.median(speedups)


THRESHOLD_STEPS = 3  # halvings of the gap between two sizes' winners (in log scale): 1..128 to within 1.8x


def _plan(outcome: Outcome, source: ModelSource, candidates: dict, checks: Checks, threads: int, clock: StageClock,
          winners: list[str], sizes: list[int]) -> Dispatch | None:
    """Consecutive sizes with one winner share a branch; between two branches the threshold is found by bisecting their
    sizes in log scale, ``THRESHOLD_STEPS`` timed sizes at most: up to the last size where the smaller size's winner
    was timed at least as fast as the larger's. (One timed middle put the fused LSTM loop's threshold at batch 11, and
    batch 32, where the fused loop runs 1.12x, ran the input.)"""
    branches, thresholds = [winners[0]], []
    for k in range(1, len(winners)):
        if winners[k] == branches[-1]:
            continue
        low, high = sizes[k - 1], sizes[k]
        for _ in range(THRESHOLD_STEPS):
            middle = round(math.sqrt(low * high))
            if not low < middle < high:
                break
            small, large = (_speedup_between(outcome, source, candidates, checks, threads, clock, name, middle)
                            for name in (branches[-1], winners[k]))
            low, high = (middle, high) if small >= large else (low, middle)
        thresholds.append(low)
        branches.append(winners[k])
    return Dispatch(tuple(branches), tuple(thresholds))


def _speedup_between(outcome: Outcome, source: ModelSource, candidates: dict, checks: Checks, threads: int, clock: StageClock,
                     name: str, size: int) -> float:
    """A candidate's speedup over the input with the ranged symbol at ``size`` (the input's own: 1)."""
    if name == INPUT:
        return 1.0
    from ..measure.inputs import InputDrawer

    valuation = {**source.sizes.valuations()[0], source.sizes.ranged[0].symbol: size}
    feeds = InputDrawer(source.graph, source.model).draw(0, valuation)
    with clock.stage("timing"):
        return _speedup_at(outcome, source, name, candidates[name][1], feeds, checks, threads)


def _dispatch_kept(outcome: Outcome, source: ModelSource, candidates: dict, checks: Checks, threads: int, clock: StageClock,
                   plan: Dispatch, sizes, labels: list[str], best: str | None) -> bool:
    """Builds, checks and times the size-choosing file; keeps it where :func:`dispatch_beats` the best single file."""
    from ..onnx.dispatch import size_dispatch

    symbol = source.sizes.ranged[0]
    try:
        with clock.stage("export"):
            branches = [_in_memory(source.spilled or source.model if name == INPUT else candidates[name][1]) for name in plan.branches]
            model = size_dispatch(branches, symbol.input, symbol.axis, plan.thresholds)
            del branches  # (their weights are the dispatch's now: not held twice while it spills)
            if embedded_weight_bytes(model) >= SPILL_BYTES:
                model = source.scratch().spill(model, "dispatch")
    except (TasoError, TypeError) as e:
        outcome.notes.append(f"no size-choosing file ({plan.describe(symbol.symbol)}): {e}")
        return False
    try:
        with clock.stage("check"):
            check_into(outcome, model, checks, threads, "dispatch")
    except OutputMismatchError as e:
        outcome.notes.append(f"the size-choosing file was not kept: {e}")
        return False
    with clock.stage("timing"):
        checks.sessions.pop("dispatch", None)
        row = [_speedup_at(outcome, source, "dispatch", model, feeds, checks, threads) for _, _, feeds in sizes]
        # Where the file runs the input's own graph, its speedup is 1 less what choosing costs (a Shape, a Gather, a
        # Less and an If: microseconds); a median below the bar there is more often the pairs' noise (an LSTM loop's
        # file measured 0.95x at batch 128, run through the input's graph, and 1.02x in the next taso run), so twice
        # the series decide it afresh.
        for k, (_, valuation, feeds) in enumerate(sizes):
            if row[k] < NEVER_SLOWER and plan.branch_at(valuation[symbol.symbol]) == INPUT:
                row[k] = _speedup_at(outcome, source, "dispatch", model, feeds, checks, threads, series=2 * SERIES)
    outcome.size_speedups["dispatch"] = dict(zip(labels, row))
    outcome.dispatch = plan.describe(symbol.symbol)
    best_row = list(outcome.size_speedups[best].values()) if best is not None else [1.0] * len(row)
    kept = dispatch_beats(row, best_row, [plan.branch_at(valuation[symbol.symbol]) == best for _, valuation, _ in sizes])
    for name, speedups in outcome.size_speedups.items():
        outcome.speedups[name] = min(speedups.values())
    if kept:
        first = plan.branches[0]
        outcome.graph = source.graph if first == INPUT else candidates[first][0]
        outcome.model, outcome.kept = model, "dispatch"
    elif best is not None:
        outcome.graph, outcome.model, outcome.kept = *candidates[best], best
    return True
