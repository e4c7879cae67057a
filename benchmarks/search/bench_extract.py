"""Equality saturation's extraction side by side: the current commit against an earlier one, each run as itself, on
the same models, rules, analytic costs and time budgets.

    python benchmarks/search/bench_extract.py [--before COMMIT] [--model inception_v3 ...] [--seconds 0.5 2 8]

The default ``--before`` is 1798413, the last commit that ordered every class on a cycle up front (big-M order rows);
since then cycles of two and three classes are cut up front and longer ones lazily, one row per cycle a choice closes,
over every e-node of each class reading the next (docs/eqsat.md). 26f0bdc is an earlier lazy-cut experiment.

For each zoo model, each side (a fresh process on its commit's code, :mod:`common.commits`) saturates the e-graph as
its ``--search eqsat`` does (the shipped rules, the default node limit), then extracts at each budget: what a user of
that commit got. Saturation changed too (``bench_saturate.py``), so the e-graphs differ; each side's e-node count is
printed. Prints the cost each found (lower is better; analytic costs, so the figures are exact and repeatable), the
method it reports and its wall time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from common import commits  # noqa: E402

BEFORE = "1798413"  # order rows on the cyclic classes
LIBRARY = commits.ROOT / "taso" / "data" / "library.jsonl.gz"  # one rules file for both sides


def worker(model: str, budgets: list[float]) -> dict:
    """This tree's saturation of ``model`` and its extraction at each budget: cost, method and seconds of each."""
    from taso import models
    from taso.cost import AnalyticCost
    from taso.onnx import load_onnx

    clean_up = commits.first_module("taso.search.cleanup", "taso.cleanup").clean_up
    saturate = commits.first_module("taso.search.eqsat.saturate", "taso.eqsat.saturate")
    extract = commits.first_module("taso.search.eqsat.extract", "taso.eqsat.extract").extract
    load_rules = commits.first_module("taso.pipeline.library", "taso.optimize").load_rules
    config = commits.first_module("taso.search").SearchConfig()
    graph, _ = clean_up(load_onnx(models.build(model)))
    egraph = saturate.EGraph(graph)
    saturate.saturate(egraph, load_rules(str(LIBRARY)), saturate.Limits(nodes=config.eqsat_nodes, iterations=config.eqsat_iterations, seconds=30.0))
    results = []
    for seconds in budgets:
        started = time.perf_counter()
        found = extract(egraph, AnalyticCost(), seconds)
        results.append({"cost": found.cost, "method": found.method, "seconds": time.perf_counter() - started, "enodes": found.enodes})
    return {"results": results}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default=BEFORE)
    p.add_argument("--model", action="append", help="zoo models (default: inception_v3 resnet50 nasnet_a bert nasrnn squeezenet)")
    p.add_argument("--seconds", type=float, nargs="+", default=[0.5, 2.0, 8.0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.model[0], args.seconds)))
        return 0
    trees = commits.sides(args.before)
    print("| model | e-nodes before, now | budget s | cost before | cost now | now / before | before: method, s | now: method, s |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for name in args.model or ["inception_v3", "resnet50", "nasnet_a", "bert", "nasrnn", "squeezenet"]:
        runs = {side: commits.run_worker(__file__, tree, ["--model", name, "--seconds", *map(str, args.seconds)])["results"]
                for side, tree in trees.items()}
        for seconds, before, now in zip(args.seconds, runs["before"], runs["now"]):
            print(f"| {name} | {before['enodes']}, {now['enodes']} | {seconds:g} | {before['cost'] * 1e3:.4f} ms | {now['cost'] * 1e3:.4f} ms | "
                  f"{now['cost'] / before['cost']:.4f} | {before['method']}, {before['seconds']:.2f} | {now['method']}, {now['seconds']:.2f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    commits.mount_from_argv()  # a worker runs the tree it was given
    sys.exit(main())
