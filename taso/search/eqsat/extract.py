"""Extraction: the cheapest acyclic choice of one e-node per needed e-class, as a taso graph.

The cost of a choice is the sum of its chosen e-nodes' costs, each counted once however many
e-nodes read it: a shared subgraph is paid for once, which is what running the graph costs
(Tensat's extraction). The exact choice is an integer program (HiGHS, via highspy):

* x_n in {0, 1} per e-node, at most one per class; each output's class has a chosen e-node;
* a chosen e-node's every child class has a chosen e-node;
* no cycle (a rule like ``x = split(concat(x, y))[0]`` puts cycles in the e-graph): each cycle
  a solution closes is cut off and the program solved again (lazy cuts);
* z_n in [0, 1] per e-node the runtime fuses into its producer in the input (a BatchNormalization
  after a Conv): its price back where the choice keeps the fusion.

Costs come from the same cost model as the backtracking search: one node at a time, zero
for a node computed from weights alone (folded at export; a hair in the choice, so that the
shortest way to compute a weight wins). When the solver finds no acyclic solution in its time,
the greedy choice (each class's cheapest e-node by tree cost, egg's extractor) is used instead.
What node prices cannot see (weights read cold, the runtime's fusions) the whole graph's price
does: single rewrites are then undone or taken by it.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...cost import CostModel
from ...errors import GraphError
from ...ir import Graph, Node, TensorType, folds_when_constant
from .saturate import EGraph, tensor_rows
from .terms import LEAF

__all__ = ["ENode", "EClasses", "Extraction", "extract"]


@dataclass(frozen=True)
class ENode:
    """One e-node: an application (``key`` names op and parameters), a tuple's output, or a graph input/weight."""

    cls: int
    kind: str  # "app", "out" or "leaf"
    key: str  # the op key of an application, the leaf key of a leaf
    children: tuple[int, ...]
    index: int = 0  # which output of the tuple, for "out"


class EClasses:
    """The e-graph as Python reads it once saturation is over: e-nodes by class, each class's handle and type."""

    def __init__(self, egraph: EGraph):
        frozen = egraph.freeze()
        value = egraph.egraph
        self.egraph = egraph
        self.class_of_handle = {value.value_to_i64(row.inputs[0]): hash(row.output) for row in frozen.functions["Id"].rows}
        self.handle: dict[int, int] = {}  # class -> its smallest handle
        for h, cls in sorted(self.class_of_handle.items(), reverse=True):
            self.handle[cls] = h
        self.nodes: dict[int, list[ENode]] = {}
        for name, row in tensor_rows(frozen):
            if name == "Out":
                self._add(ENode(hash(row.output), "out", "", (hash(row.inputs[0]),), value.value_to_i64(row.inputs[1])))
            else:
                op, key = value.value_to_string(row.inputs[0]), value.value_to_string(row.inputs[1])
                self._add(ENode(hash(row.output), "leaf" if op == LEAF else "app", key, tuple(hash(v) for v in row.inputs[2:])))

    def _add(self, node: ENode) -> None:
        self.nodes.setdefault(node.cls, []).append(node)

    def type(self, cls: int) -> TensorType | tuple[TensorType, ...]:
        return self.egraph.table.types[self.handle[cls]]

    def reachable(self, roots) -> list[int]:
        """The classes some e-node of the roots' classes reads, transitively (in discovery order)."""
        seen, order, stack = set(roots), list(roots), list(roots)
        while stack:
            for node in self.nodes.get(stack.pop(), ()):
                for child in node.children:
                    if child not in seen:
                        seen.add(child)
                        order.append(child)
                        stack.append(child)
        return order


@dataclass
class Extraction:
    """The extracted graph and how it was chosen."""

    graph: Graph
    cost: float  # the sum of the chosen e-nodes' costs
    method: str  # "ilp", "ilp (time limit)" or "greedy"
    seconds: float
    enodes: int  # e-nodes the choice was made among
    rewrites: list[str]  # the rule of each rewrite whose target the graph holds (a rule once per place it applied)
    whole: tuple[float, int] | None = None  # the graph's whole price and estimated nodes, when extract() was given ``priced``


class _Pricing:
    """What a cost model reads of a graph, for values named after e-classes."""

    def __init__(self, types: dict[str, TensorType], graph: Graph, weights, consts: set[str]):
        self.types, self.weights, self.meta, self._consts = types, weights, graph.meta, frozenset(consts)

    def type(self, value: str) -> TensorType:
        """Raises GraphError for a value no class names, as :meth:`Graph.type` does: a cost model prices a fused
        activation apart under a name of its own, and its estimate past the time limit expects that error (a
        KeyError here crashed eqsat on three real models: ZFNet-512, PP-OCR's recognizer, a U-Net)."""
        try:
            return self.types[value]
        except KeyError:
            raise GraphError(f"value {value!r} is not defined in the graph") from None

    def constant_values(self) -> frozenset[str]:
        return self._consts


class _Either:
    """Types of the input graph's values and of the e-classes' names, for a fusion checked with another producer."""

    def __init__(self, pricing: _Pricing, graph: Graph):
        self.pricing, self.graph = pricing, graph

    def type(self, value: str) -> TensorType:
        return self.graph.type(value) if value in self.graph.types else self.pricing.type(value)


class _Choice:
    """Names, types and costs of the e-classes an extraction chooses among."""

    def __init__(self, classes: EClasses, cost_model: CostModel, graph: Graph, roots: list[int]):
        self.classes, self.cost_model, self.graph = classes, cost_model, graph
        table = classes.egraph.table
        self.order = [c for c in classes.reachable(roots) if c in classes.nodes]
        self.enodes = [n for c in self.order for n in classes.nodes[c]]  # what the integer program indexes
        original: dict[int, str] = {}
        for name, handle in classes.egraph.handles.items():
            original.setdefault(classes.class_of_handle[handle], name)
        self.names: dict[int, str] = {}
        taken = set(graph.types)
        for c in self.order:
            name = original.get(c)
            if name is None:
                name = f"eq{classes.handle[c]}"
                while name in taken:
                    name += "_"
                taken.add(name)
            self.names[c] = name
        self.types: dict[str, TensorType] = {}
        for c in self.order:
            t = classes.type(c)
            if isinstance(t, tuple):
                for j, tj in enumerate(t):
                    self.types[self.output_name(c, j)] = tj
            else:
                self.types[self.names[c]] = t
        self.consts = self._constant_classes(table)
        self.pricing = _Pricing(self.types, graph, classes.egraph.weights, {self.names[c] for c in self.consts if not isinstance(classes.type(c), tuple)})
        self.fused = self._input_fusions()

    def _input_fusions(self) -> dict[tuple[str, tuple[int, ...]], list[tuple[str, tuple[int, ...]]]]:
        """The input's nodes the runtime runs inside their producer's kernel, as e-nodes: (op key, input classes) of
        each -> those of the e-nodes that would absorb it (the input's producer, and any other e-node of the
        producer's class that would: a rewrite's Conv in place of the input's).

        Priced alone, a BatchNormalization after a Conv costs what it costs run by itself; in the
        runtime it is folded into the Conv and costs nothing (``CostModel.absorbed``). Extraction
        that priced it alone folded every one of ResNet-50's by rule, a gain the whole graph's
        price did not confirm. So each such e-node gets its price back (the integer program's
        z variable) when the choice keeps an absorbing producer and gives its value no other reader.
        Inception-v3's pooling branches show why the other producers count: an average pool moved
        after its 1x1 convolution as a depthwise convolution keeps the BatchNormalization folded and
        the ReLU fused; moved as a pool, it does not.
        """
        from ...cost.model import Neighbourhood

        if not self.cost_model.absorbers:
            return {}
        around = Neighbourhood.of(self.graph)
        consts = frozenset(around.consts) | self.pricing.constant_values()  # the input's values' and the classes' names
        fused = {}
        for node in self.graph.nodes:
            if self.cost_model.absorbed(node, around):
                producers = [p for v in node.inputs if (p := around.producer(v)) is not None and p.op.name in self.cost_model.absorbers]
                if producers:
                    fused[self.signature(node)] = [self.signature(producers[0]), *self._other_absorbers(node, producers[0], consts)]
        return fused

    def _other_absorbers(self, node: Node, producer: Node, consts: frozenset[str]) -> list[tuple[str, tuple[int, ...]]]:
        """The other e-nodes of ``producer``'s class that would absorb ``node`` in its place."""
        from ...cost.model import Neighbourhood

        egraph = self.classes.egraph
        value = next(v for v in node.inputs if v in producer.outputs)
        own = self.signature(producer)
        found = []
        for q in self.classes.nodes.get(self.classes.class_of_handle[egraph.handles[value]], []):
            entry = egraph.table.keys.get(q.key) if q.kind == "app" else None
            if (entry is None or (q.key, q.children) == own or entry.outputs != 1 or entry.op.name not in self.cost_model.absorbers
                    or any(d not in self.names for d in q.children)):
                continue
            instead = Node(entry.op, entry.params, tuple(self.names[d] for d in q.children), (value,))
            there = Neighbourhood(self.graph, _Either(self.pricing, self.graph), consts, {value: instead}, {}, {id(producer)}, self.graph.outputs)
            if self.cost_model.absorbed(node, there):
                found.append((q.key, q.children))
        return found

    def signature(self, node: Node) -> tuple[str, tuple[int, ...]]:
        """The (op key, input classes) of the e-node an input graph's node is."""
        egraph, of = self.classes.egraph, self.classes.class_of_handle
        return egraph.table.key(node.op, node.params, len(node.outputs)), tuple(of[egraph.handles[v]] for v in node.inputs)

    @functools.cached_property
    def origins(self) -> dict[tuple[str, tuple[int, ...]], tuple[str, int]]:
        """(op key, input classes) -> (the rule whose target added that e-node, which rewrite); ("", 0) for the input's own."""
        of = self.classes.class_of_handle
        found = {self.signature(node): ("", 0) for node in self.graph.nodes}
        for key, inputs, rule, rewrite in self.classes.egraph.table.origins:
            found.setdefault((key, tuple(of[h] for h in inputs)), (rule, rewrite))
        return found

    def output_name(self, c: int, j: int) -> str:
        return f"{self.names[c]}.{j}"

    def _constant_classes(self, table) -> set[int]:
        """Classes computable from weights alone: a weight leaf, or an application of foldable ops on constant classes."""
        weights = set(self.classes.egraph.weights)
        const: set[int] = set()
        changed = True
        while changed:
            changed = False
            for c in self.order:
                if c in const:
                    continue
                for n in self.classes.nodes[c]:
                    if (n.kind == "leaf" and table.leaves[n.key] in weights) or (n.kind == "out" and n.children[0] in const) or (
                            n.kind == "app" and all(d in const for d in n.children) and self._folds(n)):
                        const.add(c)
                        changed = True
                        break
        return const

    def _folds(self, n: ENode) -> bool:
        return folds_when_constant(self.node(n), self.types.__getitem__)

    def node(self, n: ENode, inputs: tuple[str, ...] | None = None, label: str = "") -> Node:
        """The graph node of an application e-node, defining its class's names and reading ``inputs`` (by default
        its child classes' names)."""
        entry = self.classes.egraph.table.keys[n.key]
        outputs = ((self.names[n.cls],) if entry.outputs == 1 else tuple(self.output_name(n.cls, j) for j in range(entry.outputs)))
        return Node(entry.op, entry.params, inputs if inputs is not None else tuple(self.names[d] for d in n.children), outputs, label)

    def cost(self, n: ENode) -> float:
        """The e-node's price alone; infinite for one no choice can use.

        An e-node reading its own class (``mul(x, 1)`` in x's class) is never chosen, and is not
        measured either: as one node its output would be its input (ONNX Runtime measuring it failed
        with "value 'mul' is defined twice", on a GPT-2 export, when its key was not in the cache).
        """
        if n.cls in n.children:
            return math.inf
        if n.kind != "app" or n.cls in self.consts:
            return 0.0
        if any(d not in self.names for d in n.children) or any(isinstance(self.classes.type(d), tuple) for d in n.children):
            return math.inf
        return self.cost_model.node_cost(self.node(n), self.pricing, self.pricing.constant_values())


def extract(egraph: EGraph, cost_model: CostModel, seconds: float,
            priced: Callable[[Graph], tuple[float, int]] | None = None) -> Extraction:
    """The cheapest acyclic graph in the e-graph computing the original graph's outputs.

    ``priced``: a graph's whole price and how many of its nodes were estimated; given, the
    extraction's rewrites that the whole price says do not pay are undone (:func:`_undo_unpaid`),
    and those it passed over that the whole price says pay are taken (:func:`_take_passed_over`).
    """
    started = time.perf_counter()
    deadline = started + seconds
    classes = EClasses(egraph)
    graph = egraph.graph
    roots = list(dict.fromkeys(classes.class_of_handle[egraph.handles[o]] for o in graph.outputs))
    choice = _Choice(classes, cost_model, graph, roots)
    enodes = choice.enodes
    costs = [choice.cost(n) for n in enodes]
    # Every way of computing a weight from weights is free (export folds it), and the integer program took any: BERT's
    # scaled attention weights came out as products with a scaled identity, which export then folded with 0.3 GB more
    # memory than the scaling alone. A folded node costs a hair in the choice, so that of free ways the shortest wins.
    choosing = [_FOLDED if n.kind == "app" and n.cls in choice.consts and c == 0.0 else c for n, c in zip(enodes, costs)]
    index = {(n.key, n.children): i for i, n in enumerate(enodes) if n.kind == "app"}
    fusions = {index[a]: found for a, producers in choice.fused.items() if a in index and (found := [index[b] for b in producers if b in index])}
    greedy = _greedy(choice, enodes, choosing)
    solving = (deadline - time.perf_counter()) * (_SOLVING_SHARE if priced is not None else 1.0)
    chosen, method = _ilp(enodes, choosing, roots, greedy, fusions, max(solving, 0.5))
    if chosen is None:
        chosen, method = greedy, "greedy"
    built = _build(choice, chosen, roots)
    whole = None
    if priced is not None:
        refining = time.perf_counter()
        whole, undone = _undo_unpaid(choice, index, chosen, roots, built, priced, refining + (deadline - refining) / 2)
        if undone is not None:
            chosen, built = undone
            method += ", rewrites undone by whole price"
        whole, taken = _take_passed_over(choice, index, costs, greedy, roots, chosen, built, whole, priced, cost_model, deadline)
        if taken is not None:
            chosen, built = taken
            method += ", passed-over rewrites taken by whole price"
    graph, rewrites, used = built
    picked = {chosen[c] for c in used}
    total = sum(costs[i] for i in picked) - sum(costs[i] for i in _fused_in(enodes, picked, fusions))
    return Extraction(graph, total, method, time.perf_counter() - started, len(enodes), rewrites, whole)


_FOLDED = 1e-8  # seconds: a node export folds, in the choice only (ten times HiGHS's gap, a thousandth of the cheapest kernel)
_SOLVING_SHARE = 0.75  # of extraction's time, for the integer program when the choice is then refined by whole prices


def _undo_unpaid(choice: _Choice, index: dict, chosen: dict[int, int], roots: list[int], built: tuple[Graph, list[str], list[int]],
                 priced: Callable[[Graph], tuple[float, int]], deadline: float) -> tuple[tuple[float, int], tuple | None]:
    """The whole price of the best graph found, and the choice with each rewrite undone whose undoing lowers that price
    with its built graph (:func:`_build`); None for the latter when no undoing does.

    The integer program prices e-nodes one at a time; what the whole graph's price adds (a weight
    read cold after other weights evicted it, ``taso.cost.residency``) it cannot see. BERT's
    extraction merged the Q and K products of each layer: 2.5 ms less in the nodes' prices,
    2.7 ms more in cold reads of the wider weights. A rewrite is undone as a whole: every class
    whose chosen e-node it added goes back to the input's e-node, one rewrite at a time, each
    kept only when the whole price, measured on every node, drops.
    """
    enodes = choice.enodes
    original: dict[int, int] = {}  # class -> the input's e-node in it
    for node in choice.graph.nodes:
        i = index.get(choice.signature(node))
        if i is not None:
            original[enodes[i].cls] = i
    for i, n in enumerate(enodes):  # the input's weights and inputs, and the outputs of its multi-output nodes
        if n.kind == "leaf" or (n.kind == "out" and n.children[0] in original):
            original.setdefault(n.cls, i)
    groups: dict[object, list[int]] = {}
    for c, i in chosen.items():
        if c not in original or original[c] == i:
            continue
        n = enodes[i]
        made = enodes[chosen[n.children[0]]] if n.kind == "out" and n.children[0] in chosen else n
        _, rewrite = choice.origins.get((made.key, made.children), ("", 0))
        groups.setdefault(rewrite or ("class", c), []).append(c)
    best, whole = None, priced(built[0])
    current = chosen
    for group in groups.values():
        if time.perf_counter() > deadline:
            break
        trial = {**original, **current, **{c: original[c] for c in group}}
        try:
            trial_built = _build(choice, trial, roots)
        except RuntimeError:  # the input's e-node reads a class now computed from it
            continue
        trial_whole = priced(trial_built[0])
        if trial_whole[0] < whole[0] and not trial_whole[1]:
            best, whole, current = (trial, trial_built), trial_whole, trial
    return whole, best


def _take_passed_over(choice: _Choice, index: dict, costs: list[float], greedy: dict[int, int], roots: list[int], chosen: dict[int, int],
                      built: tuple[Graph, list[str], list[int]], whole: tuple[float, int], priced: Callable[[Graph], tuple[float, int]],
                      cost_model: CostModel, deadline: float) -> tuple[tuple[float, int], tuple | None]:
    """The whole price of the best graph found, and the choice with each rewrite the integer program passed over taken
    where taking it lowers that price with its built graph; None for the latter when taking none does.

    The mirror of :func:`_undo_unpaid`: a rewrite dearer node by node can pay in the whole price, where the cost model
    charges a node more than its price alone (:meth:`CostModel.surcharges`: a weight read cold). On BERT, eight products
    ``x @ transpose(w)`` rewritten as ``transpose(w @ transpose(x))`` cost 329 us more each in their nodes' prices and
    82 us less each priced whole: the weight's cold read costs 442 us less as the left operand. The backtracking
    search, which prices whole, took them; the integer program cannot see them.

    Building and pricing a whole graph takes BERT 10 ms, and its e-graph holds about 2,000 rewrites, so each is
    screened first: taken into the choice (its targets chosen, the classes they need and nothing computes yet filled
    by the greedy choice), its nodes' price may rise by less than the surcharges on the nodes it replaces, or it
    cannot pay. Rewrites of one rule at sites priced alike are alike (a transformer's layers): the first one tried
    speaks for the others when it does not pay.
    """
    kinds = _passed_over(choice, index, costs, greedy, chosen, set(built[2]), _class_surcharges(choice, built[0], cost_model))
    best, current, used = None, chosen, set(built[2])
    for sites in kinds:
        for k, changed in enumerate(sites):
            if time.perf_counter() > deadline:
                return whole, best
            trial = {**greedy, **{c: current[c] for c in used}, **changed}
            try:
                trial_built = _build(choice, trial, roots)
            except RuntimeError:  # taking it closes a cycle
                trial_built = None
            trial_whole = priced(trial_built[0]) if trial_built is not None else None
            if trial_whole is not None and trial_whole[0] < whole[0] and not trial_whole[1]:
                best, whole, current, used = (trial, trial_built), trial_whole, trial, set(trial_built[2])
            elif k == 0:
                break
    return whole, best


def _class_surcharges(choice: _Choice, graph: Graph, cost_model: CostModel) -> dict[int, float]:
    """The cost model's surcharges on a built graph's nodes (:meth:`CostModel.surcharges`), by the class each computes."""
    by_name = {name: c for c, name in choice.names.items()}
    by_name.update({choice.output_name(c, 0): c for c in choice.order if isinstance(choice.classes.type(c), tuple)})
    charged = cost_model.surcharges(graph)
    found: dict[int, float] = {}
    for node in graph.nodes:
        c = by_name.get(node.outputs[0])
        if id(node) in charged and c is not None:
            found[c] = found.get(c, 0.0) + charged[id(node)]
    return found


def _passed_over(choice: _Choice, index: dict, costs: list[float], greedy: dict[int, int], chosen: dict[int, int], used: set[int],
                 surcharges: dict[int, float]) -> list[list[dict[int, int]]]:
    """The rewrites in the e-graph a choice does not hold that might pay priced whole, each as the picks taking it
    changes (class -> e-node), grouped by kind (rule, and the rise in the nodes' prices and the surcharges at stake),
    the kinds most promising first."""
    enodes, of = choice.enodes, choice.classes.class_of_handle
    outs: dict[int, list[int]] = {}  # a tuple's class -> the e-nodes reading its outputs
    for i, n in enumerate(enodes):
        if n.kind == "out":
            outs.setdefault(n.children[0], []).append(i)
    targets: dict[int, tuple[str, list[int]]] = {}
    for key, inputs, rule, rewrite in choice.classes.egraph.table.origins:
        i = index.get((key, tuple(of[h] for h in inputs)))
        if i is not None:
            targets.setdefault(rewrite, (rule, []))[1].append(i)
    kinds: dict[tuple[str, int, int], list[dict[int, int]]] = {}
    seen: set[frozenset] = set()
    for rule, members in targets.values():
        picks = {enodes[i].cls: i for i in members}
        picks.update({enodes[o].cls: o for i in members for o in outs.get(enodes[i].cls, ())})
        changed = {c: i for c, i in picks.items() if chosen.get(c) != i or c not in used}
        signature = frozenset(changed.items())
        if not changed or signature in seen:
            continue
        seen.add(signature)
        rise = _price_rise(enodes, costs, greedy, chosen, used, changed)
        at_stake = sum(surcharges.get(c, 0.0) for c in changed if c in used)
        if rise is not None and rise < at_stake:
            kinds.setdefault((rule, round(rise * 1e8), round(at_stake * 1e8)), []).append(changed)
    return [kinds[kind] for kind in sorted(kinds, key=lambda kind: kind[1] - kind[2])]


def _price_rise(enodes: list[ENode], costs: list[float], greedy: dict[int, int], chosen: dict[int, int], used: set[int],
                changed: dict[int, int]) -> float | None:
    """What taking these picks adds to the nodes' prices: the new e-nodes and the greedy choice of each class they need
    that nothing computes yet, less the e-nodes they replace (what no longer has a reader is not counted: an upper
    bound). None when a class they need has no usable e-node."""
    rise = sum(costs[i] for i in changed.values()) - sum(costs[chosen[c]] for c in changed if c in used)
    stack = [d for i in changed.values() for d in enodes[i].children]
    counted = set(changed)
    while stack:
        c = stack.pop()
        if c in counted or c in used:
            continue
        counted.add(c)
        pick = greedy.get(c)
        if pick is None:
            return None
        rise += costs[pick]
        stack.extend(enodes[pick].children)
    return rise


def _greedy(choice: _Choice, enodes: list[ENode], costs: list[float]) -> dict[int, int]:
    """Each class's e-node of least tree cost (children's best costs added): egg's extractor.

    Knuth's generalization of Dijkstra's algorithm: classes are settled cheapest first, and an
    e-node is priced once, when the last of its children is settled (costs are not negative, so a
    settled class's cost is final). Sweeping every e-node until nothing changed took 2.3 s of
    NASNet-A's 2.6 s extraction (4,602 e-nodes); a worklist re-pricing the readers of every class
    whose cost dropped took 2.8 s on NasRNN.
    """
    import heapq

    readers: dict[int, list[int]] = {}
    waiting: dict[int, int] = {}  # e-node -> its children not settled yet
    heap: list[tuple[float, int]] = []
    for i, n in enumerate(enodes):
        if math.isinf(costs[i]):
            continue
        children = set(n.children)
        waiting[i] = len(children)
        for d in children:
            readers.setdefault(d, []).append(i)
        if not children:
            heap.append((costs[i], i))
    heapq.heapify(heap)
    best: dict[int, float] = {}
    pick: dict[int, int] = {}
    while heap:
        total, i = heapq.heappop(heap)
        c = enodes[i].cls
        if c in best:
            continue
        best[c], pick[c] = total, i
        for r in readers.get(c, ()):
            waiting[r] -= 1
            if waiting[r] == 0 and enodes[r].cls not in best:
                heapq.heappush(heap, (costs[r] + sum(best[d] for d in enodes[r].children), r))
    return pick


def _ilp(enodes: list[ENode], costs: list[float], roots: list[int], start: dict[int, int], fusions: dict[int, list[int]],
         seconds: float) -> tuple[dict[int, int] | None, str]:
    """The exact choice by HiGHS (class -> e-node index), or None when it found no acyclic one in ``seconds``.

    Acyclicity by cuts: each cycle of two or three classes in the e-graph is cut off up front (at
    most k-1 of the k classes on it choose an e-node reading the next one; a split of a concat
    makes three: x, the concat, the split's output joined with x); each longer cycle a choice
    closes is cut the same way and the program solved again, until the choice has no cycle.
    Order variables on every class of the e-graph's cycles (t_c >= t_d + 1 - big * (1 - x_n))
    made the relaxation weak: Inception-v3's and BERT's programs ran out of time with them
    (``benchmarks/bench_extract.py``). The greedy choice is the starting solution whenever it is
    acyclic.
    """
    deadline = time.perf_counter() + seconds
    program = _Program(enodes, costs, roots, fusions)
    short = _short_cycles(enodes, program.usable)
    for cycle in short:
        program.forbid(cycle)
    cuts = len(short)
    while True:
        program.highs.setOptionValue("time_limit", max(deadline - time.perf_counter(), 0.05))
        program.start_from(start, roots)
        chosen, exact = program.solve()
        cut = f" with {cuts} cycle cut{'s' if cuts != 1 else ''}" if cuts else ""
        if chosen is None:
            return None, f"ilp{cut} (time limit)"
        cycles = _cycles(enodes, chosen, roots)
        if not cycles:
            return chosen, f"ilp{cut}" if exact else f"ilp{cut} (time limit)"
        if not exact or time.perf_counter() >= deadline:
            return None, f"ilp{cut} (time limit)"
        for cycle in cycles:
            program.forbid(cycle)
            cuts += 1


class _Program:
    """The extraction integer program: x_n per usable e-node, at most one per class, the roots chosen, a chosen e-node's
    children covered; z_n per fused e-node (its price back where the runtime fuses it, see ``_Choice._input_fusions``);
    and the cycle cuts :meth:`forbid` adds."""

    def __init__(self, enodes: list[ENode], costs: list[float], roots: list[int], fusions: dict[int, list[int]]):
        import highspy

        self.enodes = enodes
        self.usable = [i for i, c in enumerate(costs) if not math.isinf(c) and enodes[i].cls not in enodes[i].children]
        self.x = {i: k for k, i in enumerate(self.usable)}
        self.by_class: dict[int, list[int]] = {}
        self.readers: dict[int, list[int]] = {}  # class -> the usable e-nodes reading it
        for i in self.usable:
            self.by_class.setdefault(enodes[i].cls, []).append(i)
            for d in dict.fromkeys(enodes[i].children):
                self.readers.setdefault(d, []).append(i)
        self.fusions = {i: found for i, producers in fusions.items() if i in self.x and (found := [p for p in producers if p in self.x])}
        self.z = {i: len(self.usable) + k for k, i in enumerate(self.fusions)}
        rows = _Rows()
        inf = highspy.kHighsInf
        for r in roots:
            rows.add([(self.x[i], 1.0) for i in self.by_class.get(r, [])], 1.0, inf)
        for members in self.by_class.values():
            rows.add([(self.x[i], 1.0) for i in members], -inf, 1.0)
        for i in self.usable:
            for d in dict.fromkeys(enodes[i].children):
                rows.add([(self.x[m], 1.0) for m in self.by_class.get(d, [])] + [(self.x[i], -1.0)], 0.0, inf)
        for i, producers in self.fusions.items():
            # z_i <= x_i; z_i <= the sum of x_p over its absorbing producers, one class's (or z_p, for a producer itself
            # fused); no other reader of their class chosen
            rows.add([(self.z[i], 1.0), (self.x[i], -1.0)], -inf, 0.0)
            rows.add([(self.z[i], 1.0)] + [(self.z[p] if p in self.z else self.x[p], -1.0) for p in producers], -inf, 0.0)
            for m in self.readers.get(enodes[producers[0]].cls, []):
                if m != i:
                    rows.add([(self.z[i], 1.0), (self.x[m], 1.0)], -inf, 1.0)
        self.highs = _quiet_highs()
        self.highs.setOptionValue("output_flag", False)
        self.highs.setOptionValue("threads", 1)
        # Prices in microseconds, and optimal to a nanosecond: in seconds a whole graph of small nodes is
        # within HiGHS's default absolute gap (1e-6) of any bound, and the solver stopped 3% from the optimum.
        self.highs.setOptionValue("mip_abs_gap", 1e-3)
        n, k = len(self.usable), len(self.fusions)
        micro = [c * 1e6 for c in costs]
        self.objective = np.array([micro[i] for i in self.usable] + [-micro[i] for i in self.fusions])
        self.highs.passModel(_lp(self.objective.tolist(), [1.0] * (n + k), rows, [highspy.HighsVarType.kInteger] * n + [highspy.HighsVarType.kContinuous] * k))

    def start_from(self, pick: dict[int, int], roots: list[int]) -> None:
        """A choice (class -> e-node) as the solver's starting solution, when it is acyclic and every pick usable."""
        import highspy

        def children(c: int) -> tuple[int, ...]:
            if pick.get(c) not in self.x:
                raise ValueError("no usable pick")
            return self.enodes[pick[c]].children

        try:
            order = _post_order(roots, children)  # acyclic: then every cycle cut holds too
        except ValueError:
            return
        values = [0.0] * self.highs.getNumCol()
        for c in order:
            values[self.x[pick[c]]] = 1.0
        for i in _fused_in(self.enodes, {pick[c] for c in order}, self.fusions):
            values[self.z[i]] = 1.0
        solution = highspy.HighsSolution()
        solution.col_value = values
        solution.value_valid = True
        self.highs.setSolution(solution)

    def solve(self) -> tuple[dict[int, int] | None, bool]:
        import highspy

        self.highs.run()
        solution = self.highs.getSolution()
        if solution.value_valid and not self._consistent(solution.col_value):
            # NOTE: HiGHS 1.16 given a starting solution once reported an optimum of 4.42 and returned the
            # starting solution itself (6.73; the optimum was 6.73 but for a fusion: 6.7296). Solved again
            # without the start it is right: a returned solution is checked against the reported objective.
            self.highs.clearSolver()
            self.highs.run()
            solution = self.highs.getSolution()
        if not solution.value_valid or not self._consistent(solution.col_value):
            return None, False
        values = solution.col_value
        chosen = {}
        for c, members in self.by_class.items():
            picked = [i for i in members if values[self.x[i]] > 0.5]
            if picked:
                chosen[c] = picked[0]
        return chosen, self.highs.getModelStatus() == highspy.HighsModelStatus.kOptimal

    def _consistent(self, values) -> bool:
        """Whether a returned solution's objective is the one the solver reports (within its gaps)."""
        objective = float(np.dot(self.objective, values))
        reported = self.highs.getInfo().objective_function_value
        return abs(objective - reported) <= 1e-6 * max(1.0, abs(reported)) + 1e-3

    def forbid(self, cycle: list[int]) -> None:
        """The cut for a cycle of classes c_1 -> .. -> c_k -> c_1 (c_i reads c_i+1): at most k-1 of them choose an
        e-node reading the next. With one e-node per class, k of them would be the cycle itself."""
        import highspy

        cols = [self.x[m] for j, c in enumerate(cycle) for m in self.by_class.get(c, [])
                if cycle[(j + 1) % len(cycle)] in self.enodes[m].children]
        self.highs.addRow(-highspy.kHighsInf, float(len(cycle) - 1), len(cols), np.array(cols, dtype=np.int32), np.ones(len(cols)))


def _lp(costs: list[float], upper: list[float], rows: _Rows, integrality):
    """A HiGHS model of these columns (lower bounds 0) and rows."""
    import highspy

    lp = highspy.HighsLp()
    lp.num_col_ = len(costs)
    lp.num_row_ = len(rows.lower)
    lp.col_cost_ = np.array(costs, dtype=np.float64)
    lp.col_lower_ = np.zeros(len(costs))
    lp.col_upper_ = np.array(upper, dtype=np.float64)
    lp.row_lower_ = np.array(rows.lower, dtype=np.float64)
    lp.row_upper_ = np.array(rows.upper, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(rows.start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(rows.index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(rows.value, dtype=np.float64)
    lp.integrality_ = integrality
    return lp


class _Rows:
    """A sparse matrix built row by row (HiGHS's row-wise format), with each row's bounds."""

    def __init__(self):
        self.start, self.index, self.value, self.lower, self.upper = [0], [], [], [], []

    def add(self, entries, lower: float, upper: float) -> None:
        for col, val in entries:
            self.index.append(col)
            self.value.append(val)
        self.start.append(len(self.index))
        self.lower.append(lower)
        self.upper.append(upper)


def _cycles(enodes: list[ENode], chosen: dict[int, int], roots: list[int]) -> list[list[int]]:
    """Cycles of the classes a choice needs (each as c_1 -> .. -> c_k, c_i reading c_i+1): a few per strongly connected
    component, none when the choice is acyclic."""
    import itertools

    import networkx as nx

    g = nx.DiGraph()
    stack, seen = list(roots), set(roots)
    while stack:
        c = stack.pop()
        g.add_node(c)
        for d in enodes[chosen[c]].children if c in chosen else ():
            g.add_edge(c, d)
            if d not in seen:
                seen.add(d)
                stack.append(d)
    found = []
    for component in nx.strongly_connected_components(g):
        if len(component) > 1:
            found += itertools.islice(nx.simple_cycles(g.subgraph(component)), _CUTS_PER_COMPONENT)
    return found


_CUTS_PER_COMPONENT = 8


def _short_cycles(enodes: list[ENode], usable: list[int]) -> list[list[int]]:
    """The cycles of two and three classes in the e-graph's class graph (c -> d when an e-node of c reads d), each once."""
    reads: dict[int, set[int]] = {}
    for i in usable:
        reads.setdefault(enodes[i].cls, set()).update(enodes[i].children)
    found = []
    for c, ds in reads.items():
        for d in ds:
            if d <= c:
                continue  # each cycle from its smallest class
            back = reads.get(d, ())
            if c in back:
                found.append([c, d])
            found += [[c, d, e] for e in back if e > c and c in reads.get(e, ())]
    return found


def _fused_in(enodes: list[ENode], picked: set[int], fusions: dict[int, list[int]]) -> set[int]:
    """The fused e-nodes that a choice (the e-nodes picked) runs inside their producer: an absorbing producer picked
    (or, itself fused, run so) and no other picked e-node reading its class."""
    readers: dict[int, list[int]] = {}
    for m in picked:
        for d in set(enodes[m].children):
            readers.setdefault(d, []).append(m)
    found: dict[int, bool] = {}

    def fused(i: int) -> bool:
        if i not in found:
            found[i] = False  # while its producers are looked at
            producers = fusions[i]
            found[i] = (i in picked and any(fused(p) if p in fusions else p in picked for p in producers)
                        and not any(m != i for m in readers.get(enodes[producers[0]].cls, [])))
        return found[i]

    return {i for i in fusions if fused(i)}


def _post_order(roots: list[int], children) -> list[int]:
    """The classes the roots need, each after the classes it reads (``children(c)``: the classes c's chosen e-node reads).

    Raises:
        ValueError: the choice reads a class it is computed from (a cycle).
    """
    order: list[int] = []
    done: set[int] = set()
    on_path: set[int] = set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            c, expanded = stack.pop()
            if expanded:
                on_path.discard(c)
                done.add(c)
                order.append(c)
                continue
            if c in done:
                continue
            if c in on_path:
                raise ValueError("the choice has a cycle")
            on_path.add(c)
            stack.append((c, True))
            stack.extend((d, False) for d in reversed(children(c)) if d not in done)
    return order


def _quiet_highs():
    """A HiGHS instance; the banner the library prints on first use goes to /dev/null, not to taso's output."""
    import highspy

    if not _BANNER_SHOWN:
        import os
        import sys

        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 1)
                h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _BANNER_SHOWN.append(True)
        return h
    return highspy.Highs()


_BANNER_SHOWN: list[bool] = []


def _build(choice: _Choice, chosen: dict[int, int], roots: list[int]) -> tuple[Graph, list[str], list[int]]:
    """The graph of the chosen e-nodes that the outputs need, with the original's inputs, weights and interface."""
    classes, graph, all_nodes = choice.classes, choice.graph, choice.enodes
    nodes: list[Node] = []
    rewrites: set[tuple[str, int]] = set()
    name_of = dict(choice.names)
    try:
        emitted = _post_order(roots, lambda c: all_nodes[chosen[c]].children)
    except ValueError:
        raise RuntimeError("the extracted choice has a cycle") from None
    for c in emitted:
        n = all_nodes[chosen[c]]
        if n.kind == "leaf":
            name_of[c] = classes.egraph.table.leaves[n.key]
        elif n.kind == "out":
            name_of[c] = choice.output_name(n.children[0], n.index)
        else:
            nodes.append(choice.node(n, tuple(name_of[d] for d in n.children), f"eqsat/{len(nodes)}"))
            rewrites.add(choice.origins.get((n.key, n.children), ("", 0)))

    outputs = tuple(name_of[classes.class_of_handle[classes.egraph.handles[o]]] for o in graph.outputs)
    weights = classes.egraph.weights
    types = {**{v: graph.type(v) for v in graph.inputs}, **{w: graph.type(w) if w in graph.weights else TensorType.of(a) for w, a in weights.items()}}
    for node in nodes:
        for o in node.outputs:
            types[o] = choice.types[o]
    built = Graph(graph.inputs, weights, nodes, outputs, types, graph.meta).pruned()
    return built, [rule for rule, _ in sorted(rewrites, key=lambda r: r[1]) if rule], emitted
