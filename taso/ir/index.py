"""Lookup structures over one graph for matching and the search: what the IR itself does not need.

A :class:`GraphIndex` is reached as ``graph.index`` and built piece by piece on first use;
the graph is immutable, so nothing here can go stale. It holds:

* the per-op index the matcher anchors on (:meth:`GraphIndex.nodes_of`) and the set of
  (op, params) pairs present, which lets the search skip a rule in O(pattern size)
  (:attr:`GraphIndex.op_params`);
* per node, the bit set of the nodes it is computed from (ancestor bit sets), so "is any of
  these values computed from any of those?" is one AND (:meth:`GraphIndex.depends_on`): the
  cycle check of every multi-node match;
* the search's cheap identity of a graph (:meth:`GraphIndex.search_key`) and of a rewrite of
  it before it is built (:meth:`GraphIndex.search_key_after`).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Iterable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graph import Graph, Node, Params

__all__ = ["GraphIndex"]

_KEY_MODULUS = 1 << 128


class GraphIndex:
    """Derived lookups over one immutable graph (``graph.index``); each is built when first asked for.

    NOTE: it refers to its graph weakly: a graph and its index must not form a reference cycle,
    or every graph the search drops would wait for a full garbage collection, which the search
    switches off.
    """

    def __init__(self, graph: Graph, nodes: Sequence[Node]):
        """``nodes``: the graph's nodes in the order it holds them (the order :meth:`nodes_of` lists them in)."""
        self._graph = weakref.ref(graph)
        self._nodes = nodes

    @property
    def graph(self) -> Graph:
        graph = self._graph()
        if graph is None:
            raise ReferenceError("the graph of this index no longer exists")
        return graph

    # ---- matching -----------------------------------------------------------------------------
    @cached_property
    def kinds(self) -> dict[str, tuple[int, str]]:
        """Each value's (rank, element kind): what the matcher checks every bound rule input against."""
        return {value: (t.rank, t.element_kind) for value, t in self.graph.types.items()}

    @cached_property
    def _by_op(self) -> dict[str, list[Node]]:
        index: dict[str, list[Node]] = {}
        for node in self._nodes:
            index.setdefault(node.op.name, []).append(node)
        return index

    @cached_property
    def _fed_by(self) -> dict[tuple[str, int, str], frozenset[int]]:
        """(op, input position, op of that input's producer) -> ids of the nodes of that op so fed."""
        producer = {out: node.op.name for node in self._nodes for out in node.outputs}
        index: dict[tuple[str, int, str], set[int]] = {}
        for node in self._nodes:
            for position, value in enumerate(node.inputs):
                made_by = producer.get(value)
                if made_by is not None:
                    index.setdefault((node.op.name, position, made_by), set()).add(id(node))
        return {key: frozenset(ids) for key, ids in index.items()}

    def fed_by(self, op_name: str, position: int, producer_op: str) -> frozenset[int]:
        """Ids of the nodes applying ``op_name`` whose input ``position`` a ``producer_op`` node computes: where a
        pattern whose root reads such a node's output can anchor (one set lookup per node instead of a match attempt)."""
        return self._fed_by.get((op_name, position, producer_op), frozenset())

    def nodes_of(self, op_name: str) -> list[Node]:
        """The nodes applying one operator (where the matcher anchors)."""
        return self._by_op.get(op_name, [])

    @cached_property
    def op_params(self) -> frozenset[tuple[str, Params]]:
        """The (op name, params) pairs present: a rule needing one that is absent cannot match."""
        return frozenset((n.op.name, n.params) for n in self._nodes)

    # ---- ancestry (cycle checks) -----------------------------------------------------------------
    @cached_property
    def _position(self) -> dict[str, int]:
        """Each value a node defines -> that node's position in the topological order."""
        return {out: i for i, node in enumerate(self.graph.topological_order()) for out in node.outputs}

    @cached_property
    def _ancestors(self) -> list[int]:
        """Per node (by topological position): the bit set of the positions it is computed from, itself included."""
        position, bits = self._position, []
        for i, node in enumerate(self.graph.topological_order()):
            mask = 1 << i
            for v in node.inputs:
                p = position.get(v)
                if p is not None:
                    mask |= bits[p]
            bits.append(mask)
        return bits

    def depends_on(self, values: Iterable[str], targets: set[str]) -> bool:
        """Whether any of ``values`` is computed (transitively) from any of ``targets``.

        One AND of two bit sets per value: the search asks this for every multi-node match,
        and a walk between two distant nodes of a big graph cost ~0.1 ms each time.
        """
        position, ancestors = self._position, self._ancestors
        target_bits = 0
        for t in targets:
            p = position.get(t)
            if p is not None:
                target_bits |= 1 << p
        if not target_bits:
            return False
        for v in values:
            p = position.get(v)
            if p is not None and ancestors[p] & target_bits:
                return True
        return False

    def position(self, value: str) -> int:
        """The topological position of the node that defines ``value`` (-1 for a graph input or weight)."""
        return self._position.get(value, -1)

    def independent(self, inputs: Sequence[Sequence[str]], outputs: Sequence[Sequence[str]]) -> list[int]:
        """Of the sites ``i`` (reading ``inputs[i]``, defining ``outputs[i]``), in the order given: those whose inputs
        are not computed from the outputs of a site kept before them (greedy, one AND of two bit sets per site)."""
        position, ancestors = self._position, self._ancestors
        kept, kept_bits = [], 0
        for i, (reads, defines) in enumerate(zip(inputs, outputs)):
            if any(p is not None and ancestors[p] & kept_bits for p in map(position.get, reads)):
                continue
            kept.append(i)
            for p in map(position.get, defines):
                if p is not None:
                    kept_bits |= 1 << p
        return kept

    def closes_cycle(self, added: Sequence[Node]) -> bool:
        """Whether nodes added to this graph would read a value computed from what they create themselves."""
        created = {o for n in added for o in n.outputs}
        return self.depends_on([v for n in added for v in n.inputs if v not in created], created)

    # ---- the search's identity of a graph -------------------------------------------------------
    def search_key(self) -> int:
        """A cheap identity for the search's seen-set: the sum of node signatures plus the outputs.

        Unlike :meth:`Graph.structural_hash` it depends on value names; rewrites name new values
        deterministically, so the same graph reached by two paths gets the same key, and a
        rewrite's key follows from its parent's in time proportional to the rewrite
        (:meth:`search_key_after`).
        """
        return (self._signature_sum + self._outputs_key) % _KEY_MODULUS

    def search_key_after(self, removed: Iterable[Node], added: Iterable[Node], outputs: Sequence[str] | None = None) -> int:
        """The :meth:`search_key` of ``graph.replace(removed, added, outputs=outputs)``, without building it."""
        node_sum = (self._signature_sum + sum(n.signature for n in added) - sum(n.signature for n in removed)) % _KEY_MODULUS
        return (node_sum + (self._outputs_key if outputs is None else _outputs_digest(outputs))) % _KEY_MODULUS

    @cached_property
    def _signature_sum(self) -> int:
        return sum(n.signature for n in self._nodes) % _KEY_MODULUS

    @cached_property
    def _outputs_key(self) -> int:
        # NOTE: cached: the search asks for it once per priced rewrite (millions on a big model).
        return _outputs_digest(self.graph.outputs)


def _outputs_digest(outputs: Sequence[str]) -> int:
    return int.from_bytes(hashlib.blake2b("\0".join(outputs).encode(), digest_size=16).digest(), "little")
