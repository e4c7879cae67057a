"""TASO's cost-based backtracking search over graph rewrites.

A priority queue holds graphs ordered by cost. The search pops the cheapest, applies every
rule at every match, and keeps a new graph when its cost is below ``alpha`` times the best
cost so far and its structural hash is new. ``alpha`` > 1 lets the search pass through
slightly worse graphs to reach better ones (a merge that only pays after a second rewrite),
which greedy rewriting cannot. It stops when the queue empties (saturated), after
``budget`` expanded graphs, or at the time limit, and returns the best graph with a report.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from ..cost import CostModel
from ..ir import Graph
from ..rules import Rule
from .cleanup import clean_up, may_clean_up
from .core import CLEAN_UP, Expansion, RuleIndex, SearchConfig, SearchReport, SeedIndex, Step, StopReason, decomposed_ops
from .groups import GroupLibrary, Groups, find_groups, merge_chain
from .rewrite import CompiledRule, Plan, find_matches, plan_match
from .sequences import SEQUENCE_OPS, folded_loops

__all__ = ["backtracking_search"]


# Plans left in the queue priced below the best graph when the search stops: how many are built to find one that is.
_LAST_LOOKS = 16


def _repriced(trace: tuple[Step, ...], cost: float) -> tuple[Step, ...]:
    """The trace with its last step at the graph's own price."""
    return (*trace[:-1], Step(trace[-1].rule, cost)) if trace else trace


# One possible rewrite of a graph, priced: the plan and what it changes the graph's cost by.
_Option = tuple[Plan, float]


class _Pricer:
    """The cost model as the search calls it, with the seconds spent inside it (one perf_counter pair per call)."""

    def __init__(self, cost_model: CostModel):
        self.cost_model = cost_model
        self.seconds = 0.0

    def graph_cost(self, graph: Graph) -> float:
        started = time.perf_counter()
        cost = self.cost_model.graph_cost(graph)
        self.seconds += time.perf_counter() - started
        return cost

    def measure_ahead(self, graph: Graph, plans: Sequence[Plan] | None = None) -> None:
        """Measures at once what pricing ``plans`` (rewrites of ``graph``), or ``graph`` itself, would measure one by
        one (:meth:`CostModel.measure_ahead`)."""
        started = time.perf_counter()
        if plans is None:
            self.cost_model.measure_graph_ahead(graph)
        else:
            self.cost_model.measure_plans_ahead(graph, plans)
        self.seconds += time.perf_counter() - started

    def delta(self, graph: Graph, plan: Plan) -> float:
        """What applying ``plan`` to ``graph`` changes the cost by."""
        started = time.perf_counter()
        delta = self.cost_model.rewrite_cost(graph, 0.0, plan.removed, plan.added, plan)
        self.seconds += time.perf_counter() - started
        return delta


def _all_options(graph: Graph, compiled: Sequence[CompiledRule], pricer: _Pricer, deadline: float = float("inf"),
                 apart: dict[int, tuple[int, int]] | None = None) -> list[_Option]:
    """Every rewrite of ``graph``, priced; those not reached by ``deadline`` are left out, and so are those that take
    two sites of one group (``apart``: see :class:`~taso.search.groups.Groups`)."""
    plans = [plan for crule in compiled if crule.may_match(graph)
             for plan in (plan_match(graph, match) for match in find_matches(graph, crule, apart=apart)) if plan is not None]
    pricer.measure_ahead(graph, plans)
    options = []
    for plan in plans:
        if time.perf_counter() > deadline:
            break  # pricing new nodes measures them: a cold cost cache must not overrun the time limit
        options.append((plan, pricer.delta(graph, plan)))
    return options


def _group_options(graph: Graph, groups: Groups, options: list[_Option], pricer: _Pricer, clean: bool) -> list[_Option]:
    """The group merges that ``options`` (inherited from the parent) does not hold yet, priced.

    With ``clean``, a merge is priced as it will be built: cleaned up (a merged cell's per-step inputs, gathered
    and concatenated, become one transpose). Priced raw, the 64 gathers it removes after the fact were still
    counted, and on small cells the merge looked like no gain and was never expanded. Group merges are a few
    per graph, so building each one costs little.
    """
    labels = {group.match.rule.label for group in groups.merges}
    held: dict[str, list[frozenset[int]]] = {}  # a held merge was cleaned up: it removes its match's nodes and more
    for o, _ in options:
        if o.label in labels:
            held.setdefault(o.label, []).append(o.removed_ids)
    found = []
    for group in groups.merges:
        plan = plan_match(graph, group.match)
        if plan is None or any(plan.removed_ids <= ids for ids in held.get(plan.label, ())):
            continue
        held.setdefault(plan.label, []).append(plan.removed_ids)
        if clean:
            built = plan.materialize()
            if built is None:
                continue
            if may_clean_up(built, plan.added):
                cleaned = clean_up(built)[0]
                if cleaned is not built:
                    plan = _with_clean_up(plan, cleaned, plan.label)
        found.append((plan, pricer.delta(graph, plan)))
    return found


def _touches(plan: Plan, values: set[str]) -> bool:
    return any(v in values for n in plan.removed for v in (*n.inputs, *n.outputs))


def _with_clean_up(plan: Plan, cleaned: Graph, label: str = CLEAN_UP) -> Plan:
    """The plan and the clean-up after it as one rewrite of the plan's parent, so that the cleaned graph
    inherits its parent's rewrites as any child does (rematching only through the nodes they changed)."""
    kept = {id(n) for n in cleaned.nodes}
    before = {id(n) for n in plan.parent.nodes}
    removed = tuple(n for n in plan.parent.nodes if id(n) not in kept)
    added = tuple(n for n in cleaned.topological_order() if id(n) not in before)
    outputs = None if cleaned.outputs == plan.parent.outputs else cleaned.outputs
    return Plan(plan.parent, removed, added, outputs, {o: cleaned.type(o) for n in added for o in n.outputs}, label)


def _inherited_options(graph: Graph, plan: Plan, parent_options: list[_Option], seeds: SeedIndex, compiled, pricer: _Pricer,
                       deadline: float = float("inf"), apart: dict[int, tuple[int, int]] | None = None) -> list[_Option]:
    """The child's rewrites: the parent's that the applied rewrite left intact, plus those through its new nodes.

    NOTE: a match that only the removal of an outside consumer made valid is not found here
    (it involves no new node); the search loses that option, never soundness.
    """
    if plan.outputs is not None:
        return _all_options(graph, compiled, pricer, deadline, apart)  # the outputs moved: rematch everything
    removed = plan.removed_ids
    read = {v for n in plan.added for v in n.inputs}
    options = [o for o in parent_options if removed.isdisjoint(o[0].removed_ids) and read.isdisjoint(o[0].interior)]
    if pricer.cost_model.context_sensitive:
        # A price that depends on a rewrite's neighbours is stale once the applied rewrite touched them.
        touched = {v for n in (*plan.removed, *plan.added) for v in (*n.inputs, *n.outputs)} - plan.parent.constant_values()
        options = [(o, pricer.delta(graph, o.on(graph))) if _touches(o, touched) else (o, d) for o, d in options]
    seen = {(o.label, o.removed_ids) for o, _ in options}
    new_plans = []
    for node in plan.added:
        for crule, index in seeds.patterns_for(node):
            for match in find_matches(graph, crule, seed=(index, node), apart=apart):
                new_plan = plan_match(graph, match)
                if new_plan is not None and (new_plan.label, new_plan.removed_ids) not in seen:
                    seen.add((new_plan.label, new_plan.removed_ids))
                    new_plans.append(new_plan)
    pricer.measure_ahead(graph, new_plans)
    for new_plan in new_plans:
        if time.perf_counter() > deadline:
            break
        options.append((new_plan, pricer.delta(graph, new_plan)))
    return options


_CHAIN_SHARE = 0.25  # the most of the time limit the merge chain may take


def _queue_merge_chain(queue: list, tie: Iterator[int], seen: set, graph: Graph, groups: GroupLibrary, pricer: _Pricer,
                       config: SearchConfig, deadline: float, report: SearchReport) -> None:
    """Queues each version of :func:`taso.search.groups.merge_chain` (the input with one group merge more each), priced
    whole, as a graph the search may start from.

    Offered one at a time, a merge that pays only once the others are made is never expanded: on
    NasRNN the per-step column merges each priced a loss, and the search stopped at 1.95 ms where the
    whole chain is priced 1.69 ms (and measured 1.11-1.14x faster than the search's graph)."""
    trace: tuple[Step, ...] = ()
    for step in merge_chain(graph, groups, config.excluded, deadline, clean=config.clean_up):
        cost = pricer.graph_cost(step.graph)
        trace += (Step(step.rules[-1].label, cost),) + ((Step(CLEAN_UP, cost),) if step.cleaned else ())
        report.cleaned += step.cleaned
        key = step.graph.index.search_key()
        if key not in seen:
            seen.add(key)
            heapq.heappush(queue, (cost, next(tie), step.graph, trace))


def _queue_folded_loops(queue: list, tie: Iterator[int], seen: set, graph: Graph, rule_index: RuleIndex, pricer: _Pricer,
                        deadline: float) -> None:
    """Queues the graph with its unrolled recurrent loops folded (:func:`taso.search.sequences.folded_loops`), priced
    whole, as a graph the search may start from. The rules that extend a sequence read a sequence node, which the
    input holds none of: they are admitted with the input's rules."""
    rule_index.admit(graph)
    rule_index.admit_variants(set(SEQUENCE_OPS))
    folded = folded_loops(graph, rule_index.compiled, deadline)
    if folded is None:
        return
    result, labels = folded
    key = result.index.search_key()
    if key not in seen:
        seen.add(key)
        pricer.measure_ahead(result)
        cost = pricer.graph_cost(result)
        heapq.heappush(queue, (cost, next(tie), result, tuple(Step(label, cost) for label in labels) + (Step(CLEAN_UP, cost),)))


def backtracking_search(graph: Graph, rules: Iterable[Rule | CompiledRule], cost_model: CostModel, config: SearchConfig,
                        progress: Callable[[int, float], None] | None = None) -> tuple[Graph, SearchReport]:
    """TASO's search from ``graph`` (see the module docstring); the best graph found (never costlier) and the report."""
    start = time.perf_counter()
    rule_index = RuleIndex(rules, config.connected_only, config.excluded, decomposed_ops(graph))
    pricer = _Pricer(cost_model)
    groups = GroupLibrary.shipped() if config.groups else None
    pricer.measure_ahead(graph)  # the input's nodes, in bulk, before they are priced one by one
    best, best_cost = graph, pricer.graph_cost(graph)
    report = SearchReport(StopReason.SATURATED, best_cost, best_cost)
    tie = itertools.count()
    # Queue entries hold a graph or a plan (a rewrite not built yet): only popped plans are built.
    queue: list[tuple[float, int, Graph | Plan, tuple[Step, ...]]] = [(best_cost, next(tie), graph, ())]
    seen = {graph.index.search_key()}
    if groups is not None:
        _queue_merge_chain(queue, tie, seen, graph, groups, pricer, config, start + config.time_limit * _CHAIN_SHARE, report)
    _queue_folded_loops(queue, tie, seen, graph, rule_index, pricer, start + config.time_limit * _CHAIN_SHARE)
    best_trace: tuple[Step, ...] = ()
    options_of: dict[int, list[_Option]] = {}  # an expanded graph's rewrites, inherited by its children
    while queue:
        if report.expanded >= config.budget:
            report.stop_reason = StopReason.BUDGET
            break
        if time.perf_counter() - start > config.time_limit:
            report.stop_reason = StopReason.TIME_LIMIT
            break
        current_cost, _, entry, trace = heapq.heappop(queue)
        started, costing_before = time.perf_counter(), pricer.seconds
        current = entry.materialize() if isinstance(entry, Plan) else entry
        if current is None:
            continue  # building it revealed a cycle
        by_rewrite = isinstance(entry, Plan)  # priced from its parent, not whole
        if by_rewrite and config.clean_up and may_clean_up(current, entry.added):
            cleaned = clean_up(current)[0]
            if cleaned is not current:  # a free move: priced as cleaned, inheriting through what it changed
                current, entry = cleaned, _with_clean_up(entry, cleaned)
                current_cost = pricer.graph_cost(cleaned)
                trace += (Step(CLEAN_UP, current_cost),)
                report.cleaned += 1
                seen.add(cleaned.index.search_key())
                by_rewrite = False
        if by_rewrite and cost_model.order_sensitive:
            current_cost = pricer.graph_cost(current)  # its rewrite's price took the parent's run order
            trace = _repriced(trace, current_cost)
        if current_cost < best_cost:
            best, best_cost, best_trace = current, current_cost, trace
        report.expanded += 1
        rule_index.admit(current)
        parent_options = options_of.get(id(entry.parent)) if isinstance(entry, Plan) and config.incremental else None
        found = find_groups(current, groups, excluded=config.excluded) if groups is not None else Groups()
        if parent_options is None:
            options = _all_options(current, rule_index.compiled, pricer, start + config.time_limit, found.apart)
        else:
            options = _inherited_options(current, entry, parent_options, rule_index.seeds, rule_index.compiled, pricer, start + config.time_limit,
                                         found.apart)
        options += _group_options(current, found, options, pricer, config.clean_up)
        options_of[id(current)] = options
        rewriting = time.perf_counter() - started
        accepted = 0
        key_after = current.index.search_key_after
        for option, delta in options:
            report.fired[option.label] += 1
            cost = current_cost + delta
            if cost >= config.alpha * best_cost:
                continue
            digest = key_after(option.removed, option.added, option.outputs)
            if digest in seen:
                continue
            seen.add(digest)
            accepted += 1
            plan = option.on(current)
            if not config.lazy:
                building = time.perf_counter()
                plan = plan.materialize()
                rewriting += time.perf_counter() - building
            if plan is not None:
                heapq.heappush(queue, (cost, next(tie), plan, trace + (Step(option.label, cost),)))
        if len(queue) > config.max_queue:
            queue = heapq.nsmallest(config.max_queue, queue)
            heapq.heapify(queue)
        costing = pricer.seconds - costing_before
        report.expansions.append(Expansion(len(options), accepted, len(queue), rewriting - costing, costing))
        report.generated += len(options)
        report.accepted += accepted
        report.seconds_rewriting += rewriting - costing
        gc.collect(1)
        if progress is not None:
            progress(report.expanded, best_cost)
    # Cheaper plans may still wait in the queue, unbuilt: build the cheapest that builds (and, priced in its own run
    # order by an order-sensitive cost model, is still cheaper).
    for _ in range(_LAST_LOOKS):
        if not queue or queue[0][0] >= best_cost:
            break
        cost, _, entry, trace = heapq.heappop(queue)
        built = entry.materialize() if isinstance(entry, Plan) else entry
        if built is not None and cost_model.order_sensitive:
            cost = pricer.graph_cost(built)
        if built is not None and cost < best_cost:
            best, best_cost, best_trace = built, cost, _repriced(trace, cost)
            break
    report.best_cost = best_cost
    report.trace = list(best_trace)
    applied = {step.rule for step in best_trace}
    report.rule_texts = {c.label: str(c.rule) for c in rule_index.compiled if c.label in applied}
    if groups is not None:
        report.rule_texts.update({r.name: groups.describe(r) for r in groups.rules() if r.name in applied})
    report.seconds_costing = pricer.seconds
    report.seconds = time.perf_counter() - start
    if report.stop_reason is StopReason.SATURATED and report.seconds > config.time_limit:
        report.stop_reason = StopReason.TIME_LIMIT  # an expansion cut short by the deadline proves nothing saturated
    return best, report
