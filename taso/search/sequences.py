"""Unrolled recurrent loops folded into one sequence node: a start rule at a loop's first cell, then the extend rule at
each next one (``lstm-cell-start``, ``lstm-cell-extend``: ``specs/rules/exporter_forms.py``).

Why a chain rather than the search's own steps: each fold is one proved rewrite, but a loop of 24 cells takes 24 of
them in a row, and the input projections' group merge (one rewrite, priced at once) takes away the per-step products
the start rule matches. Best-first, the search expanded the merged graph's descendants and never the 24 folds
(GRUCell loop, hidden 256, batch 1: the merge's 1.60x kept, where the folded loop runs 1.99x). So, as the group
merges' own chain does (:func:`taso.search.groups.merge_chain`), the search is also offered the graph with every loop
folded, priced whole, to start from; every step of it is a proved rule applied at a match.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from ..ir import Graph
from ..rules import Rule, operator_variant
from .cleanup import clean_up
from .rewrite import CompiledRule, Match, apply_match, find_matches

__all__ = ["START", "EXTEND", "SEQUENCE_OPS", "cell_chains", "cell_rules", "folded_loops"]

START, EXTEND = "-cell-start", "-cell-extend"
SEQUENCE_OPS = ("lstm", "gru")  # (taso.ops.recurrent)


def cell_chains(compiled: Sequence[CompiledRule]) -> list[tuple[CompiledRule, CompiledRule]]:
    """Each (start, extend) pair of rules among ``compiled``, by their names."""
    by_name = {c.rule.name: c for c in compiled if c.rule.name}
    return [(c, by_name[name[:-len(START)] + EXTEND]) for name, c in by_name.items()
            if name.endswith(START) and name[:-len(START)] + EXTEND in by_name]


def cell_rules(graph: Graph, rules: Iterable[Rule | CompiledRule], excluded: frozenset[str] = frozenset(),
               decomposed: frozenset[str] = frozenset()) -> list[CompiledRule]:
    """The start and extend rules among ``rules`` that ``graph``'s operators make possible, but the ``excluded``
    labels, compiled; the rest of a lazily parsed library stays unparsed where its operators are absent, and
    uncompiled."""
    from .core import RuleIndex

    index = RuleIndex(rules, False, excluded, decomposed)
    index.admit_variants({operator_variant(op, params) for op, params in graph.index.op_params} | set(SEQUENCE_OPS),
                         fits=lambda rule: (rule.name or "").endswith((START, EXTEND)))
    return index.compiled


def _first_cells(graph: Graph, start: CompiledRule) -> list[Match]:
    """The start rule's matches whose states no other match computes: the loops' first cells."""
    matches = list(find_matches(graph, start))
    computed = {v for m in matches for n in m.nodes for v in n.outputs}
    states = [i.name for i in start.rule.inputs if i.name not in ("x", "wi", "bi", "wh", "bh")]
    return [m for m in matches if not any(m.values[s] in computed for s in states)]


def _fold(graph: Graph, start: CompiledRule, extend: CompiledRule, first: Match, deadline: float) -> tuple[Graph, int] | None:
    """The graph with one loop folded from ``first`` on, and how many cells it took; None where the start is unsafe."""
    current = apply_match(graph, first)
    if current is None:
        return None
    state = first.values[start.rule.outputs[0][0]]  # the sequence node's first output keeps the cell's name
    cells = 1
    while time.perf_counter() < deadline:
        node = current.producer(state)
        match = next(iter(find_matches(current, extend, seed=(0, node))), None) if node is not None else None
        folded = apply_match(current, match) if match is not None else None
        if folded is None:
            break
        current, state, cells = folded, match.values[extend.rule.outputs[0][0]], cells + 1
    return current, cells


def folded_loops(graph: Graph, compiled: Sequence[CompiledRule], deadline: float = float("inf")) -> tuple[Graph, list[str]] | None:
    """``graph`` with every unrolled loop of two cells or more folded (cleaned up after), and the rules it applied in
    order; None where there is none."""
    current, applied = graph, []
    for start, extend in cell_chains(compiled):
        while time.perf_counter() < deadline:
            for first in _first_cells(current, start):
                result = _fold(current, start, extend, first, deadline)
                if result is not None and result[1] >= 2:
                    current, applied = result[0], applied + [start.label] + [extend.label] * (result[1] - 1)
                    break
            else:
                break
    return (clean_up(current)[0], applied) if applied else None
