"""Running the enumeration: worker processes, and one or two passes over every first operator.

The graphs under each first operator form a disjoint subtree
(:meth:`~taso.generator.enumerate.Enumerator.roots`), so processes enumerate them
independently and the results are merged in root order: the output does not depend on the
number of processes. Only graphs whose key occurs more than once can pair. Up to
``KEEP_GRAPHS_MAX_OPS`` operators the first pass keeps every graph, packed in a few dozen
bytes (:class:`Packer`), and the repeated keys pick them out; beyond, the first pass keeps
only keys (8 bytes per graph, so depth 4 fits in memory) and a second pass re-enumerates
and keeps the graphs with repeated keys. The same processes then run the stages after
pairing on chunks of candidates (:meth:`Workers.map`): canonical forms, common subgraphs,
the float check, instance facts and generalisation. A candidate travels as its graph specs
(picklable), never decoded: decoded graphs hold the operators' functions.
"""

from __future__ import annotations

import multiprocessing
import os
import struct
import tempfile
import weakref
from array import array
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .enumerate import Context, Enumerator, GraphSpec, Leaves, OpRef
from .settings import Settings
from .steps import StepTable

__all__ = ["KEEP_GRAPHS_MAX_OPS", "Packer", "KeyPass", "Workers", "shared_graphs", "current_context", "current_settings"]

# Up to this many operators, the first pass keeps every graph (packed, 8 bytes per operator
# plus the key); beyond it the graphs are re-enumerated in a second pass instead.
KEEP_GRAPHS_MAX_OPS = 3


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
        values = [int(x) for x in row]
        ops = []
        for i in range(self.max_ops):
            vi, p, q, *args = values[self.slot * i : self.slot * (i + 1)]
            if vi < 0:
                break
            ops.append((vi, () if p < 0 else (p, q), tuple(a for a in args if a >= 0)))
        return GraphSpec(tuple(ops), tuple(t for t in values[self.slot * self.max_ops :] if t >= 0))


@dataclass
class KeyPass:
    """The first pass: every graph's key, the graphs (packed) when kept, and the count per operator count."""

    keys: np.ndarray
    rows: np.ndarray | None
    per_depth: list[int]


_WORKER: Enumerator | None = None
_PACKER: Packer | None = None  # the worker's packer, kept for its memo of step table codes
_WANTED: tuple[str, frozenset[int]] = ("", frozenset())


def _init_worker(settings: Settings) -> None:
    global _WORKER, _PACKER
    _WORKER = Enumerator(settings)
    _PACKER = _packer(_WORKER)


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


def _keys_of_root(task: tuple[int, OpRef, bool]) -> tuple[int, array, bytes, list[int]]:
    index, root, keep = task
    keys = array("q")
    rows = bytearray()
    per_depth = [0] * (_WORKER.settings.max_ops + 1)

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

    packer = _PACKER
    pack = packer.pack
    _WORKER.walk(root, visit, leaves)
    return index, keys, bytes(rows), per_depth


def _graphs_of_root(task: tuple[int, OpRef, str]) -> tuple[int, list[tuple[int, GraphSpec]]]:
    global _WANTED
    index, root, wanted_path = task
    if _WANTED[0] != wanted_path:
        _WANTED = (wanted_path, frozenset(np.load(wanted_path).tolist()))
    wanted = _WANTED[1]
    found: list[tuple[int, GraphSpec]] = []

    def visit(key, ops, last, outputs):
        if key in wanted:
            found.append((key, GraphSpec(tuple(ops) + ((last,) if last is not None else ()), tuple(outputs))))

    _WORKER.walk(root, visit)
    return index, found


class Workers:
    """The enumeration's processes, kept for both passes so that each keeps its evaluation cache.

    Use as a context manager. With ``jobs=1`` everything runs in this process.

    Args:
        settings: what to enumerate.
        jobs: worker processes.
    """

    def __init__(self, settings: Settings, jobs: int = 1):
        self.settings, self.jobs = settings, max(1, jobs)
        self._pool = None
        self._tmp = tempfile.TemporaryDirectory(prefix="taso-generate-")
        if self.jobs > 1:
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self._pool = ctx.Pool(self.jobs, initializer=_init_worker, initargs=(settings,))
        _init_worker(settings)
        self.context = _WORKER.context
        self.roots: list[OpRef] = _WORKER.roots()
        self.packer = _packer(_WORKER)

    @property
    def units(self) -> int:
        """Units of work per pass (one per root here; other backends split roots further)."""
        return len(self.roots)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
        self._tmp.cleanup()

    def _map(self, worker: Callable, tasks: list, on_task: Callable | None) -> list:
        """Runs ``worker`` on every task; results in task order whatever the completion order."""
        results: list = [None] * len(tasks)
        done = map(worker, tasks) if self._pool is None else self._pool.imap_unordered(worker, tasks, chunksize=1)
        for index, *rest in done:
            results[index] = rest
            if on_task:
                on_task(rest)
        return results

    def map(self, fn: Callable, items: list, chunk: int = 1000) -> list:
        """``fn`` over chunks of ``items`` in the worker processes; the results flattened, in order.

        ``fn`` takes a list and returns a list of the same length; it may call
        :func:`current_context` for the pool and variants.
        """
        chunks = [items[i : i + chunk] for i in range(0, len(items), chunk)]
        done = map(fn, chunks) if self._pool is None else self._pool.imap(fn, chunks)
        return [result for part in done for result in part]

    def count_and_key(self, keep: bool, on_task: Callable | None = None) -> KeyPass:
        """The first pass: the key of every graph (with multiplicity), the graphs when ``keep``, and the counts.

        Args:
            keep: also return every graph, packed (:class:`Packer` rows).
            on_task: called after each root's subtree with ``(keys, rows, graphs per depth)``.
        """
        results = self._map(_keys_of_root, [(i, root, keep) for i, root in enumerate(self.roots)], on_task)
        per_depth = [0] * (self.settings.max_ops + 1)
        for *_, depths in results:
            per_depth = [a + b for a, b in zip(per_depth, depths)]
        # Copied into arrays of the final size root by root, each root's buffers dropped once copied: joining them
        # instead held every graph twice at the peak (2 x 290 MB at depth 3).
        total = sum(len(np.frombuffer(k, dtype=np.int64)) for k, _, _ in results)
        keys = np.empty(total, dtype=np.int64)
        rows = np.empty((total, self.packer.width), dtype=self.packer.dtype) if keep else None
        at = 0
        for i, (root_keys, root_rows, _) in enumerate(results):
            part = np.frombuffer(root_keys, dtype=np.int64)
            keys[at : at + len(part)] = part
            if keep:
                rows[at : at + len(part)] = np.frombuffer(root_rows, dtype=self.packer.dtype).reshape(len(part), self.packer.width)
            at += len(part)
            results[i] = None
        return KeyPass(keys, rows, per_depth)

    def collect_graphs(self, wanted: np.ndarray, on_task: Callable | None = None) -> list[tuple[int, GraphSpec]]:
        """The second pass: (key, graph) for every graph whose key is in ``wanted``, in enumeration order.

        Args:
            wanted: the keys to collect.
            on_task: called after each root's subtree with ``(found,)``.
        """
        path = os.path.join(self._tmp.name, f"wanted-{len(os.listdir(self._tmp.name))}.npy")
        np.save(path, np.asarray(wanted, dtype=np.int64))
        results = self._map(_graphs_of_root, [(i, root, path) for i, root in enumerate(self.roots)], on_task)
        return [item for (found,) in results for item in found]


def shared_graphs(workers: Workers, on_task: Callable | None = None, on_phase: Callable | None = None) -> tuple[KeyPass, list[tuple[int, GraphSpec]]]:
    """Every graph whose key at least one other graph shares, with the first pass's counts.

    One pass when graphs are small enough to keep (``KEEP_GRAPHS_MAX_OPS``), else two.

    Args:
        workers: the processes.
        on_task: progress callback (see :meth:`Workers.count_and_key`).
        on_phase: called with ``"collect"`` when a second pass starts.
    """
    keep = workers.settings.max_ops <= KEEP_GRAPHS_MAX_OPS
    if not keep and hasattr(workers, "repeated_keys"):
        # NOTE: a back end that reduces keys where they are (by key range) never gathers them here.
        key_pass, wanted = workers.repeated_keys(on_task)
    else:
        key_pass = workers.count_and_key(keep, on_task)
        values, multiplicity = np.unique(key_pass.keys, return_counts=True)
        wanted = values[multiplicity > 1]
    if keep:
        chosen = np.flatnonzero(np.isin(key_pass.keys, wanted))
        graphs = [(int(key_pass.keys[i]), workers.packer.unpack(key_pass.rows[i])) for i in chosen]
        key_pass.rows = None  # free the packed graphs
        return key_pass, graphs
    if on_phase:
        on_phase("collect")
    return key_pass, workers.collect_graphs(wanted, on_task)
