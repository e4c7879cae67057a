"""Decoded graphs: an enumerated :class:`GraphSpec` with parameters, shapes and expressions.

Pairing, pruning and rule emission all need more than the enumerator's compact form: the
bound parameters of every operator, the shape of every tensor, and each output as an
*expression* over the pool tensors. Expressions are nested tuples that compare and hash
cheaply: ``(-1, class, index)`` for a pool tensor, ``(variant, sizes, output, args)`` for
an operator output, with the arguments of a commutative operator sorted. Within one graph
equal expressions are the same tensor (the enumerator never computes a tensor twice), so
the expressions of the outputs describe the whole graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from taso.ir import Params

from .enumerate import Context, GraphSpec
from .opset import Variant

__all__ = ["Node", "Decoded", "Expr", "Context"]

Expr = tuple


@dataclass(frozen=True)
class Node:
    """One operator of a decoded graph."""

    variant: Variant
    sizes: tuple[int, ...]
    params: Params
    args: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def label(self) -> tuple:
        """What the operator computes, independent of its arguments: (variant index, sizes)."""
        return (self.variant.index, self.sizes)


class Decoded:
    """A graph spec resolved against its context.

    Args:
        spec: the enumerated graph.
        context: its pool and variant table.

    Attributes:
        spec, context: as given.
        nodes: the operators, in the spec's order.
        shapes: the shape of every tensor index (pool tensors first).
        producer: tensor index -> (node position, output position), for operator outputs.
    """

    def __init__(self, spec: GraphSpec, context: Context):
        self.spec, self.context = spec, context
        shapes = [t.shape for t in context.pool.types]
        self.nodes: list[Node] = []
        self.producer: dict[int, tuple[int, int]] = {}
        for vi, sizes, args in spec.ops:
            variant = context.variants[vi]
            params, out_shapes = context.bind(variant, tuple(shapes[t] for t in args), sizes)
            outs = tuple(range(len(shapes), len(shapes) + len(out_shapes)))
            for k, t in enumerate(outs):
                self.producer[t] = (len(self.nodes), k)
            shapes.extend(out_shapes)
            self.nodes.append(Node(variant, sizes, params, args, outs))
        self.shapes = shapes
        self._pool_size = len(context.pool)  # is_input is asked for every tensor of every expression

    @property
    def outputs(self) -> tuple[int, ...]:
        return self.spec.outputs

    def is_input(self, t: int) -> bool:
        return t < self._pool_size

    @cached_property
    def inputs(self) -> tuple[int, ...]:
        """The pool tensors the graph reads, in pool order."""
        return tuple(sorted({t for n in self.nodes for t in n.args if self.is_input(t)}))

    def expr(self, t: int, rename: Mapping[int, int] | None = None, memo: dict | None = None) -> Expr:
        """The expression of tensor ``t``, with pool tensors renamed by ``rename`` (pool index -> pool index)."""
        memo = {} if memo is None else memo
        hit = memo.get(t)
        if hit is not None:
            return hit
        if self.is_input(t):
            u = rename.get(t, t) if rename else t
            pool = self.context.pool
            out = (-1, pool.class_of[u], pool.rank_in_class[u])
        else:
            node_index, k = self.producer[t]
            node = self.nodes[node_index]
            args = [self.expr(a, rename, memo) for a in node.args]
            if node.variant.commutative:
                args.sort()
            out = (node.variant.index, node.sizes, k, tuple(args))
        memo[t] = out
        return out

    def output_exprs(self, rename: Mapping[int, int] | None = None) -> list[Expr]:
        memo: dict = {}
        return [self.expr(t, rename, memo) for t in self.outputs]

    def leaf_ops(self) -> set[tuple]:
        """Operators that read only pool tensors (or nothing): (label, arguments)."""
        return {(n.label, n.args) for n in self.nodes if all(self.is_input(a) for a in n.args)}

    def components(self) -> list[int]:
        """For each output (in order), the id of its connected component (operators linked by tensors they share)."""
        parent = list(range(len(self.nodes)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, node in enumerate(self.nodes):
            for a in node.args:
                if not self.is_input(a):
                    parent[find(self.producer[a][0])] = find(i)
        return [find(self.producer[t][0]) for t in self.outputs]

    def evaluate_float(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The outputs under the reference NumPy semantics, given one array per pool tensor."""
        values: dict[int, np.ndarray] = {}
        for node in self.nodes:
            args = [feeds[a] if self.is_input(a) else values[a] for a in node.args]
            for t, value in zip(node.outputs, node.variant.op.evaluate(args, node.params)):
                values[t] = value
        return [values[t] for t in self.outputs]
