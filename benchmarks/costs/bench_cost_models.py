"""Predicted vs measured speedup of the per-node and the region (fusion-aware) cost models, side by side.

For each model the same search (shipped library, same budget and time limit) runs once per
cost model; each search's best graph is exported and timed against the original on ONNX
Runtime ENABLE_ALL, all three interleaved in one run. A cost model predicts well when its
predicted speedup is close to the measured one, and above all on the right side of 1.0:
a rewrite predicted to pay that measures slower is what the end-to-end guard then refuses.

Run: python benchmarks/costs/bench_cost_models.py [--models nasrnn,squeezenet,...] [--corpus torch-script/lstm_cell_unrolled16,...]
     [--time-limit 30] [--threads 1] [--json OUT.json]
(corpus models come from ``python -m taso.models.corpus build``; a missing one is reported and skipped.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects

import taso  # noqa: E402
from taso import models  # noqa: E402
from taso.cost import make_cost_model
from taso.measure.inputs import random_inputs
from taso.measure.timing import interleaved_times  # noqa: E402
from taso.pipeline.library import load_rules
from taso.pipeline.source import export_onnx
from taso.search import SearchConfig, search

COST_MODELS = ("ort-cpu", "ort-cpu-region")


def load_model(name: str, corpus_dir: Path | None):
    if "/" not in name:
        model = models.build(name)
        return taso.load_onnx(model), model.SerializeToString()
    from taso.models.corpus import all_entries, default_cache_dir  # noqa: PLC0415 - the corpus script is only needed for corpus models

    entry = next((e for e in all_entries() if e.name == name), None)
    if entry is None:
        raise SystemExit(f"no corpus model named {name!r} (python -m taso.models.corpus list)")
    path = entry.path(corpus_dir or default_cache_dir())
    if not path.exists():
        return None, None
    shapes = {k: list(v) for k, v in entry.input_shapes.items()} or None
    return taso.load_onnx(str(path), input_shapes=shapes), path.read_bytes()


def measure(name: str, graph, original: bytes, rules, args) -> dict:
    row: dict = {"model": name, "nodes": len(graph)}
    exported = [original]
    for cost in COST_MODELS:
        model = make_cost_model(cost, threads=args.threads)
        started = time.perf_counter()
        try:
            best, report = search(graph, rules, model, SearchConfig(budget=args.budget, time_limit=args.time_limit))
        finally:
            model.close()
        row[cost] = {"predicted": round(report.predicted_speedup, 3), "search_s": round(time.perf_counter() - started, 1),
                     "rewrites": sum(report.applied.values()), **{k: getattr(model, k) for k in ("regions_timed", "regions_reused", "per_node") if hasattr(model, k)}}
        exported.append(export_onnx(best).SerializeToString())
    seconds = interleaved_times(exported, random_inputs(graph), args.threads, rounds=args.rounds)
    for cost, t in zip(COST_MODELS, seconds[1:]):
        row[cost]["measured"] = round(seconds[0] / t, 3)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="nasrnn,squeezenet,inception_v3,vgg19,bert")
    parser.add_argument("--corpus", default="torch-script/lstm_cell_unrolled16,torch-script/gru_cell_unrolled32,torch-dynamo/lstm_cell_unrolled16,"
                                            "torch-script/lstm_2layer")
    parser.add_argument("--corpus-dir", type=Path)
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rules = load_rules()
    names = [n for n in args.models.split(",") if n] + [n for n in args.corpus.split(",") if n]
    rows = []
    print("| model | nodes | per-node: predicted | measured | region: predicted | measured | regions timed / reused / per-node |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        graph, original = load_model(name, args.corpus_dir)
        if graph is None:
            print(f"| {name} | not built (python -m taso.models.corpus build --only {name}) |", flush=True)
            continue
        row = measure(name, graph, original, rules, args)
        rows.append(row)
        a, b = row["ort-cpu"], row["ort-cpu-region"]
        print(f"| {name} | {row['nodes']} | {a['predicted']:.2f}x | {a['measured']:.2f}x | {b['predicted']:.2f}x | {b['measured']:.2f}x | "
              f"{b['regions_timed']} / {b['regions_reused']} / {b['per_node']} |", flush=True)
    errors = {cost: [abs(r[cost]["predicted"] - r[cost]["measured"]) for r in rows] for cost in COST_MODELS}
    wrong_side = {cost: sum((r[cost]["predicted"] > 1.01) and (r[cost]["measured"] < 0.99) for r in rows) for cost in COST_MODELS}
    for cost in COST_MODELS:
        if rows:
            print(f"{cost}: mean |predicted - measured| {np.mean(errors[cost]):.3f}; predicted a gain that measured a loss on {wrong_side[cost]} of {len(rows)} models")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
