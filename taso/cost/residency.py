"""Where a node's weight lives when the node runs: in the core's L2, in the shared L3, or in memory.

A measured price times a node alone, run after run, so its weight is as warm as its own size
allows. In a graph, other weights pass through the cache between two reads of the same weight:
an unrolled GRU (hidden 256) reads two 0.8 MB weights per step, 1.6 MB between two reads of
either, more than this machine's 1 MB L2; merging its 32 input products into one leaves the
recurrent weight read alone between its uses, and its 32 products run from L2. Priced warm,
that merge's saving was priced at 0.57 of what it measured (``benchmarks/costs/bench_pricing.py``).

Each read's reuse distance is taken in the order ONNX Runtime runs the nodes (:func:`run_order`):
its sequential executor walks the graph depth first from the nodes nothing reads, back through
their inputs, the producer latest in the file first, and runs each node as the walk leaves it.
Both PyTorch exporters' unrolled LSTM cells so run all 32 input products, then all 32 recurrent
ones (each weight read back to back: one cold read a run), and their GRU cells alternate the two
weights (every read cold at h256). A walk after that rule gave the weight-read order ONNX Runtime
ran on all 144 files of the ceiling benchmark (its exports, their hand merges and taso's outputs;
docs/measured.md, session 18). The order-free estimate before it priced the LSTM h256 input as
interleaved, at 1.3-1.4x its measured time.

Where ONNX Runtime fuses nodes into a new one (a product and the sum after it into a Gemm), the new
node is numbered after the file's and walked as one (``taso.cost.ort_cpu.fusion_pass``).

What a read after that much other data costs is measured: the node is timed in runs that each read
that many bytes through the caches before it, against runs that read none
(``taso.cost.ort_cpu.profile_cold_penalty``); the difference is added to its price. Only the
bytes of constant inputs count: at the batch sizes these models run at, activations are small
beside weights (a batch-64 convolution's are not; see docs/design.md).

A search prices a rewrite without building its graph: the reads it adds take the place, in the
parent's order, of the first node it removes (:meth:`WeightReads.changed`). That is the child's
order whenever the walk reaches the new nodes where it reached the old ones (a group merge's
product, a fused pair); the search prices each graph it builds by its own walk.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..ir import Graph, Node

__all__ = ["CacheSizes", "WeightReads", "graph_run_order", "main_weight", "run_order"]

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

    def eviction(self, own: int, between: float, threads: int = 1, again: bool = False) -> int | None:
        """The bytes to read through the caches before timing a node whose weight of ``own`` bytes had ``between``
        bytes of other weights read since its last read: None where ``between`` is too little to move the weight out,
        or where both fit the L2 of the cores the node runs on (each intra-op thread has its own) unless the weight is
        read ``again`` within a run; else ``between`` at the nearest power of two (a few sizes per node to measure),
        at most twice the L3.

        On a 1 MB-L2 machine, square products of 0.25-4 MB weights read in turn with 1-15 others in a chain took about
        what their penalty measured after the nearest power of two of the others' bytes, within the chain's own noise;
        past half the L3 they took more (docs/measured.md, session 16). Within the L2, a weight read once a run is warm
        from the run before; one read in turn with another within a run is not quite: an unrolled GRU h128's two 192 KB
        weights, 384 KB in a 512 KB L2, cost its graph 0.32-0.375 us a read, and copies of the product cycled over two
        weights measure 0.14-0.20 of it (``benchmarks/costs/bench_alternating_reads.py``; docs/measured.md, session 28)."""
        if between < self.l2 / 8 or (own + between <= self.l2 * max(threads, 1) and not again):
            return None
        return min(1 << round(math.log2(between)), 2 * self.l3)

    def cycle(self, own: int, evicted: int, threads: int = 1) -> int | None:
        """How many weights of ``own`` bytes, read in turn, put about ``evicted`` bytes between two reads of each (at
        least 2); None where they would hold more than twice the L2 of the cores the node runs on. Within that, whether a
        read finds its weight in the core's own L2 decides its price, and copies of the node cycled so take what such a
        graph takes; past it the L3, which this machine's other tenants share, decides, and the copies measured more
        than a graph pays (NasRNN's merged 8 MB products: 232 us a read, which made its column merges look a loss
        where they measure a gain; docs/measured.md, session 26)."""
        if not own:
            return None
        cycle = 1 + max(1, round(evicted / own))
        return cycle if cycle * own <= 2 * self.l2 * max(threads, 1) else None


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


def run_order(nodes: Sequence[Node], producer: Callable[[str], Node | None], fused: Callable[[Node], tuple[int, int]] | None = None) -> list[Node]:
    """The order ONNX Runtime's sequential executor runs ``nodes`` in, given in the order the file lists them.

    GraphViewer's order: a depth-first walk from the nodes no other node reads (pushed in index order, so the
    last is walked first), back through each node's producers (pushed in index order: the latest is walked
    first), a node placed when the walk leaves it. A node's index is its place in the file, except where ONNX
    Runtime replaces nodes by one new fused node (a MatMul and its bias Add by a Gemm): ``fused`` gives each node
    the pass that makes its new node (0: none) and the new node's place among those the pass makes, which the nodes
    fused together share. A new node takes the next index, after the file's nodes and those earlier passes made,
    and is walked as one node. ``producer`` gives a value's producing node, None for a graph input or a weight (a
    node folded into a weight is not among ``nodes``).
    """
    groups: dict[tuple[int, int], list[Node]] = {}
    for position, node in enumerate(nodes):
        made_by, place = fused(node) if fused is not None else (0, 0)
        groups.setdefault((made_by, place if made_by else position), []).append(node)
    members = [groups[key] for key in sorted(groups)]
    index = {id(n): i for i, group in enumerate(members) for n in group}
    inputs_of: list[list[int]] = []
    read = [False] * len(members)
    for i, group in enumerate(members):
        found = set()
        for node in group:
            for v in node.inputs:
                p = producer(v)
                j = index.get(id(p)) if p is not None else None
                if j is not None and j != i:
                    found.add(j)
                    read[j] = True
        inputs_of.append(sorted(found))
    stack = [(i, False) for i in range(len(members)) if not read[i]]
    visited = [False] * len(members)
    order: list[Node] = []
    while stack:
        i, leaving = stack.pop()
        if leaving:
            order.extend(members[i])
            continue
        if visited[i]:
            continue
        visited[i] = True
        stack.append((i, True))
        stack.extend((j, False) for j in inputs_of[i] if not visited[j])
    return order


def graph_run_order(graph: Graph, fused: Callable[[Node], tuple[int, int]] | None = None) -> list[Node]:
    """The nodes of ``graph`` that run (not computed from weights alone, which export folds) in ONNX Runtime's order
    (``fused``: see :func:`run_order`)."""
    consts = graph.constant_values()
    return run_order([n for n in graph.topological_order() if not all(o in consts for o in n.outputs)], graph.producer, fused)


class WeightReads:
    """The weights a graph's running nodes read (their main weights), in the order they run, and each read's reuse distance.

    Each read carries a sort key, its position in the run order: a rewrite's new reads take the key of the
    first node it removes (:meth:`changed`), so a child's reads are ordered without walking the child.
    """

    __slots__ = ("keys", "nodes", "weights", "bytes", "_distances")

    def __init__(self, keys: list[tuple[int, int]], nodes: list[Node], weights: list[str], nbytes: dict[str, int]):
        self.keys, self.nodes, self.weights, self.bytes = keys, nodes, weights, nbytes
        self._distances: list[float] | None = None

    @classmethod
    def of(cls, reads: Iterable[tuple[int, Node, str, int]]) -> WeightReads:
        """From (position in the run order, node, its main weight, the weight's bytes) for every running node that has one."""
        ordered = sorted(reads, key=lambda read: read[0])
        return cls([(p, 0) for p, *_ in ordered], [n for _, n, _, _ in ordered], [w for _, _, w, _ in ordered],
                   {w: size for _, _, w, size in ordered})

    def changed(self, removed: Iterable[Node], added: Iterable[tuple[Node, str, int]], at: int) -> WeightReads:
        """These reads after a rewrite: the removed nodes' reads gone, the added ones' at position ``at`` (in their order)."""
        gone = {id(n) for n in removed}
        keep = [i for i, n in enumerate(self.nodes) if id(n) not in gone]
        keys = [self.keys[i] for i in keep]
        nodes = [self.nodes[i] for i in keep]
        weights = [self.weights[i] for i in keep]
        nbytes = {w: self.bytes[w] for w in weights}
        for j, (node, weight, size) in enumerate(added, start=1):
            key = (at, j)
            where = bisect.bisect_right(keys, key)
            keys.insert(where, key)
            nodes.insert(where, node)
            weights.insert(where, weight)
            nbytes[weight] = size
        return WeightReads(keys, nodes, weights, nbytes)

    def distances(self) -> list[float]:
        """Per read, the bytes of the other weights read since the previous read of its weight (each counted once),
        run after run: the first read of a weight in a run follows the last one of the run before."""
        if self._distances is None:
            self._distances = _reuse_distances(self.weights, self.bytes)
        return self._distances


def _reuse_distances(weights: list[str], nbytes: dict[str, int]) -> list[float]:
    """Walks back from each read to the previous read of its weight (cyclically); a weight read once a run has every
    other weight between its reads, without a walk."""
    total = sum(nbytes.values())
    counts: dict[str, int] = {}
    for w in weights:
        counts[w] = counts.get(w, 0) + 1
    n = len(weights)
    found: list[float] = []
    for i, w in enumerate(weights):
        if counts[w] == 1:
            found.append(float(total - nbytes[w]))
            continue
        seen: set[str] = set()
        between = 0
        j = i - 1
        while weights[j % n] != w:
            other = weights[j % n]
            if other not in seen:
                seen.add(other)
                between += nbytes[other]
            j -= 1
        found.append(float(between))
    return found
