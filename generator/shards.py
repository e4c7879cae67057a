"""Shards: the enumeration cut into pieces that run, finish and are checkpointed on their own.

The graphs under each first operator form a disjoint subtree
(:meth:`~taso.generator.enumerate.Enumerator.roots`). A root whose subtree is large is cut
further, by ranges of its second operators (:func:`plan_shards`); walking the shards of a
root in order visits its graphs in exactly the order :meth:`Enumerator.walk` does, so a run
merged in shard order does not depend on how many processes or machines ran the shards.
Both back ends use them: the local process pool (:mod:`~taso.generator.parallel`) and Ray
(:mod:`~taso.generator.cluster`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .enumerate import Enumerator, Leaves, OpRef, Visitor

__all__ = ["DEFAULT_SHARDS", "Shard", "plan_shards", "walk_shard"]

# The plan aims at about this many shards of equal estimated work (independent of the number of
# processes, so that a resumed run with another -j or on another cluster finds the same shards).
DEFAULT_SHARDS = 64


@dataclass(frozen=True)
class Shard:
    """The graphs under one first operator, or under a range of its second operators.

    Attributes:
        id: a stable name: ``r00007`` (root 7, whole), ``r00007.00010-00020`` (root 7's second
            operators 10 to 19; the first range also holds the root's one-operator graph).
        root: index of the first operator in :meth:`Enumerator.roots`.
        children: the range of second operators, or None for the whole subtree.
    """

    id: str
    root: int
    children: tuple[int, int] | None = None


def _children(enumerator: Enumerator, root: OpRef) -> list:
    """The admissible second operators under ``root``, in enumeration order."""
    enumerator.push_root(root)
    try:
        return list(enumerator._admissible_steps())
    finally:
        enumerator.pop()


def plan_shards(enumerator: Enumerator, target: int = DEFAULT_SHARDS) -> list[Shard]:
    """Shards of roughly equal estimated work, in enumeration order.

    A root's work is estimated by its number of second operators. A root above
    ``1/target`` of the total is split into ranges of its second operators, so that no
    shard holds much more than that share. With two operators at most there is nothing to
    split: every graph below a root is one step away.
    """
    roots = enumerator.roots()
    if enumerator.settings.max_ops <= 2:
        return [Shard(f"r{i:05d}", i) for i in range(len(roots))]
    sizes = [len(_children(enumerator, root)) for root in roots]
    limit = max(1, math.ceil(sum(sizes) / max(1, target)))
    shards = []
    for i, size in enumerate(sizes):
        if size <= limit:
            shards.append(Shard(f"r{i:05d}", i))
            continue
        parts = math.ceil(size / limit)
        bounds = [size * k // parts for k in range(parts + 1)]
        shards.extend(Shard(f"r{i:05d}.{lo:05d}-{hi:05d}", i, (lo, hi)) for lo, hi in zip(bounds, bounds[1:]))
    return shards


def walk_shard(enumerator: Enumerator, root: OpRef, shard: Shard, visit: Visitor,
               leaves: Callable[[Leaves], None] | None = None) -> None:
    """Visits the shard's graphs in the order :meth:`Enumerator.walk` visits them within the root.

    ``leaves`` is :meth:`Enumerator.walk`'s: the graphs of ``max_ops`` operators a parent's at a time.

    NOTE: the split replays ``walk`` and ``_grow``'s loop one level down, so it calls the
    enumerator's private steps; ``tests/test_ray.py`` checks the shards of a root together
    visit exactly its graphs, in order.
    """
    if shard.children is None:
        enumerator.walk(root, visit, leaves)
        return
    lo, hi = shard.children
    enumerator.push_root(root)
    try:
        if lo == 0:
            enumerator._record(visit)
        if len(enumerator.ops) + 2 == enumerator.settings.max_ops:  # the shard's children are parents of leaves: grown together
            enumerator._grow_parents(visit, leaves, children=slice(lo, hi))
            return
        for v, sizes, args, _params, out_shapes, outs, used in list(enumerator._admissible_steps())[lo:hi]:
            enumerator.push(v, sizes, args, outs, out_shapes, used)
            enumerator._record(visit)
            enumerator._grow(visit, leaves)
            enumerator.pop()
    finally:
        enumerator.pop()
