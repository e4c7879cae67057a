"""Scale-out on Ray: the enumeration's shards as Ray tasks, checkpointed, merged in order.

The local path (:class:`~taso.generator.parallel.Workers`) hands shards
(:mod:`~taso.generator.shards`) to a process pool. Here the same shards run as Ray tasks, so
the enumeration spreads over every node of a cluster (``ray.init()`` with no address starts
a local one). :class:`RayWorkers` has the interface of ``Workers``, so the pipeline runs
unchanged.

* **Determinism.** Results are merged in shard order whatever order they finish in, so the
  rule file is byte-identical to the local run.
* **Faults.** A task whose worker dies is retried by Ray (``max_retries``); a shard is a pure
  function of the settings, so a retry returns the same bytes.
* **Checkpoints.** Every finished shard is written to a run directory
  (:class:`~taso.generator.store.ShardStore`), atomically and with a digest over its
  contents, and so is every finished stage after it. A resumed run reuses the files that
  check out and redoes the others: a partial or corrupt file is never merged.
* **After the enumeration.** The stages after pairing (canonical forms, common subgraphs, the
  float check, instance facts, generalisation) run as Ray tasks over chunks of candidates
  (:meth:`RayWorkers.map`), the same functions the local pool runs. A candidate travels as
  its graph specs and is decoded in the task (decoded graphs hold the operators' functions,
  which do not pickle); results come back in chunk order, so the file stays byte-identical.
  The driver pairs the collected graphs by key and keeps or drops candidates by the tasks'
  verdicts.

``taso verify --ray`` fans rules out to Ray tasks as well (:func:`verify_rules_on_ray`).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import statistics
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from taso.errors import TasoError

from . import parallel
from .enumerate import Enumerator, OpRef
from .parallel import KeyPass, Workers
from .settings import Settings
from .shards import DEFAULT_SHARDS, Shard, plan_shards, walk_shard
from .store import ShardStore, write_atomically

__all__ = ["Shard", "plan_shards", "walk_shard", "ShardStore", "StageReport", "MapReport", "RayBackend", "RayWorkers", "ray_available",
           "verify_rules_on_ray"]

# A note on cancelling. Tasks that an interrupted or failed pass leaves pending are not
# cancelled: Ray 2.60 cancels on the caller's thread while results arrive on another, and
# cancelling a task whose result is arriving fails it twice; the driver then aborts on an
# internal check ("Tried to complete task that was not pending") and takes the user's
# process with it (seen in CI, on the interrupted-run test). The tasks left behind are
# bounded work: ray.shutdown() of a local cluster ends them, and so does the exit of a
# driver that joined a cluster. Only a verification task past its time limit is killed,
# after checking that it has not just finished.
# Ray retries a task whose worker process died this many times before the run fails.
MAX_RETRIES = 3
# Beyond KEEP_GRAPHS_MAX_OPS the first pass's keys are split into this many ranges, each reduced to its
# repeated keys by a task of its own: no process, the driver included, holds every key.
KEY_RANGES = 16


def ray_available() -> str | None:
    """None when Ray can be imported, else the reason it cannot (for a clear error or a test skip)."""
    try:
        import ray  # noqa: F401
    except ImportError as e:
        return f"ray is not installed ({e}); pip install 'taso[cluster]'"
    return None


# ---- shards -------------------------------------------------------------------------------------------


# ---- what runs in a Ray worker ----------------------------------------------------------------------------


def _worker_enumerator(settings: Settings) -> Enumerator:
    """This process's enumerator for ``settings``, kept between tasks for its evaluation cache."""
    if parallel._WORKER is None or parallel._WORKER.settings != settings:
        parallel._init_worker(settings)
    return parallel._WORKER


def _maybe_die(fault: str | None) -> None:
    """Fault injection for tests: the first task to create the marker file kills its own process."""
    if not fault:
        return
    try:
        os.close(os.open(fault, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _key_shard(settings: Settings, shard: Shard, keep: bool, fault: str | None) -> dict:
    """Pass 1 on one shard: every graph's key, the graphs packed when ``keep``, counts and cost."""
    start = time.perf_counter()
    enumerator = _worker_enumerator(settings)
    _maybe_die(fault)
    keys, rows, per_depth = parallel.walk_rows(enumerator, parallel.worker_roots()[shard.root], shard, keep)
    return {"keys": keys.tobytes(), "rows": bytes(rows), "per_depth": per_depth, "seconds": time.perf_counter() - start}


def _collect_shard(settings: Settings, shard: Shard, wanted: np.ndarray, fault: str | None) -> dict:
    """Pass 2 on one shard: the graphs whose key is wanted, packed, with their keys."""
    start = time.perf_counter()
    enumerator = _worker_enumerator(settings)
    root = parallel.worker_roots()[shard.root]
    wanted_set = frozenset(wanted.tolist())
    keys, rows, seen = array("q"), bytearray(), 0
    pack = parallel._packer(enumerator).pack

    def visit(key, ops, last, outputs):
        nonlocal seen
        seen += 1
        if key in wanted_set:
            keys.append(key)
            rows.extend(pack(ops, last, outputs))
        if seen == 100:
            _maybe_die(fault)

    walk_shard(enumerator, root, shard, visit)
    return {"keys": keys.tobytes(), "rows": bytes(rows), "per_depth": [seen], "seconds": time.perf_counter() - start}


def _split_by_range(keys: np.ndarray, ranges: int) -> list[np.ndarray]:
    """The keys sorted and cut into ``ranges`` equal ranges of the signed 64-bit space (in order)."""
    keys = np.sort(keys)
    return np.split(keys, np.searchsorted(keys, parallel.key_range_bounds(ranges)))


def _keys_by_range(settings: Settings, shard: Shard, ranges: int, fault: str | None) -> tuple:
    """Pass 1 on one shard, keys only, returned as (counts and cost, then one sorted array per key range)."""
    result = _key_shard(settings, shard, False, fault)
    parts = _split_by_range(np.frombuffer(result["keys"], dtype=np.int64), ranges)
    return ({"per_depth": result["per_depth"], "seconds": result["seconds"]}, *parts)


def _repeated_in_range(*parts: np.ndarray) -> np.ndarray:
    """The reducer of one key range: the keys that occur more than once over every shard's part."""
    values, multiplicity = np.unique(np.concatenate(parts), return_counts=True)
    return values[multiplicity > 1]


def _map_chunk(settings: Settings, fn: Callable, chunk: list) -> tuple[str, float, list]:
    """One chunk of a stage after enumeration: (this worker's ``host:pid``, seconds, ``fn(chunk)``)."""
    start = time.perf_counter()
    _worker_enumerator(settings)
    result = fn(chunk)
    return f"{socket.gethostname()}:{os.getpid()}", time.perf_counter() - start, result


# ---- the backend -----------------------------------------------------------------------------------------


@dataclass
class StageReport:
    """What one pass over the shards did: shards run, reused from checkpoints, corrupt and redone; each shard's cost."""

    name: str
    total: int = 0
    run: int = 0
    reused: int = 0
    corrupt: list[str] = field(default_factory=list)
    cost: dict[str, tuple[int, float]] = field(default_factory=dict)  # shard id -> (graphs, seconds)

    def summary(self) -> str:
        graphs = [g for g, _ in self.cost.values()]
        seconds = [s for _, s in self.cost.values()]
        total = max(1, sum(graphs))
        line = (f"{self.name}: {self.total} shards ({self.run} run, {self.reused} reused from checkpoints, "
                f"{len(self.corrupt)} corrupt checkpoints redone)")
        if graphs:
            line += (f"; graphs per shard: median {statistics.median(graphs):,.0f}, max {max(graphs):,} "
                     f"({100 * max(graphs) / total:.1f}% of {sum(graphs):,}); seconds per shard: median "
                     f"{statistics.median(seconds):.2f}, max {max(seconds):.2f}, sum {sum(seconds):.1f}")
        return line

    def to_json(self) -> dict:
        return {"name": self.name, "total": self.total, "run": self.run, "reused": self.reused, "corrupt": self.corrupt,
                "shards": {k: {"graphs": g, "seconds": round(s, 4)} for k, (g, s) in self.cost.items()}}


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else many or one + 's'}"


@dataclass
class MapReport:
    """One stage after enumeration run as Ray tasks over chunks of candidates (:meth:`RayWorkers.map`).

    Attributes:
        name: the stage's worker function (``holds_in_float``, ``instance_facts``...).
        items: candidates in; chunks: Ray tasks.
        seconds: wall time of the stage, from the first task submitted to the last result.
        task_seconds: the tasks' own time, summed.
        workers: the ``host:pid`` of every worker process that ran a chunk, with its chunk count.
    """

    name: str
    items: int
    chunks: int
    seconds: float = 0.0
    task_seconds: float = 0.0
    workers: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        return (f"{self.name}: {self.items:,} candidates in {_plural(self.chunks, 'Ray task')} on "
                f"{_plural(len(self.workers), 'worker process', 'worker processes')}, "
                f"{self.seconds:.1f} s (tasks {self.task_seconds:.1f} s)")

    def to_json(self) -> dict:
        return {"name": self.name, "items": self.items, "chunks": self.chunks, "seconds": round(self.seconds, 4),
                "task_seconds": round(self.task_seconds, 4), "workers": self.workers}


@dataclass
class RayBackend:
    """How and where to run the enumeration on Ray; ``backend.workers(settings)`` makes the workers.

    Attributes:
        address: a cluster to join (``ray start --head`` prints it); None starts a local one.
        num_cpus: CPUs of a local cluster (None: all); ignored when joining one.
        run_dir: where finished shards are checkpointed (None: no checkpoints).
        resume: reuse the finished shards in ``run_dir``.
        shards: about how many shards the plan aims at.
        progress: show a tqdm bar for the stages after enumeration.
        fault: tests only: a marker file; the first task to create it kills its own worker.
        stop_after: tests only: raise KeyboardInterrupt after this many shards were checkpointed.
        reports: filled as the run goes, one per pass.
        stages: filled as the run goes, one per stage after enumeration (canonical forms, common
            subgraphs, float check, instance facts, generalisation), each run as Ray tasks.
    """

    address: str | None = None
    num_cpus: int | None = None
    run_dir: str | None = None
    resume: bool = False
    shards: int = DEFAULT_SHARDS
    progress: bool = False
    fault: str | None = None
    stop_after: int | None = None
    reports: list[StageReport] = field(default_factory=list)
    stages: list[MapReport] = field(default_factory=list)

    def workers(self, settings: Settings) -> RayWorkers:
        return RayWorkers(settings, self)

    def summary(self) -> str:
        """One line per pass: shards run and reused, and the spread of their cost; one per stage after it."""
        return "\n".join([r.summary() for r in self.reports] + [r.summary() for r in self.stages])

    def save_report(self) -> None:
        """Writes each shard's measured cost (graphs, seconds), and each later stage's, to ``run_dir/shards.json``."""
        if self.run_dir:
            report = json.dumps({"passes": [r.to_json() for r in self.reports], "stages": [r.to_json() for r in self.stages]}, indent=1)
            write_atomically(os.path.join(self.run_dir, "shards.json"), report.encode())


def _connect(address: str | None, num_cpus: int | None) -> bool:
    """Connects to Ray (starting a local cluster without an address); True when this call started it."""
    reason = ray_available()
    if reason:
        raise TasoError(f"--ray: {reason}")
    import ray

    if address:
        _check_reachable(address)
    if ray.is_initialized():
        return False
    try:
        if address:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise TasoError(f"--ray {address or ''}: cannot connect to Ray: {e}".replace("  ", " ")) from None
    return True


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fails in seconds when nothing listens at a ``host:port`` address (Ray itself retries for minutes).

    Other forms (``auto``, ``ray://...``) are left to Ray.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise TasoError(f"--ray {address}: no Ray cluster answers there ({e}); start one with `ray start --head`") from None


class RayWorkers(Workers):
    """:class:`~taso.generator.parallel.Workers` whose units of work are Ray tasks over shards.

    The driver keeps an enumerator too (for the context and the plan); pass results are
    merged in shard order, and :meth:`map` runs the stages after enumeration as Ray tasks.
    """

    def __init__(self, settings: Settings, backend: RayBackend):
        self.settings, self.backend, self.jobs = settings, backend, 0
        self._pool = None
        self._started = _connect(backend.address, backend.num_cpus)
        import ray

        self._ray = ray
        self._tmp = None
        enumerator = _worker_enumerator(settings)
        self.context = enumerator.context
        self.roots: list[OpRef] = enumerator.roots()
        self.packer = parallel._packer(enumerator)
        self.shards = plan_shards(enumerator, backend.shards)
        self.store = ShardStore(backend.run_dir, settings, backend.resume) if backend.run_dir else None
        self.resume, self.persistent, self.reused = backend.resume, backend.run_dir is not None, {}
        self._settings_ref = ray.put(settings)
        self._checkpointed = 0

    @property
    def units(self) -> int:
        return len(self.shards)

    def __exit__(self, *exc) -> None:
        if self._started:
            self._ray.shutdown()

    def _remote(self, fn: Callable, returns: int = 1):
        return self._ray.remote(max_retries=MAX_RETRIES, num_cpus=1, num_returns=returns)(fn)

    def _run(self, stage: str, task: Callable, extra: tuple, on_task: Callable | None, ranges: int = 0) -> list[dict]:
        """Runs ``task`` on every shard not checkpointed; results in shard order, whatever the finish order.

        With ``ranges``, the task returns its keys as that many key ranges after its result; they
        stay in the object store (``result["ranges"]``: their refs) and reach the driver only to be
        checkpointed, one shard at a time.
        """
        report = StageReport(stage, total=len(self.shards))
        self.backend.reports.append(report)
        results: list[dict | None] = [None] * len(self.shards)
        for i, shard in enumerate(self.shards):
            if self.store and self.backend.resume and (found := self.store.load(stage, shard)) is not None:
                if ranges:
                    found["ranges"] = [self._ray.put(p) for p in _split_by_range(np.frombuffer(found.pop("keys"), dtype=np.int64), ranges)]
                results[i] = found
                report.reused += 1
                self._finish(report, shard, found, on_task)
        if self.store:
            report.corrupt = list(self.store.corrupt)
            self.store.corrupt.clear()
        remote = self._remote(task, 1 + ranges)
        pending = {}
        for i, shard in enumerate(self.shards):
            if results[i] is None:
                refs = remote.remote(self._settings_ref, shard, *extra, self.backend.fault)
                head, parts = (refs[0], refs[1:]) if ranges else (refs, [])
                pending[head] = (i, parts)
        # Tasks left pending by an interrupt or an error are not cancelled (see the note on cancelling).
        while pending:
            done, _ = self._ray.wait(list(pending), num_returns=1)
            i, parts = pending.pop(done[0])
            results[i] = self._ray.get(done[0])
            report.run += 1
            if self.store:
                self._save(stage, self.shards[i], results[i], parts)
            if parts:
                results[i]["ranges"] = parts
            self._finish(report, self.shards[i], results[i], on_task)
            if self.backend.stop_after is not None and self._checkpointed >= self.backend.stop_after:
                raise KeyboardInterrupt
        return results

    def _save(self, stage: str, shard: Shard, result: dict, parts: list) -> None:
        if parts:  # keys only, by range: the checkpoint holds them together
            result = {**result, "keys": b"".join(p.tobytes() for p in self._ray.get(parts)), "rows": b""}
        self.store.save(stage, shard, {"keys": result["keys"], "rows": result["rows"]},
                        {"per_depth": result["per_depth"], "seconds": round(result["seconds"], 6)})
        self._checkpointed += 1

    @staticmethod
    def _finish(report: StageReport, shard: Shard, result: dict, on_task: Callable | None) -> None:
        report.cost[shard.id] = (sum(result["per_depth"]), result["seconds"])
        if on_task:
            if report.name == "enumerate":
                on_task((result["keys"], result["rows"], result["per_depth"]))
            elif report.name == "keys":
                on_task((None, None, result["per_depth"]))
            else:
                on_task((None,))

    def repeated(self, on_task: Callable | None = None, on_phase: Callable | None = None) -> tuple[list[int], parallel.InMemoryGraphs]:
        """The counts per depth, and every graph whose key at least one other graph shares, in shard order.

        Up to ``KEEP_GRAPHS_MAX_OPS`` operators one pass returns every graph, packed, and the
        repeated keys pick them out; beyond, a keys-only pass reduced where the keys are
        (:meth:`repeated_keys`), then a second pass collects the graphs with repeated keys.
        """
        if self.settings.max_ops > parallel.KEEP_GRAPHS_MAX_OPS:
            key_pass, wanted = self.repeated_keys(on_task)
            if on_phase:
                on_phase("collect")
            return key_pass.per_depth, parallel.InMemoryGraphs(*self.collect_rows(wanted, on_task), self.packer)
        key_pass = self.count_and_key(on_task)
        values, multiplicity = np.unique(key_pass.keys, return_counts=True)
        chosen = np.flatnonzero(np.isin(key_pass.keys, values[multiplicity > 1]))
        return key_pass.per_depth, parallel.InMemoryGraphs(key_pass.keys[chosen], key_pass.rows[chosen], self.packer)

    def count_and_key(self, on_task: Callable | None = None) -> KeyPass:
        """The one-pass enumeration: every graph's key and packed row, in shard order, and the counts."""
        results = self._run("enumerate", _key_shard, (True,), on_task)
        per_depth = [sum(r["per_depth"][k] for r in results) for k in range(self.settings.max_ops + 1)]
        keys = np.frombuffer(b"".join(r["keys"] for r in results), dtype=np.int64)
        rows = np.frombuffer(b"".join(r["rows"] for r in results), dtype=self.packer.dtype).reshape(-1, self.packer.width)
        return KeyPass(keys, rows, per_depth)

    def repeated_keys(self, on_task: Callable | None = None) -> tuple[KeyPass, np.ndarray]:
        """The keys-only first pass, reduced where the keys are: the counts, and the keys seen more than once.

        Each shard returns its keys cut into :data:`KEY_RANGES` ranges; one reducer task per
        range finds the repeated keys in it. The driver gets only the repeated keys (the
        ones pass 2 collects), never all of them. See :func:`~taso.generator.parallel.shared_graphs`.
        """
        results = self._run("keys", _keys_by_range, (KEY_RANGES,), on_task, ranges=KEY_RANGES)
        per_depth = [sum(r["per_depth"][k] for r in results) for k in range(self.settings.max_ops + 1)]
        reduce = self._remote(_repeated_in_range)
        repeated = [reduce.remote(*[r["ranges"][k] for r in results]) for k in range(KEY_RANGES)]
        wanted = np.concatenate(self._ray.get(repeated))
        return KeyPass(np.zeros(0, np.int64), None, per_depth), wanted

    def collect_rows(self, wanted: np.ndarray, on_task: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The second pass: the keys and packed rows of every graph whose key is in ``wanted``, in shard order."""
        wanted = np.asarray(wanted, dtype=np.int64)
        stage = f"collect-{hashlib.sha256(wanted.tobytes()).hexdigest()[:12]}"
        results = self._run(stage, _collect_shard, (self._ray.put(wanted),), on_task)
        self.backend.reports[-1].name = "collect"
        keys = np.frombuffer(b"".join(r["keys"] for r in results), dtype=np.int64)
        rows = np.frombuffer(b"".join(r["rows"] for r in results), dtype=self.packer.dtype).reshape(-1, self.packer.width)
        return keys, rows

    def map(self, fn: Callable, items: list, chunk: int = 1000, name: str | None = None) -> list:
        """``fn`` over chunks of ``items`` as Ray tasks; the results flattened, in order (a stage is checkpointed whole,
        not by chunks: ``name`` is not used).

        The stages after enumeration run here (see :func:`~taso.generator.pipeline.generate`):
        the items are picklable candidates, decoded in the task. Each call is recorded in
        ``backend.stages``; a task whose worker dies is retried like a shard.
        """
        start = time.perf_counter()
        chunks = [items[i : i + chunk] for i in range(0, len(items), chunk)]
        report = MapReport(fn.__name__, len(items), len(chunks))
        self.backend.stages.append(report)
        remote = self._remote(_map_chunk)
        refs = [remote.remote(self._settings_ref, fn, c) for c in chunks]
        results: dict = {}
        bar = tqdm(total=len(refs), desc=fn.__name__, unit="chunk", file=sys.stderr, disable=not self.backend.progress, dynamic_ncols=True)
        with bar:
            pending = set(refs)
            while pending:
                done, _ = self._ray.wait(list(pending), num_returns=1)
                for ref in done:
                    worker, seconds, results[ref] = self._ray.get(ref)
                    report.workers[worker] = report.workers.get(worker, 0) + 1
                    report.task_seconds += seconds
                pending.difference_update(done)
                bar.update(len(done))
        report.seconds = time.perf_counter() - start
        return [result for ref in refs for result in results[ref]]


# ---- verification ---------------------------------------------------------------------------------------


def _verify_one(data: dict, settings) -> dict:
    from taso.verifier.verify import verify_rule

    from taso.rules import Rule

    return verify_rule(Rule.from_json(data), settings).to_json()


def verify_rules_on_ray(rules: Sequence, settings, address: str | None = None, num_cpus: int | None = None,
                        progress: Callable | None = None, grace_s: float = 60.0, on_result: Callable | None = None) -> list:
    """Verifies rules as Ray tasks, one per rule; returns them in input order, each with its status.

    Z3's own timeout (``settings.timeout_s``) bounds a proof. At most one task per CPU of
    the cluster is in flight, so a task starts when it is submitted; one still running
    ``grace_s`` past twice the timeout (a solver stuck outside its timeout, a lost node) is
    cancelled and its rule is "unknown", so one rule never holds up the run.

    Args:
        rules: the candidates.
        settings: :class:`taso.verifier.verify.Settings`.
        address: a Ray cluster to join; None starts a local one.
        num_cpus: CPUs of a local cluster (None: all).
        progress: wraps the stream of finished rules (e.g. a tqdm bar).
        on_result: called with (position in ``rules``, verified rule) as each finishes (a journal).
    """
    from taso.rules import Rule

    started = _connect(address, num_cpus)
    import ray

    try:
        remote = ray.remote(max_retries=MAX_RETRIES, num_cpus=1)(_verify_one)
        settings_ref = ray.put(settings)
        limit = settings.timeout_s * 2 + grace_s  # two proof attempts share the timeout; a margin for the pre-checks
        window = max(1, int(ray.cluster_resources().get("CPU", 1)))
        results: list[dict | None] = [None] * len(rules)
        submit = lambda i: remote.remote(rules[i].to_json(), settings_ref)  # noqa: E731
        wrap = progress or (lambda it: it)
        def verified(index: int) -> Rule:
            data = results[index]
            return Rule.from_json(data) if data is not None else \
                rules[index].with_status("unknown", {"reason": f"timeout: the Ray task ran over {limit:.0f} s", "seconds": limit})

        for index in wrap(_windowed(ray, submit, len(rules), window, limit, results)):
            if on_result:
                on_result(index, verified(index))  # in finishing order
        return [verified(i) for i in range(len(rules))]
    finally:
        if started:
            ray.shutdown()


def _windowed(ray, submit: Callable, count: int, window: int, limit: float, results: list):
    """Runs ``submit(i)`` for every index with at most ``window`` in flight; yields once per finished or
    timed-out task, filling ``results`` (None for a task cancelled after ``limit`` seconds)."""
    next_index, pending = 0, {}  # ref -> (index, submitted at)
    while next_index < count or pending:
        while next_index < count and len(pending) < window:
            pending[submit(next_index)] = (next_index, time.monotonic())
            next_index += 1
        done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
        for ref in done:
            index, _ = pending.pop(ref)
            results[index] = ray.get(ref)
            yield index
        now = time.monotonic()
        for ref, (index, since) in list(pending.items()):
            if now - since > limit:
                finished, _ = ray.wait([ref], timeout=0)  # one that finished meanwhile is kept, not killed
                if finished:
                    results[index] = ray.get(ref)
                else:
                    ray.cancel(ref, force=True)  # a solver stuck in C ignores a polite cancel
                del pending[ref]
                yield index
