"""The matching of a search's first expansion on unrolled cells: the matcher now against the matcher at BEFORE.

Issue 24 asks that the first expansion of a 64-step cell take under 1 s, and matching is most of
it. For each cell export (``bench_cell_ceiling.py``'s files, 64 steps), this runs the search for
one expansion (the shipped library, ``ort-cpu`` costs from the cache, default settings) with the
matcher of ``taso/search/rewrite.py`` as it is and as it was at ``BEFORE`` (read from git, imported
beside it), and prints the first expansion's seconds (matching, planning and pricing every
rewrite of the input graph). Both must try the same rewrites; rounds alternate between the two
and the ratio printed is the median of before / now. A last column checks, outside the timed
rounds, that the two matchers find the same matches of every rule in the same order.

Run: python benchmarks/bench_first_expansion.py [--rounds 5] [--cells lstm gru] [--hidden 512]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _before import modules_at  # noqa: E402 - a sibling script, not a package

import taso.search.core  # noqa: E402
from taso.search import rewrite as now  # noqa: E402
from taso.cost import make_cost_model
from taso.search.groups import GroupLibrary, find_groups  # noqa: E402
from taso.onnx.importer import load_onnx  # noqa: E402
from taso.pipeline.library import load_rules
from taso.search import SearchConfig
from taso.search import search

BEFORE = "0cebfd0"  # the matcher before the per-graph kind table and the group bookkeeping in O(1)
CEILING_DIR = Path.home() / ".cache" / "taso-ceiling"


def _same_matches(before, graph, rules, apart) -> bool:
    """Every rule's matches, the same from both matchers and in the same order."""
    for rule in rules:
        crule = now.CompiledRule(rule)
        ids = [[tuple(map(id, m.nodes)) for m in module.find_matches(graph, crule, apart=apart)] for module in (before, now)]
        if ids[0] != ids[1]:
            return False
    return True


def _first_expansion(find_matches, graph, rules, cost) -> tuple[float, int]:
    """(seconds, rewrites tried) of the search's first expansion with this matcher."""
    taso.search.find_matches = find_matches
    try:
        _, report = search(graph, rules, cost, SearchConfig(budget=1))
    finally:
        taso.search.find_matches = now.find_matches
    first = report.expansions[0]
    return first.seconds_rewriting + first.seconds_costing, first.tried


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cells", nargs="+", default=["lstm", "gru"])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--exporters", nargs="+", default=["dynamo", "torchscript"])
    args = parser.parse_args()
    before = modules_at(BEFORE, "taso", "taso", ("rewrite",))["rewrite"]
    rules, cost = load_rules(), make_cost_model("ort-cpu")
    print("| export | nodes | rewrites tried | before (s) | now (s) | before / now | same matches |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for cell in args.cells:
        for exporter in args.exporters:
            path = CEILING_DIR / f"{cell}_h{args.hidden}_s64.{exporter}.onnx"
            if not path.exists():
                print(f"skipped {path.name}: build it with python benchmarks/bench_cell_ceiling.py --cells {cell} --hidden {args.hidden} "
                      f"--steps 64 --exporters {exporter} --threads 1", file=sys.stderr)
                continue
            graph = load_onnx(str(path))
            matchers = {"before": before.find_matches, "now": now.find_matches}
            tried = {name: _first_expansion(f, graph, rules, cost)[1] for name, f in matchers.items()}  # untimed: rules compiled, costs cached
            if tried["before"] != tried["now"]:
                raise SystemExit(f"{path.name}: the two matchers tried different numbers of rewrites: {tried}")
            seconds: dict[str, list[float]] = {"before": [], "now": []}
            for round_ in range(args.rounds):
                for name in (("before", "now") if round_ % 2 == 0 else ("now", "before")):
                    seconds[name].append(_first_expansion(matchers[name], graph, rules, cost)[0])
            b, n = statistics.median(seconds["before"]), statistics.median(seconds["now"])
            ratio = statistics.median(x / y for x, y in zip(seconds["before"], seconds["now"]))
            same = _same_matches(before, graph, rules, find_groups(graph, GroupLibrary.shipped()).apart)
            print(f"| {path.name} | {len(graph.nodes)} | {tried['now']:,} | {b:.3f} | {n:.3f} | {ratio:.2f}x | {'yes' if same else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
