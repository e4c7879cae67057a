"""Why a rule did or did not apply: ``taso optimize MODEL --explain RULE``.

For every graph node whose operator is one of the rule's source operators, the explanation
says whether the rule's source matches there and, if not, the first reason: the operator's
parameters differ, the rest of the pattern is not around it, a bound input lies outside the
ranks the proof assumed, a shape constraint is false, an inside value escapes, the target
does not type-check, the rewrite would close a cycle. The same functions the search uses
decide each case (:func:`taso.search.rewrite.decline_reason`, :func:`taso.search.rewrite.plan_or_reason`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import TasoError
from ..ir import Graph, Node
from ..rules import Rule
from .rewrite import CompiledRule, Plan, decline_reason, find_matches, params_fit, plan_or_reason

__all__ = ["find_rules", "explain_rule"]


def find_rules(rules: Sequence[Rule], query: str) -> list[Rule]:
    """The directed rules a user means: an id (either direction), or text contained in the rule's text.

    Raises:
        TasoError: nothing matches.
    """
    by_id = [r for r in rules if query in (r.id, r.name, r.extra.get("reversed_from"))]
    found = by_id or [r for r in rules if query in str(r)]
    if not found:
        raise TasoError(f"--explain {query!r}: no rule of the library has that id or contains that text")
    return found


def _node_label(node: Node) -> str:
    return f"{node.op.name} {node.name or '?'} -> {', '.join(node.outputs)}"


def _why_at(graph: Graph, crule: CompiledRule, index: int, node: Node) -> str:
    """What happens to the rule with its source node ``index`` played by ``node``."""
    pattern = crule.nodes[index]
    if not params_fit(pattern, node):
        return f"no: its parameters differ from the rule's {crule.rule.source[index].params}"
    matches = list(find_matches(graph, crule, seed=(index, node), structural=True))
    if not matches:
        return "no: the rest of the rule's source is not connected to it here"
    reasons = []
    for match in matches:
        reason = decline_reason(graph, crule, match.nodes, match.values)
        if reason is None:
            plan = plan_or_reason(graph, match)
            if isinstance(plan, Plan):
                return "yes: the rule applies here"
            reason = plan
        reasons.append(reason)
    return "no: " + reasons[0] + (f" (and {len(reasons) - 1} other binding(s))" if len(reasons) > 1 else "")


def explain_rule(graph: Graph, rule: Rule) -> list[str]:
    """One line per (graph node, source position) where the rule could start, saying whether it applies and why not."""
    crule = CompiledRule(rule)
    lines = [f"rule {rule.id}: {rule}"]
    for index, pattern in enumerate(crule.nodes):
        for node in graph.index.nodes_of(pattern.op_name):
            lines.append(f"  {_node_label(node)} as source node {index} ({pattern.op_name}): {_why_at(graph, crule, index, node)}")
    if len(lines) == 1:
        lines.append(f"  the model has none of the rule's source operators ({', '.join(sorted({p.op_name for p in crule.nodes}))})")
    return lines
