"""The generator's stages after pairing (issue 27): the stage functions now vs as they were before this work, side by side.

Candidates come from the enumeration of a sample of first operators (every ``--every``-th
root at ``--max-ops``), paired and taken through the pipeline's stages in this process
(:func:`candidates`), so both sides see the same inputs. The *before* side is
``generator/{graphs,pairing,prune,generalize,emit}.py`` read from git at ``BEFORE`` and imported
beside the current modules (each one's relative imports of the others point at the old
copies). Each stage function runs on the whole sample, before and now alternating (the
first of the two swaps every round, and the memos of *now* are emptied before each of its
runs, so no run profits from an earlier one); their results must be equal, rule by rule
for generalisation. The printed ratio is before / now of the median wall times.

Run: python benchmarks/bench_generalize.py [--max-ops 3] [--ops OPS] [--every 1] [--repeat 3] [--stages rules renaming ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _before import modules_at  # noqa: E402 - a sibling script, not a package

from taso.generator import Settings, emit, generalize, pairing, parse_ops, prune  # noqa: E402
from taso.generator.enumerate import Enumerator, GraphSpec  # noqa: E402
from taso.generator.parallel import Workers  # noqa: E402

BEFORE = "45f2366cd25398d3595729282db6da5d8e632e57"  # the generator's stage functions before the work on them
# Every root of these at depth 3 takes ~30 s to enumerate and pair in one process and gives 2,661 rules to generalise, convolutions
# (the expensive ones) among them. The default set at depth 3 takes minutes in one process (--ops all).
SAMPLE_OPS = "conv2d,add,concat,split,enlarge,relu"
CHANGED = ("graphs", "pairing", "prune", "generalize", "emit")  # in import order: each imports only earlier ones among these


def before_modules() -> dict[str, object]:
    """The changed modules at ``BEFORE``, imported as ``taso.generator._before_<name>``, importing each other."""
    return modules_at(BEFORE, "generator", "taso.generator", CHANGED)


def candidates(settings: Settings, every: int) -> dict[str, list]:
    """The inputs of each stage for the graphs under every ``every``-th root, as the pipeline hands them over.

    Needs the worker context (a :class:`Workers` of this process open).
    """
    enumerator = Enumerator(settings)
    graphs: list[tuple[int, GraphSpec]] = []

    def visit(key, ops, last, outputs):
        graphs.append((key, GraphSpec(tuple(ops) + ((last,) if last is not None else ()), tuple(outputs))))

    for root in enumerator.roots()[::every]:
        enumerator.walk(root, visit)
    pairs = pairing.pair_specs(graphs)
    summaries = prune.summarize(pairs)
    kept = [prune.Found(pairs[i], *summaries[i]) for i in prune.first_per_form(s[0] for s in summaries)]
    kept = [k for k in kept if not k.trivial]
    inputs = {"renaming": pairs, "common_subgraph": [k.pair for k in kept]}
    kept = [k for k, ok in zip(kept, prune.no_common_subgraph(inputs["common_subgraph"])) if ok]
    inputs["float_checked"] = [k.pair for k in kept]
    kept = [k for k, ok in zip(kept, pairing.holds_in_float(inputs["float_checked"])) if ok]
    inputs["instances"] = kept
    remaining, _, _ = prune.select_non_instances([k.form for k in kept], prune.instance_facts(kept))
    inputs["rules"] = [kept[i] for i in remaining]
    return inputs


def stage_functions(old: dict[str, object]) -> dict[str, dict[bool, Callable]]:
    """Stage name -> {True: the function before, False: now}."""
    return {
        "renaming": {True: old["prune"].summarize, False: prune.summarize},
        "common_subgraph": {True: old["prune"].no_common_subgraph, False: prune.no_common_subgraph},
        "float_checked": {True: old["pairing"].holds_in_float, False: pairing.holds_in_float},
        "instances": {True: old["prune"].instance_facts, False: prune.instance_facts},
        "rules": {True: old["emit"].generalized_rules, False: emit.generalized_rules},
    }


def comparable(stage: str, results: list) -> list:
    """Results in a form that compares by value (rules by their JSON text: a rule's fields compare by identity of dicts otherwise)."""
    if stage == "rules":
        return [None if r is None else r.to_json() for r in results]
    return results


def fresh_memos() -> None:
    """Empties every memo the current code keeps across calls in a process, so a timed run starts cold."""
    generalize._MEMO = generalize._ShapeMemo()


def timed(fn: Callable, items: list, before: bool) -> tuple[float, list]:
    if not before:
        fresh_memos()
    start = time.perf_counter()
    result = fn(items)
    return time.perf_counter() - start, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-ops", type=int, default=3)
    parser.add_argument("--ops", default=SAMPLE_OPS, help=f"the operator set, as taso generate --ops takes it (default: {SAMPLE_OPS})")
    parser.add_argument("--every", type=int, default=1, help="enumerate roots 0, every, 2*every, ... (default: 1; a sample of roots pairs few graphs)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stages", nargs="+", default=["rules"], choices=["renaming", "common_subgraph", "float_checked", "instances", "rules"])
    args = parser.parse_args(argv)
    settings = Settings(max_ops=args.max_ops, ops=parse_ops(args.ops))
    old = before_modules()
    functions = stage_functions(old)
    with Workers(settings, 1):
        start = time.perf_counter()
        inputs = candidates(settings, args.every)
        print(f"every {args.every}th root at --max-ops {args.max_ops}: " + ", ".join(f"{s} {len(v):,}" for s, v in inputs.items())
              + f" inputs ({time.perf_counter() - start:.1f} s to build)")
        failed = False
        for stage in args.stages:
            seconds: dict[bool, list[float]] = {True: [], False: []}
            for round_ in range(args.repeat):
                results = {}
                for before in ((True, False) if round_ % 2 == 0 else (False, True)):
                    elapsed, results[before] = timed(functions[stage][before], inputs[stage], before)
                    seconds[before].append(elapsed)
                if comparable(stage, results[True]) != comparable(stage, results[False]):
                    print(f"{stage}: DIFFERENT results before and now", file=sys.stderr)
                    failed = True
                    break
            if failed:
                break
            then, now = statistics.median(seconds[True]), statistics.median(seconds[False])
            print(f"{stage}: {len(inputs[stage]):,} inputs, before ({BEFORE[:7]}) {then:.2f} s, now {now:.2f} s: "
                  f"{then / now:.2f}x less wall time (medians of {args.repeat}, alternating; results equal)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
