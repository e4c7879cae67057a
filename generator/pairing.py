"""Pairing: graphs with equal output fingerprints become candidate substitutions.

All graphs that share a key compute the same tensors (as multisets of outputs), so every
two of them form a candidate, with outputs mapped by fingerprint order. Multi-output
graphs pair like single-output ones: two matmuls sharing an input and a concat + matmul +
split both have two outputs with the same two fingerprints.

The exact fingerprints use polynomial stand-ins for relu, sigmoid, tanh and max-pool, and
a 64-bit digest can collide, so every candidate is re-checked with the float reference
semantics (``Op.evaluate``) on fresh random inputs before it is kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from .enumerate import Context, GraphSpec
from .graphs import Decoded
from .parallel import current_context, current_settings

__all__ = ["Candidate", "pair_specs", "pair_graphs", "Decoder", "FloatCheck", "holds_in_float", "close"]


@dataclass(frozen=True, eq=False)
class Candidate:
    """Two graphs that compute the same outputs: ``a.outputs[i]`` equals ``b.outputs[i]``.

    Attributes:
        key: the shared graph key (provenance).
        a, b: the two graphs, ``a`` enumerated first.
    """

    key: int
    a: Decoded
    b: Decoded


def pair_specs(graphs: Iterable[tuple[int, GraphSpec]]) -> list[tuple[int, GraphSpec, GraphSpec]]:
    """Every pair of graphs that share a key, as (key, first, second), in a deterministic order.

    Args:
        graphs: (key, graph); keys that occur once are ignored. Equal keys mean equal output
            fingerprints, which include the shapes.
    """
    buckets: dict[int, list[GraphSpec]] = {}
    for key, spec in graphs:
        buckets.setdefault(key, []).append(spec)
    pairs = []
    for key in sorted(buckets):
        specs = sorted(set(buckets[key]))
        pairs.extend((key, first, second) for i, first in enumerate(specs) for second in specs[i + 1 :])
    return pairs


class Decoder:
    """Decodes graph specs once each (a graph belongs to many pairs)."""

    def __init__(self, context: Context):
        self.context = context
        self._decoded: dict[GraphSpec, Decoded] = {}

    def __call__(self, spec: GraphSpec) -> Decoded:
        got = self._decoded.get(spec)
        if got is None:
            got = self._decoded[spec] = Decoded(spec, self.context)
        return got

    def candidate(self, key: int, first: GraphSpec, second: GraphSpec) -> Candidate:
        return Candidate(key, self(first), self(second))


def pair_graphs(graphs: Iterable[tuple[int, GraphSpec]], context: Context) -> Iterator[Candidate]:
    """Every pair of graphs that share a key, decoded (see :func:`pair_specs`)."""
    decode = Decoder(context)
    for key, first, second in pair_specs(graphs):
        yield decode.candidate(key, first, second)


class FloatCheck:
    """Re-checks candidates with the float reference semantics on random inputs.

    Args:
        context: the pool the graphs read.
        seed: seeds the inputs (independent of the residues' stream).
        rtol: relative tolerance; the absolute tolerance is ``rtol`` times the largest magnitude.
        trials: independent input draws; a candidate must hold on all.
    """

    def __init__(self, context: Context, seed: int, rtol: float = 1e-5, trials: int = 2):
        rng = np.random.default_rng([seed, 1])
        self._feeds = [[rng.standard_normal(t.shape) for t in context.pool.types] for _ in range(trials)]
        self._values: dict[Decoded, list[list[np.ndarray]]] = {}
        self.rtol = rtol

    def _outputs(self, graph: Decoded) -> list[list[np.ndarray]]:
        got = self._values.get(graph)
        if got is None:
            got = self._values[graph] = [graph.evaluate_float(feeds) for feeds in self._feeds]
        return got

    def holds(self, candidate: Candidate) -> bool:
        """Whether every mapped output pair agrees on every trial."""
        for left, right in zip(self._outputs(candidate.a), self._outputs(candidate.b)):
            for x, y in zip(left, right):
                if not close(x, y, self.rtol):
                    return False
        return True


def holds_in_float(pairs: list[tuple[int, GraphSpec, GraphSpec]]) -> list[bool]:
    """For a worker process: :meth:`FloatCheck.holds` on each pair of specs, decoded here.

    The inputs are drawn from the run's seed (:func:`~taso.generator.parallel.current_settings`),
    the same in every process, so a verdict does not depend on where it is computed.
    """
    context = current_context()
    decode, check = Decoder(context), FloatCheck(context, current_settings().seed)
    return [check.holds(decode.candidate(*pair)) for pair in pairs]


def close(x: np.ndarray, y: np.ndarray, rtol: float) -> bool:
    """Element-wise closeness relative to the larger array's magnitude (robust near zero)."""
    if x.shape != y.shape:
        return False
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        return bool(np.array_equal(x, y))
    scale = max(float(np.max(np.abs(x), initial=0.0)), float(np.max(np.abs(y), initial=0.0)), 1e-12)
    return bool(np.all(np.abs(x - y) <= rtol * (np.abs(y) + scale)))
