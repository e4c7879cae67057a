"""Running the enumeration and the stages after it: worker processes, shards spilled to disk.

The enumeration is cut into shards (:mod:`~taso.generator.shards`): the graphs under a first
operator, or under a range of its second operators. Processes walk them independently and
each writes its shard's graphs to the run directory (:class:`~taso.generator.store.ShardStore`):
the keys sorted, their positions, and every graph packed in a few dozen bytes
(:class:`Packer`). Only graphs whose key occurs more than once can pair; they are picked out
one key range at a time over every shard's file (:func:`repeated_graphs`) and merged in shard
order, so the output does not depend on the number of processes, and memory does not grow
with the number of graphs. The same processes then run the stages after pairing on chunks of
candidates (:meth:`Workers.map`): canonical forms, common subgraphs, the float check, instance
facts and generalisation. A candidate travels as its graph specs (picklable), never decoded:
decoded graphs hold the operators' functions.

With a run directory of its own (``taso generate --run-dir``) a run is resumable: a killed
run, started again with ``--resume``, reuses every shard and stage that finished and the
finished chunks of the stage it was in.
"""

from __future__ import annotations

import multiprocessing
import resource
import struct
import sys
import tempfile
import time
import weakref
from array import array
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from taso.errors import TasoError

from .enumerate import Context, Enumerator, GraphSpec, Leaves, OpRef
from .settings import Settings
from .shards import DEFAULT_SHARDS, Shard, plan_shards, walk_shard
from .steps import StepTable
from .store import ShardStore, StoredShard, write_shard

__all__ = ["KEEP_GRAPHS_MAX_OPS", "Packer", "KeyPass", "Workers", "shared_graphs", "walk_rows", "RepeatedGraphs", "InMemoryGraphs",
           "key_range_bounds", "current_context", "current_settings"]

# The Ray back end's first pass keeps every graph in memory up to this many operators; beyond it,
# keys only and a second pass (:mod:`~taso.generator.cluster`). The local pool always spills to disk.
KEEP_GRAPHS_MAX_OPS = 3
# The stage name of the local pass's shard files.
SPILL = "graphs"
# About this many keys (of all graphs) make one key range of :class:`RepeatedGraphs`: its repeated graphs are
# unpacked and paired together (at depth 4 about one graph in four has a repeated key).
RANGE_KEYS = 1 << 22
# A long stage's finished chunks are kept at most this often in a resumable run.
CHECKPOINT_SECONDS = 30.0


class Packer:
    """Packs graph specs into fixed-width rows of small ints: one slot per operator, then outputs.

    An operator's slot is (variant, sizes[0], sizes[1], args...), ``max_args`` arguments, -1
    where absent; then up to two outputs per operator, -1 padded. Rows are int8 when every
    value fits.

    Args:
        max_ops: the largest graph.
        largest: the largest value a row holds (variant count, tensor count, split size).
        max_args: the largest operator arity (3 for TASO's ops, 5 with batch norm).
    """

    def __init__(self, max_ops: int, largest: int, max_args: int = 3):
        self.max_ops = max_ops
        self.slot = 3 + max_args
        self.width = (self.slot + 2) * max_ops
        self.dtype = np.int8 if largest < 127 else np.int16
        self._struct = struct.Struct(f"<{self.width}{'b' if self.dtype == np.int8 else 'h'}")
        self._codes: dict[OpRef, tuple[int, ...]] = {}
        self._tables: weakref.WeakKeyDictionary[StepTable, np.ndarray] = weakref.WeakKeyDictionary()  # dropped with the table
        self._little = np.dtype(self.dtype).newbyteorder("<")
        # Padding after a row of n values: up to the outputs, then to the end.
        ops_end = self.slot * max_ops
        self._pad = {n: (-1,) * ((ops_end if n <= ops_end else self.width) - n) for n in range(self.width + 1)}

    def _encode(self, op: OpRef) -> tuple[int, ...]:
        code = self._codes.get(op)
        if code is None:
            vi, sizes, args = op
            code = self._codes[op] = (vi, *(sizes or (-1, -1)), *args, *(-1,) * (self.slot - 3 - len(args)))
        return code

    def pack(self, ops: list, last: OpRef | None, outputs: list) -> bytes:
        """One row: the operators (``ops`` then ``last``), then the outputs."""
        row = [x for op in ops for x in self._encode(op)]
        if last is not None:
            row.extend(self._encode(last))
        row.extend(self._pad[len(row)])
        row.extend(outputs)
        row.extend(self._pad[len(row)])
        return self._struct.pack(*row)

    def pack_leaves(self, leaves: Leaves) -> bytes:
        """The rows of a batch of last-level graphs, as :meth:`pack` would write them one by one, built as one array."""
        rows = np.full((len(leaves.rows), self.width), -1, dtype=self.dtype)
        prefix = [x for op in leaves.ops for x in self._encode(op)]
        ops_end = len(prefix) + self.slot
        rows[:, : len(prefix)] = prefix
        rows[:, len(prefix) : ops_end] = self._table_codes(leaves.table)[leaves.rows]
        room = self.width - ops_end
        rows[:, ops_end:] = [outputs + [-1] * (room - len(outputs)) for outputs in leaves.outputs]
        return rows.astype(self._little, copy=False).tobytes()

    def _table_codes(self, table: StepTable) -> np.ndarray:
        """Every row's operator slot for a step table (tables are few and kept, so this is memoised)."""
        codes = self._tables.get(table)
        if codes is None:
            codes = self._tables[table] = table.slots(self.slot).astype(self.dtype)
        return codes

    def unpack(self, row: np.ndarray) -> GraphSpec:
        return self._spec(np.asarray(row).tolist())

    def unpack_many(self, rows: np.ndarray) -> list[GraphSpec]:
        """Every row's graph; the rows are read at once (element by element, a mapped array costs microseconds each)."""
        return [self._spec(values) for values in np.asarray(rows).tolist()]

    def _spec(self, values: list[int]) -> GraphSpec:
        ops = []
        slot = self.slot
        for i in range(self.max_ops):
            vi, p, q, *args = values[slot * i : slot * (i + 1)]
            if vi < 0:
                break
            ops.append((vi, () if p < 0 else (p, q), tuple(a for a in args if a >= 0)))
        return GraphSpec(tuple(ops), tuple(t for t in values[slot * self.max_ops :] if t >= 0))


@dataclass
class KeyPass:
    """The first pass: every graph's key, the graphs (packed) when kept, and the count per operator count."""

    keys: np.ndarray
    rows: np.ndarray | None
    per_depth: list[int]


_WORKER: Enumerator | None = None
_PACKER: Packer | None = None  # the worker's packer, kept for its memo of step table codes
_ROOTS: list[OpRef] = []  # the worker's first operators, computed once


def _init_worker(settings: Settings) -> None:
    global _WORKER, _PACKER, _ROOTS
    _WORKER = Enumerator(settings)
    _PACKER = _packer(_WORKER)
    _ROOTS = _WORKER.roots()


def worker_roots() -> list[OpRef]:
    """The first operators of this process's enumerator (see :func:`current_context`)."""
    return _ROOTS


def current_context() -> Context:
    """The context of this process's enumerator (in a worker, or in the parent once :class:`Workers` started)."""
    return _WORKER.context


def current_settings() -> Settings:
    """The settings of this process's enumerator (see :func:`current_context`)."""
    return _WORKER.settings


def _packer(enumerator: Enumerator) -> Packer:
    max_ops = enumerator.settings.max_ops
    largest_dim = max(max(c.shape, default=1) for c in enumerator.pool.classes)
    # A split size is a concat operand's size: at most a chain of max_ops concatenations.
    largest = max(len(enumerator.variants), len(enumerator.pool) + 2 * max_ops, (max_ops + 1) * largest_dim)
    return Packer(max_ops, largest, max(3, max(v.arity for v in enumerator.variants)))


def walk_rows(enumerator: Enumerator, root: OpRef, shard: Shard, keep: bool) -> tuple[array, bytearray, list[int]]:
    """One shard's graphs: every key in enumeration order, the packed rows when ``keep``, the count per operator count."""
    keys = array("q")
    rows = bytearray()
    per_depth = [0] * (enumerator.settings.max_ops + 1)
    packer = _PACKER if _WORKER is enumerator else _packer(enumerator)
    pack = packer.pack

    def visit(key, ops, last, outputs):
        keys.append(key)
        per_depth[len(ops) + (last is not None)] += 1
        if keep:
            rows.extend(pack(ops, last, outputs))

    def leaves(batch: Leaves):
        keys.extend(batch.keys)
        per_depth[len(batch.ops) + 1] += len(batch.keys)
        if keep:
            rows.extend(packer.pack_leaves(batch))

    walk_shard(enumerator, root, shard, visit, leaves)
    return keys, rows, per_depth


def _spill_shard(task: tuple[int, Shard, str]) -> tuple[int, list[int], float]:
    """Pass 1 in a worker: walks one shard and writes its graphs to ``path`` (keys sorted, with their positions, and rows).

    Only the counts travel back: the parent never holds every graph.
    """
    index, shard, path = task
    start = time.perf_counter()
    keys, rows, per_depth = walk_rows(_WORKER, _ROOTS[shard.root], shard, keep=True)
    keys = np.frombuffer(keys, dtype=np.int64)
    order = np.argsort(keys, kind="stable").astype(np.int32)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # the worker's peak so far
    write_shard(path, SPILL, shard.id, {"keys": keys[order].tobytes(), "order": order.tobytes(), "rows": bytes(rows)},
                {"per_depth": per_depth, "seconds": round(seconds, 6), "worker_peak_bytes": peak})
    return index, per_depth, seconds


def key_range_bounds(ranges: int) -> np.ndarray:
    """The ``ranges - 1`` bounds that cut the signed 64-bit keys into equal ranges."""
    return np.array([-(1 << 63) + k * ((1 << 64) // ranges) for k in range(1, ranges)], dtype=np.int64)


class RepeatedGraphs:
    """The spilled graphs whose key at least one other graph has, a key range at a time.

    Each shard's keys are sorted, so a key range is a slice of every shard's file: reducing
    one range holds its keys only (16 bytes each while reduced), never all of them, and the
    graphs of a range are unpacked only when :meth:`graphs` asks for them.

    Args:
        shards: the spilled shards, in shard order.
        packer: how their rows are packed.
        range_keys: about how many keys (of all graphs) one range holds.
    """

    def __init__(self, shards: list[StoredShard], packer: Packer, range_keys: int = RANGE_KEYS):
        self._shards, self._packer = shards, packer
        self._keys = [s.array("keys", np.int64) for s in shards]
        total = sum(len(k) for k in self._keys)
        self.ranges = max(1, -(-total // range_keys))
        bounds = key_range_bounds(self.ranges)
        self._cuts = [np.concatenate([[0], np.searchsorted(k, bounds), [len(k)]]) for k in self._keys]

    def rows(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """The keys and packed rows of the graphs of range ``r`` (of ``ranges``) whose key another graph has.

        In shard order, then enumeration order; the rows are read from the files, not decoded.
        """
        parts = [k[c[r] : c[r + 1]] for k, c in zip(self._keys, self._cuts)]
        values, multiplicity = np.unique(np.concatenate(parts), return_counts=True)
        repeated = values[multiplicity > 1]
        keys: list[np.ndarray] = []
        rows: list[np.ndarray] = []
        for shard, part, c in zip(self._shards, parts, self._cuts) if len(repeated) else ():
            at = np.minimum(np.searchsorted(repeated, part), len(repeated) - 1)
            hits = np.flatnonzero(repeated[at] == part)
            if not len(hits):
                continue
            positions = np.asarray(shard.array("order", np.int32)[hits + c[r]])
            by_position = np.argsort(positions, kind="stable")
            keys.append(np.asarray(part[hits[by_position]]))
            rows.append(np.asarray(shard.array("rows", self._packer.dtype, self._packer.width)[positions[by_position]]))
        if not keys:
            return np.zeros(0, np.int64), np.zeros((0, self._packer.width), self._packer.dtype)
        return np.concatenate(keys), np.concatenate(rows)

    def graphs(self, r: int) -> list[tuple[int, GraphSpec]]:
        """(key, graph) for the repeated keys of range ``r``, decoded (see :meth:`rows`)."""
        keys, rows = self.rows(r)
        return list(zip(keys.tolist(), self._packer.unpack_many(rows)))


class InMemoryGraphs:
    """Graphs already gathered in memory (the Ray back end's), cut into key ranges like :class:`RepeatedGraphs`.

    Args:
        keys, rows: the graphs whose key another graph has, packed.
        packer: how the rows are packed.
        range_graphs: about how many of these graphs one range holds.
    """

    def __init__(self, keys: np.ndarray, rows: np.ndarray, packer: Packer, range_graphs: int = RANGE_KEYS // 4):
        order = np.argsort(keys, kind="stable")
        self._keys, self._rows, self._packer = keys[order], rows[order], packer
        self.ranges = max(1, -(-len(keys) // range_graphs))
        self._cuts = np.concatenate([[0], np.searchsorted(self._keys, key_range_bounds(self.ranges)), [len(keys)]])

    def rows(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        return self._keys[self._cuts[r] : self._cuts[r + 1]], self._rows[self._cuts[r] : self._cuts[r + 1]]

    def graphs(self, r: int) -> list[tuple[int, GraphSpec]]:
        keys, rows = self.rows(r)
        return list(zip(keys.tolist(), self._packer.unpack_many(rows)))


class Workers:
    """The enumeration's processes, kept for the enumeration and every stage after it (each keeps its caches).

    Use as a context manager. With ``jobs=1`` everything runs in this process.

    Args:
        settings: what to enumerate.
        jobs: worker processes.
        run_dir: the run directory (:class:`~taso.generator.store.ShardStore`) that makes the run
            resumable; None: a temporary one, removed at the end.
        resume: reuse what ``run_dir`` holds.
        shards: about how many shards of equal work to plan (:func:`~taso.generator.shards.plan_shards`).
    """

    def __init__(self, settings: Settings, jobs: int = 1, run_dir: str | None = None, resume: bool = False,
                 shards: int = DEFAULT_SHARDS):
        self.settings, self.jobs = settings, max(1, jobs)
        self.resume = resume
        self._pool = None
        self._tmp = None if run_dir else tempfile.TemporaryDirectory(prefix="taso-generate-")
        self.store: ShardStore | None = ShardStore(run_dir or self._tmp.name, settings, resume)
        self.persistent = run_dir is not None
        self.reused: dict[str, int] = {}
        if self.jobs > 1:
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self._pool = ctx.Pool(self.jobs, initializer=_init_worker, initargs=(settings,))
        _init_worker(settings)
        self.context = _WORKER.context
        self.roots: list[OpRef] = _ROOTS
        self.packer = _packer(_WORKER)
        self.shards = plan_shards(_WORKER, shards)

    @property
    def units(self) -> int:
        """Units of work of the enumeration: its shards."""
        return len(self.shards)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
        if self._tmp is not None:
            self._tmp.cleanup()

    def spill(self, on_task: Callable | None = None) -> tuple[list[StoredShard], list[int]]:
        """The enumeration: every shard's graphs written to the run directory; the files, in shard order, and the counts.

        A resumed run reuses the shards whose files check out (``reused["shards"]``).

        Args:
            on_task: called after each shard with ``(None, None, graphs per depth)``.
        """
        stored: list[StoredShard | None] = [None] * len(self.shards)
        if self.resume:
            for i, shard in enumerate(self.shards):
                if (found := self.store.open(SPILL, shard)) is not None:
                    stored[i] = found
                    if on_task:
                        on_task((None, None, found.info["per_depth"]))
            self.reused["shards"] = sum(s is not None for s in stored)
        tasks = [(i, shard, self.store.path(SPILL, shard)) for i, shard in enumerate(self.shards) if stored[i] is None]
        done = map(_spill_shard, tasks) if self._pool is None else self._pool.imap_unordered(_spill_shard, tasks, chunksize=1)
        for index, per_depth, _ in done:
            stored[index] = self.store.open(SPILL, self.shards[index])
            if stored[index] is None:
                raise TasoError(f"{self.store.path(SPILL, self.shards[index])}: the shard just written does not check out "
                                "(is the disk full, or another run using this directory?)")
            if on_task:
                on_task((None, None, per_depth))
        per_depth = [sum(s.info["per_depth"][k] for s in stored) for k in range(self.settings.max_ops + 1)]
        return stored, per_depth

    def repeated(self, on_task: Callable | None = None, on_phase: Callable | None = None) -> tuple[list[int], RepeatedGraphs]:
        """The enumeration; the counts per depth and the graphs whose key another graph has, by key range."""
        stored, per_depth = self.spill(on_task)
        return per_depth, RepeatedGraphs(stored, self.packer)

    def stage(self, name: str, compute: Callable[[], object]):
        """A stage's result: reused from the run directory when resuming, else computed (and kept when the run is resumable)."""
        if self.resume and (found := self.store.load_stage(name)) is not None:
            self.reused[name] = 1
            return found
        value = compute()
        if self.persistent:
            self.store.save_stage(name, value)
        return value

    def map(self, fn: Callable, items: list, chunk: int = 1000, name: str | None = None) -> list:
        """``fn`` over chunks of ``items`` in the worker processes; the results flattened, in order.

        ``fn`` takes a list and returns a list of the same length; it may call
        :func:`current_context` for the pool and variants. With a ``name`` and a resumable run,
        the finished chunks are kept every ``CHECKPOINT_SECONDS``: a resumed run does only the rest.
        """
        chunks = [items[i : i + chunk] for i in range(0, len(items), chunk)]
        keep = name is not None and self.persistent
        partial = f"{name}.partial"
        done_parts: list = (self.store.load_stage(partial) or []) if keep and self.resume else []
        if len(done_parts) > len(chunks):
            done_parts = []
        todo = chunks[len(done_parts):]
        results = map(fn, todo) if self._pool is None else self._pool.imap(fn, todo)
        saved = time.monotonic()
        for part in results:
            done_parts.append(part)
            if keep and time.monotonic() - saved > CHECKPOINT_SECONDS:
                self.store.save_stage(partial, done_parts)
                saved = time.monotonic()
        if keep:
            self.store.drop_stage(partial)
        return [result for part in done_parts for result in part]


def shared_graphs(workers: Workers, on_task: Callable | None = None, on_phase: Callable | None = None) -> tuple[KeyPass, list[tuple[int, GraphSpec]]]:
    """Every graph whose key at least one other graph shares (range by range), with the counts per depth.

    Args:
        workers: the processes (local or Ray).
        on_task: progress callback, after each shard.
        on_phase: called with ``"collect"`` when a back end starts a second pass.
    """
    per_depth, source = workers.repeated(on_task, on_phase)
    return KeyPass(np.zeros(0, np.int64), None, per_depth), [g for r in range(source.ranges) for g in source.graphs(r)]
