"""Matches found per second on BERT and NASNet-A, anchored matching vs a naive matcher, side by side.

The naive matcher tries every node of the graph as the anchor of every rule (no per-op
index); the anchored one starts from the graph's per-op index and extends through edges.
Both find the same matches; the ratio of their throughputs is the result.
Run: python benchmarks/search/bench_match.py [--library PATH] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import taso
from taso import models
from taso.search.rewrite import CompiledRule, find_matches

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))


def _rules(path: str | None):
    from taso.pipeline.library import DEFAULT_LIBRARY, load_rules

    if path or os.path.exists(DEFAULT_LIBRARY):
        return load_rules(path)
    from rule_examples import all_rules  # before the shipped library exists

    return all_rules()


class _Unindexed:
    """A view of a graph without a per-op index: finding an operator's nodes scans the graph, as matching would without it."""

    def __init__(self, graph):
        self._graph = graph
        self.index = _ScanningIndex(graph)

    def __getattr__(self, name):
        return getattr(self._graph, name)


class _ScanningIndex:
    def __init__(self, graph):
        self._graph = graph

    def nodes_of(self, op_name):
        return [n for n in self._graph.nodes if n.op.name == op_name]

    def __getattr__(self, name):
        return getattr(self._graph.index, name)


def _count(graph, compiled) -> int:
    return sum(1 for crule in compiled for _ in find_matches(graph, crule))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--library")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    compiled = [CompiledRule(r) for r in _rules(args.library)]
    for name, options in (("bert_base", {"layers": 4}), ("nasnet_a", {})):
        graph = taso.load_onnx(models.build(name, **options))
        times = {"anchored": [], "naive": []}
        for _ in range(args.repeat):
            for label, view in (("anchored", graph), ("naive", _Unindexed(graph))):
                start = time.perf_counter()
                found = _count(view, compiled)
                times[label].append(time.perf_counter() - start)
        anchored, naive = statistics.median(times["anchored"]), statistics.median(times["naive"])
        print(f"{name:<10} {len(graph):>4} nodes, {len(compiled)} rules, {found} matches: "
              f"{found / anchored:,.0f} matches/s anchored; anchored is {naive / anchored:.1f}x the naive matcher")


if __name__ == "__main__":
    main()
