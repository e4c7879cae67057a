"""The sizes a model with symbolic dims ships for: each symbol's measurement size, and the range it is searched and
timed at.

A file with a symbolic batch runs at every batch, and a rewrite that pays at one can lose at another: a GRUCell
loop optimized at batch 1 ran 2.54x there and 0.91x at batch 128. So a batch-like symbol (named like a batch, or
at axis 0: :func:`taso.onnx.symbolic.is_batch_like`) has a range by default, 1 and a large batch (the largest
power of two up to :data:`LARGE_BATCH` whose biggest value stays within :data:`LARGE_BATCH_BYTES`: measuring
past that costs more than a search), and ``--input-shape x=24,1:8:128,256`` gives one explicitly, in the spirit
of TensorRT's optimization profiles. Every other symbol has one size (never past the largest the file runs at:
:mod:`taso.onnx.size_bounds`). The pipeline searches at each valuation of
the range, times every candidate at each, and keeps a file that is not slower at any
(:mod:`taso.pipeline.size_guard`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import TasoError
from ..ir import Graph, TensorType
from ..ir.dims import bare_symbol
from ..onnx.symbolic import DEFAULT_SIZE, is_batch_like

__all__ = ["LARGE_BATCH", "LARGE_BATCH_BYTES", "MAX_VALUATIONS", "SymbolSizes", "SizeRange", "label"]

LARGE_BATCH = 128
LARGE_BATCH_BYTES = 16 << 20  # the biggest value at the large batch: a larger one makes measuring cost more than it tells
SMALLEST_LARGE_BATCH = 8  # a large batch below this is not worth a second search: the range stays at 1
MAX_VALUATIONS = 8  # searches and timings multiply with the valuations


@dataclass(frozen=True)
class SymbolSizes:
    """One size symbol: where it is read at run time, its sizes (the first is the measurement size) and why."""

    symbol: str
    input: str
    axis: int
    sizes: tuple[int, ...]
    why: str


@dataclass(frozen=True)
class SizeRange:
    """The size symbols of a model's inputs with their sizes; a static model has none."""

    symbols: tuple[SymbolSizes, ...] = ()

    @classmethod
    def of(cls, graph: Graph, given: Mapping[str, Sequence] | None = None, static: bool = False) -> SizeRange:
        """The range of ``graph`` (imported at the measurement sizes): the sizes ``given`` (``--input-shape``, ranges as
        tuples) name, the default range for a batch-like symbol, one size for any other.

        Raises:
            TasoError: a range given for a dim the model fixes, or more than :data:`MAX_VALUATIONS` valuations.
        """
        if static:
            return cls()
        measured = dict(graph.meta.sizes)
        bounds = {symbol: (size, why) for symbol, size, why in graph.meta.size_bounds}
        where = _first_places(graph)
        ranges = _given_ranges(graph, given or {})
        symbols = []
        for symbol, (name, axis) in sorted(where.items(), key=lambda item: (list(graph.inputs).index(item[1][0]), item[1][1])):
            size = measured[symbol]
            if symbol in ranges:
                sizes, why = ranges[symbol], "--input-shape"
            elif given and name in given:
                sizes, why = (size,), "--input-shape"
            elif is_batch_like(symbol, axis):
                large = _large_batch(graph, symbol, size)
                if large is not None and symbol in bounds:
                    large = min(large, bounds[symbol][0])
                sizes = (size,) if large is None or large <= size else (size, large)
                why = (f"a batch: {size}, and {large}, the largest batch up to {LARGE_BATCH} whose biggest value stays within "
                       f"{LARGE_BATCH_BYTES >> 20} MiB" if len(sizes) > 1 else
                       f"a batch: {size} (a batch of {SMALLEST_LARGE_BATCH} would hold a value over {LARGE_BATCH_BYTES >> 20} MiB)")
            else:
                sizes = (size,)
                if symbol in bounds and size == bounds[symbol][0] < DEFAULT_SIZE:
                    why = f"the largest the file runs at: {bounds[symbol][1]}"
                else:
                    why = f"the default for a size that is not a batch ({DEFAULT_SIZE})" if size == DEFAULT_SIZE else "measured size"
            symbols.append(SymbolSizes(symbol, name, axis, sizes, why))
        found = cls(tuple(symbols))
        if len(found.valuations()) > MAX_VALUATIONS:
            raise TasoError(f"--input-shape: {len(found.valuations())} combinations of sizes ({found.describe()}); "
                            f"at most {MAX_VALUATIONS}: give fewer sizes")
        return found

    @property
    def ranged(self) -> tuple[SymbolSizes, ...]:
        """The symbols with more than one size."""
        return tuple(s for s in self.symbols if len(s.sizes) > 1)

    def valuations(self) -> list[dict[str, int]]:
        """Every combination of the ranged symbols' sizes (the measurement sizes first), each with the others at theirs."""
        fixed = {s.symbol: s.sizes[0] for s in self.symbols}
        ranged = self.ranged
        return [{**fixed, **{s.symbol: size for s, size in zip(ranged, sizes)}}
                for sizes in itertools.product(*(s.sizes for s in ranged))]

    def describe(self) -> str:
        """``batch=1,128; seq=128``."""
        return "; ".join(f"{s.symbol}={','.join(map(str, s.sizes))}" for s in self.symbols)

    def explain(self) -> list[str]:
        """One line per symbol: its sizes and why (``taso info``)."""
        return [f"{s.symbol} ({s.input} axis {s.axis}): {', '.join(map(str, s.sizes))}: {s.why}" for s in self.symbols]


def label(valuation: Mapping[str, int], range_: SizeRange) -> str:
    """The ranged symbols' sizes in one valuation, ``batch=8``: how a report names it."""
    return ",".join(f"{s.symbol}={valuation[s.symbol]}" for s in range_.ranged) or "the measurement sizes"


def _first_places(graph: Graph) -> dict[str, tuple[str, int]]:
    """Each size symbol that is an input dim by itself: the first input and axis that carry it."""
    where: dict[str, tuple[str, int]] = {}
    for name, t in graph.inputs.items():
        for axis, d in enumerate(getattr(t, "shape", ())):
            symbol = bare_symbol(d)
            if symbol is not None and symbol not in where:
                where[symbol] = (name, axis)
    return where


def _given_ranges(graph: Graph, given: Mapping[str, Sequence]) -> dict[str, tuple[int, ...]]:
    ranges: dict[str, tuple[int, ...]] = {}
    for name, dims in given.items():
        for axis, sizes in enumerate(dims):
            if not isinstance(sizes, tuple):
                continue
            symbol = bare_symbol(graph.inputs[name].shape[axis]) if name in graph.inputs else None
            if symbol is None:
                raise TasoError(f"--input-shape {name}: axis {axis} has a range ({':'.join(map(str, sizes))}) but the model fixes "
                                "that dim; a range needs a symbolic dim")
            if ranges.get(symbol, sizes) != sizes:
                raise TasoError(f"--input-shape gives the symbol {symbol!r} two ranges")
            ranges[symbol] = sizes
    return ranges


def _large_batch(graph: Graph, symbol: str, size: int) -> int | None:
    """The largest power of two up to :data:`LARGE_BATCH` at which no value that grows with ``symbol`` passes
    :data:`LARGE_BATCH_BYTES` (None below :data:`SMALLEST_LARGE_BATCH`)."""
    at_one = {**dict(graph.meta.sizes), symbol: 1}
    # (a value with a fresh symbol of an opaque node's output, known only at run time, is not counted)
    biggest = max((t.at(at_one).nbytes for t in graph.types.values()
                   if isinstance(t, TensorType) and symbol in t.symbols and t.symbols <= at_one.keys()), default=0)
    batch = LARGE_BATCH
    while batch >= SMALLEST_LARGE_BATCH and biggest * batch > LARGE_BATCH_BYTES:
        batch //= 2
    return batch if batch >= SMALLEST_LARGE_BATCH else None
