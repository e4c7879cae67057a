"""Fingerprints: exact values of enumerated tensors, and the hashes that pair graphs.

Every pool tensor holds random residues modulo :data:`FINGERPRINT_PRIME`; every operator is
evaluated with its exact semantics (``Op.evaluate_exact``), so two graphs whose outputs
fingerprint equal compute equal polynomials with overwhelming probability, never by a
rounding accident. A tensor's fingerprint is a 64-bit digest of its shape and residues; a
graph's key is a digest of the *multiset* of its output fingerprints, so graphs pair
whatever the order of their outputs.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

from taso import ops as registry
from taso.ir import Params

__all__ = ["tensor_fingerprint", "graph_key", "ExactEvaluator"]


def tensor_fingerprint(array: np.ndarray) -> int:
    """A 64-bit digest of a residue array and its shape, stable across processes."""
    h = _shape_hasher(array.shape).copy()
    h.update(np.ascontiguousarray(array, dtype=np.int64))
    return int.from_bytes(h.digest(), "little")


@functools.lru_cache(maxsize=256)
def _shape_hasher(shape: tuple[int, ...]):
    """A digest that has read the shape (each fingerprint copies it: the enumeration meets a few dozen shapes)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(np.asarray(shape, dtype=np.int64).tobytes())
    return h


def graph_key(output_fingerprints: Iterable[int]) -> int:
    """The key of a graph: a digest of its outputs' fingerprints as a multiset.

    NOTE: Python hashes tuples of ints without the per-process salt it applies to str and
    bytes, so this key is the same in every worker process.
    """
    return hash(tuple(sorted(output_fingerprints)))


class ExactEvaluator:
    """Evaluates operator variants on residue arrays, memoised by argument fingerprints.

    The same small expression (``matmul(x1, w1)``) recurs in thousands of enumerated
    graphs; the cache turns all but its first evaluation into a dictionary lookup. An
    operator with a fused activation is evaluated as its linear part (shared, through the
    cache, with the variant without activation) followed by the registry's activation
    operator: that is what a fused activation means, and the tests check that the exact
    semantics agree.

    Args:
        limit: the number of cached results above which the cache is emptied (bounds
            memory); 0 disables the cache (every call evaluates, for comparison).
    """

    def __init__(self, limit: int = 200_000):
        self._cache: dict[tuple, list[tuple[int, np.ndarray]]] = {}
        self._limit = limit
        self._linear: dict[Params, Params] = {}
        self.evaluations = 0

    def apply(self, variant, sizes: tuple[int, ...], params: Params, fingerprints: Sequence[int],
              arrays: Sequence[np.ndarray]) -> list[tuple[int, np.ndarray]]:
        """The (fingerprint, residues) of each output of ``variant`` on these arguments.

        Args:
            variant: the :class:`~taso.generator.opset.Variant` applied.
            sizes: split sizes, or () (kept for the caller's convenience; ``params`` holds them).
            params: the variant's parameters bound to these argument shapes.
            fingerprints: the arguments' fingerprints (with ``params``, the cache key).
            arrays: the arguments' residues.
        """
        return self._apply(variant.op, params, tuple(fingerprints), arrays)

    def apply_batched(self, variant, params: Params, items: Sequence[Sequence[np.ndarray]], positions: Sequence[int],
                      keys: Sequence[tuple] | None = None, linear: dict | None = None) -> list[tuple[int, ...]]:
        """The output fingerprints of ``variant`` on each item's arguments, from one evaluation of the op.

        The items' arguments at ``positions`` (the variant's batch positions for these shapes,
        :meth:`~taso.generator.opset.Variant.batch_positions`) are concatenated along axis 0
        (every other argument must be the same array in every item) and each output is cut
        back into the items' parts, as :attr:`~taso.generator.opset.Variant.batched` declares
        exact. One NumPy call on k stacked images costs little more than on one: the small
        arrays of the enumeration leave most of an op's time in per-call overhead. Nothing is
        cached here (the caller memoises fingerprints).

        Args:
            variant: the :class:`~taso.generator.opset.Variant` applied (with ``batched`` positions).
            params: its parameters bound to the items' argument shapes (the same for all).
            items: per item, its argument arrays.
            positions: the argument positions concatenated.
            keys: per item, its arguments' fingerprints (with ``linear``).
            linear: when given, the linear parts of fused activations computed before, kept
                here by op, params and ``keys``: the variants of an op that differ only in
                their activation share one evaluation of the linear part.

        Returns:
            Per item, the fingerprints of its outputs, in output order.
        """
        op = variant.op
        activation = params["activation"] if "has_activation" in op.groups else "none"
        linear_params = params if activation == "none" else self._linear_params(params)
        linear_key = (op.name, linear_params, tuple(positions), tuple(keys)) if linear is not None and keys is not None else None
        outs = linear.get(linear_key) if linear_key is not None else None
        if outs is None:
            arrays = [np.concatenate([item[k] for item in items]) if k in positions else items[0][k] for k in range(len(items[0]))]
            self.evaluations += 1
            outs = op.evaluate_exact(arrays, linear_params)
            if linear_key is not None and activation != "none":
                linear[linear_key] = outs
        if activation != "none":
            outs = registry.get(activation).evaluate_exact(outs, _NO_PARAMS)
        if any(out.ndim == 0 or out.shape[0] % len(items) for out in outs):
            raise ValueError(f"{variant.label}: its outputs do not cut into {len(items)} parts along axis 0, so it has no batch axis there")
        parts = [np.split(out, len(items)) for out in outs]
        return [tuple(tensor_fingerprint(part[i]) for part in parts) for i in range(len(items))]

    def _linear_params(self, params: Params) -> Params:
        """``params`` without the fused activation, memoised: building a Params costs more than the lookup it serves."""
        linear = self._linear.get(params)
        if linear is None:
            linear = self._linear[params] = params.replace(activation="none")
        return linear

    def _apply(self, op, params: Params, fingerprints: tuple, arrays) -> list[tuple[int, np.ndarray]]:
        key = (op.name, params, fingerprints)
        hit = self._cache.get(key)
        if hit is None:
            activation = params["activation"] if "has_activation" in op.groups else "none"
            if activation == "none":
                self.evaluations += 1
                outs = op.evaluate_exact(list(arrays), params)
            else:
                (_, linear), = self._apply(op, self._linear_params(params), fingerprints, arrays)
                outs = registry.get(activation).evaluate_exact([linear], _NO_PARAMS)
            hit = [(tensor_fingerprint(o), o) for o in outs]
            if len(self._cache) >= self._limit:
                self._cache.clear()
            if self._limit:
                self._cache[key] = hit
        return hit


_NO_PARAMS = Params()
