"""The generator's stages after pairing (issue 27): this commit's stage functions against BEFORE's, each run as its own commit.

Each side is a fresh process on its commit's code (:mod:`common.commits`): it enumerates a sample of first operators
(every ``--every``-th root at ``--max-ops``, over ``--ops``) with that commit's enumerator, pairs the graphs and
takes them through the pipeline's stages (:func:`candidates`), so it builds each stage's inputs itself; then it
times each chosen stage function once on the whole sample of its inputs. A stage's memos start empty in each
process (the generalisation's shape memo is first used by the timed ``rules`` stage), so every timed run is cold;
``--repeat`` is the number of processes per side, the two sides alternating (before first, then now first, ...),
and each process builds its inputs anew (about 30 s for the default sample at depth 3). The printed ratio is
before / now of the median wall times. The two sides' inputs and results are compared by digests (sha256 of a
canonical text: rules by their JSON): the whole commits enumerate, pair and prune alike, so when a stage's inputs
are the same its results must be too (rule by rule for generalisation); the script fails when they differ.

Run: python benchmarks/generator/bench_generalize.py [--max-ops 3] [--ops OPS] [--every 1] [--repeat 3] [--stages rules renaming ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from common import commits  # noqa: E402

BEFORE = "45f2366cd25398d3595729282db6da5d8e632e57"  # the generator's stage functions before the work on them
# Every root of these at depth 3 takes ~30 s to enumerate and pair in one process and gives 2,661 rules to generalise, convolutions
# (the expensive ones) among them. The default set at depth 3 takes minutes in one process (--ops all).
SAMPLE_OPS = "conv2d,add,concat,split,enlarge,relu"
STAGES = ("renaming", "common_subgraph", "float_checked", "instances", "rules")  # in pipeline order


def candidates(every: int) -> dict[str, list]:
    """The inputs of each stage for the graphs under every ``every``-th root, as the pipeline hands them over.

    Needs the worker context (a ``Workers`` of this process open) and this tree's code mounted.
    """
    from taso.generator import pairing, prune
    from taso.generator.enumerate import Enumerator, GraphSpec
    from taso.generator.parallel import current_settings

    enumerator = Enumerator(current_settings())
    graphs: list = []

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


def digest(items) -> str:
    """sha256 of the items' canonical text: their repr (graph specs, forms, facts, flags), a rule by its JSON."""
    h = hashlib.sha256()
    for item in items:
        text = json.dumps(item.to_json(), sort_keys=True, default=repr) if hasattr(item, "to_json") else repr(item)
        h.update(text.encode())
        h.update(b"\n")
    return h.hexdigest()


def kept(stage: str, results: list) -> int:
    """What a stage's results count: distinct forms (renaming), pairs kept (common subgraph, float check), unions of
    independent candidates (instances), rules that generalise (rules)."""
    if stage == "renaming":
        return len({form for form, *_ in results})
    if stage == "instances":
        return sum(union for _, union in results)
    if stage == "rules":
        return sum(rule is not None for rule in results)
    return sum(results)


def worker(max_ops: int, ops: str, every: int, stages: list[str]) -> dict:
    """This tree's inputs for the sample and, for each of ``stages`` (in pipeline order), its stage function's
    seconds on them (once, cold) and a digest of its results."""
    from taso.generator import Settings, emit, pairing, parse_ops, prune
    from taso.generator.parallel import Workers

    functions = {"renaming": prune.summarize, "common_subgraph": prune.no_common_subgraph, "float_checked": pairing.holds_in_float,
                 "instances": prune.instance_facts, "rules": emit.generalized_rules}
    out: dict = {"inputs": {}, "input_digests": {}, "seconds": {}, "results": {}, "counts": {}}
    with Workers(Settings(max_ops=max_ops, ops=parse_ops(ops)), 1):
        start = time.perf_counter()
        inputs = candidates(every)
        out["build_seconds"] = time.perf_counter() - start
        out["inputs"] = {stage: len(items) for stage, items in inputs.items()}
        for stage in (s for s in STAGES if s in stages):
            out["input_digests"][stage] = digest(inputs[stage])
            start = time.perf_counter()
            results = functions[stage](inputs[stage])
            out["seconds"][stage] = time.perf_counter() - start
            out["results"][stage] = digest(results)
            out["counts"][stage] = kept(stage, results)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-ops", type=int, default=3)
    parser.add_argument("--ops", default=SAMPLE_OPS, help=f"the operator set, as taso generate --ops takes it (default: {SAMPLE_OPS})")
    parser.add_argument("--every", type=int, default=1, help="enumerate roots 0, every, 2*every, ... (default: 1; a sample of roots pairs few graphs)")
    parser.add_argument("--repeat", type=int, default=3, help="processes per side, alternating (default 3)")
    parser.add_argument("--stages", nargs="+", default=["rules"], choices=list(STAGES))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.max_ops, args.ops, args.every, args.stages)))
        return 0
    trees = commits.sides(BEFORE)
    forwarded = ["--max-ops", str(args.max_ops), "--ops", args.ops, "--every", str(args.every), "--stages", *args.stages]
    runs = commits.alternating_runs(__file__, trees, forwarded, args.repeat)
    b0, n0 = runs["before"][0], runs["now"][0]
    print(f"every {args.every}th root of {args.ops} at --max-ops {args.max_ops}, before = {BEFORE[:7]}, {args.repeat} processes per side; "
          f"inputs built in {statistics.median(r['build_seconds'] for r in runs['before']):.1f} s before, "
          f"{statistics.median(r['build_seconds'] for r in runs['now']):.1f} s now")
    print("| stage | inputs before, now | out before, now | before (s) | now (s) | before / now | same inputs | same results |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    failed = False
    for stage in (s for s in STAGES if s in args.stages):
        then, now = (statistics.median(r["seconds"][stage] for r in runs[side]) for side in ("before", "now"))
        same_inputs = len({r["input_digests"][stage] for side in runs for r in runs[side]}) == 1
        same_results = len({r["results"][stage] for side in runs for r in runs[side]}) == 1
        failed |= same_inputs and not same_results
        print(f"| {stage} | {b0['inputs'][stage]:,}, {n0['inputs'][stage]:,} | {b0['counts'][stage]:,}, {n0['counts'][stage]:,} | "
              f"{then:.2f} | {now:.2f} | {then / now:.2f}x | {'yes' if same_inputs else 'NO'} | {'yes' if same_results else 'NO'} |", flush=True)
    if failed:
        print("DIFFERENT results before and now on the same inputs", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    commits.mount_from_argv()  # a worker runs the tree it was given
    sys.exit(main())
