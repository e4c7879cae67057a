"""Saturation side by side: the current rule admission against an earlier commit's, on the same models, rounds and limits.

    python benchmarks/bench_saturate.py [--before COMMIT] [--model inception_v3 ...] [--rounds 2] [--repeat 2]

The default ``--before`` is 1798413, which declared to egglog every rule whose source's operators all occur in the
e-graph; since then a rule also waits until each producer-reader pair of operators in its source occurs (declaring a
rule costs more than matching it). For each zoo model both run the same number of rounds from the same graph,
alternating; prints the seconds each took (best of ``--repeat``), the ratio, and the e-nodes and targets each added
(equal when the admission lost no match).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _before import modules_at  # noqa: E402 - a sibling script, not a package

import taso.search.eqsat  # noqa: E402,F401 - the package the old modules are loaded into
from taso import models  # noqa: E402
from taso.search.cleanup import clean_up  # noqa: E402
now = importlib.import_module("taso.search.eqsat.saturate")  # the module: the package exports a function of that name
from taso.onnx import load_onnx  # noqa: E402
from taso.pipeline.library import load_rules

BEFORE = "1798413"  # rules admitted by operators alone


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default=BEFORE)
    p.add_argument("--model", action="append", help="zoo models (default: inception_v3 resnet50 nasnet_a bert nasrnn squeezenet)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    before = modules_at(args.before, "taso/eqsat", "taso.search.eqsat", ("terms", "patterns", "saturate"))["saturate"]
    rules = load_rules()
    print("| model | rounds | seconds before | seconds now | now / before | e-nodes before, now | targets added before, now |")
    print("|---|---:|---:|---:|---:|---|---|")
    for name in args.model or ["inception_v3", "resnet50", "nasnet_a", "bert", "nasrnn", "squeezenet"]:
        graph, _ = clean_up(load_onnx(models.build(name)))
        best: dict[str, tuple[float, int, int]] = {}
        for _ in range(args.repeat):
            for label, module in (("before", before), ("now", now)):
                egraph = module.EGraph(graph)
                started = time.perf_counter()
                report = module.saturate(egraph, rules, module.Limits(nodes=50_000, iterations=args.rounds, seconds=600.0))
                seconds = time.perf_counter() - started
                if label not in best or seconds < best[label][0]:
                    best[label] = (seconds, report.terms, report.applied)
        (b_s, b_terms, b_applied), (n_s, n_terms, n_applied) = best["before"], best["now"]
        print(f"| {name} | {args.rounds} | {b_s:.2f} | {n_s:.2f} | {n_s / b_s:.2f} | {b_terms}, {n_terms} | {b_applied}, {n_applied} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
