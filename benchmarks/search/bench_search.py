"""Search time per zoo model, and the lazy plan queue vs building every accepted rewrite, side by side.

Both variants run the same search (same rules, cost model, budget) one after the other on
each model; the ratio of their times is the result, and the best costs must agree.
Run: python benchmarks/search/bench_search.py [--models nasrnn,bert_base,...] [--budget N] [--cost analytic|ort-cpu]
"""

from __future__ import annotations

import argparse
import time

import taso
from taso import models
from taso.cost import make_cost_model
from taso.pipeline.library import load_rules
from taso.search import SearchConfig, search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="nasrnn,squeezenet,bert_base,nasnet_a,inception_v3")
    parser.add_argument("--budget", type=int, default=50)
    parser.add_argument("--cost", default="analytic")
    parser.add_argument("--library")
    args = parser.parse_args()
    rules = load_rules(args.library)
    for name in args.models.split(","):
        graph = taso.load_onnx(models.build(name))
        cost_model = make_cost_model(args.cost)
        seconds = {}
        for lazy in (True, False):
            start = time.perf_counter()
            _, report = search(graph, rules, cost_model, SearchConfig(budget=args.budget, time_limit=600, lazy=lazy))
            seconds[lazy] = (time.perf_counter() - start, report)
        cost_model.close()
        (t_lazy, lazy_report), (t_eager, eager_report) = seconds[True], seconds[False]
        print(f"{name:<13} {len(graph):>4} nodes: search {t_lazy:.1f} s for {lazy_report.expanded} expansions / {lazy_report.generated} rewrites; "
              f"lazy plans are {t_eager / t_lazy:.1f}x building every rewrite (best cost ratio {eager_report.best_cost / lazy_report.best_cost:.3f})")


if __name__ == "__main__":
    main()
