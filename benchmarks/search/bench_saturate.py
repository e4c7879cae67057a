"""Saturation side by side: the current rule admission against an earlier commit's, each run as its own commit, on
the same models, rules, rounds and limits.

    python benchmarks/search/bench_saturate.py [--before COMMIT] [--model inception_v3 ...] [--rounds 2] [--repeat 2]

The default ``--before`` is 1798413, which declared to egglog every rule whose source's operators all occur in the
e-graph; since then a rule also waits until each producer-reader pair of operators in its source occurs (declaring a
rule costs more than matching it). For each zoo model each side (a fresh process on its commit's code,
:mod:`common.commits`) runs the same number of rounds from the same cleaned-up graph, the sides alternating
``--repeat`` times; prints the seconds each took (best of ``--repeat``), the ratio, and the e-nodes and targets each
added (equal when the admission lost no match).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from common import commits  # noqa: E402

BEFORE = "1798413"  # rules admitted by operators alone
LIBRARY = commits.ROOT / "taso" / "data" / "library.jsonl.gz"  # one rules file for both sides


def worker(model: str, rounds: int) -> dict:
    """This tree's saturation of ``model`` for ``rounds`` rounds: seconds, e-nodes and targets added."""
    from taso import models
    from taso.onnx import load_onnx

    clean_up = commits.first_module("taso.search.cleanup", "taso.cleanup").clean_up
    saturate = commits.first_module("taso.search.eqsat.saturate", "taso.eqsat.saturate")
    rules = commits.first_module("taso.pipeline.library", "taso.optimize").load_rules(str(LIBRARY))
    graph, _ = clean_up(load_onnx(models.build(model)))
    egraph = saturate.EGraph(graph)
    started = time.perf_counter()
    report = saturate.saturate(egraph, rules, saturate.Limits(nodes=50_000, iterations=rounds, seconds=600.0))
    return {"seconds": time.perf_counter() - started, "terms": report.terms, "applied": report.applied}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default=BEFORE)
    p.add_argument("--model", action="append", help="zoo models (default: inception_v3 resnet50 nasnet_a bert nasrnn squeezenet)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.model[0], args.rounds)))
        return 0
    trees = commits.sides(args.before)
    print("| model | rounds | seconds before | seconds now | now / before | e-nodes before, now | targets added before, now |")
    print("|---|---:|---:|---:|---:|---|---|")
    for name in args.model or ["inception_v3", "resnet50", "nasnet_a", "bert", "nasrnn", "squeezenet"]:
        runs = commits.alternating_runs(__file__, trees, ["--model", name, "--rounds", str(args.rounds)], args.repeat)
        best = {side: min(side_runs, key=lambda run: run["seconds"]) for side, side_runs in runs.items()}
        b, n = best["before"], best["now"]
        print(f"| {name} | {args.rounds} | {b['seconds']:.2f} | {n['seconds']:.2f} | {n['seconds'] / b['seconds']:.2f} | "
              f"{b['terms']}, {n['terms']} | {b['applied']}, {n['applied']} |", flush=True)
    return 0


if __name__ == "__main__":
    commits.mount_from_argv()  # a worker runs the tree it was given
    sys.exit(main())
