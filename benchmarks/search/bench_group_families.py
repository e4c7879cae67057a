"""What each group family adds: the search with every family, without one, and without group merges, side by side.

For each model (NasRNN from the zoo by default, or ONNX files given), the search runs at its
default settings (9 s, measured ``ort-cpu`` costs) once with all group families, once with
each family's arities excluded, and once with group merges off (``SearchConfig(groups=False)``).
Every result is exported, checked equal to the input on ONNX Runtime, and all of them are
timed with the input in one interleaved run (:func:`taso.measure.timing.interleaved_times`). The
table gives each variant's predicted and measured speedup (input time / its time) and the
group merges it applied.

Run: python benchmarks/search/bench_group_families.py [MODEL.onnx ...] [--rounds 7] [--time-limit 9]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import taso
from taso.cost import make_cost_model
from taso.measure.inputs import random_input_sets
from taso.measure.outputs import compare_with, run_reference
from taso.measure.timing import interleaved_times
from taso.onnx.importer import load_onnx
from taso.pipeline.library import load_rules
from taso.search import SearchConfig, search
from taso.search.groups import FAMILIES, MAX_GROUP, MIN_GROUP


def _variants(time_limit: float) -> dict[str, SearchConfig]:
    variants = {"all families": SearchConfig(time_limit=time_limit)}
    for family in FAMILIES:
        labels = frozenset(f"{family.name}-{k}" for k in range(MIN_GROUP, MAX_GROUP + 1))
        variants[f"without {family.name}"] = SearchConfig(time_limit=time_limit, excluded=labels)
    variants["no group merges"] = SearchConfig(time_limit=time_limit, groups=False)
    return variants


def _load(name: str):
    if name.endswith(".onnx"):
        return name, load_onnx(name)
    from taso import models

    return name, load_onnx(models.build(name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["nasrnn"], help="zoo names or ONNX files (default: nasrnn)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--time-limit", type=float, default=SearchConfig.time_limit)
    args = parser.parse_args()
    rules, cost = load_rules(), make_cost_model("ort-cpu")
    for name, graph in map(_load, args.models):
        input_sets = random_input_sets(graph)
        original = taso.export_onnx(graph).SerializeToString()
        reference = run_reference(original, input_sets)
        rows, models = [], [original]
        for label, config in _variants(args.time_limit).items():
            best, report = search(graph, rules, cost, config)
            exported = taso.export_onnx(best).SerializeToString()
            comparison = compare_with(reference, exported)
            if not comparison.ok:
                raise SystemExit(f"{name}, {label}: the search's graph differs from the input: {comparison.describe()}")
            models.append(exported)
            groups = {k: v for k, v in report.applied.items() if any(k.startswith(f.name + "-") for f in FAMILIES)}
            rows.append((label, report.predicted_speedup, groups))
        times = interleaved_times(models, input_sets[0], rounds=args.rounds, labels=["input", *(r[0] for r in rows)])
        print(f"\n{name} ({len(graph.nodes)} nodes), input {times[0] * 1e3:.3f} ms")
        print("| variant | predicted | measured | group merges applied |")
        print("|---|---:|---:|---|")
        for (label, predicted, groups), seconds in zip(rows, times[1:]):
            applied = ", ".join(f"{count} x {rule}" for rule, count in sorted(groups.items())) or "none"
            print(f"| {label} | {predicted:.2f}x | {times[0] / seconds:.2f}x | {applied} |", flush=True)
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
