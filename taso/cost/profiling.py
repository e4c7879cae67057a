"""Timing one node on ONNX Runtime: its kernels profiled beside a reference kernel and a floor (each run rescaled to the
reference's speed, the floor's overhead subtracted), or, for nodes too small for the profiler's tick, timed by the wall
clock over copies of it; a noisy measurement is taken again.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from ..errors import TasoError
from ..measure.timing import session_options
from ..onnx.probes import COLD, EVICT, FLOOR, REFERENCE, WARM, add_floor, add_reference, cold_then_warm
from .copies import COPIES, WALL_CLOCK_ROUNDS, WALL_CLOCK_RUN_SECONDS
from .in_place import InPlaceWeights, in_place_session
from .wake import splits_over_threads

__all__ = ["REFERENCE", "FLOOR", "FULL_SECONDS", "QUICK_SECONDS", "SMALL_SECONDS", "SMALL_SECONDS_THREADED", "wall_clock_below", "copies_for", "NOISY_BAND", "steadier", "KernelProfile", "profile_kernels"]






_SESSION_SECONDS = 0.005  # exporting a node, building its session and reading its profile, beside its runs


FULL_SECONDS = 0.02  # a measurement's runs; a quick one (a spot-check's screen) runs a quarter of that


QUICK_SECONDS = 0.005


# A node profiled below this is timed again by the wall clock (wall_clock_marginal: copies of it against one), which
# is what it adds to a running graph: below a few us the profiler's ticks and its own ~5 us per kernel swamp it,
# and up to an L2-sized weight its bookkeeping between kernels costs the weight part of its residency (a 1 MB
# product: 24 us a step of a chain, 32 us profiled). Above, a node's run dwarfs both, and 33 copies would take long.
SMALL_SECONDS = 30e-6


# With more than one intra-op thread the profiler prices a product split over the threads above what it adds to a
# running graph. Without spinning (sessions 27-29): the per-step [1,512] x [512,1536] product of an unrolled GRU h512
# profiled at 70-77 us at 2 threads, 56-60 us by copies, and the graph paid about 58 a step. With the workers spinning
# within a run (taso.measure.timing.session_options, session 30) the profiled excess grew with the kernel: [64,256] x
# [256,1024] profiled at 310 us and took 180 by copies, [32,512] x [512,2048] 590 and 388, [64,512] x [512,2048]
# 1,117-1,148 and 725-743; the LSTM h256x64 graph that merged product saves in paid what copies say. Up to this
# bound every node is timed by copies; past it a node's run dwarfs the copies' budget (8 copies of 1 ms: 8 ms a run).
SMALL_SECONDS_THREADED = 1e-3


def wall_clock_below(threads: int) -> float:
    """The profiled price under which a node is timed again by the wall clock, at ``threads`` intra-op threads."""
    return SMALL_SECONDS if threads <= 1 else SMALL_SECONDS_THREADED


# A run of the copies lasts about this long: 33 copies of a 100 us node; fewer of a longer one (16 of a 200 us one),
# and never fewer than 8 (3 copies of [32,512] x [512,2048] took 439 us each, 8 and 16 of them 387-388).
_COPIES_SECONDS = COPIES * 100e-6


_FEWEST_COPIES = 8


def copies_for(seconds: float) -> int:
    """How many copies of a node profiled at ``seconds`` :func:`taso.cost.copies.wall_clock_marginal` times."""
    return max(_FEWEST_COPIES, min(COPIES, round(_COPIES_SECONDS / max(seconds, 1e-9))))


NOISY_BAND = 0.2  # a wall-clock measurement whose middle half spreads wider than this is taken again


def steadier(timed: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    """A wall-clock measurement, taken again when its rounds spread over more than :data:`NOISY_BAND`: of the two, the one
    whose rounds agree better. Copies of a merged product once came out at 1,384 us with a band of 0.27, where before
    and after they took 725-743 with 0.10."""
    first = timed()
    if first[1] <= NOISY_BAND:
        return first
    return min(first, timed(), key=lambda measured: measured[1])


def _wall_clock_seconds(seconds: float) -> float:
    """About what timing copies of a node of ``seconds`` takes: two sessions (one copy, and ``copies_for`` copies), each
    timed in every round for at least 3 runs and ``WALL_CLOCK_RUN_SECONDS``."""
    per_round = sum(max(WALL_CLOCK_RUN_SECONDS, 3 * copies * seconds) for copies in (1, copies_for(seconds)))
    return 2 * _SESSION_SECONDS + WALL_CLOCK_ROUNDS * per_round


@dataclass(frozen=True)
class KernelProfile:
    """Per run of a profiled session, seconds: in the model's own kernels, in the reference kernel beside them, and
    in the floor kernel (a Neg of one float: what the profiler reports for a kernel that does nothing, in that run)."""

    kernels: list[float]
    reference: list[float]
    floor: list[float]
    splits: bool = False  # whether the model's own kernels split their work over the threads (taso.cost.wake)


def profile_kernels(model: bytes, feeds: dict, threads: int, min_total: float = FULL_SECONDS, min_runs: int = 7,
                    max_runs: int = 400, warm: bool = False, in_place: InPlaceWeights | None = None) -> KernelProfile:
    """Profiles runs of ``model`` with a reference MatMul and a floor kernel beside it.

    ONNX Runtime's profiler times each kernel inside the session, so no Python call overhead
    has to be subtracted from microsecond-sized operators; the reference kernel (a 128x256 by
    256x256 MatMul added as an independent node) runs in the same session run, under the same
    machine load, and each run's kernel time is later divided by its reference time. The floor
    kernel runs there too: the profiler's own overhead in a kernel's time differs between
    sessions (a 1-float Neg took 2.0 us in one session and 4.0 in the next), so it is measured
    in each run, not once per machine. Runs go on until ``min_total`` seconds have passed: a few
    for a big kernel, hundreds for a microsecond one, whose profiled times come in whole microseconds.

    With ``warm``, each run runs the model twice, after the reference: the kernels timed are the
    second copy's, on the inputs and weights the first has just read. Timed alone after the
    reference, a 384x384 product on one row took 20 us; the same product took 10 us at each step
    of a chain that reads its weight again and again (``benchmarks/costs/bench_small_nodes.py``). A
    weight's reads after other bytes passed through the caches are priced apart
    (``taso.cost.residency``). A model the copies cannot be ordered in (no computed input), or
    one whose copies ONNX Runtime fuses into a kernel of another name, is timed once.
    """
    proto = onnx.load_model_from_string(model)
    twice = cold_then_warm(proto, after=f"{REFERENCE}_y") if warm else None
    timed = twice or proto
    add_reference(timed.graph)
    add_floor(timed.graph, after=f"{proto.graph.output[0].name}~warm" if twice else None)
    rng = np.random.default_rng(0)
    beside = {f"{REFERENCE}_x": rng.standard_normal((128, 256)).astype(np.float32), f"{FLOOR}_x": np.ones(1, np.float32)}
    events = profiled_runs(timed, {**feeds, **beside}, threads, min_total, min_runs, max_runs, in_place=in_place)
    if twice is None:
        return _kernel_times(events, skip=WARM_UP_RUNS)
    roles = (REFERENCE, FLOOR, WARM, COLD, EVICT)
    times = role_times(events, WARM_UP_RUNS, roles=roles)
    if any(times[_WORK]) or not any(times[WARM]):
        return profile_kernels(model, feeds, threads, min_total, min_runs, max_runs, in_place=in_place)
    return KernelProfile(times[WARM], times[REFERENCE], times[FLOOR], splits_over_threads(events, lambda name: _kernel_role(name, roles) == WARM))


def _kernel_times(events: list[dict], skip: int) -> KernelProfile:
    """The profiled kernel seconds of each session run (after ``skip`` warm-up runs): the model's, the reference's, the floor's."""
    times = role_times(events, skip, roles=(REFERENCE, FLOOR))
    if not times[REFERENCE]:
        raise TasoError(f"the ort-cpu cost model found no timed runs in ONNX Runtime {ort.__version__}'s profile "
                        "(its profile format may have changed); use --cost analytic")
    return KernelProfile(*(times[role] for role in (_WORK, REFERENCE, FLOOR)),
                         splits_over_threads(events, lambda name: _kernel_role(name, (REFERENCE, FLOOR)) == _WORK))


WARM_UP_RUNS = 3


_WORK = "work"  # a profiled kernel of the model itself, not one added beside it


def profiled_runs(proto: onnx.ModelProto, feeds: dict, threads: int, min_total: float, min_runs: int, max_runs: int,
                   in_place: InPlaceWeights | None = None) -> list[dict]:
    """ONNX Runtime's profile events of ``WARM_UP_RUNS`` runs, then runs until ``min_total`` seconds and ``min_runs`` runs."""
    options = session_options(threads)
    with tempfile.TemporaryDirectory() as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "profile")
        session = in_place_session(proto, options, in_place)
        for _ in range(WARM_UP_RUNS):
            session.run(None, feeds)
        total, runs = 0.0, 0
        while (total < min_total or runs < min_runs) and runs < max_runs:
            start = time.perf_counter()
            session.run(None, feeds)
            total += time.perf_counter() - start
            runs += 1
        with open(session.end_profiling(), encoding="utf-8") as f:
            return json.load(f)


def role_times(events: list[dict], skip: int, roles: tuple[str, ...]) -> dict[str, list[float]]:
    """Per session run (after ``skip`` warm-up runs), the seconds of the kernels whose node name starts with each
    of ``roles``, and of the rest (``_WORK``); runs in which the first role's kernel did not run are left out."""
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"][skip:]
    kernels = sorted((e["ts"], e["dur"], _kernel_role(e["name"], roles)) for e in events
                     if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
                     and e.get("args", {}).get("op_name") not in _LAYOUT_KERNELS)
    times: dict[str, list[float]] = {role: [] for role in (_WORK, *roles)}
    index = 0
    for start, end in windows:
        seconds = dict.fromkeys(times, 0.0)
        while index < len(kernels) and kernels[index][0] < start:
            index += 1
        while index < len(kernels) and kernels[index][0] <= end:
            _, dur, role = kernels[index]
            seconds[role] += dur * 1e-6
            index += 1
        if seconds[roles[0]] > 0:
            for role, value in seconds.items():
                times[role].append(value)
    return times


# The layout conversions ONNX Runtime puts around a convolution or pooling it runs in its blocked (NCHWc) layout. A
# node measured alone pays both; in a graph, consecutive convolutions and poolings stay blocked and pay none (a
# [1, 192, 35, 35] input's ReorderInput took 90 us beside a 1x1 convolution's 231 us: two sibling convolutions
# measured alone counted it twice, merged once, and the search bought 26 merges that measured 0.94x on Inception-v3).
_LAYOUT_KERNELS = frozenset({"ReorderInput", "ReorderOutput"})


def _kernel_role(name: str, roles: tuple[str, ...]) -> str:
    """Whose kernel a profile event times: the first of ``roles`` its node's name starts with, or the model's own."""
    for role in roles:
        if name.startswith(role):
            return role
    return _WORK


def _robust_mean(values: list[float]) -> float:
    """The mean of the middle half: robust to outliers like a median, finer than the profiler's microsecond ticks."""
    ordered = sorted(values)
    quarter = len(ordered) // 4
    middle = ordered[quarter : len(ordered) - quarter] or ordered
    return sum(middle) / len(middle)






