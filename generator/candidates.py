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
sides, reads the graph specs directly (:func:`leaf_ops`); it runs in the parent and drops
most pairs before any is decoded. The rest of the test and the canonical form run in the
workers (:func:`clear_summaries`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .enumerate import GraphSpec
from .pairing import Decoder, pair_specs
from .parallel import current_context
from .prune import Found, canonicalize, shares_subgraph

__all__ = ["RangeCandidates", "leaf_ops", "clear_summaries", "range_candidates"]

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


def leaf_ops(spec: GraphSpec, pool_size: int) -> frozenset:
    """The operators that read only pool tensors (or nothing), as the spec writes them: (variant, sizes, args).

    Equal to :meth:`Decoded.leaf_ops <taso.generator.graphs.Decoded.leaf_ops>` up to how a
    label is written (``(variant, sizes)``), so two graphs share one exactly when their
    decoded graphs do.
    """
    return frozenset(op for op in spec.ops if all(t < pool_size for t in op[2]))


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


def range_candidates(graphs: list[tuple[int, GraphSpec]], pool_size: int, map_pairs) -> RangeCandidates:
    """Pairs the graphs of one key range and keeps the first clear candidate of each form.

    Args:
        graphs: (key, graph) for every graph of the range whose key another graph has.
        pool_size: the pool's tensor count (tensors below it are inputs).
        map_pairs: runs :func:`clear_summaries` over a list of pairs in the workers, in order.
    """
    pairs = pair_specs(graphs)
    leaves: dict[GraphSpec, frozenset] = {}
    for _, spec in graphs:
        if spec not in leaves:
            leaves[spec] = leaf_ops(spec, pool_size)
    distinct = [p for p in pairs if leaves[p[1]].isdisjoint(leaves[p[2]])]
    kept: dict[bytes, Found] = {}
    clear = 0
    for pair, summary in zip(distinct, map_pairs(distinct), strict=True):
        if summary is not None:
            clear += 1
            if summary[0] not in kept:
                kept[summary[0]] = Found(pair, *summary)
    return RangeCandidates(len(pairs), clear, list(kept.values()))
