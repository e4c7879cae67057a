"""Extraction side by side: the current integer program against an earlier commit's, on the same saturated e-graphs,
with the same analytic costs and time budgets.

    python benchmarks/bench_extract.py [--before COMMIT] [--model inception_v3 ...] [--seconds 0.5 2 8]

The default ``--before`` is 1798413, the last commit that ordered every class on a cycle up front (big-M order rows);
since then cycles of two and three classes are cut up front and longer ones lazily, one row per cycle a choice closes,
over every e-node of each class reading the next (docs/eqsat.md). 26f0bdc is an earlier lazy-cut experiment.

For each zoo model the e-graph is saturated once, as ``--search eqsat`` does (the shipped rules, the default node
limit), then each extractor runs on it at each budget, alternating. Prints the cost each found (lower is better;
analytic costs, so the figures are exact and repeatable), the method it reports and its wall time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _before import modules_at  # noqa: E402 - a sibling script, not a package

import taso.search.eqsat  # noqa: E402,F401 - the package the old module is loaded into
from taso import models  # noqa: E402
from taso.search.cleanup import clean_up  # noqa: E402
from taso.cost import AnalyticCost
from taso.search.eqsat.saturate import EGraph, Limits, saturate  # noqa: E402
from taso.onnx import load_onnx  # noqa: E402
from taso.pipeline.library import load_rules
from taso.search import SearchConfig

BEFORE = "1798413"  # order rows on the cyclic classes


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default=BEFORE)
    p.add_argument("--model", action="append", help="zoo models (default: inception_v3 resnet50 nasnet_a bert nasrnn squeezenet)")
    p.add_argument("--seconds", type=float, nargs="+", default=[0.5, 2.0, 8.0])
    args = p.parse_args()
    extract_now = sys.modules["taso.search.eqsat.extract"].extract
    extract_before = modules_at(args.before, "taso/eqsat", "taso.search.eqsat", ("extract",))["extract"].extract
    rules = load_rules()
    config = SearchConfig()
    cost = AnalyticCost()
    print(f"| model | e-nodes | budget s | cost before | cost now | now / before | before: method, s | now: method, s |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for name in args.model or ["inception_v3", "resnet50", "nasnet_a", "bert", "nasrnn", "squeezenet"]:
        graph, _ = clean_up(load_onnx(models.build(name)))
        egraph = EGraph(graph)
        saturate(egraph, rules, Limits(nodes=config.eqsat_nodes, iterations=config.eqsat_iterations, seconds=30.0))
        for seconds in args.seconds:
            results = {}
            for label, extract in (("before", extract_before), ("now", extract_now)):
                started = time.perf_counter()
                found = extract(egraph, cost, seconds)
                results[label] = (found.cost, found.method, time.perf_counter() - started, found.enodes)
            (b_cost, b_method, b_s, enodes), (n_cost, n_method, n_s, _) = results["before"], results["now"]
            print(f"| {name} | {enodes} | {seconds:g} | {b_cost * 1e3:.4f} ms | {n_cost * 1e3:.4f} ms | {n_cost / b_cost:.4f} | "
                  f"{b_method}, {b_s:.2f} | {n_method}, {n_s:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
