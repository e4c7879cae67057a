"""The generator end to end: enumerate, fingerprint, pair, prune, generalise, emit.

Stages run in this order, each counted (the counts go into the library header):

1. ``graphs``: graphs enumerated (:mod:`~taso.generator.enumerate`), by operator count.
2. ``candidates``: pairs of graphs with equal output fingerprints (:mod:`~taso.generator.pairing`).
3. ``common_subgraph``: of those pairs, the ones with no operator shared by both sides
   (:mod:`~taso.generator.prune`).
4. ``renaming``: one per class of input renamings.
5. ``nontrivial``: both sides not identical.
6. ``float_checked``: holds in float on fresh random inputs. The check runs after the
   structural stages only because it is the expensive one: none of them depends on it.
7. ``instances``: no specialisation of another candidate, no union of smaller ones.
8. ``rules``: generalised to shape expressions (:mod:`~taso.generator.generalize`).

Stages 2 to 4 stream over key ranges (:mod:`~taso.generator.candidates`): only the first
candidate of each form outlives its range. Common subgraphs are dropped before renamings
are: both are renaming-invariant, so the kept candidates are the same either way, and the
cheap test first spares canonicalising most pairs.

Stages 3 and 4, and 6 to 8, run in the workers (:meth:`Workers.map`: the local process pool,
or Ray tasks), one function per stage over chunks of candidates:
:func:`~.candidates.clear_summaries`, :func:`~.pairing.holds_in_float`,
:func:`~.prune.instance_facts`, :func:`~.emit.generalized_rules`. A candidate travels as its
graph specs (:class:`~.prune.Found`) and is decoded where it is worked on; the parent pairs
graphs by key, keeps or drops candidates by the verdicts, in order, and decides instances
from the forms the workers found (:func:`~.prune.select_non_instances`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from taso import __version__
from taso.rules import FORMAT, VERSION, Library, Rule

from .candidates import clear_summaries, range_candidates
from .emit import generalized_rules
from .pairing import holds_in_float
from .parallel import Workers
from .prune import Found, instance_facts, select_non_instances
from .settings import Settings

__all__ = ["generate", "Result", "STAGES", "Progress"]

# Stage name -> what it counts, in pipeline order.
STAGES: dict[str, str] = {
    "graphs": "graphs enumerated",
    "candidates": "pairs with equal fingerprints",
    "common_subgraph": "no common subgraph",
    "renaming": "distinct up to input renaming",
    "nontrivial": "sides not identical",
    "float_checked": "hold in float",
    "instances": "not an instance or union of another",
    "rules": "generalised to shape expressions",
}


@dataclass
class Progress:
    """Callbacks for a progress display; every one is optional.

    Attributes:
        phase: ``phase(name, total)`` starts a phase of ``total`` units (subtrees of roots).
        advance: ``advance(graphs, candidates)`` reports one finished unit, the graphs it held,
            and the candidate pairs found so far (None when not known yet).
        stage: ``stage(name, count)`` reports a stage's count.
    """

    phase: Callable[[str, int], None] = lambda name, total: None
    advance: Callable[[int, int | None], None] = lambda graphs, candidates: None
    stage: Callable[[str, int], None] = lambda name, count: None


class _PairCounter:
    """Counts candidate pairs among the keys seen so far, now and then.

    A running count per key would cost a dictionary entry per graph; re-sorting the key
    arrays costs a fraction of a second, so it is done at most every ``every`` seconds and
    at most a tenth of the time.
    """

    def __init__(self, total: int, every: float = 2.0):
        self._keys: list[np.ndarray] = []
        self._every, self._next, self.pairs, self._todo = every, 0.0, 0, total

    def add(self, keys) -> int:
        """Adds one unit's keys; returns the pairs counted so far (exact after the last unit)."""
        self._keys.append(np.frombuffer(keys, dtype=np.int64))
        self._todo -= 1
        start = time.perf_counter()
        if start >= self._next or self._todo == 0:
            self._keys = [np.concatenate(self._keys)]
            _, counts = np.unique(self._keys[0], return_counts=True)
            self.pairs = int((counts * (counts - 1) // 2).sum())
            now = time.perf_counter()
            self._next = now + max(self._every, 10 * (now - start))
        return self.pairs


@dataclass
class Result:
    """What a generator run produced."""

    library: Library
    counts: dict[str, int]
    per_depth: list[int]
    seconds: dict[str, float] = field(default_factory=dict)
    resumed: dict[str, int] = field(default_factory=dict)  # what a resumed run reused: "shards" -> count, stage -> 1


def _where(items: list, keep: list[bool]) -> list:
    return [item for item, ok in zip(items, keep, strict=True) if ok]


# Candidates per chunk of work for each stage after pairing (a chunk is one task of a process pool or of Ray).
CHUNKS = {"renaming": 2000, "float_checked": 250, "instances": 250, "rules": 50}


def generate(settings: Settings, jobs: int = 1, progress: Progress | None = None,
             make_workers: Callable[[Settings], Workers] | None = None) -> Result:
    """Runs the generator.

    Args:
        settings: what to enumerate.
        jobs: worker processes for the enumeration and the stages after it (the output does not depend on it).
        progress: optional callbacks.
        make_workers: makes the workers instead of ``jobs`` local processes, e.g.
            :meth:`taso.generator.cluster.RayBackend.workers` (the output does not depend on it either).

    Returns:
        The library of candidate rules, with the stage counts in its header.
    """
    progress = progress or Progress()
    counts: dict[str, int] = {}
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def stage(name: str, count: int) -> None:
        nonlocal clock
        counts[name] = count
        now = time.perf_counter()
        seconds[name] = now - clock
        clock = now
        progress.stage(name, count)

    def on_task(result) -> None:
        if len(result) == 3:  # first pass: keys (None when they stay in the workers or on disk), rows, graphs per depth
            progress.advance(sum(result[2]), None if result[0] is None else pairs.add(result[0]))
        else:  # second pass: found graphs
            progress.advance(0, None)

    make_workers = make_workers or (lambda s: Workers(s, jobs))
    with make_workers(settings) as workers:
        context = workers.context
        pairs = _PairCounter(workers.units)
        progress.phase("enumerate", workers.units)

        per_depth, source = workers.repeated(on_task, lambda name: progress.phase(name, workers.units))
        stage("graphs", sum(per_depth))

        # Every stage below runs in the workers on chunks of picklable candidates (specs, never
        # decoded graphs); the parent only keeps or drops them, in order. Each stage's result is
        # kept in a resumable run's directory (Workers.stage), the long ones chunk by chunk too.
        def run(fn: Callable, items: list, name: str) -> list:
            return workers.map(fn, items, chunk=CHUNKS[name], name=name)

        # Pairing, common subgraphs and renamings stream over key ranges (generator/candidates.py).
        first: dict[bytes, Found] = {}
        pairs = clear = 0
        progress.phase("pair", source.ranges)
        for r in range(source.ranges):
            part = workers.stage(f"range-{r:04d}", lambda: range_candidates(*source.rows(r), workers.packer, len(context.pool),
                                                                             lambda p: workers.map(clear_summaries, p, chunk=CHUNKS["renaming"])))
            pairs, clear = pairs + part.pairs, clear + part.clear
            for found in part.kept:
                first.setdefault(found.form, found)
            progress.advance(0, pairs)
        stage("candidates", pairs)
        stage("common_subgraph", clear)
        kept = [first[form] for form in sorted(first)]
        stage("renaming", len(kept))
        kept = [k for k in kept if not k.trivial]
        stage("nontrivial", len(kept))
        kept = workers.stage("float_checked", lambda: _where(kept, run(holds_in_float, [k.pair for k in kept], "float_checked")))
        stage("float_checked", len(kept))

        def non_instances() -> list:
            remaining, _, _ = select_non_instances([k.form for k in kept], run(instance_facts, kept, "instances"))
            return [kept[i] for i in remaining]

        kept = workers.stage("instances", non_instances)
        stage("instances", len(kept))

        general = workers.stage("rules", lambda: run(generalized_rules, kept, "rules"))
        rules: dict[str, Rule] = {}
        for rule in general:
            if rule is not None:
                rules.setdefault(rule.id, rule)
        ordered = sorted(rules.values(), key=lambda r: (max(r.size), r.size, r.id))
        stage("rules", len(ordered))  # before the workers stop (a Ray cluster's shutdown is not the stage's)
        resumed = dict(workers.reused)

    header = {
        "description": "candidate substitutions from taso generate; see docs/rules.md",
        "format_doc": "docs/rules.md",
        "format": FORMAT,
        "version": VERSION,
        "taso": __version__,
        "generator": {**settings.to_json(), "variants": [v.label for v in context.variants]},
        "counts": {"graphs_by_ops": per_depth[1:], **counts},
    }
    return Result(Library(ordered, header), counts, per_depth, seconds, resumed)
