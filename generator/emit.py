"""Emission: canonical candidates become :class:`taso.rules.Rule` objects in a :class:`Library`.

Inputs are named after the pool tensors the canonical renaming maps them to (``x1``, ``w1``,
``k2``...), source values ``s0, s1, ...`` and target values ``t0, t1, ...``. The source is
the side with fewer operators (the canonical first side on a tie), so a rule reads as a
simplification, as in TASO; the optimizer may apply it in either direction.
"""

from __future__ import annotations

from taso.rules import Rule, RuleInput, RuleNode

from .generalize import generalize_all
from .graphs import Decoded
from .pairing import Decoder
from .parallel import current_context, current_settings
from .prune import Canonical, Found

__all__ = ["build_rule", "generalized_rules", "fingerprint_text"]


def fingerprint_text(key: int) -> str:
    """The graph key as 16 hex digits (the rule's fingerprint provenance)."""
    return f"{key & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def _side(graph: Decoded, rename: dict[int, int], prefix: str) -> tuple[tuple[RuleNode, ...], dict[int, str]]:
    """One side's nodes, values named ``prefix0, prefix1...``.

    Nodes come in a canonical topological order (by height, then expression) and
    commutative arguments in expression order, so renaming-equivalent candidates give the
    same rule whichever of them was found first.
    """
    pool = graph.context.pool
    names = {t: pool.names[rename[t]] for t in graph.inputs}
    memo: dict = {}
    height: dict[int, int] = {}
    for node in graph.nodes:
        h = 1 + max((height.get(a, 0) for a in node.args), default=0)
        height.update((t, h) for t in node.outputs)
    nodes = []
    for node in sorted(graph.nodes, key=lambda n: (height[n.outputs[0]], graph.expr(n.outputs[0], rename, memo))):
        for t in node.outputs:
            names[t] = f"{prefix}{len(names) - len(graph.inputs)}"
        args = sorted(node.args, key=lambda a: graph.expr(a, rename, memo)) if node.variant.commutative else node.args
        nodes.append(RuleNode(node.variant.op.name, dict(node.params), tuple(names[a] for a in args), tuple(names[t] for t in node.outputs)))
    return tuple(nodes), names


def _appearance_order(sides: list[tuple[Decoded, list[int]]]) -> list[int]:
    """Pool tensors in order of first appearance, reading each output's expression left to right."""
    seen: list[int] = []

    def walk(graph: Decoded, t: int) -> None:
        if graph.is_input(t):
            if t not in seen:
                seen.append(t)
            return
        node = graph.nodes[graph.producer[t][0]]
        for a in node.args:
            walk(graph, a)

    for graph, outputs in sides:
        for t in outputs:
            walk(graph, t)
    return seen


def build_rule(canonical: Canonical) -> Rule:
    """The rule of a canonical candidate, with literal parameters (see :func:`~taso.generator.generalize.generalize`).

    Inputs of each class are numbered in order of first appearance, source first.
    """
    first, second = canonical.candidate.a, canonical.candidate.b
    if canonical.swapped:
        first, second = second, first
    if len(second.nodes) < len(first.nodes):
        first, second = second, first
    pool = first.context.pool
    memo_s: dict = {}
    memo_t: dict = {}
    order = sorted(range(len(first.outputs)), key=lambda i: (first.expr(first.outputs[i], canonical.rename, memo_s),
                                                            second.expr(second.outputs[i], canonical.rename, memo_t)))
    appearance = _appearance_order([(first, [first.outputs[i] for i in order]), (second, [second.outputs[i] for i in order])])
    taken = [0] * len(pool.classes)
    rename: dict[int, int] = {}
    for t in appearance:
        cls = pool.class_of[t]
        rename[t] = pool.class_spans[cls][0] + taken[cls]
        taken[cls] += 1
    source, source_names = _side(first, rename, "s")
    target, target_names = _side(second, rename, "t")
    outputs = tuple((source_names[first.outputs[i]], target_names[second.outputs[i]]) for i in order)
    inputs = tuple(RuleInput(pool.names[t], pool.classes[pool.class_of[t]].name, pool.types[t]) for t in sorted(rename.values()))
    return Rule(inputs=inputs, source=source, target=target, outputs=outputs, fingerprint=fingerprint_text(canonical.candidate.key))


def generalized_rules(items: list[Found]) -> list[Rule | None]:
    """For a worker process: each candidate's rule (:func:`build_rule`) generalised to shape expressions
    (:func:`~taso.generator.generalize.generalize_all`, with the run's seed), or None where it does not generalise."""
    decode = Decoder(current_context())
    return generalize_all([(build_rule(item.decode(decode)), current_settings().seed) for item in items])
