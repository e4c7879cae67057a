"""A second search engine: equality saturation over the proved rules, with exact extraction (Tensat, MLSys'21).

The backtracking search (:mod:`taso.search`) holds one graph at a time and throws most of
what it saw away; here an e-graph (egglog) holds every rewrite of the graph at once, and the
cheapest graph in it is extracted by an integer program (HiGHS). Same rules, same guards,
same cost model, same output check and export as the backtracking search: only the way the
space is explored differs.

* :mod:`.terms`: graphs as egglog terms, and the table of what the strings stand for;
* :mod:`.patterns`: a rule as an egglog query, and the guards each match passes in Python;
* :mod:`.saturate`: the rounds of matching and adding, within limits;
* :mod:`.extract`: the cheapest acyclic choice, as a graph.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from ...cost import CostModel
from ...ir import Graph
from ...rules import Rule
from ..rewrite import CompiledRule
from ..sequences import cell_rules, folded_loops
from .extract import Extraction, extract
from .saturate import EGraph, Limits, Saturation, saturate

__all__ = ["eqsat_search", "Limits", "Saturation", "Extraction"]


def _add_cleaned_versions(egraph: EGraph, graph: Graph, library, excluded, seeds, deadline: float,
                          texts: dict[str, str]) -> list[tuple[list[str], Graph]]:
    """Group merges applied to the input and cleaned up, as other versions of the graph in the e-graph; the versions
    added, each with the merges it holds.

    The backtracking search prices a merge as cleaned up (:func:`taso.search.groups.merged`), and extraction can
    only choose what the e-graph holds. Each merge found on the input is one version; and the chain of
    :func:`taso.search.groups.merge_chain`, which merges one group more each, adds one version per step. Each
    merge's text goes in ``texts``.
    """
    from ..groups import merge_chain, merged

    versions: list[tuple[list[str], Graph]] = []
    for match in seeds:
        step = merged(graph, match)
        if step is not None and egraph.add_version(step[0], match.rule.label):
            versions.append(([match.rule.label], step[0]))
    for step in merge_chain(graph, library, excluded, deadline):
        last = step.rules[-1]
        texts.setdefault(last.label, library.describe(last.rule))
        if egraph.add_version(step.graph, last.label):
            versions.append(([crule.label for crule in step.rules], step.graph))
    return versions


def _add_folded_loops(egraph: EGraph, graph: Graph, rules: Iterable[Rule | CompiledRule], config, deadline: float,
                      texts: dict[str, str]) -> list[tuple[list[str], Graph]]:
    """The input with its unrolled recurrent loops folded (:func:`taso.search.sequences.folded_loops`) as another
    version: saturation applies the start rule at every cell but extends no sequence (the extend rule reads
    ``concat(xs, x)``, which only a fold's previous step makes), so extraction alone ran one fused node per step."""
    from ..core import decomposed_ops

    compiled = cell_rules(graph, rules, config.excluded, decomposed_ops(graph))
    folded = folded_loops(graph, compiled, deadline)
    if folded is None or not egraph.add_version(folded[0], folded[1][-1]):
        return []
    texts.update({c.label: str(c.rule) for c in compiled if c.label in folded[1]})
    return [(folded[1], folded[0])]


def _priced(cost_model: CostModel, graph: Graph) -> tuple[float, int]:
    """The graph's whole price, and how many of its nodes were estimated rather than measured (past the time limit)."""
    before = cost_model.estimated
    cost = cost_model.graph_cost(graph)
    return cost, cost_model.estimated - before


def eqsat_search(graph: Graph, rules: Iterable[Rule | CompiledRule], cost_model: CostModel, config, progress=None) -> tuple[Graph, object]:
    """The cheapest graph equality saturation finds within ``config``'s limits, and a :class:`~taso.search.SearchReport`.

    ``config`` is the search's :class:`~taso.search.SearchConfig`: its time limit is shared,
    ``eqsat_share`` of it for saturation and the rest for extraction.
    """
    from ..core import EqsatStats, SearchReport, Step, StopReason, decomposed_ops

    started = time.perf_counter()
    rules = rules if isinstance(rules, Sequence) else list(rules)  # read twice: the loops' fold, then saturation
    initial = cost_model.graph_cost(graph)
    egraph = EGraph(graph)
    saturated_by = started + config.time_limit * config.eqsat_share
    seeds, versions = [], []
    texts: dict[str, str] = {}
    if config.groups:
        from ..groups import GroupLibrary, find_groups

        library = GroupLibrary.shipped()
        seeds = [merge.match for merge in find_groups(graph, library, excluded=config.excluded).merges]
        texts.update({match.rule.label: library.describe(match.rule.rule) for match in seeds})
        versions = _add_cleaned_versions(egraph, graph, library, config.excluded, seeds, (started + saturated_by) / 2, texts)
    versions += _add_folded_loops(egraph, graph, rules, config, (started + saturated_by) / 2, texts)
    limits = Limits(nodes=config.eqsat_nodes, iterations=config.eqsat_iterations, seconds=max(saturated_by - time.perf_counter(), 0.5))
    saturation = saturate(egraph, rules, limits, config.connected_only, config.excluded, seeds, decomposed_ops(graph))
    remaining = max(config.time_limit - (time.perf_counter() - started), 1.0)
    extraction = extract(egraph, cost_model, remaining, priced=lambda g: _priced(cost_model, g))
    # The extraction prices node by node; the whole graph's price also sees what runs between nodes (weights read
    # again after other weights, fusions). The versions added whole are graphs the e-graph holds: each is priced whole
    # too, and the cheapest of all is the result. Versions come first, so that on a tie the graph made by rewriting the
    # input wins over the same graph rebuilt from the e-graph: it keeps the input's node order, which ONNX Runtime's run
    # order follows, and is the file the backtracking search writes (the GRUCell x32 export's two were priced alike).
    # Past the time limit a measured cost model estimates the nodes it has not measured, and an extracted graph can be
    # full of nodes no run measured: ResNet-50's, its Conv + BN folded (which ONNX Runtime does itself), was priced
    # 1.05-1.12x on 237-377 estimates and measured 0.93-1.01x. A graph is chosen over the input only on measured prices.
    extracted_cost, extracted_estimates = extraction.whole
    priced = [(version, *_priced(cost_model, version), labels) for labels, version in versions]
    priced.append((extraction.graph, extracted_cost, extracted_estimates, extraction.rewrites))
    best, best_cost, best_rules = graph, initial, []
    for candidate, cost, estimates, rules_used in priced:
        if cost < best_cost and not estimates:
            best, best_cost, best_rules = candidate, cost, rules_used
    stop = {"saturated": StopReason.SATURATED, "time limit": StopReason.TIME_LIMIT}.get(saturation.stop_reason, StopReason.BUDGET)
    trace = [Step(rule, best_cost) for rule in best_rules]
    texts.update(saturation.texts)
    report = SearchReport(stop, initial, best_cost, expanded=saturation.iterations, generated=saturation.matches, accepted=saturation.applied,
                          seconds=time.perf_counter() - started, trace=trace, engine="eqsat",
                          rule_texts={step.rule: texts.get(step.rule, "") for step in trace})
    report.eqsat = EqsatStats(saturation.stop_reason, saturation.iterations, saturation.terms, saturation.matches, saturation.applied,
                              saturation.seconds, extraction.method, extraction.seconds, extracted_cost, extracted_estimates, len(versions),
                              "input" if best is graph else "extraction" if best is extraction.graph else "version")
    return best, report
