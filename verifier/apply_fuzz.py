"""Apply-fuzz: every rule, in both directions, applied by the rewrite engine itself at random shapes.

A proof covers the shapes its encoding assumed; the rewrite engine decides where a rule
applies. This closes the loop between them: each directed rule's source is built at random
shapes that satisfy its constraints (sizes renamed consistently or changed one by one) and
at shapes of other ranks (a bias-vector slot bound to a matrix), the engine finds its own
matches and rewrites them, and both graphs run on the NumPy semantics in float64. A
rewritten graph whose outputs differ is a wrong application; a match declined (rank
outside the proof, a constraint false, the target ill-typed) is fine.

    python -m taso.verifier.apply_fuzz [--library FILE] [--sample N] [--shapes 5] [-j 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from taso.errors import TasoError
from taso.ir import Graph
from taso.rules import Rule
from taso.search.rewrite import CompiledRule, apply_match, find_matches

from .batch import process_map, sample_evenly
from .numeric import close, random_shapes

__all__ = ["RuleFuzz", "fuzz_rule", "fuzz_rules", "main"]

RTOL = 1e-6


@dataclass
class RuleFuzz:
    """What applying one directed rule found: shapes tried, rewrites applied and checked, wrong ones."""

    rule_id: str
    text: str
    shapes: int = 0
    applied: int = 0
    declined: int = 0
    wrong: list[str] = field(default_factory=list)


def _other_ranks(rule: Rule, rng: np.random.Generator, count: int) -> list[dict[str, tuple[int, ...]]]:
    """Shapes where some inputs have one more or one less leading dimension than in the proof."""
    out = []
    for _ in range(count):
        shapes = {}
        for i in rule.inputs:
            shape = i.type.shape
            move = int(rng.integers(0, 3))
            shapes[i.name] = shape[1:] if move == 1 and shape else ((int(rng.choice((1, 2, 4))),) + shape if move == 2 else shape)
        out.append(shapes)
    return out


def _run(graph: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs in float64 (constants keep their dtype; NumPy promotes)."""
    env = dict(feeds)
    with np.errstate(all="ignore"):
        for node in graph.topological_order():
            env.update(zip(node.outputs, node.op.evaluate([env[v] for v in node.inputs], node.params)))
    return [np.asarray(env[v], np.float64) for v in graph.outputs]


def fuzz_rule(rule: Rule, shapes: int = 5, seed: int = 0) -> RuleFuzz:
    """Applies ``rule`` with the rewrite engine at ``shapes`` constraint-satisfying shapes and two of other ranks."""
    rng = np.random.default_rng(seed)
    crule = CompiledRule(rule)
    report = RuleFuzz(rule.id, str(rule))
    # A few shapes more than asked: a rewrite may decline at some (its target ill-typed there).
    for at in [*random_shapes(rule, rng, shapes + 3, tries=100, independent=True), *_other_ranks(rule, rng, 2)]:
        try:
            graph = rule.side_graph("source", at)
        except TasoError:
            continue  # not even the source is well typed here
        report.shapes += 1
        feeds = {name: rng.standard_normal(t.shape) for name, t in graph.inputs.items()}
        want = _run(graph, feeds)
        for match in find_matches(graph, crule):
            rewritten = apply_match(graph, match)
            if rewritten is None:
                report.declined += 1
                continue
            report.applied += 1
            got = _run(rewritten, feeds)
            if any(not close(g, w, RTOL) for g, w in zip(got, want)):
                worst = max(float(np.max(np.abs(g - w))) if g.shape == w.shape and g.size else float("inf") for g, w in zip(got, want))
                report.wrong.append(f"at {dict(at)}: |diff| {worst:.3g}")
    return report


def _fuzz_job(job: tuple[dict, int, int]) -> RuleFuzz:
    data, shapes, seed = job
    return fuzz_rule(Rule.from_json(data), shapes, seed)


def fuzz_rules(rules: Sequence[Rule], shapes: int = 5, seed: int = 0, jobs: int = 1) -> list[RuleFuzz]:
    """Fuzzes every rule (in parallel with ``jobs`` processes)."""
    return process_map(_fuzz_job, [(r.to_json(), shapes, seed + i) for i, r in enumerate(rules)], jobs, chunksize=16)


def main(argv: Sequence[str] | None = None) -> int:
    """Prints totals and every wrong application; exit 1 when there is one."""
    from taso.pipeline.library import load_rules

    parser = argparse.ArgumentParser(prog="python -m taso.verifier.apply_fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--library", help="rule file (default: the shipped library)")
    parser.add_argument("--sample", type=int, default=0, help="fuzz only every k-th directed rule, k chosen to leave about N (default: all)")
    parser.add_argument("--shapes", type=int, default=5, help="constraint-satisfying shapes per rule (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        rules = load_rules(args.library)
    except TasoError as e:
        print(f"apply_fuzz: error: {e}", file=sys.stderr)
        return 2
    rules = sample_evenly(rules, args.sample)
    start = time.perf_counter()
    reports = fuzz_rules(rules, args.shapes, args.seed, args.jobs)
    wrong = [r for r in reports if r.wrong]
    for r in wrong:
        print(f"WRONG {r.rule_id}: {r.text}: {r.wrong[0]}")
    few = [r for r in reports if r.applied < args.shapes]
    for r in few:
        print(f"few shapes {r.rule_id}: {r.text}: applied {r.applied} time(s) at {r.shapes} shape(s)")
    print(f"{len(reports)} directed rules, {sum(r.shapes for r in reports)} shapes, {sum(r.applied for r in reports)} rewrites applied and "
          f"compared in float64, {sum(r.declined for r in reports)} declined; {sum(len(r.wrong) for r in reports)} wrong in {len(wrong)} rules; "
          f"{len(few)} rules applied fewer than {args.shapes} times; {time.perf_counter() - start:.0f} s")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
