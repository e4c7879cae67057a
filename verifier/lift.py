"""Rank lifting: the batched (rank-3) forms of rules found on 2-D activations, each proved again.

    python -m taso.verifier.lift [LIBRARY] [-o OUT.jsonl.gz] [-j 2] [--timeout 10] [--merge]

The generator finds rules on 2-D activations (``x1: (2, 4)``), and the rewrite engine applies
a rule only at the input ranks its proof assumed, so ``x[S,K]·W[K,N]`` rules never touch the
``x[B,S,K]·W[K,N]`` projections of a transformer export. This pass writes each such rule's
batched form and hands it to the verifier like any candidate:

* every *activation* input (shape class ``act``) gains a leading batch dimension; weights,
  bias vectors and scalars keep their rank (they broadcast over the batch, as the matmul's
  right operand of a projection does);
* every node whose values gain the dimension has its parameters rewritten: a concat or
  split axis ``a`` becomes ``a + 1``, a transpose permutation ``(p0, p1)`` becomes
  ``(0, p0 + 1, p1 + 1)``, and every shape expression ``dim(x, a)`` over a lifted input
  becomes ``dim(x, a + 1)`` (constraints included);
* a rule that cannot be lifted this way is skipped and counted with the reason: an
  operator outside the lifted set (``LIFTABLE``) would see a batched value, a concat would
  join a batched value with an unbatched one, or the lifted sides do not type-check.

Each lifted rule is then verified from scratch (``verify.verify_rules``: the NumPy
pre-check, Z3 against the specs, the cross-check at other shapes); only ``proved`` ones are
kept. A lifted rule's inputs carry their new ranks, so the rewrite engine's match-time rank
check (``taso.search.rewrite._within_proof``) applies it exactly where the new proof holds: to
rank-3 activations, never to 2-D ones (the original rule keeps those) nor to rank 4.

``--merge`` appends the proved lifted rules to the input library (the existing rules, ids
and proofs unchanged) and writes the result with a fresh digest; the header records the
lift's counts under ``lift``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from taso.specs import AXIOMS

from taso.errors import TasoError
from taso.ir import TensorType
from taso.rules import Library, Rule, RuleInput, RuleNode, resolve_expr

from . import DEFAULT_TIMEOUT_S

__all__ = ["LIFTABLE", "BATCH", "Lifted", "lift_rule", "lift_library", "main"]

# Operators that commute with a leading batch dimension, and how their parameters move.
ELEMENTWISE = frozenset({"relu", "sigmoid", "tanh", "add", "mul", "scalar_mul"})
LIFTABLE = ELEMENTWISE | {"matmul", "transpose", "concat", "split"}
# Operators with no tensor inputs (constants) never gain the dimension; a rule may hold them.
CONSTANTS = frozenset({"eye", "fill"})
BATCH = 3  # the example batch size: differs from every other example size (2 and 4)
LIFTED_CLASS = "act"


class Skip(Exception):
    """The rule cannot be lifted soundly by this pass (the message says why)."""


@dataclass
class Lifted:
    """What :func:`lift_library` made: the lifted candidates, the skipped rules with reasons, the verified ones."""

    eligible: int = 0
    candidates: list[Rule] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    results: list[Rule] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def proved(self) -> list[Rule]:
        return [r for r in self.results if r.status == "proved"]

    def counts(self) -> dict[str, Any]:
        status = Counter(r.status for r in self.results)
        return {"eligible": self.eligible, "lifted": len(self.candidates), "skipped": sum(self.skipped.values()),
                "proved": status.get("proved", 0), "refuted": status.get("refuted", 0), "unknown": status.get("unknown", 0),
                "skipped_by_reason": dict(sorted(self.skipped.items()))}


def eligible(rule: Rule) -> bool:
    """A proved rule over matmul whose activations are 2-D: what exporters' batched projections need."""
    ops = {n.op for n in rule.source + rule.target}
    return (rule.status == "proved" and "matmul" in ops
            and any(i.shape_class == LIFTED_CLASS and i.type.rank == 2 for i in rule.inputs))


def _lift_expr(expr: Any, lifted: frozenset[str]) -> Any:
    """A shape expression over the lifted inputs: ``dim(x, a)`` -> ``dim(x, a + 1)`` for a batched ``x``."""
    if isinstance(expr, (list, tuple)):
        return [_lift_expr(e, lifted) for e in expr]
    if isinstance(expr, Mapping) and set(expr) == {"dim"}:
        name, axis = expr["dim"]
        if name in lifted:
            if axis < 0:
                return {"dim": [name, axis]}  # counted from the end: the same dimension
            return {"dim": [name, int(axis) + 1]}
        return {"dim": [name, axis]}
    return expr


def _lift_side(nodes: Sequence[RuleNode], ranks: Mapping[str, int], lifted_inputs: frozenset[str]) -> tuple[RuleNode, ...]:
    """One side with every batched node's parameters moved; raises Skip where that is not sound."""
    batched = set(lifted_inputs)
    rank = dict(ranks)  # value -> rank before lifting
    out = []
    for index, node in enumerate(nodes):
        ins = [v in batched for v in node.inputs]
        params = dict(node.params)
        if not any(ins):
            out.append(node)
            continue
        if node.op not in LIFTABLE:
            raise Skip(f"{node.op} of a batched value")
        if node.op == "transpose":
            perm = tuple(params["perm"])
            params["perm"] = (0, *(p + 1 for p in perm))
        elif node.op == "concat":
            if not all(ins):
                raise Skip("concat of a batched and an unbatched value")
            r = rank[node.inputs[0]]
            params["axis"] = params["axis"] % r + 1
        elif node.op == "split":
            r = rank[node.inputs[0]]
            params["axis"] = params["axis"] % r + 1
        elif node.op == "matmul":
            # A batched operand of rank 1 would change which dimensions contract.
            if any(rank[v] < 2 for v in node.inputs):
                raise Skip("matmul with a vector operand")
        elif node.op in ("add", "mul"):
            # An unbatched operand broadcasts over the batch only when it is not of a higher rank.
            r = max(rank[v] for v, b in zip(node.inputs, ins) if b)
            if any(rank[v] > r for v, b in zip(node.inputs, ins) if not b):
                raise Skip(f"{node.op} of a batched value and a higher-rank unbatched one")
        batched.update(node.outputs)
        out.append(RuleNode(node.op, params, node.inputs, node.outputs))
    return tuple(out)


def _value_ranks(rule: Rule, side: str) -> dict[str, int]:
    graph = rule.side_graph(side)
    return {v: graph.type(v).rank for n in graph.nodes for v in (*n.inputs, *n.outputs)} | {i.name: i.type.rank for i in rule.inputs}


def lift_rule(rule: Rule, batch: int = BATCH, naive: bool = False) -> Rule:
    """The rank-3 form of a rule over 2-D activations: a candidate for the verifier.

    ``naive`` keeps every axis parameter and shape expression as it was (only the inputs
    gain the batch dimension, and a transpose permutation the batch axis): the wrong lift,
    for tests that show the verifier refuses it.

    Raises:
        Skip: the rule has no 2-D activation, or an operator cannot be lifted soundly.
    """
    lifted = frozenset(i.name for i in rule.inputs if i.shape_class == LIFTED_CLASS and i.type.rank == 2)
    if not lifted:
        raise Skip("no 2-D activation input")
    for n in rule.source + rule.target:
        if n.op not in LIFTABLE and n.op not in CONSTANTS:
            raise Skip(f"operator {n.op} is not lifted")
    inputs = tuple(RuleInput(i.name, i.shape_class, TensorType((batch, *i.type.shape), i.type.dtype)) if i.name in lifted else i
                   for i in rule.inputs)
    sides = {}
    for side in ("source", "target"):
        nodes = _lift_side(getattr(rule, side), _value_ranks(rule, side), lifted)
        if naive:  # undo every axis move but the transposes' batch axis
            nodes = tuple(RuleNode(n.op, {**n.params, **({"axis": o.params["axis"]} if "axis" in o.params else {})}, n.inputs, n.outputs)
                          for n, o in zip(nodes, getattr(rule, side)))
        sides[side] = nodes
    move = (lambda e: e) if naive else (lambda e: _lift_expr(e, lifted))
    params = tuple({**p, "value": move(p["value"])} for p in rule.params)
    constraints = tuple({"eq": [move(e) for e in c["eq"]]} for c in rule.constraints)
    candidate = Rule(inputs=inputs, source=sides["source"], target=sides["target"], outputs=rule.outputs, params=params,
                     constraints=constraints, fingerprint=rule.fingerprint, status="candidate", proof=None,
                     extra={"lifted_from": rule.id, "batch_axes": sorted(lifted)})
    # The example values the expressions take at the lifted shapes (the literal params hold them).
    try:
        shapes = {i.name: i.type.shape for i in inputs}
        fixed = {}
        for p in params:
            fixed.setdefault((p["side"], int(p["node"])), {})[p["param"]] = resolve_expr(p["value"], shapes)
        for side in ("source", "target"):
            nodes = [RuleNode(n.op, {**n.params, **fixed.get((side, k), {})}, n.inputs, n.outputs) for k, n in enumerate(sides[side])]
            sides[side] = tuple(nodes)
        candidate = replace(candidate, source=sides["source"], target=sides["target"])
        if not naive:
            candidate.validate()
    except TasoError as e:
        raise Skip(f"the lifted sides do not type-check ({type(e).__name__})") from None
    return candidate


def lift_library(library: Library, jobs: int = 2, timeout_s: float = DEFAULT_TIMEOUT_S, verify: bool = True,
                 progress=None) -> Lifted:
    """Lifts every eligible rule of the library and verifies the lifted candidates."""
    out = Lifted()
    seen = {r.id for r in library.rules}
    for rule in library.rules:
        if not eligible(rule):
            continue
        out.eligible += 1
        try:
            candidate = lift_rule(rule)
        except Skip as e:
            out.skipped[str(e)] += 1
            continue
        if candidate.id in seen:
            out.skipped["the lifted form is already in the library"] += 1
            continue
        seen.add(candidate.id)
        out.candidates.append(candidate)
    if verify and out.candidates:
        from .verify import Settings, verify_rules

        start = time.perf_counter()
        out.results = verify_rules(out.candidates, Settings(timeout_s=timeout_s, explain=True), jobs, progress)
        out.seconds = time.perf_counter() - start
        # A proof that added constraints changes the id: drop a duplicate of a rule already kept.
        kept, ids = [], set(r.id for r in library.rules)
        for r in out.results:
            if r.status == "proved" and r.id in ids:
                out.skipped["the lifted form is already in the library"] += 1
                continue
            ids.add(r.id)
            kept.append(r)
        out.results = kept
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from .build_library import DEFAULT_OUTPUT
    from .report import progress_bar, summary

    parser = argparse.ArgumentParser(prog="python -m taso.verifier.lift", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("library", nargs="?", default=DEFAULT_OUTPUT, help="a proved library (default: the package's)")
    parser.add_argument("-o", "--output", help="where to write the proved lifted rules (with --merge: the whole library)")
    parser.add_argument("--merge", action="store_true", help="write the input library plus the proved lifted rules")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="worker processes for verification (default 2)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="Z3 seconds per rule")
    args = parser.parse_args(argv)
    try:
        library = Library.load(args.library)
        lifted = [r for r in library.rules if (r.extra or {}).get("lifted_from")]
        base = Library([r for r in library.rules if not (r.extra or {}).get("lifted_from")], library.header)
        out = lift_library(base, args.jobs, args.timeout, progress=progress_bar(len(base)))
        counts = out.counts()
        print(f"lift: {counts['eligible']} eligible rules (proved, over matmul, with a 2-D activation): {counts['lifted']} lifted, "
              f"{counts['skipped']} skipped; verified in {out.seconds:.1f} s (-j {args.jobs}): {counts['proved']} proved, "
              f"{counts['refuted']} refuted, {counts['unknown']} unknown")
        for reason, n in out.skipped.most_common():
            print(f"  skipped {n:4d}: {reason}")
        if args.output:
            print(summary(out.results, out.seconds, args.jobs, args.output, listing=True).split("\n", 1)[-1] if any(
                r.status != "proved" for r in out.results) else "", end="")
            if args.merge:
                header = {**{k: v for k, v in library.header.items() if k not in ("digest", "lift")},
                          "lift": {**counts, "rank": 3, "batch": BATCH, "axioms": len(AXIOMS), "timeout_s": args.timeout,
                                   "jobs": args.jobs, "seconds": round(out.seconds, 2),
                                   "build": "python -m taso.verifier.lift --merge"}}
                result = Library(base.rules + out.proved, header)
            else:
                result = Library(out.proved, {"lift": counts})
            result.save(args.output)
            print(f"\nwrote {len(result)} rules ({len(out.proved)} lifted) -> {args.output}"
                  + (f" (replacing {len(lifted)} earlier lifted rules)" if lifted and args.merge else ""))
    except TasoError as e:
        print(f"lift: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
