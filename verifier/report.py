"""What the verifier tells people and records in libraries: summaries, explanations, headers."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

from taso.specs import AXIOMS, axiom

from taso.rules import Library, Rule, format_rule

from .prove import solver_settings
from .verify import Settings

__all__ = ["counts", "summary", "explain", "library_header", "progress_bar"]


def progress_bar(total: int, quiet: bool = False):
    """A tqdm wrapper for :func:`~taso.verifier.verify.verify_rules` (None when quiet; hidden when stderr is not a terminal)."""
    if quiet or total <= 1:
        return None
    from tqdm import tqdm

    return lambda it: tqdm(it, total=total, desc="verify", unit="rule", file=sys.stderr, disable=None)


def counts(rules: Sequence[Rule]) -> dict[str, int]:
    """Rules per status, every status present."""
    found = Counter(r.status for r in rules)
    return {"candidates": len(rules), **{s: found.get(s, 0) for s in ("proved", "refuted", "unknown")}}


def _expr(expr: Any) -> str:
    """A shape expression for people: ``x.shape[1]``."""
    if isinstance(expr, dict) and "dim" in expr:
        return f"{expr['dim'][0]}.shape[{expr['dim'][1]}]"
    if isinstance(expr, dict) and "div" in expr:
        return f"{_expr(expr['div'][0])} // {expr['div'][1]}"
    if isinstance(expr, (list, tuple)):
        return "(" + ", ".join(_expr(e) for e in expr) + ")"
    return str(expr)


def _why(rule: Rule) -> str:
    proof = rule.proof or {}
    reason = str(proof.get("reason", ""))
    if "counterexample" in proof:
        c = proof["counterexample"]
        reason += f" ({c['source']} vs {c['target']}: max |difference| {c['max_abs_diff']:.3g}, seed {c['seed']})"
    return reason


def summary(rules: Sequence[Rule], seconds: float, jobs: int, output: str, listing: bool = True) -> str:
    """One line of counts, then one line per rule that was not proved (with ``listing``)."""
    n = counts(rules)
    added = sum(1 for r in rules if r.status == "proved" and (r.proof or {}).get("constraints_added"))
    lines = [f"verified {n['candidates']} candidates in {seconds:.1f} s (-j {jobs}): {n['proved']} proved"
             f" ({added} with added shape constraints), {n['refuted']} refuted, {n['unknown']} unknown -> {output}"]
    if listing:
        for rule in rules:
            if rule.status != "proved":
                lines.append(f"  {rule.id}  {rule.status:8s} {_why(rule)}\n      {format_rule(rule)}")
    return "\n".join(lines)


def explain(rule: Rule) -> str:
    """A verified rule, its status and, when proved, the axioms its proof used."""
    proof = rule.proof or {}
    head = f"{rule.id}{f' ({rule.name})' if rule.name else ''}: {format_rule(rule)}"
    if rule.status != "proved":
        return f"{head}\n{rule.status}: {_why(rule)}"
    lines = [head, f"proved in {proof['seconds']:.3f} s from {proof['axioms_given']} relevant axioms; the proof used:"]
    lines += [f"  {axiom(name)}" for name in proof.get("axioms", [])]
    for c in proof.get("constraints_added", []):
        lines.append(f"  and the shape constraint {_expr(c['eq'][0])} == {_expr(c['eq'][1])} (added to the rule; the candidate was {proof['candidate']})")
    return "\n".join(lines)


def library_header(candidates: Library, results: Sequence[Rule], settings: Settings, jobs: int, seconds: float) -> dict[str, Any]:
    """The header of a verified library: where the candidates came from, how they were verified, the counts."""
    return {
        "generator": candidates.header.get("generator", {}),
        "verifier": {**settings.to_json(), **solver_settings(), "axioms": len(AXIOMS), "jobs": jobs, "seconds": round(seconds, 2)},
        "counts": counts(results),
    }
