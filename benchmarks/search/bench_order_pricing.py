"""What pricing each built graph in its own run order costs the search, side by side.

``ort-cpu`` prices weight reads in the order ONNX Runtime runs the nodes (``taso.cost.residency``);
a rewrite is priced in its parent's order, and the search prices every graph it builds by
``graph_cost`` (a walk of the whole graph) because a rewrite can reorder reads it does not touch.
This runs the same search (same rules, budget, a cost cache warmed by a first run) with that
re-pricing on and off (``order_sensitive``), one after the other per model, and prints the ratio
of seconds per expansion and each variant's best graph at its own price (the search without re-pricing reports
an estimate for it).

Run: python benchmarks/search/bench_order_pricing.py [--models nasrnn,bert_base,nasnet_a] [--budget 30] [FILE.onnx ...]
"""

from __future__ import annotations

import argparse
import time

import onnx

import taso
from taso import models
from taso.cost import make_cost_model
from taso.pipeline.library import load_rules
from taso.search import SearchConfig, search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", help="ONNX files to search besides the zoo models")
    parser.add_argument("--models", default="nasrnn,bert_base,nasnet_a")
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    rules = load_rules()
    graphs = [(name, taso.load_onnx(models.build(name))) for name in args.models.split(",") if name]
    graphs += [(path, taso.load_onnx(onnx.load(path))) for path in args.files]
    config = SearchConfig(budget=args.budget, time_limit=600)
    print("| model | nodes | expansions | s per expansion, own order / parent's | ratio | best graph's cost ms, own order / parent's (reported) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, graph in graphs:
        cost_model = make_cost_model("ort-cpu", threads=args.threads)
        search(graph, rules, cost_model, config)  # fills the cost cache: neither variant measures
        seconds, best = {}, {}
        for own_order in (True, False):
            cost_model.order_sensitive = own_order
            start = time.perf_counter()
            found, report = search(graph, rules, cost_model, config)
            seconds[own_order] = (time.perf_counter() - start) / max(report.expanded, 1)
            best[own_order] = (cost_model.graph_cost(found), report.best_cost)
        cost_model.close()
        print(f"| {name} | {len(graph)} | {report.expanded} | {seconds[True] * 1e3:.1f} ms / {seconds[False] * 1e3:.1f} ms | "
              f"{seconds[True] / seconds[False]:.2f}x | {best[True][0] * 1e3:.3f} / {best[False][0] * 1e3:.3f} ({best[False][1] * 1e3:.3f}) |")


if __name__ == "__main__":
    main()
