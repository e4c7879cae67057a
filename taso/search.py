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
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import overload

from .cleanup import clean_up, may_clean_up
from .cost import CostModel
from .errors import TasoError
from .groups import GroupLibrary, Groups, find_groups, merge_chain
from .ir import Graph
from .rewrite import CompiledRule, Plan, find_matches, plan_match
from .rules import Rule, operator_variant, side_variants

__all__ = ["ENGINES", "SearchConfig", "SearchReport", "StopReason", "Step", "Expansion", "search", "RuleSlot", "LazyRules"]


class StopReason(Enum):
    SATURATED = "saturated"
    BUDGET = "budget"
    TIME_LIMIT = "time limit"


@dataclass(frozen=True)
class SearchConfig:
    """Limits of the search.

    Attributes:
        alpha: keep graphs costing less than alpha x the best cost (TASO: 1.05).
        budget: the most graphs to expand (pop and rewrite).
        time_limit: wall-clock seconds (default 9: with the library ready in well under a second,
            a model's search stays within 10 s; every zoo model's best graph was found within
            10 s on a loaded 2-core machine, benchmarks/bench_search_time.py).
        max_queue: the most graphs waiting in the queue (the costliest are dropped).
        clean_up: clean up a graph a rewrite built when there is something to clean up at its new
            nodes (:mod:`taso.cleanup`: a free move, so merges that share a concatenation are priced
            as sharing it); False for benchmarks.
        lazy: keep unbuilt plans in the queue and build only popped ones (False builds every
            accepted rewrite at once, as a naive implementation would: for benchmarks).
        incremental: a child graph inherits its parent's still-valid rewrites and matches only
            through its new nodes (False rematches every rule on every graph: for benchmarks).
        connected_only: use only rules whose source is one piece. A source of unrelated parts
            (``[sigmoid(x1), sigmoid(x2)]``: batch any two sigmoids of the graph) matches every
            pair of such nodes, and on an unrolled RNN export the first expansion drowned in
            tens of thousands of them; the merges that pay share an input (a weight, an
            activation). False uses every rule: for benchmarks.
        excluded: rules the search must not use, by the label reports name them with (the
            pipeline's answer to an optimized model that failed its output check).
        groups: also offer group merges (:mod:`taso.groups`): k sites of one kind rewritten in one
            proved step, found in one pass over the graph.
        engine: "backtracking" (this module) or "eqsat" (:mod:`taso.eqsat`: equality saturation
            over the same rules, with exact extraction).
        eqsat_nodes, eqsat_iterations: eqsat's limits on e-nodes and rounds of matching.
        eqsat_share: the part of the time limit eqsat saturates for (the rest extracts).
    """

    alpha: float = 1.05
    budget: int = 200
    time_limit: float = 9.0
    max_queue: int = 2000
    clean_up: bool = True
    lazy: bool = True
    incremental: bool = True
    connected_only: bool = True
    excluded: frozenset[str] = frozenset()
    groups: bool = True
    engine: str = "backtracking"
    eqsat_nodes: int = 5_000
    eqsat_iterations: int = 10
    eqsat_share: float = 0.6


ENGINES = ("backtracking", "eqsat")
CLEAN_UP = "clean-up"  # the trace's label of a graph clean-up changed (not a rule)


@dataclass(frozen=True)
class Step:
    rule: str
    cost: float


@dataclass(frozen=True)
class Expansion:
    """What one expansion (a graph popped and rewritten) did: egg's per-iteration statistics, for TASO.

    Attributes:
        tried: rewrites of the graph found and priced (its matches whose target fits, inherited ones included).
        accepted: those queued (cheaper than alpha x the best cost, and a graph not seen before).
        queue: graphs waiting in the queue afterwards.
        seconds_rewriting: building the graph, matching and planning its rewrites.
        seconds_costing: in the cost model, pricing them.
    """

    tried: int
    accepted: int
    queue: int
    seconds_rewriting: float
    seconds_costing: float

    def to_json(self) -> dict:
        return {"tried": self.tried, "accepted": self.accepted, "queue": self.queue, "seconds_rewriting": self.seconds_rewriting,
                "seconds_costing": self.seconds_costing}


@dataclass
class SearchReport:
    """What the search did: why it stopped, costs, how rules fired and what each expansion did (egg's Report, for TASO).

    ``generated`` and ``accepted`` total the expansions' ``tried`` and ``accepted``;
    ``seconds_rewriting`` totals theirs, and ``seconds_costing`` theirs plus pricing the input.
    """

    stop_reason: StopReason
    initial_cost: float
    best_cost: float
    expanded: int = 0
    generated: int = 0
    accepted: int = 0
    seconds: float = 0.0
    seconds_rewriting: float = 0.0
    seconds_costing: float = 0.0
    trace: list[Step] = field(default_factory=list)
    rule_texts: dict[str, str] = field(default_factory=dict)  # applied rule -> its text, for people
    fired: Counter = field(default_factory=Counter)
    expansions: list[Expansion] = field(default_factory=list)  # one per expanded graph, in order
    cleaned: int = 0  # expanded graphs that clean-up changed (a "clean-up" step in their trace)
    engine: str = "backtracking"
    eqsat: dict = field(default_factory=dict)  # equality saturation's own figures (:func:`taso.eqsat.eqsat_search`)
    # What the input file costs beyond the searched graph's price, which taso's output does not pay
    # (:meth:`taso.cost.model.CostModel.input_overhead`): the file, not the graph, is what the output is measured against.
    input_overhead: float = 0.0

    @property
    def predicted_speedup(self) -> float:
        """The input file's predicted time over the best graph's."""
        return (self.initial_cost + self.input_overhead) / self.best_cost if self.best_cost > 0 else 1.0

    @property
    def applied(self) -> Counter:
        """Rules applied on the way to the best graph, with counts (clean-ups are not rules)."""
        return Counter(step.rule for step in self.trace if step.rule != CLEAN_UP)

    def to_json(self) -> dict:
        return {
            "stop_reason": self.stop_reason.value, "initial_cost_s": self.initial_cost, "input_overhead_s": self.input_overhead,
            "best_cost_s": self.best_cost,
            "predicted_speedup": self.predicted_speedup, "expanded": self.expanded, "generated": self.generated,
            "accepted": self.accepted, "seconds": self.seconds, "seconds_rewriting": self.seconds_rewriting,
            "seconds_costing": self.seconds_costing, "applied": dict(self.applied), "cleaned": self.cleaned,
            "trace": [{"rule": s.rule, "cost_s": s.cost} for s in self.trace], "rule_texts": dict(self.rule_texts),
            "expansions": [e.to_json() for e in self.expansions], "engine": self.engine,
            **({"eqsat": dict(self.eqsat)} if self.eqsat else {}),
        }


class _SeedIndex:
    """Pattern nodes by what a graph node must have to play them: its op, and its exact params when the pattern fixes them.

    The search seeds matching at every node a rewrite adds; looking patterns up by
    (op, params) skips the thousands whose params cannot fit before a match is even started.
    """

    def __init__(self, compiled: Sequence[CompiledRule]):
        self.exact: dict[tuple[str, object], list[tuple[CompiledRule, int]]] = {}
        self.any_params: dict[str, list[tuple[CompiledRule, int]]] = {}
        for crule in compiled:
            for p in crule.nodes:
                if p.literal is not None:
                    self.exact.setdefault((p.op_name, p.literal), []).append((crule, p.index))
                else:
                    self.any_params.setdefault(p.op_name, []).append((crule, p.index))

    def patterns_for(self, node) -> list[tuple[CompiledRule, int]]:
        return self.exact.get((node.op.name, node.params), []) + self.any_params.get(node.op.name, [])


_UNSET = object()


class RuleSlot:
    """A directed rule the search may use: its source's operator variants now, the rule itself only when asked for (once).

    ``make`` returns the rule, or None when it must not be used (not proved, a reverse that
    cannot bind its inputs); the compiled form is kept, so every search sharing the slot
    compiles the rule at most once.
    """

    __slots__ = ("source_ops", "_make", "_rule", "_compiled")

    def __init__(self, source_ops: frozenset[str], make: Callable[[], Rule | None]):
        self.source_ops = source_ops
        self._make = make
        self._rule = self._compiled = _UNSET

    @classmethod
    def of(cls, rule: Rule | CompiledRule) -> RuleSlot:
        """A slot for a rule already in hand (compiled only if the search needs it)."""
        crule = rule if isinstance(rule, CompiledRule) else None
        plain = crule.rule if crule is not None else rule
        slot = cls(side_variants(plain.source), lambda: plain)
        slot._rule = plain
        if crule is not None:
            slot._compiled = crule
        return slot

    def rule(self) -> Rule | None:
        if self._rule is _UNSET:
            self._rule = self._make()
        return self._rule

    def compiled(self) -> CompiledRule | None:
        if self._compiled is _UNSET:
            rule = self.rule()
            self._compiled = None if rule is None else CompiledRule(rule)
        return self._compiled


class LazyRules(Sequence[Rule]):
    """Directed rules whose parsing and compiling wait until a search needs them.

    As a sequence it is the full list (every usable rule, the first of each id), built on
    first use; the search instead admits rules by the operators of the graphs it expands
    (:class:`_RuleIndex`), so a model without convolutions never parses a convolution rule.
    """

    def __init__(self, slots: Sequence[RuleSlot], size: int | None = None):
        """``size``: the length when known without parsing (a library's index counts its rules)."""
        self.slots = list(slots)
        self._size = size
        self._all: list[Rule] | None = None

    def _rules(self) -> list[Rule]:
        if self._all is None:
            seen: set[str] = set()
            rules = []
            for slot in self.slots:
                rule = slot.rule()
                if rule is not None and rule.id not in seen:
                    seen.add(rule.id)
                    rules.append(rule)
            self._all = rules
        return self._all

    def __len__(self) -> int:
        return self._size if self._all is None and self._size is not None else len(self._rules())

    @overload
    def __getitem__(self, index: int) -> Rule: ...
    @overload
    def __getitem__(self, index: slice) -> list[Rule]: ...

    def __getitem__(self, index):
        return self._rules()[index]

    def __iter__(self) -> Iterator[Rule]:
        return iter(self._rules())


class _RuleIndex:
    """The rules one search uses: a rule is compiled once every operator of its source has occurred in a graph the search expanded.

    The operators present only grow, and a rule admitted late has an operator its graph's
    parent lacked, so each of its matches runs through a node the rewrite added: seeded
    matching finds them. Admitted rules stay in their original order, so the search sees
    the same rewrites, in the same order, as with every rule compiled up front.
    """

    def __init__(self, rules: Iterable[Rule | CompiledRule], connected_only: bool = False, excluded: frozenset[str] = frozenset()):
        self.connected_only = connected_only
        self.excluded = excluded
        slots = rules.slots if isinstance(rules, LazyRules) else [RuleSlot.of(r) for r in rules]
        self._pending = list(enumerate(slots))
        self._admitted: list[tuple[int, CompiledRule]] = []
        self._ids: set[str] = set()
        self.present: set[str] = set()
        self.compiled: list[CompiledRule] = []
        self.seeds = _SeedIndex(())

    def admit(self, graph: Graph) -> None:
        """Compiles the rules that the operators of ``graph`` (with those seen before) make possible."""
        self.admit_variants({operator_variant(op, params) for op, params in graph.index.op_params})

    def admit_variants(self, variants: set[str], fits: Callable[[Rule], bool] | None = None) -> None:
        """Compiles the rules these operator variants (with those seen before) make possible.

        ``fits``: a further test of a parsed rule; a rule failing it stays pending for a later call
        (equality saturation admits a rule once its source's producer-reader pairs occur in the e-graph).
        """
        if fits is None and variants <= self.present:
            return
        self.present |= variants
        ready, waiting = [], []
        for i, slot in self._pending:
            possible = slot.source_ops <= self.present and (fits is None or slot.rule() is None or fits(slot.rule()))
            (ready if possible else waiting).append((i, slot))
        if not ready:
            return
        self._pending = waiting
        for position, slot in ready:
            crule = slot.compiled()
            if crule is None or (self.connected_only and not crule.connected) or crule.label in self.excluded:
                continue
            if crule.rule_id not in self._ids:
                self._ids.add(crule.rule_id)
                self._admitted.append((position, crule))
        self._admitted.sort(key=lambda pair: pair[0])
        self.compiled = [crule for _, crule in self._admitted]
        self.seeds = _SeedIndex(self.compiled)


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

    def delta(self, graph: Graph, plan: Plan) -> float:
        """What applying ``plan`` to ``graph`` changes the cost by."""
        started = time.perf_counter()
        delta = self.cost_model.rewrite_cost(graph, 0.0, plan.removed, plan.added, plan)
        self.seconds += time.perf_counter() - started
        return delta


def _all_options(graph: Graph, compiled: Sequence[CompiledRule], pricer: _Pricer, deadline: float = float("inf"),
                 apart: dict[int, tuple[int, int]] | None = None) -> list[_Option]:
    """Every rewrite of ``graph``, priced; those not reached by ``deadline`` are left out, and so are those that take
    two sites of one group (``apart``: see :class:`~taso.groups.Groups`)."""
    options = []
    for crule in compiled:
        if crule.may_match(graph):
            for match in find_matches(graph, crule, apart=apart):
                if time.perf_counter() > deadline:
                    return options  # pricing new nodes measures them: a cold cost cache must not overrun the time limit
                plan = plan_match(graph, match)
                if plan is not None:
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


def _inherited_options(graph: Graph, plan: Plan, parent_options: list[_Option], seeds: _SeedIndex, compiled, pricer: _Pricer,
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
    for node in plan.added:
        for crule, index in seeds.patterns_for(node):
            for match in find_matches(graph, crule, seed=(index, node), apart=apart):
                if time.perf_counter() > deadline:
                    return options
                new_plan = plan_match(graph, match)
                if new_plan is None:
                    continue
                key = (new_plan.label, new_plan.removed_ids)
                if key in seen:
                    continue
                seen.add(key)
                options.append((new_plan, pricer.delta(graph, new_plan)))
    return options


def search(
    graph: Graph,
    rules: Iterable[Rule | CompiledRule],
    cost_model: CostModel,
    config: SearchConfig = SearchConfig(),
    progress: Callable[[int, float], None] | None = None,
) -> tuple[Graph, SearchReport]:
    """Finds a cheaper equivalent graph.

    Args:
        graph: the starting graph.
        rules: proved rules (or rules already compiled for matching, or :class:`LazyRules`); each is
            compiled only once its source operators occur in a graph the search expands.
        cost_model: prices graphs.
        config: alpha, budget, time limit.
        progress: called after each expansion with (expanded, best cost).

    Returns:
        The best graph found (never costlier than the input) and the search report.
    """
    # NOTE: the queue holds millions of long-lived objects on a big model, and the cyclic GC's full
    # collections walked them all every few expansions (half of NASNet-A's search time). Automatic
    # collection is off during the search; each expansion collects the young generations, where
    # the cycles the search makes (matching closures) die.
    collecting = gc.isenabled()
    gc.disable()
    # Pricing counts against the time limit: past it, a measured cost model estimates the nodes it has not measured.
    cost_model.deadline = time.perf_counter() + config.time_limit
    try:
        if config.engine == "eqsat":
            try:
                from .eqsat import eqsat_search
            except ImportError as e:
                raise TasoError(f"the eqsat search needs egglog and highspy ({e}): pip install 'taso[eqsat]'") from None
            return eqsat_search(graph, rules, cost_model, config)
        return _search(graph, rules, cost_model, config, progress)
    finally:
        cost_model.deadline = float("inf")
        if config.engine == "eqsat":
            # The e-graph (0.3-0.5 GB of egglog's memory on BERT) is held by cycles among the extraction's objects: collected
            # now, its memory goes back to the system with the stage's heap trim, before the export builds the model on top.
            gc.collect()
        if collecting:
            gc.enable()


_CHAIN_SHARE = 0.25  # the most of the time limit the merge chain may take


def _queue_merge_chain(queue: list, tie: Iterator[int], seen: set, graph: Graph, groups: GroupLibrary, pricer: _Pricer,
                       config: SearchConfig, deadline: float, report: SearchReport) -> None:
    """Queues each version of :func:`taso.groups.merge_chain` (the input with one group merge more each), priced
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


def _search(graph: Graph, rules: Iterable[Rule | CompiledRule], cost_model: CostModel, config: SearchConfig,
            progress: Callable[[int, float], None] | None) -> tuple[Graph, SearchReport]:
    start = time.perf_counter()
    rule_index = _RuleIndex(rules, config.connected_only, config.excluded)
    pricer = _Pricer(cost_model)
    groups = GroupLibrary.shipped() if config.groups else None
    best, best_cost = graph, pricer.graph_cost(graph)
    report = SearchReport(StopReason.SATURATED, best_cost, best_cost)
    tie = itertools.count()
    # Queue entries hold a graph or a plan (a rewrite not built yet): only popped plans are built.
    queue: list[tuple[float, int, Graph | Plan, tuple[Step, ...]]] = [(best_cost, next(tie), graph, ())]
    seen = {graph.index.search_key()}
    if groups is not None:
        _queue_merge_chain(queue, tie, seen, graph, groups, pricer, config, start + config.time_limit * _CHAIN_SHARE, report)
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
