"""Timing whole models on ONNX Runtime: one place for every wall-clock measurement taso takes.

``taso optimize``'s end-to-end guard (:mod:`taso.pipeline.guard`), ``taso bench`` and the ort-cpu
cost model's calibration (:mod:`taso.cost.ort_cpu`) all time models here, the same way:

* a session with the deployment's options (:func:`session_options`: intra-op threads,
  sequential execution, ENABLE_ALL or no graph optimization);
* warm-up runs when the session is opened (the first runs allocate and pre-pack);
* per round, the fastest of a few runs (:func:`fastest_run`): other processes only ever add
  time, so the minimum is the least noisy figure (one session timed on its own, as in a
  calibration, takes the median of its runs instead: :func:`median_run`);
* rounds interleaved over all the models in a rotating order (:func:`interleaved_medians`),
  so a load change hits every model alike and no model always runs first or right after a
  given other one;
* the median over rounds, per model.

A model ONNX Runtime cannot load or run raises :class:`TimingError`, which names it.
(Per-kernel profiling for operator costs stays in :func:`taso.cost.ort_cpu.profile_kernels`.)
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnxruntime as ort

from ..errors import TasoError, first_line

__all__ = ["TimingError", "InterleavedTimer", "nothing_pays", "use_custom_ops", "custom_op_libraries", "session_options", "open_session", "warm_session", "fastest_run", "mean_run", "median_run", "interleaved_samples", "interleaved_medians", "interleaved_times", "fresh_session_series", "fresh_session_speedups", "rotated"]

CPU = ("CPUExecutionProvider",)


class TimingError(TasoError):
    """ONNX Runtime cannot load or run one of the models being timed.

    Attributes:
        position: the model's index in the list that was timed.
        label: how the caller named it.
        reason: ONNX Runtime's message, first line.
    """

    def __init__(self, position: int, reason: str, label: str | None = None):
        self.position, self.reason = position, reason
        self.label = label if label is not None else f"model {position}"
        super().__init__(f"ONNX Runtime cannot run {self.label}: {reason}")


# Custom-op libraries (``SessionOptions.register_custom_ops_library``) every session taso opens registers:
# ``--custom-ops LIB`` and ``$TASO_CUSTOM_OPS`` (paths separated by os.pathsep).
_custom_ops: list[str] = []


def use_custom_ops(paths: Sequence[str]) -> None:
    """Registers ONNX Runtime custom-op libraries in every session opened from now on (checks, timing, costs).

    Raises:
        TasoError: a path is not a library ONNX Runtime can load.
    """
    for path in paths:
        if not os.path.isfile(path):
            raise TasoError(f"--custom-ops {path}: no such file")
        try:
            ort.SessionOptions().register_custom_ops_library(path)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise TasoError(f"--custom-ops {path}: ONNX Runtime cannot load it as a custom-op library ({first_line(e)})") from None
        if path not in _custom_ops:
            _custom_ops.append(path)


def custom_op_libraries() -> list[str]:
    """The custom-op libraries sessions register: those given to :func:`use_custom_ops`, then ``$TASO_CUSTOM_OPS``'s."""
    from_environment = [p for p in os.environ.get("TASO_CUSTOM_OPS", "").split(os.pathsep) if p]
    return list(dict.fromkeys(_custom_ops + from_environment))


def session_options(threads: int, optimize: bool = True) -> ort.SessionOptions:
    """The deployment's options: ``threads`` intra-op threads, one inter-op thread, sequential, ENABLE_ALL (or none).

    With more than one thread, the workers spin between the operators of a run, as ONNX Runtime's do by default,
    and stop spinning when the run returns. Workers that go on spinning after a run land in the next model's
    measurement: one model timed against itself on a 2-core machine ranged 0.44x-2.24x. Workers that never spin must
    be woken for every kernel split over them: a chain of 16 ``[1, 256] x [256, 768]`` products took 1.6x as long as
    with spinning, and a fifth more or less from one sample to the next. Spinning within runs only, it takes a
    run's one wake-up longer than with spinning throughout, and one model timed against itself ranged 0.97-1.01
    (10th-90th percentile; ``benchmarks/costs/bench_spinning.py``).
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4  # a failure reaches the user as taso's one line; ONNX Runtime's log would repeat it in red
    for library in custom_op_libraries():
        options.register_custom_ops_library(library)
    if threads > 1:
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        options.add_session_config_entry("session.force_spinning_stop", "1")
    return options


def open_session(model: str | bytes, threads: int = 1, optimize: bool = True, providers: Sequence[str] = CPU) -> ort.InferenceSession:
    """A session for a model file or serialized model (ONNX Runtime's own exceptions pass through)."""
    return ort.InferenceSession(model, session_options(threads, optimize), providers=list(providers))


def fastest_run(session: ort.InferenceSession, feeds: Mapping[str, np.ndarray], min_runs: int = 3, min_seconds: float = 0.01) -> float:
    """The fastest of at least ``min_runs`` runs lasting ``min_seconds`` in all."""
    fastest, total, runs = float("inf"), 0.0, 0
    while runs < min_runs or total < min_seconds:
        start = time.perf_counter()
        session.run(None, feeds)
        elapsed = time.perf_counter() - start
        fastest, total, runs = min(fastest, elapsed), total + elapsed, runs + 1
    return fastest


def mean_run(session: ort.InferenceSession, feeds: Mapping[str, np.ndarray], runs: int) -> float:
    """Seconds per run over a burst of ``runs`` back-to-back runs (one perf_counter pair for runs too short to time alone)."""
    start = time.perf_counter()
    for _ in range(runs):
        session.run(None, feeds)
    return (time.perf_counter() - start) / runs


def median_run(session: ort.InferenceSession, feeds: Mapping[str, np.ndarray], min_seconds: float = 0.02, min_runs: int = 7,
               max_runs: int = 200, warmup: int = 3) -> float:
    """The median of one session's runs after ``warmup`` untimed ones: at least ``min_runs`` and ``min_seconds``, at most ``max_runs``.

    For one session on its own (a calibration); models compared with each other are timed
    with :func:`interleaved_times`.
    """
    for _ in range(warmup):
        session.run(None, feeds)
    times: list[float] = []
    total = 0.0
    while (total < min_seconds or len(times) < min_runs) and len(times) < max_runs:
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
        total += times[-1]
    return statistics.median(times)


def rotated(n: int, shift: int) -> list[int]:
    """The order of round ``shift`` over ``n`` models: 0..n-1 rotated left by ``shift``."""
    return [(i + shift) % n for i in range(n)]


# Rounds run before a stopping rule is asked whether the measurements already decide.
MIN_ROUNDS = 3

Decided = Callable[[list[list[float]]], bool]


def interleaved_samples(measures: Sequence[Callable[[], float]], rounds: int, decided: Decided | None = None) -> list[list[float]]:
    """Calls every measure once per round, in an order rotated by one each round; every sample, per measure, by round.

    Args:
        measures: each returns one sample of seconds (one model's timing for one round).
        rounds: samples per measure, at most.
        decided: a stopping rule, asked after each round from :data:`MIN_ROUNDS` on with the samples so far:
            True ends the series (the measurements already decide what they are for).
    """
    samples: list[list[float]] = [[] for _ in measures]
    for round_ in range(rounds):
        for i in rotated(len(measures), round_):
            samples[i].append(measures[i]())
        if decided is not None and round_ + 1 >= MIN_ROUNDS and decided(samples):
            break
    return samples


def interleaved_medians(measures: Sequence[Callable[[], float]], rounds: int, decided: Decided | None = None) -> list[float]:
    """:func:`interleaved_samples`' median per measure."""
    return [statistics.median(s) for s in interleaved_samples(measures, rounds, decided)]


def nothing_pays(threshold: float) -> Decided:
    """A stopping rule for timing candidates against a baseline (``samples[0]``): decided when, for every candidate,
    every round's paired ratio baseline/candidate is below ``threshold``.

    Only a rejection stops a series early: rounds are interleaved, so a round's two times share the
    machine's state, and three of three ratios below the margin has a chance of at most 1/8 if the
    truth sat at it (a candidate that did pay then waits for a later run). A candidate that may pay
    gets every round: writing a slower model is the worse mistake (a loaded 2-core machine once
    showed a GRU re-export 1.02x faster twice in three-round series; it ran at 0.86x).
    """
    def decided(samples: list[list[float]]) -> bool:
        baseline = samples[0]
        return all(b / c < threshold for candidate in samples[1:] for b, c in zip(baseline, candidate))

    return decided


class InterleavedTimer:
    """Models open side by side in ONNX Runtime, each warmed once, timed in as many interleaved series as asked.

    Opening and warming a session costs several runs; a second, independent series (a confirmation)
    on the sessions already open costs only its rounds (ALBERT-xxlarge: 5.5 s a run).

    Args:
        models: model files or serialized models, or sessions already open with the same options (an output
            check's: the model is not loaded twice).
        feeds: input arrays by name; each model gets those its graph declares.
        threads: intra-op threads.
        labels: names for errors (default "model 0", "model 1", ...).
        optimize: ENABLE_ALL (True) or no graph optimization, for all models or per model.
        providers: ONNX Runtime execution providers.
        warmup: runs when a session is opened, not timed (one when the first takes 0.2 s or more).
        min_runs, min_seconds: what one round's fastest run is the fastest of.
        long_run: when given, a model whose last warm run took at least this many seconds runs once per
            round: a run that long is its own stable sample, and the median over rounds still filters
            load (BERT-base's 230 ms runs spent 14.5 s of ``taso optimize``'s first timing series as
            the fastest of three).

    Raises:
        TimingError: ONNX Runtime cannot load or run one of the models (its position and label are in the error).
    """

    def __init__(self, models: Sequence[str | bytes | ort.InferenceSession], feeds: Mapping[str, np.ndarray], threads: int = 1, *,
                 labels: Sequence[str] | None = None, optimize: bool | Sequence[bool] = True, providers: Sequence[str] = CPU,
                 warmup: int = 2, min_runs: int = 3, min_seconds: float = 0.01, long_run: float | None = None):
        self._flags = [optimize] * len(models) if isinstance(optimize, bool) else list(optimize)
        self.labels = list(labels) if labels is not None else [f"model {i}" for i in range(len(models))]
        self._feeds, self._threads, self._providers, self._warmup = feeds, threads, providers, warmup
        self._min_runs, self._min_seconds, self._long_run = min_runs, min_seconds, long_run
        self._measures: list[Callable[[], float] | None] = [None] * len(models)
        self.sessions: list[ort.InferenceSession | None] = [None] * len(models)  # open, warm; an output check may run on them
        for position, model in enumerate(models):
            self._open(position, model)

    def _open(self, position: int, model: str | bytes | ort.InferenceSession) -> None:
        session, own_feeds, warm_seconds = _warmed(position, self.labels[position], model, self._feeds, self._threads, self._flags[position],
                                                   self._providers, self._warmup)
        self.sessions[position] = session
        long = self._long_run is not None and warm_seconds >= self._long_run
        self._measures[position] = _measure(position, self.labels[position], session, own_feeds, 1 if long else self._min_runs,
                                            0.0 if long else self._min_seconds)

    def replace(self, position: int, model: str | bytes | ort.InferenceSession, label: str | None = None) -> None:
        """Closes the session at ``position`` and opens ``model`` there (its memory is freed before the new one loads).

        Raises:
            TimingError: ONNX Runtime cannot load or run the new model.
        """
        self.close(position)
        if label is not None:
            self.labels[position] = label
        self._open(position, model)

    def close(self, position: int) -> None:
        """Closes the session at ``position`` (ONNX Runtime frees its copy of the weights); :meth:`replace` opens another."""
        self._measures[position] = self.sessions[position] = None

    def times(self, rounds: int = 7, decided: Decided | None = None, positions: Sequence[int] | None = None) -> list[float]:
        """One interleaved series: seconds per run of each model (of ``positions``, default all), the median over
        rounds of each round's fastest run; ``decided``: a stopping rule (see :func:`interleaved_samples`)."""
        chosen = list(range(len(self._measures))) if positions is None else list(positions)
        return interleaved_medians([self._measures[k] for k in chosen], rounds, decided)


def interleaved_times(
    models: Sequence[str | bytes],
    feeds: Mapping[str, np.ndarray],
    threads: int = 1,
    rounds: int = 7,
    *,
    labels: Sequence[str] | None = None,
    optimize: bool | Sequence[bool] = True,
    providers: Sequence[str] = CPU,
    warmup: int = 2,
    min_runs: int = 3,
    min_seconds: float = 0.01,
    long_run: float | None = None,
    decided: Decided | None = None,
) -> list[float]:
    """Seconds per run of each model: the median over interleaved rounds of each round's fastest run (one series of
    an :class:`InterleavedTimer`; the arguments are its own, ``rounds`` and ``decided`` the series').

    Raises:
        TimingError: ONNX Runtime cannot load or run one of the models (its position and label are in the error).
    """
    timer = InterleavedTimer(models, feeds, threads, labels=labels, optimize=optimize, providers=providers, warmup=warmup,
                             min_runs=min_runs, min_seconds=min_seconds, long_run=long_run)
    return timer.times(rounds, decided)


def fresh_session_speedups(models: Sequence[str | bytes], feeds: Mapping[str, np.ndarray], threads: int = 1, rounds: int = 7,
                           series: int = 3, *, labels: Sequence[str] | None = None) -> tuple[float, list[float]]:
    """The first model's seconds per run and each model's speedup over it (first / model), each the median over
    ``series`` interleaved series (:func:`fresh_session_series`).

    A session can run a model 30% slower than a fresh one for as long as it lives (why is not pinned down):
    an LSTMCell ceiling measured 1.91x in one series and 1.33-1.37x in four fresh ones.

    Raises:
        TimingError: ONNX Runtime cannot load or run one of the models.
    """
    timed = fresh_session_series(models, feeds, threads, rounds, series, labels=labels)
    return statistics.median(t[0] for t in timed), [statistics.median(t[0] / t[k] for t in timed) for k in range(len(models))]


def fresh_session_series(models: Sequence[str | bytes], feeds: Mapping[str, np.ndarray], threads: int = 1, rounds: int = 7,
                         series: int = 3, *, labels: Sequence[str] | None = None) -> list[list[float]]:
    """Each model's seconds per run in each of ``series`` interleaved series (:func:`interleaved_times`), every series
    in fresh sessions: what a benchmark needs to say how far apart the series of one pair of files measured.

    Raises:
        TimingError: ONNX Runtime cannot load or run one of the models.
    """
    return [interleaved_times(models, feeds, threads, rounds, labels=labels) for _ in range(series)]


def _measure(position: int, label: str, session: ort.InferenceSession, feeds, runs: int, seconds: float) -> Callable[[], float]:
    """One model's timing for one round. NOTE: it holds no reference to its timer: a cycle through the timer would keep
    every session (GBs of repacked weights) alive until the cyclic collector happened to run."""
    def fastest() -> float:
        try:
            return fastest_run(session, feeds, runs, seconds)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise TimingError(position, first_line(e), label) from None

    return fastest


# A first run this long is not followed by more warm-up runs: one-off costs are paid, and each run costs that much again.
_LONG_FIRST_RUN = 0.2


def _warmed(position: int, label: str, model: str | bytes | ort.InferenceSession, feeds: Mapping[str, np.ndarray], threads: int, optimize: bool,
            providers: Sequence[str], warmup: int) -> tuple[ort.InferenceSession, dict[str, np.ndarray], float]:
    """:func:`warm_session`, and the seconds of its last warm-up run."""
    try:
        session = model if isinstance(model, ort.InferenceSession) else open_session(model, threads, optimize, providers)
        names = {i.name for i in session.get_inputs()}
        own_feeds = {k: v for k, v in feeds.items() if k in names}
        elapsed = 0.0
        for k in range(warmup):
            start = time.perf_counter()
            session.run(None, own_feeds)
            elapsed = time.perf_counter() - start
            if elapsed >= _LONG_FIRST_RUN:
                break
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise TimingError(position, first_line(e), label) from None
    return session, own_feeds, elapsed


def warm_session(position: int, label: str, model: str | bytes, feeds: Mapping[str, np.ndarray], threads: int = 1, optimize: bool = True,
                 providers: Sequence[str] = CPU, warmup: int = 3) -> tuple[ort.InferenceSession, dict[str, np.ndarray]]:
    """A session run ``warmup`` times (once when that run takes 0.2 s or more) on the feeds its graph declares, and those feeds.

    Raises:
        TimingError: ONNX Runtime cannot load or run the model (``position`` and ``label`` name it).
    """
    session, own_feeds, _ = _warmed(position, label, model, feeds, threads, optimize, providers, warmup)
    return session, own_feeds


