"""Rules whose source shares nothing between its parts, used or not by the search, side by side.

A directed rule like ``[sigmoid(x1), sigmoid(x2)] => split(sigmoid(concat(x1, x2)))`` is true
and proved, but its source is two unrelated pieces: it matches every ordered pair of sigmoids
in a graph. The search uses only connected sources by default (``SearchConfig.connected_only``).
For each model this runs the same search twice (default limits, the shipped library, measured
``ort-cpu`` costs from the cache) and prints what the first expansion tried, how many graphs
each search expanded within the time limit, and the predicted speedup it reached.

Run: python benchmarks/search/bench_connected.py [--time-limit 9] [--model NAME ...]
     (corpus models need python -m taso.models.corpus build first; missing ones are skipped, with a note)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from taso.models import corpus

from taso.cost import make_cost_model
from taso.ir import Graph  # noqa: E402
from taso.onnx.importer import load_onnx  # noqa: E402
from taso.pipeline.library import load_rules
from taso.search import SearchConfig, search

DEFAULT_MODELS = ("zoo/resnet50", "zoo/inception_v3", "zoo/nasnet_a", "zoo/nasrnn", "zoo/bert_base", "torch-script/lstm_cell_unrolled16",
                  "torch-script/gru_cell_unrolled32", "pypi-wheel/captcha_crnn")


def load(name: str) -> Graph | str:
    """The model's graph, or why it is not there."""
    if name.startswith("zoo/"):
        import taso.models as zoo

        return load_onnx(zoo.build(name.split("/", 1)[1]))
    entry = {e.name: e for e in corpus.all_entries()}.get(name)
    if entry is None:
        return "not a corpus model"
    if not entry.path().exists():
        return f"not built: python -m taso.models.corpus build --only {name}"
    return load_onnx(str(entry.path()), entry.input_shapes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=SearchConfig.time_limit)
    parser.add_argument("--model", action="append", help="zoo/NAME or a corpus name (repeatable)")
    args = parser.parse_args()
    rules, cost = load_rules(), make_cost_model("ort-cpu")
    print("| model | nodes | first expansion: all rules / connected | expanded in the limit: all / connected | predicted: all / connected |")
    print("|---|---:|---|---|---|")
    for name in args.model or DEFAULT_MODELS:
        graph = load(name)
        if isinstance(graph, str):
            print(f"skipped {name}: {graph}", file=sys.stderr)
            continue
        runs = [search(graph, rules, cost, SearchConfig(time_limit=args.time_limit, connected_only=flag))[1] for flag in (False, True)]
        first = [r.expansions[0].tried if r.expansions else 0 for r in runs]
        print(f"| {name} | {len(graph.nodes)} | {first[0]:,} / {first[1]:,} ({first[0] / max(first[1], 1):.1f}x fewer) | "
              f"{runs[0].expanded} / {runs[1].expanded} | {runs[0].predicted_speedup:.2f}x / {runs[1].predicted_speedup:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
