"""The matching of a search's first expansion on unrolled cells: this commit against BEFORE, each run as itself.

Issue 24 asks that the first expansion of a 64-step cell take under 1 s, and matching is most of it. For each cell
export (``end_to_end/bench_cell_ceiling.py``'s files, 64 steps), each side (a fresh process on its commit's code,
:mod:`common.commits`) runs the search for one expansion (the shipped library, ``ort-cpu`` costs from its cache,
default settings): once untimed (rules compiled, costs measured), then ``--rounds`` timed. It prints the first
expansion's seconds (matching, planning and pricing every rewrite of the input graph). Both must try the same
rewrites; the two sides alternate ``--series`` times and the ratio printed is before / now of the medians. A last
column checks that the two find the same matches of every rule in the same order (nodes named by position).

Run: python benchmarks/search/bench_first_expansion.py [--rounds 5] [--cells lstm gru] [--hidden 512]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from common import commits  # noqa: E402

BEFORE = "0cebfd0"  # the matcher before the per-graph kind table and the group bookkeeping in O(1)
CEILING_DIR = Path.home() / ".cache" / "taso-ceiling"
LIBRARY = commits.ROOT / "taso" / "data" / "library.jsonl.gz"  # one rules file for both sides


def worker(path: str, rounds: int) -> dict:
    """This tree's first expansion of the model at ``path``: seconds of each timed round, rewrites tried, and a digest
    of every rule's matches (nodes by position in the graph)."""
    from taso.cost import make_cost_model
    from taso.onnx import load_onnx

    search = commits.first_module("taso.search")
    rewrite = commits.first_module("taso.search.rewrite", "taso.rewrite")
    groups = commits.first_module("taso.search.groups", "taso.groups")
    rules = commits.first_module("taso.pipeline.library", "taso.optimize").load_rules(str(LIBRARY))
    graph, cost = load_onnx(path), make_cost_model("ort-cpu")

    def first_expansion() -> tuple[float, int]:
        _, report = search.search(graph, rules, cost, search.SearchConfig(budget=1))
        first = report.expansions[0]
        return first.seconds_rewriting + first.seconds_costing, first.tried

    _, tried = first_expansion()
    seconds = [first_expansion()[0] for _ in range(rounds)]
    position = {id(node): at for at, node in enumerate(graph.nodes)}
    apart = groups.find_groups(graph, groups.GroupLibrary.shipped()).apart
    digest = hashlib.sha256()
    for rule in rules:
        for match in rewrite.find_matches(graph, rewrite.CompiledRule(rule), apart=apart):
            digest.update(repr([position[id(node)] for node in match.nodes]).encode())
        digest.update(b"|")
    return {"seconds": seconds, "tried": tried, "nodes": len(graph.nodes), "matches": digest.hexdigest()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--series", type=int, default=2, help="alternations of the two sides' processes")
    parser.add_argument("--cells", nargs="+", default=["lstm", "gru"])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--exporters", nargs="+", default=["dynamo", "torchscript"])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)  # the worker's model
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.path, args.rounds)))
        return 0
    trees = commits.sides(BEFORE)
    print("| export | nodes | rewrites tried before, now | before (s) | now (s) | before / now | same matches |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for cell in args.cells:
        for exporter in args.exporters:
            path = CEILING_DIR / f"{cell}_h{args.hidden}_s64.{exporter}.onnx"
            if not path.exists():
                print(f"skipped {path.name}: build it with python benchmarks/end_to_end/bench_cell_ceiling.py --cells {cell} "
                      f"--hidden {args.hidden} --steps 64 --exporters {exporter} --threads 1", file=sys.stderr)
                continue
            runs = commits.alternating_runs(__file__, trees, ["--path", str(path), "--rounds", str(args.rounds)], args.series)
            tried = {side: runs[side][0]["tried"] for side in runs}
            b, n = (statistics.median(s for run in runs[side] for s in run["seconds"]) for side in ("before", "now"))
            same = len({run["matches"] for side_runs in runs.values() for run in side_runs}) == 1
            print(f"| {path.name} | {runs['now'][0]['nodes']} | {tried['before']:,}, {tried['now']:,} | {b:.3f} | {n:.3f} | {b / n:.2f}x | "
                  f"{'yes' if same else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    commits.mount_from_argv()  # a worker runs the tree it was given
    sys.exit(main())
