"""What pricing the split products' shadows costs ``graph_cost``, side by side, and what it adds to each graph.

At more than one thread ``ort-cpu`` walks each graph it prices in ONNX Runtime's run order once more, to charge each
product the thread pool splits for the single-threaded nodes after it (``taso.cost.shadow``). The search prices every
graph it builds so. This prices each model (zoo models, and FILE.onnx) with the shadow and with none, alternately
(``--repeat`` times each, fresh memos each time: the table's entries are cached), and prints the seconds per
``graph_cost`` call with the shadow over those without, and the share of the graph's price the shadow is.

Run: python benchmarks/bench_shadow_pricing.py [--models nasrnn,bert_base] [--threads 2] [FILE.onnx ...]
"""

from __future__ import annotations

import argparse
import statistics
import time

import onnx

from taso import models
from taso.cost.ort_cpu import OrtCpuCost
from taso.cost.shadow import Shadow
from taso.onnx import load_onnx


def _timed_cost(model: OrtCpuCost, graph) -> tuple[float, float]:
    model._reads.clear()  # the per-graph walk, not its memo
    start = time.perf_counter()
    cost = model.graph_cost(graph)
    return time.perf_counter() - start, cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*")
    parser.add_argument("--models", default="nasrnn,bert_base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    graphs = {name: load_onnx(models.build(name), {}) for name in filter(None, args.models.split(","))}
    graphs.update({path: load_onnx(onnx.load(path), {}) for path in args.files})
    shaded = OrtCpuCost(threads=args.threads)
    print(f"shadow at {args.threads} threads: {shaded.shadow()}")
    plain = OrtCpuCost(threads=args.threads, cache=shaded.cache)  # the same table, no shadow
    plain._shadow = Shadow()
    print("| model | nodes | graph_cost with / without the shadow (seconds per call) | shadow / graph price |")
    print("|---|---:|---:|---:|")
    for name, graph in graphs.items():
        for model in (shaded, plain):
            model.graph_cost(graph)  # measures what the table lacks, once
        times = {id(shaded): [], id(plain): []}
        costs = {}
        for _ in range(args.repeat):
            for model in (shaded, plain):
                seconds, costs[id(model)] = _timed_cost(model, graph)
                times[id(model)].append(seconds)
        ratio = statistics.median(times[id(shaded)]) / statistics.median(times[id(plain)])
        share = (costs[id(shaded)] - costs[id(plain)]) / costs[id(shaded)]
        print(f"| {name} | {len(graph.nodes)} | {ratio:.2f}x | {share:.1%} |")
    shaded.close()


if __name__ == "__main__":
    main()
