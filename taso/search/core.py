"""The search's core, shared by its engines: limits (:class:`SearchConfig`), the typed report (:class:`SearchReport`,
with its :class:`StopReason`, per-expansion :class:`Expansion` and eqsat's :class:`EqsatStats`), and the rules a
search admits as the operators they need appear (:class:`RuleIndex`, over :class:`RuleSlot` s and
:class:`LazyRules`). Engines import this module, never each other (egg's ``Runner``, ``Iteration`` and ``StopReason``
are the model).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import overload

from ..ir import Graph
from ..rules import Rule, operator_variant, side_variants
from .rewrite import CompiledRule

__all__ = ["CLEAN_UP", "SearchConfig", "SearchReport", "StopReason", "Step", "Expansion", "EqsatStats", "RuleSlot", "LazyRules",
           "RuleIndex", "SeedIndex"]


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
            10 s on a loaded 2-core machine, benchmarks/search/bench_search_time.py).
        max_queue: the most graphs waiting in the queue (the costliest are dropped).
        clean_up: clean up a graph a rewrite built when there is something to clean up at its new
            nodes (:mod:`taso.search.cleanup`: a free move, so merges that share a concatenation are priced
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
        groups: also offer group merges (:mod:`taso.search.groups`): k sites of one kind rewritten in one
            proved step, found in one pass over the graph.
        engine: "backtracking" (this module) or "eqsat" (:mod:`taso.search.eqsat`: equality saturation
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


@dataclass(frozen=True)
class EqsatStats:
    """What equality saturation did, beside the report every engine gives (egg's Runner report, with extraction).

    Attributes:
        stop_reason: why saturation stopped ("saturated", "time limit", "node limit", "iteration limit").
        iterations, enodes, matches, applied: rounds of matching, e-nodes at the end, matches found and added.
        seconds_saturating, seconds_extracting: the two phases' wall time.
        extraction: how the cheapest graph was extracted ("ilp (HiGHS, optimal)", "greedy", ...).
        extracted_cost: the extracted graph's price, whole; extracted_estimated_nodes: how many of its nodes were
            priced on estimates (past the time limit), which rules it out.
        versions: group-merged versions of the input added whole; chosen: "input", "extraction" or "version".
    """

    stop_reason: str
    iterations: int
    enodes: int
    matches: int
    applied: int
    seconds_saturating: float
    extraction: str
    seconds_extracting: float
    extracted_cost: float
    extracted_estimated_nodes: int
    versions: int
    chosen: str

    def to_json(self) -> dict:
        return {"stop_reason": self.stop_reason, "iterations": self.iterations, "enodes": self.enodes, "matches": self.matches,
                "applied": self.applied, "seconds_saturating": self.seconds_saturating, "extraction": self.extraction,
                "seconds_extracting": self.seconds_extracting, "extracted_cost_s": self.extracted_cost,
                "extracted_estimated_nodes": self.extracted_estimated_nodes, "versions": self.versions, "chosen": self.chosen}


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
    eqsat: EqsatStats | None = None  # equality saturation's own figures (:func:`taso.search.eqsat.eqsat_search`)
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
            **({"eqsat": self.eqsat.to_json()} if self.eqsat is not None else {}),
        }


class SeedIndex:
    """Pattern nodes by what a graph node must have to play them: its op, and its exact params when the pattern fixes them.

    The search seeds matching at every node a rewrite adds; looking patterns up by
    (op, params) skips the thousands whose params cannot fit before a match is even started.
    """

    def __init__(self, compiled: Sequence[CompiledRule]):
        self.exact: dict[tuple[str, object], list[tuple[CompiledRule, int]]] = {}
        self.any_params: dict[str, list[tuple[CompiledRule, int]]] = {}
        for crule in compiled:
            for p in crule.nodes:
                if p.index in crule.constants:
                    continue  # matched by value from the node that reads it, never seeded at
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
    (:class:`RuleIndex`), so a model without convolutions never parses a convolution rule.
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


def decomposed_ops(graph: Graph) -> frozenset[str]:
    """The ops ``graph`` would be written with as their decompositions (ONNX's Attention below opset 23, where its target
    allows no raise): a rewrite into one would only buy the measuring's noise, so the search makes none."""
    from ..ops import OPS

    return frozenset(op.name for op in OPS.values() if op.onnx.native_opset and not graph.meta.writes_natively(op.onnx.native_opset))


class RuleIndex:
    """The rules one search uses: a rule is compiled once every operator of its source has occurred in a graph the search expanded.

    The operators present only grow, and a rule admitted late has an operator its graph's
    parent lacked, so each of its matches runs through a node the rewrite added: seeded
    matching finds them. Admitted rules stay in their original order, so the search sees
    the same rewrites, in the same order, as with every rule compiled up front.
    """

    def __init__(self, rules: Iterable[Rule | CompiledRule], connected_only: bool = False, excluded: frozenset[str] = frozenset(),
                 decomposed: frozenset[str] = frozenset()):
        self.connected_only = connected_only
        self.excluded = excluded
        self.decomposed = decomposed  # ops a rewrite must not make: the graph writes them as the form they replace
        slots = rules.slots if isinstance(rules, LazyRules) else [RuleSlot.of(r) for r in rules]
        self._pending = list(enumerate(slots))
        self._admitted: list[tuple[int, CompiledRule]] = []
        self._ids: set[str] = set()
        # A fill node of a source is a constant matched by value, and every graph may hold one as a weight.
        self.present: set[str] = {"fill"}
        self.compiled: list[CompiledRule] = []
        self.seeds = SeedIndex(())

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
            if self.decomposed and {n.op for n in crule.rule.target} & self.decomposed - {n.op for n in crule.rule.source}:
                continue
            if crule.rule_id not in self._ids:
                self._ids.add(crule.rule_id)
                self._admitted.append((position, crule))
        self._admitted.sort(key=lambda pair: pair[0])
        self.compiled = [crule for _, crule in self._admitted]
        self.seeds = SeedIndex(self.compiled)


