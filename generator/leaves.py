"""The last operator of every graph: found a parent at a time, evaluated many parents at a time.

Nearly all enumerated graphs are leaves: a parent graph of ``max_ops - 1`` operators plus one
last step, never grown further. A leaf needs only its key (the digest of its outputs'
fingerprints), so its step is evaluated for fingerprints alone. Profiling showed evaluation
as most of a leaf's cost once the steps came from tables (:mod:`~taso.generator.steps`), and
that cost was per-call overhead: a 3x3 convolution of one 2x4x5x5 image costs about as much
as of fifty. The steps that read a parent's newest tensor are new for every parent, but the
*siblings* (parents that share a grandparent) ask for the same steps on their own newest
tensors: conv2d with the same kernel on each sibling's image. So the enumerator snapshots the
siblings (:class:`Parent`), gathers their steps' evaluations (:class:`LeafEvaluations`),
runs each group of alike steps as one NumPy call where the variant declares a batch axis
(:attr:`~taso.generator.opset.Variant.batched`), and only then hands out each parent's
leaves (:class:`Leaves`), in the order the one-by-one enumeration would have.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .fingerprint import ExactEvaluator
from .steps import StepTable

__all__ = ["Leaves", "LeafEvaluations", "Parent"]

# The most steps evaluated in one call: large enough to amortise the call, small enough to stay in cache.
GROUP_LIMIT = 256


@dataclass
class Leaves:
    """The graphs of ``max_ops`` operators under one parent: the parent's operators plus one step each.

    Attributes:
        ops: the parent's operators (copy what you keep).
        table: the step table the steps come from.
        rows: each graph's last operator, as a row of ``table``.
        keys: each graph's key (:func:`~taso.generator.fingerprint.graph_key`).
        outputs: each graph's output tensor indices, sorted by fingerprint.
    """

    ops: list
    table: StepTable
    rows: list[int]
    keys: list[int]
    outputs: list[list[int]]

    def last(self) -> list[tuple]:
        """Each graph's last operator."""
        op = self.table.op
        return [op(row) for row in self.rows]


class LeafEvaluations:
    """The output fingerprints of last steps requested for a batch of parents: memo hits at once, the rest run in groups.

    One object serves one batch of siblings (see :meth:`request_rows`).

    Args:
        evaluator: evaluates a step (one at a time, or a group with ``apply_batched``).
        memo: fingerprints of steps seen before, by (variant index, sizes, argument
            fingerprints); shared across batches, emptied when it reaches ``limit``.
        limit: see ``memo`` (0: nothing is memoised).
    """

    def __init__(self, evaluator: ExactEvaluator, memo: dict, limit: int):
        self._evaluator, self._memo, self._limit = evaluator, memo, limit
        self.results: list[tuple[int, ...] | None] = []
        self._waiting: dict[tuple, int] = {}  # memo key -> its result's index, while waiting for run()
        self._groups: dict[tuple, list] = {}  # alike steps -> [(result index, memo key, variant, params, batch positions, arrays)]
        self._shared: dict[StepTable, np.ndarray] = {}  # per table, each row's result index once requested (see request_rows)

    def request(self, step: tuple, fps: list[int], arrays: list) -> int:
        """Asks for a step's output fingerprints; returns the index of ``results`` they will be at after :meth:`run`.

        Args:
            step: (variant, sizes, argument tensors, params, output shapes), as a step table lists it.
            fps: the graph's tensors' fingerprints; ``arrays``: their residues.
        """
        v, sizes, args, params, out_shapes = step
        memo_key = (v.index, sizes, *[fps[t] for t in args])
        hit = self._memo.get(memo_key)
        if hit is not None:
            self.results.append(hit)
            return len(self.results) - 1
        index = self._waiting.get(memo_key)
        if index is not None:
            return index
        index = len(self.results)
        fps, arrays = list(memo_key[2:]), [arrays[t] for t in args]
        positions = v.batch_positions(tuple(a.ndim for a in arrays), len(out_shapes[0])) if v.batched and out_shapes else ()
        if not positions:
            self.results.append(self._remember(memo_key, tuple(f for f, _ in self._evaluator.apply(v, sizes, params, fps, arrays))))
            return index
        self.results.append(None)
        self._waiting[memo_key] = index
        alike = (v.index, sizes, positions, *(arrays[k].shape if k in positions else fps[k] for k in range(len(fps))))
        self._groups.setdefault(alike, []).append((index, memo_key, v, params, positions, arrays))
        return index

    def request_rows(self, table: StepTable, rows: np.ndarray, fresh: np.ndarray, fps: list[int], arrays: list) -> np.ndarray:
        """:meth:`request` for rows of a graph's step table; returns the indices of their ``results``.

        Siblings differ only in their newest operator, so a row that reads none of its outputs
        (not ``fresh``) is the same step, on the same tensors, in every sibling with this
        table: it is requested by the first and looked up, as an array, by the others.

        Args:
            table: the graph's step table; ``rows``: the rows asked for.
            fresh: per row, whether it reads an output of the graph's newest operator.
            fps: the graph's tensors' fingerprints; ``arrays``: their residues.
        """
        step, request = table.step, self.request
        shared = self._shared.get(table)
        if shared is None:
            shared = self._shared[table] = np.full(len(table), -1, dtype=np.int64)
        indices = np.empty(len(rows), dtype=np.int64)
        indices[fresh] = [request(step(row), fps, arrays) for row in rows[fresh].tolist()]
        kept = rows[~fresh]
        found = shared[kept]
        for i in np.flatnonzero(found < 0).tolist():
            row = int(kept[i])
            found[i] = shared[row] = request(step(row), fps, arrays)
        indices[~fresh] = found
        return indices

    def run(self) -> None:
        """Evaluates every waiting step, a group of alike steps at a time."""
        evaluator = self._evaluator
        linear: dict = {}  # conv2d and conv2d+relu on the same images: one convolution (see apply_batched)
        for group in self._groups.values():
            for start in range(0, len(group), GROUP_LIMIT):
                part = group[start : start + GROUP_LIMIT]
                _, memo_key, v, params, positions, arrays = part[0]
                if len(part) == 1:
                    outs = [tuple(f for f, _ in evaluator.apply(v, memo_key[1], params, memo_key[2:], arrays))]
                else:
                    keys = [memo_key[2:] for _, memo_key, *_ in part]
                    outs = evaluator.apply_batched(v, params, [arrays for *_, arrays in part], positions, keys, linear)
                for (index, memo_key, *_), fps in zip(part, outs):
                    self.results[index] = self._remember(memo_key, fps)
        self._groups.clear()
        self._waiting.clear()

    def _remember(self, memo_key: tuple, fps: tuple[int, ...]) -> tuple[int, ...]:
        if len(self._memo) >= self._limit:
            self._memo.clear()
        if self._limit:
            self._memo[memo_key] = fps
        return fps


@dataclass
class Parent:
    """A parent graph's state that its leaves need, kept while the evaluations of its steps wait.

    Attributes:
        ops: its operators (a copy).
        table: its step table; ``rows``: the rows that pass the order and class filters.
        requests: per row, the index of its step's fingerprints in :attr:`LeafEvaluations.results`.
        outputs: (fingerprint, tensor) of its operators' outputs that nothing reads yet.
        output_fps: the fingerprints of all its operators' outputs.
        tensors: how many tensors it holds (a leaf's outputs are numbered from there).
        pool_size: how many of those are pool tensors.
    """

    ops: list
    table: StepTable
    rows: list[int]
    requests: list[int]
    outputs: list[tuple[int, int]]
    output_fps: frozenset[int]
    tensors: int
    pool_size: int

    def leaves(self, results: list, pool_fps: frozenset[int]) -> Leaves | None:
        """The parent's leaves once their fingerprints are known: those whose new tensors duplicate none, with keys and outputs.

        Args:
            results: :attr:`LeafEvaluations.results` after its run.
            pool_fps: the pool's fingerprints.
        """
        n, n_pool, taken = self.tensors, self.pool_size, self.output_fps | pool_fps
        output_mask = self.table.output_masks
        left: dict[int, list[tuple[int, int]]] = {}  # the outputs left after a step, by the bits of those it reads
        rows, keys, outputs = [], [], []
        for row, request in zip(self.rows, self.requests):
            outs = results[request]
            if not taken.isdisjoint(outs) or (len(outs) > 1 and len(set(outs)) < len(outs)):
                continue
            read = output_mask[row]
            pairs = left.get(read)
            if pairs is None:
                pairs = left[read] = [(f, t) for f, t in self.outputs if not read >> (t - n_pool) & 1]
            pairs = pairs + [(f, n + i) for i, f in enumerate(outs)]
            pairs.sort()
            rows.append(row)
            keys.append(hash(tuple([f for f, _ in pairs])))  # graph_key, of fingerprints already sorted
            outputs.append([t for _, t in pairs])
        return Leaves(self.ops, self.table, rows, keys, outputs) if rows else None
