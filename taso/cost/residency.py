"""Where a node's weight lives when the node runs: in the core's L2, in the shared L3, or in memory.

A measured price times a node alone, run after run, so its weight is as warm as its own size
allows. In a graph, other weights pass through the cache between two reads of the same weight:
an unrolled GRU (hidden 256) reads two 0.8 MB weights per step, 1.6 MB between two reads of
either, more than this machine's 1 MB L2; merging its 32 input products into one leaves the
recurrent weight read alone between its uses, and its 32 products run from L2. Priced warm,
that merge's saving was priced at 0.57 of what it measured (``benchmarks/bench_pricing.py``).

The reuse distance of a weight is estimated without an execution order, from how many running
nodes read each weight per run (``k``): between two reads of ``W`` (read ``k_W`` times), a weight
read at least as often is read once, a weight read ``k' < k_W`` times is read in a fraction
``k' / k_W`` of the gaps. So ``between(W) = sum over weights W' != W of bytes(W') * min(1, k_W' / k_W)``.
What a read after that much other data costs is measured: the node is timed right after that many
bytes were read through the caches, and right after its own previous run
(``taso.cost.ort_cpu.profile_cold_penalty``); the difference is added to its price. Only the
bytes of constant inputs count: at the batch sizes these models run at, activations are small
beside weights (a batch-64 convolution's are not; see docs/design.md).

What this estimate does not know is the order ONNX Runtime runs the nodes in: its sequential
executor walks the graph depth first from the nodes nothing reads, back through their inputs,
the producer latest in the file first. Both PyTorch exporters' unrolled LSTM cells run all 32
input products, then all 32 recurrent ones (each weight read back to back, no penalty); their
GRU cells alternate the two weights (a walk written after that rule gave the profiled order on
all four exports). Priced as interleaved, the LSTM h256 input was priced at 1.3-1.4x its
measured time. An exact order for every candidate the search prices is a walk of the whole
graph per rewrite; an incremental one is the next step (docs/measured.md, session 17).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..ir import Node

__all__ = ["CacheSizes", "WeightReads", "main_weight"]

@dataclass(frozen=True)
class CacheSizes:
    """Bytes of the data caches a core sees: its own L1 and L2, and the L3 it shares."""

    l1: int
    l2: int
    l3: int

    @classmethod
    @functools.lru_cache(maxsize=1)
    def of_this_machine(cls) -> CacheSizes:
        """Read from Linux's sysfs; 32 KB, 1 MB and 32 MB where it says nothing."""
        sizes = {1: 32 << 10, 2: 1 << 20, 3: 32 << 20}
        for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
            try:
                kind = (index / "type").read_text().strip()
                level = int((index / "level").read_text())
                size = _bytes((index / "size").read_text().strip())
            except (OSError, ValueError):
                continue
            if kind in ("Data", "Unified") and level in sizes and size:
                sizes[level] = size
        return cls(sizes[1], sizes[2], sizes[3])

    def eviction(self, own: int, between: float, threads: int = 1) -> int | None:
        """The bytes to read through the caches before timing a node whose weight of ``own`` bytes had ``between``
        bytes of other weights read since its last read: None while both fit the L2 of the cores the node runs on
        (each intra-op thread has its own) or ``between`` is too little to move the weight out; else ``between``
        at the nearest power of two (a few sizes per node to measure), at most twice the L3.

        On this machine, square products of 0.25-4 MB weights read in turn with 1-15 others in a chain took about what
        their penalty measured after the nearest power of two of the others' bytes, within the chain's own noise; past
        half the L3 they took more (docs/measured.md, session 16)."""
        if own + between <= self.l2 * max(threads, 1) or between < self.l2 / 8:
            return None
        return min(1 << round(math.log2(between)), 2 * self.l3)


def _bytes(text: str) -> int:
    """sysfs writes "1024K" or "32768K" or "32M"."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text and text[-1] in units else int(text)


def main_weight(node: Node, is_const: Callable[[str], bool], nbytes: Callable[[str], int], smallest: int) -> str | None:
    """The largest constant input of ``node`` of at least ``smallest`` bytes: what its residency is judged by."""
    best, best_bytes = None, smallest - 1
    for v in node.inputs:
        if is_const(v):
            size = nbytes(v)
            if size > best_bytes:
                best, best_bytes = v, size
    return best


class WeightReads:
    """The weights a graph's running nodes read (their main weights), how often per run, and each one's reuse distance."""

    __slots__ = ("bytes", "readers", "_distance_by_count")

    def __init__(self, nbytes: dict[str, int], readers: dict[str, list[Node]]):
        self.bytes, self.readers = nbytes, readers
        self._distance_by_count: dict[int, float] | None = None

    @classmethod
    def of(cls, reads: Iterable[tuple[Node, str, int]]) -> WeightReads:
        """From (node, its main weight, the weight's bytes) for every running node that has one."""
        nbytes: dict[str, int] = {}
        readers: dict[str, list[Node]] = {}
        for node, weight, size in reads:
            nbytes[weight] = size
            readers.setdefault(weight, []).append(node)
        return cls(nbytes, readers)

    def changed(self, removed: Iterable[tuple[Node, str]], added: Iterable[tuple[Node, str, int]]) -> WeightReads:
        """These reads after a rewrite: the removed nodes' reads gone, the added ones' there."""
        gone = {}
        for node, weight in removed:
            gone.setdefault(weight, set()).add(id(node))
        readers = dict(self.readers)
        nbytes = dict(self.bytes)
        for weight, ids in gone.items():
            kept = [n for n in readers.get(weight, ()) if id(n) not in ids]
            if kept:
                readers[weight] = kept
            else:
                readers.pop(weight, None)
                nbytes.pop(weight, None)
        for node, weight, size in added:
            readers[weight] = [*readers.get(weight, ()), node]
            nbytes[weight] = size
        return WeightReads(nbytes, readers)

    def between(self, weight: str) -> float:
        """Bytes of other weights read between two reads of ``weight``: see the module's docstring."""
        if self._distance_by_count is None:
            by_count: dict[int, int] = {}
            for w, size in self.bytes.items():
                count = len(self.readers[w])
                by_count[count] = by_count.get(count, 0) + size
            self._distance_by_count = {k: sum(b * min(1.0, c / k) for c, b in by_count.items()) for k in by_count}
        return self._distance_by_count[len(self.readers[weight])] - self.bytes[weight]
