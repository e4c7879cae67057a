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

from ...cost import CostModel
from ...errors import GraphError
from ...ir import Graph, Node, TensorType, folds_when_constant
from .ilp import ENode, exact_choice, fused_in, post_order
from .saturate import EGraph, tensor_rows
from .terms import LEAF

__all__ = ["ENode", "EClasses", "Extraction", "extract"]


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
        fixed = self._fixed_price(n)
        if fixed is not None:
            return fixed
        return self.cost_model.node_cost(self.node(n), self.pricing, self.pricing.constant_values())

    def _fixed_price(self, n: ENode) -> float | None:
        """What :meth:`cost` gives ``n`` without the cost model (infinite, or zero), or None where the model prices it."""
        if n.cls in n.children:
            return math.inf
        if n.kind != "app" or n.cls in self.consts:
            return 0.0
        if any(d not in self.names for d in n.children) or any(isinstance(self.classes.type(d), tuple) for d in n.children):
            return math.inf
        return None

    def measure_ahead(self) -> None:
        """Measures the e-nodes the choice prices in bulk, before they are priced one by one (:meth:`CostModel.measure_ahead`)."""
        consts = self.pricing.constant_values()
        self.cost_model.measure_ahead((self.node(n), self.pricing, consts) for n in self.enodes if self._fixed_price(n) is None)


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
    choice.measure_ahead()
    costs = [choice.cost(n) for n in enodes]
    # Every way of computing a weight from weights is free (export folds it), and the integer program took any: BERT's
    # scaled attention weights came out as products with a scaled identity, which export then folded with 0.3 GB more
    # memory than the scaling alone. A folded node costs a hair in the choice, so that of free ways the shortest wins.
    choosing = [_FOLDED if n.kind == "app" and n.cls in choice.consts and c == 0.0 else c for n, c in zip(enodes, costs)]
    index = {(n.key, n.children): i for i, n in enumerate(enodes) if n.kind == "app"}
    fusions = {index[a]: found for a, producers in choice.fused.items() if a in index and (found := [index[b] for b in producers if b in index])}
    greedy = _greedy(choice, enodes, choosing)
    solving = (deadline - time.perf_counter()) * (_SOLVING_SHARE if priced is not None else 1.0)
    chosen, method = exact_choice(enodes, choosing, roots, greedy, fusions, max(solving, 0.5))
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
    total = sum(costs[i] for i in picked) - sum(costs[i] for i in fused_in(enodes, picked, fusions))
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






def _build(choice: _Choice, chosen: dict[int, int], roots: list[int]) -> tuple[Graph, list[str], list[int]]:
    """The graph of the chosen e-nodes that the outputs need, with the original's inputs, weights and interface."""
    classes, graph, all_nodes = choice.classes, choice.graph, choice.enodes
    nodes: list[Node] = []
    rewrites: set[tuple[str, int]] = set()
    name_of = dict(choice.names)
    try:
        emitted = post_order(roots, lambda c: all_nodes[chosen[c]].children)
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
