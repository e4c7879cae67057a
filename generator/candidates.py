"""From repeated keys to candidates, one key range at a time: pairing, common subgraphs, renamings.

Graphs with equal keys pair into candidates (:func:`~taso.generator.pairing.pair_specs`). At
depth 4 that is tens of millions of pairs, too many to hold or to canonicalise one by one, so
this stage streams: the graphs of one key range are paired, cleared of common subgraphs,
and brought to canonical forms in the workers, and only the first candidate of each form
survives the range (:class:`RangeCandidates`, small, and kept in a resumable run's
directory).

Two facts make the streaming exact, i.e. the kept candidates are the ones that pairing every
graph at once, keeping the first candidate per form and then dropping common subgraphs
would keep:

* Candidates are ordered by key, then by their graphs (``pair_specs``), and a key lies in
  one range; ranges are taken in key order, so "first met" is the same candidate.
* Sharing a subgraph is invariant under input renaming (renaming both sides maps a shared
  operator to a shared operator), so a form's candidates all share one, or none does:
  dropping them before the renaming stage removes whole forms.

The first half of the common-subgraph test, an operator over the same pool tensors on both
sides, reads the packed rows directly, for every pair at once (:func:`share_leaf_op`): it
drops most pairs before any graph is decoded. The rest of the test and the canonical form
run in the workers (:func:`clear_summaries`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .enumerate import GraphSpec
from .pairing import Decoder
from .parallel import Packer, current_context
from .prune import Found, canonicalize, shares_subgraph

__all__ = ["RangeCandidates", "bucket_pairs", "share_leaf_op", "clear_summaries", "range_candidates"]

Pair = tuple[int, GraphSpec, GraphSpec]


@dataclass(frozen=True)
class RangeCandidates:
    """What one key range gave.

    Attributes:
        pairs: candidate pairs (graphs with equal keys).
        clear: of those, pairs without a common subgraph.
        kept: the first clear candidate of each canonical form, in the order met.
    """

    pairs: int
    clear: int
    kept: list[Found]


def bucket_pairs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of positions (i < j) whose keys are equal, for keys sorted; built per bucket size, not per pair."""
    if not len(keys):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    sizes = np.diff(np.concatenate([starts, [len(keys)]]))
    firsts, seconds = [], []
    for size in np.unique(sizes[sizes > 1]):
        a, b = np.triu_indices(int(size), 1)
        base = starts[sizes == size][:, None]
        firsts.append((base + a).ravel())
        seconds.append((base + b).ravel())
    if not firsts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(firsts), np.concatenate(seconds)


def share_leaf_op(rows: np.ndarray, first: np.ndarray, second: np.ndarray, slot: int, max_ops: int, pool_size: int) -> np.ndarray:
    """Whether the two graphs of each pair hold the same operator over pool tensors only (or over nothing).

    Reads the packed rows (:class:`~taso.generator.parallel.Packer`): an operator's slot
    (variant, sizes, arguments, -1 padded) is equal exactly when the operator is, so this is
    the exact first half of :func:`~taso.generator.prune.shares_subgraph`.
    """
    slots = rows[:, : slot * max_ops].reshape(len(rows), max_ops, slot).astype(np.int16)
    leaf = (slots[:, :, 0] >= 0) & np.all(slots[:, :, 3:] < pool_size, axis=2)
    shared = np.zeros(len(first), dtype=bool)
    for i in range(max_ops):
        for j in range(max_ops):
            both = leaf[first, i] & leaf[second, j]
            at = np.flatnonzero(both & ~shared)
            shared[at] = np.all(slots[first[at], i] == slots[second[at], j], axis=1)
    return shared


def clear_summaries(pairs: list[Pair]) -> list[tuple | None]:
    """For a worker: None for a pair that shares a subgraph, else its canonical summary (form, rename items, swapped, trivial)."""
    decode = Decoder(current_context())
    out: list[tuple | None] = []
    for pair in pairs:
        candidate = decode.candidate(*pair)
        if shares_subgraph(candidate):
            out.append(None)
            continue
        c = canonicalize(candidate)
        out.append((c.form, tuple(sorted(c.rename.items())), c.swapped, c.trivial))
    return out


def range_candidates(keys: np.ndarray, rows: np.ndarray, packer: Packer, pool_size: int, map_pairs) -> RangeCandidates:
    """Pairs the graphs of one key range and keeps the first clear candidate of each form.

    Only the graphs of pairs that pass :func:`share_leaf_op` are decoded; those pairs go to
    the workers in :func:`~taso.generator.pairing.pair_specs`' order (by key, then by graph).

    Args:
        keys, rows: every graph of the range whose key another graph has, packed.
        packer: how the rows are packed.
        pool_size: the pool's tensor count (tensors below it are inputs).
        map_pairs: runs :func:`clear_summaries` over a list of pairs in the workers, in order.
    """
    order = np.argsort(keys, kind="stable")
    keys, rows = keys[order], rows[order]
    first, second = bucket_pairs(keys)
    distinct = ~share_leaf_op(rows, first, second, packer.slot, packer.max_ops, pool_size)
    first, second = first[distinct], second[distinct]
    needed = np.unique(np.concatenate([first, second]))
    specs = dict(zip(needed.tolist(), packer.unpack_many(rows[needed])))
    pairs = []
    for i, j in zip(first.tolist(), second.tolist()):
        a, b = specs[i], specs[j]
        if a != b:
            pairs.append((int(keys[i]), *((a, b) if a < b else (b, a))))
    pairs.sort()
    kept: dict[bytes, Found] = {}
    clear = 0
    for pair, summary in zip(pairs, map_pairs(pairs), strict=True):
        if summary is not None:
            clear += 1
            if summary[0] not in kept:
                kept[summary[0]] = Found(pair, *summary)
    return RangeCandidates(len(distinct), clear, list(kept.values()))
