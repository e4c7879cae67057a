"""The search with clean-up as a free move vs without it, side by side on the same models (issue 22).

For each model: the same search (shipped library, measured ``ort-cpu`` costs from the cache,
``--time-limit`` seconds) with ``SearchConfig(clean_up=True)`` (the default: a graph a rewrite
built is cleaned up when :func:`taso.search.cleanup.may_clean_up` finds work at its new nodes) and
with ``clean_up=False``, run alternately ``--repeat`` times. Printed per model: graphs
expanded, graphs cleaned up, the search's predicted speedup, and the cost of its result after
the pipeline's final clean-up (what ``taso optimize`` exports), with the ratio of that cost
without / with (above 1: in-search clean-up found a cheaper graph).

Run: python benchmarks/search/bench_search_cleanup.py [--model nasrnn --model FILE.onnx ...] [--time-limit 9] [--repeat 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from taso.cost import make_cost_model
from taso.onnx import load_onnx
from taso.pipeline.library import load_rules
from taso.search import SearchConfig, search
from taso.search.cleanup import clean_up


def _graph(name: str):
    if name.endswith(".onnx"):
        return load_onnx(name)
    import taso.models as zoo

    return load_onnx(zoo.build(name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="a taso.models name or an .onnx file (default: nasrnn, squeezenet, bert_base)")
    parser.add_argument("--time-limit", type=float, default=9.0)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    rules, model = load_rules(), make_cost_model("ort-cpu")
    for name in args.model or ["nasrnn", "squeezenet", "bert_base"]:
        start = clean_up(_graph(name))[0]
        runs: dict[bool, list] = {True: [], False: []}
        for _ in range(args.repeat):
            for flag in (True, False):
                best, report = search(start, rules, model, SearchConfig(time_limit=args.time_limit, clean_up=flag))
                runs[flag].append((report.expanded, report.cleaned, report.predicted_speedup, model.graph_cost(clean_up(best)[0])))
        line = []
        for flag in (True, False):
            r = runs[flag]
            line.append(f"{'with' if flag else 'without'} clean-up: {statistics.median(x[0] for x in r):.0f} expanded, "
                        f"{statistics.median(x[1] for x in r):.0f} cleaned, predicted {statistics.median(x[2] for x in r):.3f}x, "
                        f"result {statistics.median(x[3] for x in r) * 1e3:.3f} ms")
        ratio = statistics.median(x[3] for x in runs[False]) / statistics.median(x[3] for x in runs[True])
        print(f"{name}: {'; '.join(line)}; result cost without / with: {ratio:.3f}", flush=True)
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
