"""Timing models on ONNX Runtime: rounds rotate over the models, a model that fails is named, times are medians."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import model_from_text

from taso.errors import TasoError
from taso.measure.timing import TimingError, interleaved_medians, interleaved_times, rotated


def _relu_model() -> bytes:
    return model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4, 8] x) => (float[4, 8] y) { y = Relu (x) }
    """).SerializeToString()


def _gather_model() -> bytes:
    """Runs only when its integer input indexes inside the 3-row table."""
    return model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (int64[2] i) => (float[2, 4] y) <float[3, 4] t = {1,2,3,4,5,6,7,8,9,10,11,12}> { y = Gather (t, i) }
    """).SerializeToString()


def test_rounds_rotate_so_no_model_always_runs_first():
    calls: list[int] = []

    def measure(i: int, seconds: list[float]):
        samples = iter(seconds)
        return lambda: calls.append(i) or next(samples)

    medians = interleaved_medians([measure(0, [3.0, 1.0, 2.0]), measure(1, [5.0, 5.0, 4.0]), measure(2, [0.5, 0.7, 0.6])], rounds=3)
    assert calls == [0, 1, 2, 1, 2, 0, 2, 0, 1]
    assert medians == [2.0, 5.0, 0.6]
    assert rotated(3, 4) == [1, 2, 0]


def test_interleaved_times_are_positive_per_model_and_per_optimization_level():
    feeds = {"x": np.ones((4, 8), np.float32), "unused": np.zeros(1, np.float32)}  # each model gets the inputs it declares
    times = interleaved_times([_relu_model(), _relu_model()], feeds, rounds=3, optimize=(False, True), min_seconds=0.001)
    assert len(times) == 2 and all(t > 0 for t in times)


def test_a_model_onnx_runtime_cannot_load_raises_an_error_naming_it():
    with pytest.raises(TimingError) as caught:
        interleaved_times([_relu_model(), b"not a model"], {"x": np.ones((4, 8), np.float32)}, rounds=1, labels=("the input", "the candidate"))
    error = caught.value
    assert isinstance(error, TasoError) and error.position == 1 and error.label == "the candidate"
    assert str(error).startswith("ONNX Runtime cannot run the candidate: ") and "\n" not in str(error)


def test_a_model_failing_at_run_time_is_named_by_its_position_by_default():
    with pytest.raises(TimingError, match=r"^ONNX Runtime cannot run model 0: ") as caught:
        interleaved_times([_gather_model()], {"i": np.array([0, 7], np.int64)}, rounds=1)
    assert caught.value.position == 0 and caught.value.reason


def test_a_long_running_model_is_timed_once_per_round(monkeypatch):
    """With long_run, a model whose last warm-up run took that long runs once per round (the median over rounds still
    filters load); a short one stays the fastest of min_runs. No probe run: the warm-up run decides."""
    import taso.measure.timing as timing

    calls = []
    real = timing.fastest_run
    monkeypatch.setattr(timing, "fastest_run", lambda session, feeds, runs=3, seconds=0.01: calls.append(runs) or real(session, feeds, runs, seconds))
    interleaved_times([_relu_model()], {"x": np.ones((4, 8), np.float32)}, rounds=3, long_run=0.0)
    assert calls == [1, 1, 1]  # one run per round
    calls.clear()
    interleaved_times([_relu_model()], {"x": np.ones((4, 8), np.float32)}, rounds=3, long_run=10.0)
    assert calls == [3, 3, 3]


def test_a_second_series_reuses_the_open_sessions_and_times_the_models_asked(monkeypatch):
    """A confirmation on a model that takes seconds per run must not reopen and rewarm its sessions."""
    import taso.measure.timing as timing
    from taso.measure.timing import InterleavedTimer

    opened = []
    real = timing.open_session
    monkeypatch.setattr(timing, "open_session", lambda *a, **k: opened.append(1) or real(*a, **k))
    timer = InterleavedTimer([_relu_model(), _relu_model(), _relu_model()], {"x": np.ones((4, 8), np.float32)})
    assert len(timer.times(rounds=3)) == 3 and len(timer.times(rounds=3, positions=[0, 2])) == 2
    assert len(opened) == 3
    timer.replace(1, _relu_model(), "another")
    assert len(opened) == 4 and timer.labels[1] == "another" and len(timer.times(rounds=3)) == 3


def test_a_long_first_warm_up_run_is_the_only_one(monkeypatch):
    import taso.measure.timing as timing

    runs = []

    class Slow:
        def get_inputs(self):
            return []

        def run(self, outputs, feeds):
            runs.append(1)
            timing_clock[0] += 2.0

    timing_clock = [0.0]
    monkeypatch.setattr(timing, "open_session", lambda *a, **k: Slow())
    monkeypatch.setattr(timing.time, "perf_counter", lambda: timing_clock[0])
    timing.warm_session(0, "slow", b"", {}, warmup=3)
    assert runs == [1]


def _series(per_round: list[list[float]]):
    """Measures that return the given samples round by round (one list per model)."""
    calls = [iter(samples) for samples in per_round]
    return [lambda it=it: next(it) for it in calls]


def test_timing_stops_after_three_rounds_when_no_candidate_pays():
    from taso.measure.timing import MIN_ROUNDS, interleaved_samples, nothing_pays

    slower = _series([[1.0] * 7, [1.5] * 7, [1.1] * 7])  # both candidates slower than the baseline
    assert [len(s) for s in interleaved_samples(slower, 7, nothing_pays(1.02))] == [MIN_ROUNDS] * 3


def test_a_candidate_that_may_pay_gets_every_round():
    """Only a rejection stops early: a clearly faster candidate, or one straddling the margin, is timed to the cap."""
    from taso.measure.timing import interleaved_samples, nothing_pays

    faster = _series([[1.0] * 7, [0.5] * 7])
    assert [len(s) for s in interleaved_samples(faster, 7, nothing_pays(1.02))] == [7, 7]
    noisy = _series([[1.0] * 7, [0.97, 1.0, 0.97, 1.0, 0.97, 1.0, 0.97]])  # ratios 1.03 and 1.00 around 1.02
    assert [len(s) for s in interleaved_samples(noisy, 7, nothing_pays(1.02))] == [7, 7]
    assert [len(s) for s in interleaved_samples(_series([[1.0] * 7, [1.5] * 7]), 7)] == [7, 7], "no rule: every round"


def test_sessions_with_several_threads_spin_within_a_run_only_and_their_costs_are_cached_apart():
    """Workers spinning after a run land in the next interleaved measurement; workers that never spin are woken for
    every split kernel (benchmarks/costs/bench_spinning.py)."""
    from taso.cost.ort_cpu import fingerprint
    from taso.measure.timing import session_options

    two = session_options(2)
    assert two.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert two.get_session_config_entry("session.force_spinning_stop") == "1"
    with pytest.raises(RuntimeError, match="does not have configuration"):
        session_options(1).get_session_config_entry("session.force_spinning_stop")  # one thread: ONNX Runtime's default
    assert "|spinning-within-runs|" in fingerprint(2) and "spinning" not in fingerprint(1)


def test_fresh_session_speedups_take_the_median_of_each_ratio_over_series_in_fresh_sessions(monkeypatch):
    """A series run in one bad session (0.5x here) is outvoted by the fresh ones; each series opens its own sessions."""
    import taso.measure.timing as timing

    series = iter([[1.0, 0.5, 2.0], [1.2, 0.6, 1.2], [0.9, 0.45, 0.9]])  # input, a 2x variant, a 1x one (0.5x in one bad session)
    calls = []

    def one_series(models, feeds, threads=1, rounds=7, **options):
        calls.append(list(models))
        return next(series)

    monkeypatch.setattr(timing, "interleaved_times", one_series)
    first, speedups = timing.fresh_session_speedups(["a.onnx", "b.onnx", "c.onnx"], {}, 1, rounds=5, series=3)
    assert len(calls) == 3 and first == 1.0
    assert speedups == [1.0, 2.0, 1.0]


def test_fresh_session_series_keeps_every_series(monkeypatch):
    """A benchmark that reports how far apart the series of one pair measured needs each of them, not their median."""
    import taso.measure.timing as timing

    series = iter([[1.0, 0.5], [1.2, 0.4], [0.9, 0.6]])
    monkeypatch.setattr(timing, "interleaved_times", lambda models, feeds, threads=1, rounds=7, **options: next(series))
    assert timing.fresh_session_series(["a.onnx", "b.onnx"], {}, 1, rounds=5, series=3) == [[1.0, 0.5], [1.2, 0.4], [0.9, 0.6]]
