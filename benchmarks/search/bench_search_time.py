"""Search time against what it buys: the old search settings vs the new defaults, measured end to end.

For each model the same search (shipped library, ort-cpu costs, warm cost cache after the
first run) runs with each setting; both best graphs are exported and timed against the
original on ONNX Runtime ENABLE_ALL, interleaved in one run. The new defaults are right
when they find the same or a faster model in a fraction of the time.

Run: python benchmarks/search/bench_search_time.py [--models nasrnn,squeezenet,...] [--corpus torch-script/lstm_cell_unrolled16,...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects

from costs.bench_cost_models import load_model  # noqa: E402 - one loader for zoo and corpus models

from taso.cost import make_cost_model
from taso.measure.inputs import random_inputs
from taso.measure.timing import interleaved_times  # noqa: E402
from taso.pipeline.library import load_rules
from taso.pipeline.source import export_onnx
from taso.search import SearchConfig, search

SETTINGS = {"budget 200, 60 s (before)": SearchConfig(budget=200, time_limit=60.0), "defaults (now)": SearchConfig()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="nasrnn,squeezenet,bert,resnet50,resnext50,inception_v3,nasnet_a,bert_base,vgg19")
    parser.add_argument("--corpus", default="torch-script/lstm_cell_unrolled16,torch-script/gru_cell_unrolled32")
    parser.add_argument("--corpus-dir", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rules = load_rules()
    print(f"library ready in {time.perf_counter() - started:.2f} s")
    names = [n for n in args.models.split(",") if n] + [n for n in args.corpus.split(",") if n]
    labels = list(SETTINGS)
    print("| model | " + " | ".join(f"{label}: search s | measured" for label in labels) + " |")
    print("|---|" + "---|---|" * len(labels))
    for name in names:
        graph, original = load_model(name, args.corpus_dir)
        if graph is None:
            print(f"| {name} | not built (python -m taso.models.corpus build --only {name}) |", flush=True)
            continue
        exported, seconds = [original], []
        for label in labels:
            model = make_cost_model("ort-cpu", threads=args.threads)
            begin = time.perf_counter()
            try:
                best, _ = search(graph, rules, model, SETTINGS[label])
            finally:
                model.close()
            seconds.append(time.perf_counter() - begin)
            exported.append(export_onnx(best).SerializeToString())
        times = interleaved_times(exported, random_inputs(graph), args.threads, rounds=args.rounds)
        cells = [f"{s:.1f} | {times[0] / t:.2f}x" for s, t in zip(seconds, times[1:])]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
