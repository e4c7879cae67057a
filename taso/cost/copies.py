"""Timing a node by the wall clock, as copies of it inside one running session.

The profiler times a kernel alone, in whole microseconds, over an overhead of its own; a node's
price in a graph is what one more of it adds to a running session: its kernel, its dispatch, its
outputs' allocation. Two measurements are made here from copies of a one-node model:

* :func:`wall_clock_marginal`: copies reading the same inputs and the same weight, against one copy:
  a node's warm price (a weight read back to back, as an unrolled LSTM reads its input weight).
* :func:`cold_read_penalty`: copies cycling over ``m`` weights of the node's own shape, against copies
  all reading one: what each read costs when ``m - 1`` other weights of its size were read since its
  last (an unrolled GRU alternates its input and recurrent weights: ``m = 2``). It measured 0.77-1.05 of
  what a chain of such products pays a read, where the profiled pairs measured 0.13-0.58 of it
  (``benchmarks/costs/bench_cycle_probe.py``; docs/measured.md, session 26).

Both time a fixed model beside each round (:class:`WallReference`) and rescale the round to the reference's speed
when the cost table was started, as the profiled prices are rescaled to a reference kernel: the cloud host this
runs on slows a core 1.6-2.5x for tens of milliseconds at a time (the host's doing: a CPU-bound process on the other
core does not), and one such stretch over a whole measurement priced a 128-float Add at 0.80 us for 128 nodes
of a graph, where it takes 0.39 (docs/measured.md, session 27).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from ..measure.timing import fastest_run, interleaved_samples, open_session, session_options
from ..onnx.probes import SPIN_UP, SPIN_UP_SHAPE, cycled_copies, negations, spun_up, with_copies
from .cache import noise_band
from .in_place import InPlaceWeights, in_place_session

__all__ = ["COPIES", "WALL_CLOCK_ROUNDS", "WALL_CLOCK_RUN_SECONDS", "WallReference",
           "copies_session", "spin_up_feeds", "per_round_differences", "Pair", "many_round_differences", "median_and_band", "wall_clock_marginal", "cold_read_penalty", "interquartile_range"]

COPIES = 33
WALL_CLOCK_ROUNDS = 7
WALL_CLOCK_RUN_SECONDS = 0.003


REFERENCE_NEGATIONS = 65  # the reference model's nodes: a run is mostly running nodes, as a small node's price is
_REFERENCE_FEEDS = {"x": np.ones(1, np.float32)}




@dataclass
class WallReference:
    """A chain of Neg nodes timed beside each round of a wall-clock measurement, and its time when the cost table was
    started (``calibrated``, seconds): a round is rescaled by ``calibrated`` over the reference's time in that round.

    Over two minutes of back-to-back measurements of a 128-float Add, 10 of 1,760 came out 1.3-3x the median; in 9
    of them the reference ran 1.6-2.5x its median too, and rescaled, all 1,760 lay within 0.33-0.49 us of a 0.41 us
    median (docs/measured.md, session 27)."""

    threads: int
    calibrated: float | None = None
    _session: ort.InferenceSession | None = field(default=None, repr=False)

    def time(self) -> float:
        """One sample: the fastest of at least 3 runs over ``WALL_CLOCK_RUN_SECONDS``."""
        if self._session is None:
            self._session = open_session(negations(REFERENCE_NEGATIONS), self.threads, optimize=False)
            self._session.run(None, _REFERENCE_FEEDS)
        return fastest_run(self._session, _REFERENCE_FEEDS, 3, WALL_CLOCK_RUN_SECONDS)

    def calibrate(self) -> float:
        """The reference's undisturbed time (:func:`undisturbed`), the lowest in ``CALIBRATION_SESSIONS`` fresh sessions one
        after another: the table's ``calibrated`` when it is started. A slow stretch of the machine can outlast one
        session's samples: twelve calibrations in a row at 2 threads gave 28.3-29.2 us eight times and 35-62 us four,
        and one table calibrated at 50.6 us priced every node it timed 1.6-1.7x what the graph paid (session 30)."""
        times = []
        for _ in range(CALIBRATION_SESSIONS):
            self._session = None
            times.append(undisturbed(self.time, CALIBRATION_SAMPLES // CALIBRATION_SESSIONS))
        self.calibrated = min(times)
        return self.calibrated

    def calm_rounds(self, deltas: list[float], references: list[float]) -> list[float]:
        """The rounds in which the reference ran within :data:`DISTURBED` of its calibrated speed, rescaled to it.

        A slow stretch does not slow every kernel alike: in one, the reference ran 1.75x its calibrated time while a
        product reading a 3 MB weight kept its speed, and rescaled, that product's entry came out at 18.6 us where it
        takes 31 (session 30). So a disturbed round is dropped rather than rescaled."""
        calibrated = self.calibrated if self.calibrated is not None else self.calibrate()
        calm = [(d, r) for d, r in zip(deltas, references) if r <= DISTURBED * calibrated]
        return self.rescaled([d for d, _ in calm], [r for _, r in calm])

    def rescaled(self, deltas: list[float], references: list[float]) -> list[float]:
        """Each round's figure at the reference's calibrated speed."""
        calibrated = self.calibrated if self.calibrated is not None else self.calibrate()
        return [d * calibrated / r for d, r in zip(deltas, references)]


CALIBRATION_SAMPLES = 15
CALIBRATION_GAP = 0.02  # seconds between two calibration samples
CALIBRATION_SESSIONS = 3
DISTURBED = 1.25  # a round whose reference ran past this times its calibrated time is dropped (WallReference.calm_rounds)
ROUND_SETS = 3  # sets of WALL_CLOCK_ROUNDS rounds a measurement takes at most, until most of its rounds are calm


def undisturbed(sample, samples: int = CALIBRATION_SAMPLES) -> float:
    """A reference's time on a calm machine: the lower quartile of ``samples`` samples taken ``CALIBRATION_GAP`` apart.
    The median of 15 back to back once calibrated a 2-thread table's Neg chain at 51 us, where it
    takes 28.6: every price of that table came out 1.8x (session 29)."""
    taken = []
    for i in range(samples):
        if i:
            time.sleep(CALIBRATION_GAP)
        taken.append(sample())
    return float(np.percentile(taken, 25))






def copies_session(proto: onnx.ModelProto, threads: int, in_place: InPlaceWeights | None = None, **options) -> ort.InferenceSession:
    """A session that keeps identical nodes apart (ONNX Runtime's common-subexpression elimination would make them one)."""
    session_opts = session_options(threads)
    for name, value in options.items():
        setattr(session_opts, name, value)
    return in_place_session(proto, session_opts, in_place, disabled_optimizers=["CommonSubexpressionElimination"])


def wall_clock_marginal(model: bytes, feeds: dict, threads: int, in_place: InPlaceWeights | None = None,
                        reference: WallReference | None = None, copies: int = COPIES) -> tuple[float, float]:
    """What one more copy of ``model``'s nodes adds to a running session, by the wall clock: (seconds, noise band).

    ``copies`` independent copies reading the same inputs are timed against one copy, in
    interleaved rounds (common-subexpression elimination off: ONNX Runtime would fold the
    copies into one; the copies share the weight, prepacked once). For a node under a few
    microseconds the profiler cannot tell: it times kernels in whole microseconds over an
    overhead of its own of ~5 us that moves with where the kernel runs, and a 3-way Split with
    its Concat was priced at 1.5-2.4x what a step of a chain of them takes
    (``benchmarks/costs/bench_small_nodes.py``: 0.86-1.01x timed so). The difference is the node's
    kernel, its dispatch and its outputs' allocation, on warm inputs: what it adds inside a graph. With ``reference``,
    each round is rescaled to the reference's calibrated speed.
    """
    proto = onnx.load_model_from_string(model)
    return median_and_band(per_round_differences(proto, with_copies(proto, copies), copies - 1, feeds, threads, in_place,
                                                  reference))




def cold_read_penalty(model: bytes, feeds: dict, threads: int, weight: str, cycle: int,
                      in_place: InPlaceWeights | None = None, reference: WallReference | None = None) -> tuple[float, float] | None:
    """What each read of ``weight`` costs when ``cycle - 1`` other weights of its size were read since its last:
    copies cycling over ``cycle`` weights against as many copies reading one, per copy, by the wall clock
    (seconds, noise band); None when ``weight`` is not an initializer of the model (a large one handed over in place).

    Both sessions run the same kernels on the same shapes; only the weights' reuse distance differs. Each copy of the
    cycled model reads its weight cold, and the difference is the penalty the residency model adds to a read at that
    distance (``taso.cost.residency``). With ``reference``, each round is rescaled as in :func:`wall_clock_marginal`."""
    proto = onnx.load_model_from_string(model)
    copies = cycle * max(2, -(-16 // cycle))  # whole cycles, at least 16 copies
    cycled = cycled_copies(proto, weight, cycle, copies)
    if cycled is None:
        return None
    return median_and_band(per_round_differences(with_copies(proto, copies), cycled, copies, feeds, threads, in_place, reference))








def spin_up_feeds(feeds: dict, name: str = SPIN_UP) -> dict:
    """``feeds`` and the input ``name`` of a :func:`split_product` (the spin-up's: :func:`spun_up`)."""
    return {**feeds, name: np.ones((1, SPIN_UP_SHAPE[0]), np.float32)}


def per_round_differences(base: onnx.ModelProto, more: onnx.ModelProto, per: int, feeds: dict, threads: int,
                          in_place: InPlaceWeights | None, reference: WallReference | None = None,
                          spin_up: bool = True) -> list[float]:
    """Per interleaved round, (``more``'s fastest run - ``base``'s) / ``per``; with ``reference`` timed in the same
    rounds, the rounds it ran calm in (:meth:`WallReference.calm_rounds`), more rounds taken while most were disturbed,
    and all of them rescaled when none was calm. With more than one thread, both run after a split product
    (:func:`spun_up`) unless not ``spin_up``."""
    return many_round_differences([Pair(base, more, per, feeds, in_place)], threads, reference, spin_up)[0]


@dataclass
class Pair:
    """Two models timed against each other by the wall clock: ``more`` runs ``per`` more of what is priced than ``base``."""

    base: onnx.ModelProto
    more: onnx.ModelProto
    per: int
    feeds: dict
    in_place: InPlaceWeights | None = None


def many_round_differences(pairs: list[Pair], threads: int, reference: WallReference | None = None,
                           spin_up: bool = True) -> list[list[float]]:
    """:func:`per_round_differences` for several pairs at once, all timed in the same rounds beside one reference: a
    measurement in bulk (:mod:`taso.cost.bulk`) times the reference once a round, not once a pair. A pair's rounds are
    taken again while most of them were disturbed, as one pair's are."""
    if threads > 1 and spin_up:
        pairs = [Pair(spun_up(p.base), spun_up(p.more), p.per, spin_up_feeds(p.feeds), p.in_place) for p in pairs]
    measures = []
    for p in pairs:
        for model in (p.base, p.more):
            session = copies_session(model, threads, p.in_place)
            for _ in range(3):
                session.run(None, p.feeds)
            measures.append(functools.partial(fastest_run, session, p.feeds, 3, WALL_CLOCK_RUN_SECONDS))
    if reference is None:
        samples = interleaved_samples(measures, WALL_CLOCK_ROUNDS)
        return [[(m - o) / p.per for o, m in zip(samples[2 * i], samples[2 * i + 1])] for i, p in enumerate(pairs)]
    deltas: list[list[float]] = [[] for _ in pairs]
    references: list[float] = []
    done: dict[int, list[float]] = {}
    for _ in range(ROUND_SETS):  # until most rounds ran at the reference's calibrated speed
        open_pairs = [i for i in range(len(pairs)) if i not in done]
        timed = [m for i in open_pairs for m in measures[2 * i: 2 * i + 2]]
        samples = interleaved_samples(timed + [reference.time], WALL_CLOCK_ROUNDS)
        for j, i in enumerate(open_pairs):
            deltas[i] += [(m - o) / pairs[i].per for o, m in zip(samples[2 * j], samples[2 * j + 1])]
        references += samples[-1]
        for i in open_pairs:
            calm = reference.calm_rounds(deltas[i], references[-len(deltas[i]):])
            if 2 * len(calm) > WALL_CLOCK_ROUNDS:
                done[i] = calm
        if len(done) == len(pairs):
            break
    for i in range(len(pairs)):
        if i not in done:
            calm = reference.calm_rounds(deltas[i], references[-len(deltas[i]):])
            done[i] = calm or reference.rescaled(deltas[i], references[-len(deltas[i]):])
    return [done[i] for i in range(len(pairs))]


def median_and_band(deltas: list[float]) -> tuple[float, float]:
    """Seconds (the median difference, at least 0) and their noise band (the middle half's spread)."""
    seconds = max(float(np.median(deltas)), 0.0)
    return seconds, noise_band(seconds, interquartile_range(deltas))


def interquartile_range(values: list[float]) -> float:
    """The spread of the middle half of the runs: a measurement's noise band, robust to a run the machine disturbed."""
    lower, upper = np.percentile(values, [25, 75])
    return float(upper - lower)
