"""The cost cache: measured entries on disk with their noise bands, spot-checked on use.

Independent of any back end: a measuring model (:mod:`taso.cost.ort_cpu`, :mod:`taso.cost.cupy_gpu`)
keeps its table here under its hardware fingerprint.
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import TasoError, warn
from ..onnx.files import write_text_atomically

__all__ = ["cache_directory", "CostCache", "CostEntry", "SpotCheck", "SpotCheckPolicy", "SPOT_CHECK_OFF", "Verdict", "noise_band", "format_cost_report"]


# An entry's noise band is a relative half-width: the interquartile range over the median of the
# runs it came from, at least BAND_FLOOR, because the same node timed in another session of the
# same process strays further than its runs spread (SqueezeNet's nodes timed three times each: an
# 86 us Conv whose runs spread 2-5% came out 24% apart). At most BAND_CEILING, so that an entry
# off by a factor of 3 shows even on the noisiest microsecond kernel. Two measurements agree when
# they differ by no more than the sum of their half-widths, each at least ABSOLUTE_FLOOR: the
# resolution of the measurements under a few microseconds, which ort-cpu takes by the wall clock
# over copies of the node (20 tries of a 0.39 us Add gave 0.38-0.40). At the profiler's 1 us tick,
# which it was, a 128-float Add cached at 0.80 us agreed with 0.39 fresh, and a GRU h128 graph
# has 128 of them (docs/measured.md, session 27).
BAND_FLOOR = 0.10
BAND_CEILING = 0.5
ABSOLUTE_FLOOR = 5e-8
# A measuring model's own constants (the table's unit): every other entry is in their unit, so they
# are not spot-checked or marked stale; a table whose unit is wrong is a new fingerprint's job.
CALIBRATION = "calibration|"

# What the last spot-check of an entry found (its ``state``).
UNCHECKED = ""
AGREED = "ok"  # within the combined band of a fresh measurement
FIXED = "fixed"  # a quick and a full fresh measurement disagreed with it: the full one replaced it
SUSPECT = "suspect"  # the fresh measurements disagreed with it and among themselves: not re-measured yet
STALE = "stale"  # its table went stale before it was checked: not re-measured yet

# Measures an entry's node now: (seconds, noise band); quick=True for a shorter screening measurement.
Measure = Callable[[bool], tuple[float, float]]


# The cache file's format: a top-level key a file written by another version would carry with another value.
_FORMAT_KEY, _FORMAT = "taso-cost-cache-format", 2


def cache_directory() -> str:
    """Where taso keeps what it measured on this machine: ``$TASO_CACHE_DIR``, default ``~/.cache/taso``."""
    return os.environ.get("TASO_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "taso"))


def noise_band(seconds: float, spread: float) -> float:
    """The relative noise band of a measurement of ``seconds`` whose runs spread over ``spread`` seconds (their interquartile range)."""
    relative = spread / seconds if seconds > 0 else BAND_CEILING
    return min(max(relative, BAND_FLOOR), BAND_CEILING)


def allowed_difference(a: float, band_a: float, b: float, band_b: float) -> float:
    """How far two measurements of one entry may be apart and still agree: their combined noise band, in seconds."""
    return max(band_a * abs(a), ABSOLUTE_FLOOR) + max(band_b * abs(b), ABSOLUTE_FLOOR)


def agrees(a: float, band_a: float, b: float, band_b: float) -> bool:
    return abs(a - b) <= allowed_difference(a, band_a, b, band_b)


@dataclass
class CostEntry:
    """What the cache knows about an entry besides its seconds.

    Attributes:
        band: the relative noise band; None for an entry an older version wrote (unknown:
            first in line for a spot-check).
        measured_at: when its seconds were measured (Unix time; None: unknown).
        checked_at: when a spot-check last re-measured it.
        state: what that check found (UNCHECKED, AGREED, FIXED, SUSPECT or STALE).
        disagreement: (cached, fresh, allowed difference) seconds of that check, when it disagreed.
    """

    band: float | None = None
    measured_at: float | None = None
    checked_at: float | None = None
    state: str = UNCHECKED
    disagreement: tuple[float, float, float] | None = None

    @property
    def trusted(self) -> bool:
        """False for an entry a check found wrong or whose table went stale: it is re-measured when next used."""
        return self.state not in (SUSPECT, STALE)

    def to_json(self, seconds: float) -> dict[str, Any]:
        out: dict[str, Any] = {"s": seconds}
        if self.band is not None:
            out["band"] = round(self.band, 4)
        for name, value in (("at", self.measured_at), ("checked", self.checked_at)):
            if value is not None:
                out[name] = round(value)
        if self.state:
            out["state"] = self.state
        if self.disagreement is not None:
            out["disagreed"] = list(self.disagreement)
        return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def entry_from_json(value: Any) -> tuple[float, CostEntry | None] | None:
    """(seconds, what else is known) of an entry as stored: a dict, or seconds alone (older versions); None when damaged."""
    if _number(value):
        return float(value), None
    if not isinstance(value, dict) or not _number(value.get("s")):
        return None
    optional = {name: float(value[name]) if _number(value.get(name)) else None for name in ("band", "at", "checked")}
    disagreed = value.get("disagreed")
    state = value.get("state", UNCHECKED)
    return float(value["s"]), CostEntry(
        band=optional["band"], measured_at=optional["at"], checked_at=optional["checked"],
        state=state if state in (AGREED, FIXED, SUSPECT, STALE) else UNCHECKED,
        disagreement=tuple(disagreed) if isinstance(disagreed, list) and len(disagreed) == 3 and all(map(_number, disagreed)) else None)


@dataclass(frozen=True)
class SpotCheckPolicy:
    """How many of the entries a search takes from the cache it re-measures: per table, once per loaded cache (a process).

    A check costs a real measurement where a warm search takes every entry from the cache in a
    fraction of a second (SqueezeNet: 0.13 s of pricing in a 1.5 s search), so an entry is
    first screened with a quick measurement (about 10 ms for a small operator: a session
    profiled for 5 ms instead of 20, within about 2% of a full one), and only one that
    disagrees is measured in full, which decides. The check is bounded twice: at most
    ``entries`` entries (a quick measurement each, a full one only for one that disagreed), and
    no check starts that is expected to end past ``seconds`` of checking (a big Conv is left to
    ``taso info --costs --check N``, which has no time bound). A count alone would let a few big
    kernels take seconds; a time alone would spend it all on the first microsecond kernels of
    the graph. 4 entries cost a warm SqueezeNet search about 40 ms: its pricing 1.2-1.4x, the
    whole search within this shared machine's noise (0.94-1.03x; benchmarks/costs/bench_cost_cache.py).

    Each entry the search takes is drawn with probability ``rate``, so that the sample spreads
    past the graph's first nodes (an entry without a noise band, from an older version, is always
    drawn while the bounds allow). A healthy table disagrees with a fresh measurement about as
    rarely as two fresh measurements disagree, so when ``stale_fraction`` of at least
    ``min_verdicts`` checked entries disagree, the table as a whole went stale (a new ONNX
    Runtime build or another machine under the same fingerprint) and its unchecked entries are
    re-measured when next used.
    """

    entries: int = 4
    seconds: float = 0.25
    rate: float = 0.1
    stale_fraction: float = 0.5
    min_verdicts: int = 3
    seed: int | None = None  # None: another sample in each process


SPOT_CHECK_OFF = SpotCheckPolicy(entries=0)


def spot_check_policy() -> SpotCheckPolicy:
    """The default policy, or none where ``$TASO_SPOT_CHECKS`` is ``0``: a benchmark comparing runs made in separate
    processes needs them all to price with one table, and a spot-check that replaces an entry in the third run
    makes the first two's prices stale (NasRNN's four 8-way Splits, fixed from 3.9 to 7.5 us in the third run, moved
    the graph all three wrote by 14 us)."""
    value = os.environ.get("TASO_SPOT_CHECKS", "").strip()
    if value == "":
        return SpotCheckPolicy()
    if value.isdigit():
        return SpotCheckPolicy(entries=int(value))
    raise TasoError(f"TASO_SPOT_CHECKS={value!r}: expected how many cost entries a run re-measures (a whole number; 0: none)")


@dataclass(frozen=True)
class Verdict:
    """One spot-checked entry: its cached and fresh seconds, how far apart they could be, what was concluded and the seconds to use now."""

    key: str
    cached: float
    fresh: float
    band: float  # the allowed difference, seconds
    state: str  # AGREED, FIXED or SUSPECT
    value: float

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "cached": self.cached, "fresh": self.fresh, "band": self.band, "state": self.state}


class SpotCheck:
    """Re-measures a sample of the entries taken from one table, so that an entry that went wrong is not trusted forever.

    A measuring model asks :meth:`wants` for each entry it takes from the cache, calls
    :meth:`verify` for those drawn, and :meth:`remeasure` for an entry the cache no longer
    trusts (suspect, or its table went stale). Bounds and the stale rule: :class:`SpotCheckPolicy`.
    """

    def __init__(self, cache: CostCache, fingerprint: str, policy: SpotCheckPolicy):
        self.cache, self.fingerprint, self.policy = cache, fingerprint, policy
        self.verdicts: list[Verdict] = []
        self.measurements = 0  # fresh measurements for checks, quick or full (not re-measures of untrusted entries)
        self.seconds = 0.0  # spent on them
        self.marked_stale = 0  # entries this check marked stale (0: the table held)
        self._rng = random.Random(policy.seed)

    @property
    def exhausted(self) -> bool:
        return self.marked_stale > 0 or len(self.verdicts) >= self.policy.entries or self.seconds >= self.policy.seconds

    def wants(self, key: str, expected_seconds: float = 0.0) -> bool:
        """Whether to re-measure this entry now (``expected_seconds``: what that would take)."""
        if self.exhausted or key.startswith(CALIBRATION) or self.seconds + expected_seconds > self.policy.seconds:
            return False
        entry = self.cache.entry(self.fingerprint, key)
        return entry is None or entry.band is None or self._rng.random() < self.policy.rate

    def verify(self, key: str, cached: float, measure: Measure) -> Verdict:
        """Screens the entry with a quick fresh measurement; when they disagree a full one decides, and the cache keeps what it shows."""
        entry = self.cache.entry(self.fingerprint, key)
        quick = self._measure(measure, True)
        band = entry.band if entry is not None and entry.band is not None else quick[1]  # unknown: as noisy as now
        if agrees(cached, band, *quick):
            return self._settle(key, cached, band, quick, AGREED, cached)
        full = self._measure(measure, False)
        if agrees(cached, band, *full):  # the quick one was disturbed
            return self._settle(key, cached, band, full, AGREED, cached)
        if agrees(*quick, *full):  # both fresh measurements say the entry is wrong
            return self._settle(key, cached, band, full, FIXED, full[0])
        return self._settle(key, cached, band, quick, SUSPECT, statistics.median((cached, quick[0], full[0])))

    def remeasure(self, key: str, cached: float, measure: Measure) -> float:
        """An untrusted entry measured again: the fresh seconds replace it (outside the spot-check's bounds: a cold cache would measure it too)."""
        entry = self.cache.entry(self.fingerprint, key)
        seconds, band = measure(False)
        old_band = entry.band if entry is not None and entry.band is not None else band
        allowed = allowed_difference(cached, old_band, seconds, band)
        now = time.time()
        agreed = abs(cached - seconds) <= allowed
        self.cache.settle(self.fingerprint, key, seconds, CostEntry(
            band, now, now, AGREED if agreed else FIXED, None if agreed else (cached, seconds, allowed)))
        return seconds

    def describe(self) -> list[str]:
        """The entries checked, one line each, and whether the table went stale: for people."""
        lines = [_comparison(v.cached, v.fresh, v.band, v.state, v.key) for v in self.verdicts]
        if self.marked_stale:
            disagreed = sum(v.state != AGREED for v in self.verdicts)
            lines.append(f"{disagreed} of {len(self.verdicts)} disagreed: the table went stale, "
                         f"its other {self.marked_stale} entries are re-measured when next used")
        return lines

    def _measure(self, measure: Measure, quick: bool) -> tuple[float, float]:
        started = time.perf_counter()
        try:
            return measure(quick)
        finally:
            self.measurements += 1
            self.seconds += time.perf_counter() - started

    def _settle(self, key: str, cached: float, band: float, fresh: tuple[float, float], state: str, value: float) -> Verdict:
        """Records a check's verdict: a fixed entry takes the fresh seconds and band; others keep theirs (a band learnt if unknown)."""
        allowed = allowed_difference(cached, band, *fresh)
        disagreement = None if state == AGREED else (cached, fresh[0], allowed)
        now = time.time()
        if state == FIXED:
            self.cache.settle(self.fingerprint, key, fresh[0], CostEntry(fresh[1], now, now, FIXED, disagreement))
        else:
            old = self.cache.entry(self.fingerprint, key)
            self.cache.settle(self.fingerprint, key, cached, CostEntry(band, old and old.measured_at, now, state, disagreement))
        verdict = Verdict(key, cached, fresh[0], allowed, state, value)
        self.verdicts.append(verdict)
        self._judge_table()
        return verdict

    def _judge_table(self) -> None:
        """Marks the table stale when a large share of the sample disagreed."""
        checked = len(self.verdicts)
        disagreed = sum(v.state != AGREED for v in self.verdicts)
        if not self.marked_stale and checked >= self.policy.min_verdicts and disagreed >= self.policy.stale_fraction * checked:
            self.marked_stale = self.cache.mark_stale(self.fingerprint, spare={v.key for v in self.verdicts})


class CostCache:
    """Measured costs on disk, one table per hardware fingerprint, so a second run measures nothing it knows.

    The file (``$TASO_CACHE_DIR/costs.json``, default ``~/.cache/taso``) maps fingerprint ->
    {node key: entry}. An entry is ``{"s": seconds, "band": noise band, "at": when measured}``,
    with what its last spot-check found (``checked``, ``state``, ``disagreed``), or seconds
    alone as older versions wrote it (band unknown: first in line for a spot-check). A cached
    entry is not trusted forever: a measuring model spot-checks a sample of the entries it
    takes (:class:`SpotCheck`), and re-measures the ones found wrong or stale.

    Args:
        path: the file (default as above).
        spot_check: how entries taken from it are checked (``SPOT_CHECK_OFF``: never; default
            :func:`spot_check_policy`, which reads ``$TASO_SPOT_CHECKS``).
    """

    def __init__(self, path: str | None = None, spot_check: SpotCheckPolicy | None = None):
        self.path = path or os.path.join(cache_directory(), "costs.json")
        self.policy = spot_check or spot_check_policy()
        self.problem: str | None = None  # what was wrong with the file on disk, and ignored
        self._foreign = False  # the file is another version's: never saved over
        self._data: dict[str, dict[str, float]] = {}
        self._meta: dict[str, dict[str, CostEntry]] = {}
        self._checks: dict[str, SpotCheck] = {}
        self._load()
        self._dirty = False

    def _load(self) -> None:
        """Reads the file; a damaged cache is only lost time, never wrong results, so what cannot be read is left out
        (one warning says so). A file another version of taso wrote in another format is not read, nor overwritten."""
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            self._damaged(f"unreadable, ignored ({e.strerror if isinstance(e, OSError) and e.strerror else e})")
            return
        if not isinstance(raw, dict):
            self._damaged(f"not a JSON object of tables but a {type(raw).__name__}, ignored")
            return
        written_as = raw.pop(_FORMAT_KEY, _FORMAT)
        if written_as != _FORMAT:
            self._foreign = True
            self.problem = f"written by another version of taso (format {written_as!r}, this one reads {_FORMAT}): not used, and left as it is"
            warn(f"the cost cache {self.path} was {self.problem[:-len(': not used, and left as it is')]}: this run measures afresh and does not save over it")
            return
        damaged = 0
        for fingerprint, entries in raw.items():
            if not isinstance(entries, dict):
                damaged += 1
                continue
            table, meta = self._data.setdefault(fingerprint, {}), self._meta.setdefault(fingerprint, {})
            for key, value in entries.items():
                parsed = entry_from_json(value)
                if parsed is None:
                    damaged += 1
                    continue
                table[key] = parsed[0]
                if parsed[1] is not None:
                    meta[key] = parsed[1]
        if damaged:
            self._damaged(f"{damaged} damaged table(s) or entries ignored")

    def _damaged(self, problem: str) -> None:
        self.problem = problem
        warn(f"the cost cache {self.path} is damaged: {problem}; it is replaced by what this run measures")

    def table(self, fingerprint: str) -> dict[str, float]:
        """The fingerprint's entries, key -> seconds (what else is known of each: :meth:`entry`)."""
        self._meta.setdefault(fingerprint, {})
        return self._data.setdefault(fingerprint, {})

    def record(self, fingerprint: str, key: str, seconds: float, band: float | None = None) -> None:
        """Stores a measurement just taken, with its noise band where the measuring model knows it."""
        self.settle(fingerprint, key, seconds, None if band is None else CostEntry(band, time.time()))

    def settle(self, fingerprint: str, key: str, seconds: float, entry: CostEntry | None) -> None:
        """Stores an entry's seconds with what is known of it (None: seconds alone)."""
        self.table(fingerprint)[key] = seconds
        if entry is None:
            self._meta[fingerprint].pop(key, None)
        else:
            self._meta[fingerprint][key] = entry
        self._dirty = True

    def tables(self) -> dict[str, dict[str, float]]:
        """Every table, by fingerprint (a copy of the mapping; the tables themselves are the cache's)."""
        return dict(self._data)

    def entry(self, fingerprint: str, key: str) -> CostEntry | None:
        """What is known of an entry besides its seconds; None for seconds alone (or no entry)."""
        return self._meta.get(fingerprint, {}).get(key)

    def spot_check(self, fingerprint: str) -> SpotCheck:
        """This cache's spot-check of a table: one per table per loaded cache, so that a process checks a table once."""
        check = self._checks.get(fingerprint)
        if check is None:
            check = self._checks[fingerprint] = SpotCheck(self, fingerprint, self.policy)
        return check

    def mark_stale(self, fingerprint: str, spare: set[str] | frozenset[str] = frozenset()) -> int:
        """Marks the table's entries stale (re-measured when next used), but ``spare`` and the calibration; returns how many."""
        marked = 0
        for key in self.table(fingerprint):
            if key in spare or key.startswith(CALIBRATION):
                continue
            entry = self._meta[fingerprint].setdefault(key, CostEntry())
            entry.state = STALE
            marked += 1
        self._dirty = self._dirty or marked > 0
        return marked

    def summary(self) -> dict[str, int]:
        return {fp: len(table) for fp, table in self._data.items()}

    def health(self, fingerprint: str, worst: int = 5) -> dict[str, Any]:
        """A table's entries, how many were spot-checked, are suspect or stale, and the ``worst`` disagreements (of entries whose last check disagreed)."""
        table, meta = self.table(fingerprint), self._meta[fingerprint]
        measured = [key for key in table if not key.startswith(CALIBRATION)]
        known = [meta[key] for key in measured if key in meta]
        states = Counter(entry.state for entry in known)
        found = sorted(((key, entry.disagreement) for key, entry in meta.items() if entry.state in (FIXED, SUSPECT) and entry.disagreement),
                       key=lambda item: -abs(item[1][0] - item[1][1]) / item[1][2])
        dates = [entry.measured_at for entry in known if entry.measured_at is not None]
        return {
            "entries": len(table), "spot_checked": sum(entry.checked_at is not None for entry in known),
            "suspect": states[SUSPECT], "stale": states[STALE], "fixed": states[FIXED],
            "without_band": sum(key not in meta or meta[key].band is None for key in measured),
            "oldest_measurement": min(dates) if dates else None,
            "worst": [{"key": key, "cached": cached, "fresh": fresh, "band": allowed, "state": meta[key].state}
                      for key, (cached, fresh, allowed) in found[:worst]],
        }

    def report(self, worst: int = 5) -> dict[str, Any]:
        """What ``taso info --costs`` shows: the file, entries per fingerprint and each table's health."""
        report: dict[str, Any] = {"path": self.path, "tables": self.summary(),
                                  "health": {fp: self.health(fp, worst) for fp in self._data}}
        if self.problem:
            report["problem"] = self.problem
        return report

    def save(self) -> None:
        """Writes the cache atomically. One that cannot be written (a read-only or full disk, a cache directory under a
        regular file) is a warning: the run goes on, and only its measurements are lost."""
        if not self._dirty or self._foreign:
            return
        data = {fp: {key: self.entry_json(fp, key, seconds) for key, seconds in table.items()} for fp, table in self._data.items()}
        data[_FORMAT_KEY] = _FORMAT
        try:
            write_text_atomically(self.path, json.dumps(data, indent=0, sort_keys=True))
        except OSError as e:
            warn(f"cannot save the cost cache {self.path} ({e.strerror or e}): this run's measurements are not kept (TASO_CACHE_DIR sets where it goes)")
        self._dirty = False

    def entry_json(self, fingerprint: str, key: str, seconds: float) -> float | dict[str, Any]:
        entry = self.entry(fingerprint, key)
        return seconds if entry is None else entry.to_json(seconds)


def format_cost_report(report: Mapping[str, Any]) -> str:
    """``taso info --costs`` as text: per fingerprint, its entries, spot-checks, suspect and stale entries and worst disagreements."""
    lines = [f"cost cache {report['path']}"]
    if report.get("problem"):
        lines.append(f"  the file was damaged: {report['problem']}")
    for fingerprint, count in report["tables"].items():
        lines.append(f"  {count:>6} entries  {fingerprint}")
        health = report["health"][fingerprint]
        if health["oldest_measurement"] is not None:
            lines.append(f"         oldest measured {time.strftime('%Y-%m-%d', time.localtime(health['oldest_measurement']))}")
        lines.append(f"         {health['spot_checked']} spot-checked, {health['suspect']} suspect, {health['stale']} stale, "
                     f"{health['fixed']} fixed by a check, {health['without_band']} without a noise band "
                     "(written by an older version, or not per-node costs)")
        if health["worst"]:
            lines.append("         worst disagreements with a fresh measurement:")
            lines.extend(f"           {_comparison(w['cached'], w['fresh'], w['band'], w['state'], w['key'])}" for w in health["worst"])
    if not report["tables"]:
        lines.append("  (empty)")
    return "\n".join(lines)


def _comparison(cached: float, fresh: float, band: float, state: str, key: str) -> str:
    return f"{_seconds(cached):>9} cached  {_seconds(fresh):>9} fresh  band ±{_seconds(band):<9}  {state:<7}  {key}"


def _seconds(value: float) -> str:
    """Seconds for people: in us or ms, the units operator costs come in."""
    return f"{value * 1e6:.1f} us" if abs(value) < 1e-3 else f"{value * 1e3:.2f} ms"
