"""The rewrite engine: find a rule's source pattern in a graph and replace it by the target.

Matching is anchored: candidates for the first pattern node come from the graph's per-op
index, and every further pattern node is reached through an edge (a value it shares with
an already-matched node), so a match costs a few dictionary lookups, never a whole-graph
isomorphism. Commutative binary ops are matched in both operand orders.

A match is applied only when it is safe: interior values of the pattern have no users
outside it and are not graph outputs; the target type-checks on the matched shapes; every
mapped output keeps its type; and no cycle appears. The target's mapped outputs reuse the
source values' names, so consumers outside the pattern stay wired untouched.

A rule reads a constant by value through a fill node in its source (the 0.5 and the 1 of a
GELU): it matches a one-element weight of that value, or a fill node of it, and is never
removed, since other nodes of the file may read the same constant.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from ..errors import GraphError, TasoError
from ..ir import Graph, Node, Params, TensorType
from ..ir.dims import concrete, symbols_of
from ..ops import COMMUTATIVE, get
from ..ops.constants import as_fill
from ..rules import Rule, RuleNode, resolve_expr

__all__ = ["CompiledRule", "Match", "Plan", "find_matches", "params_fit", "decline_reason", "plan_match", "plan_or_reason", "apply_match", "plans", "rewrites"]


@dataclass(frozen=True)
class _PatternNode:
    index: int
    op_name: str
    literal: Params | None  # exact params to compare, or None when some are shape expressions
    fixed: tuple[tuple[str, object], ...]  # literal params that must be equal (when literal is None)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


class CompiledRule:
    """A rule prepared for matching: ops resolved, params split into literal and shape-dependent, a matching order."""

    def __init__(self, rule: Rule):
        self.rule = rule
        self.rule_id = rule.id
        self.label = rule.name or self.rule_id  # how reports name the rule
        self.variables = frozenset(i.name for i in rule.inputs)
        # The proof assumed each input's rank (and element kind): a match elsewhere is outside it.
        self.input_kinds = tuple((i.name, i.type.rank, i.type.element_kind) for i in rule.inputs)
        self.kind_of = {name: (rank, kind) for name, rank, kind in self.input_kinds}
        shape_params: dict[int, set[str]] = {}
        for p in rule.params:
            if p["side"] == "source":
                shape_params.setdefault(int(p["node"]), set()).add(p["param"])
        self.source_exprs = [(int(p["node"]), p["param"], p["value"]) for p in rule.params if p["side"] == "source"]
        self.target_exprs = [(int(p["node"]), p["param"], p["value"]) for p in rule.params if p["side"] == "target"]
        nodes = []
        for i, rn in enumerate(rule.source):
            full = _node_params(rn)
            if i in shape_params:
                fixed = tuple((k, v) for k, v in full.items() if k not in shape_params[i])
                nodes.append(_PatternNode(i, rn.op, None, fixed, rn.inputs, rn.outputs))
            else:
                nodes.append(_PatternNode(i, rn.op, full, (), rn.inputs, rn.outputs))
        self.nodes = nodes
        self.producer = {v: n for n in nodes for v in n.outputs}
        self.order = self._matching_order()
        self.mapped = {s for s, _ in rule.outputs}
        # Source constants (see the module's docstring): matched by value after the node that reads them.
        self.constants = frozenset(n.index for n in nodes if n.op_name == "fill" and not n.inputs and n.literal is not None
                                   and not set(n.outputs) & self.mapped)
        self.constant_values = frozenset(v for i in self.constants for v in nodes[i].outputs)
        self.rank_free = _rank_free_constants(rule, nodes, self.constants)
        self.target_ops = [get(rn.op) for rn in rule.target]
        self.target_params = [_node_params(rn) for rn in rule.target]
        self.interior = {v for rn in rule.source for v in rn.outputs} - self.constant_values
        self.anchor_op = self.nodes[self.order[0]].op_name
        # Where the anchor reads a value another pattern node computes: (input position, that node's op).
        anchor = self.nodes[self.order[0]]
        self.anchor_feeds = tuple((i, self.producer[v].op_name) for i, v in enumerate(anchor.inputs)
                                  if v in self.producer and v not in self.constant_values)
        # What a graph must contain for a match to be possible: checked in O(pattern size).
        self.requirements = tuple({(n.op_name, n.literal) for n in nodes if n.index not in self.constants})
        self.connected = _walk(nodes, 0)[1]

    def may_match(self, graph: Graph) -> bool:
        """A cheap necessary condition: every pattern op (with its exact params, when literal) occurs in the graph."""
        index = graph.index
        present = index.op_params
        return all((op, params) in present if params is not None else bool(index.nodes_of(op)) for op, params in self.requirements)

    def order_from(self, start: int) -> list[int]:
        """A matching order that begins with pattern node ``start`` (for matching seeded at a graph node)."""
        cache = self.__dict__.setdefault("_orders", {})
        if start not in cache:
            cache[start] = self._matching_order(start)
        return cache[start]

    def _matching_order(self, start: int | None = None) -> list[int]:
        """Pattern nodes ordered so that each one after the first shares a value with an earlier one."""
        if start is None:
            # Anchor on a node producing a mapped output: the pattern's root(s) are the rarest to match.
            mapped = {s for s, _ in self.rule.outputs}
            start = next((n.index for n in reversed(self.nodes) if set(n.outputs) & mapped), len(self.nodes) - 1)
        return _walk(self.nodes, start)[0]


def _walk(nodes: Sequence[_PatternNode], start: int) -> tuple[list[int], bool]:
    """Pattern nodes from ``start``, each next one sharing a value (an input included) with those before; and
    whether that reached them all.

    When it does not, the pattern is not one piece: a source of two outputs that share
    nothing (``[sigmoid(x1), sigmoid(x2)]``) matches every pair of such nodes in a graph,
    quadratically many places, none of them related. The walk then goes on from the next
    node not reached, so that every node still has a place in the matching order.
    """
    order, seen_values, one_piece = [start], set(nodes[start].inputs) | set(nodes[start].outputs), True
    while len(order) < len(nodes):
        for n in nodes:
            if n.index not in order and (set(n.inputs) | set(n.outputs)) & seen_values:
                break
        else:
            n = next(n for n in nodes if n.index not in order)  # another piece
            one_piece = False
        order.append(n.index)
        seen_values |= set(n.inputs) | set(n.outputs)
    return order, one_piece


# Validated parameters by (op, given params): thousands of rule nodes share a few hundred
# parameter sets, and validating each one again dominated compiling a library.
_PARAMS: dict[tuple, Params] = {}


def _node_params(rn: RuleNode) -> Params:
    """``make_params`` for a rule node, memoized (Params are immutable, so sharing them is safe)."""
    try:
        key = (rn.op, tuple(sorted(rn.params.items())))
        params = _PARAMS.get(key)
    except TypeError:  # an unhashable parameter value: validate it every time
        return get(rn.op).make_params(**rn.params)
    if params is None:
        params = _PARAMS[key] = get(rn.op).make_params(**rn.params)
    return params


@dataclass(frozen=True)
class Match:
    """A place where a rule's source occurs: graph nodes per pattern node and the value binding."""

    rule: CompiledRule
    nodes: tuple[Node, ...]  # in rule.source order
    values: dict  # rule value name (inputs and source values) -> graph value name


def _operand_orders(p: _PatternNode) -> Sequence[tuple[str, ...]]:
    if p.op_name in COMMUTATIVE and len(p.inputs) == 2 and p.inputs[0] != p.inputs[1]:
        return (p.inputs, (p.inputs[1], p.inputs[0]))
    return (p.inputs,)


def params_fit(p: _PatternNode, node: Node) -> bool:
    """The node's parameters are the pattern node's (its literal ones, when some are shape expressions)."""
    if p.literal is not None:
        return node.params == p.literal
    return all(node.params.get(k) == v for k, v in p.fixed)


def constant_node(graph: Graph, value: str, p: _PatternNode, rank_free: bool = False) -> Node | None:
    """The node that plays source constant ``p`` where the match reads ``value``: the graph's fill node of the same
    parameters, or a stand-in for a one-element weight of the same value; None when ``value`` is another value.
    ``rank_free`` (:func:`_rank_free_constants`): a weight of shape [1] plays a scalar constant too."""
    producer = graph.producer(value)
    if producer is not None:
        return producer if producer.op.name == "fill" and producer.params == p.literal else None
    weight = graph.weights.get(value)
    if weight is not None and rank_free and weight.shape == (1,):
        weight = weight.reshape(())
    if weight is None or as_fill(weight) != p.literal:
        return None
    return Node(get("fill"), p.literal, (), (value,), "constant")


_BROADCASTING = frozenset({"scalar_mul", "add", "sub", "mul", "div", "pow", "where"})


def _rank_free_constants(rule: Rule, nodes: Sequence[_PatternNode], constants: frozenset[int]) -> frozenset[int]:
    """The scalar source constants that a one-element weight of shape [1] may play (exporters write 0.5 either way):
    each is read only by broadcasting element-wise ops whose result has rank 1 or more at the rule's shapes, so a
    [1] in its place changes no value and no type (a match binds inputs of the ranks the rule's have)."""
    if not constants:
        return frozenset()
    try:
        types = rule.side_graph("source").types
    except TasoError:
        return frozenset()
    free = set()
    for index in constants:
        value, literal = nodes[index].outputs[0], nodes[index].literal
        users = [n for n in nodes if value in n.inputs]
        if literal["shape"] == () and users and all(
                n.op_name in _BROADCASTING and all(types[o].rank >= 1 for o in n.outputs) for n in users):
            free.add(index)
    return frozenset(free)


def _candidates(graph: Graph, crule: CompiledRule, p: _PatternNode, values: dict) -> list[Node]:
    """Graph nodes that could play pattern node ``p`` given the values bound so far."""
    for position, name in enumerate(p.outputs):
        if name in values:  # a later-matched consumer fixed what p must produce
            producer = graph.producer(values[name])
            # a producer of another op may have fewer outputs than p (a sigmoid where p is a split's second part)
            fits = producer is not None and position < len(producer.outputs) and producer.outputs[position] == values[name]
            return [producer] if fits else []
    for name in p.inputs:
        if name in values:
            return [user for user, _ in graph.uses(values[name]) if user.op.name == p.op_name]
    return graph.index.nodes_of(p.op_name)


def _anchors(graph: Graph, crule: CompiledRule, p: _PatternNode) -> list[Node]:
    """The nodes the first pattern node may be: those of its op, narrowed, when it reads another pattern node's output,
    to the nodes whose input there (either input of a commutative op) that op computes. Same order as the op index."""
    nodes = graph.index.nodes_of(p.op_name)
    if not crule.anchor_feeds:
        return nodes
    position, producer_op = crule.anchor_feeds[0]
    fed = graph.index.fed_by(p.op_name, position, producer_op)
    if len(_operand_orders(p)) > 1:
        fed = fed | graph.index.fed_by(p.op_name, 1 - position, producer_op)
    return [n for n in nodes if id(n) in fed]


def find_matches(graph: Graph, crule: CompiledRule, seed: tuple[int, Node] | None = None, structural: bool = False,
                 apart: Mapping[int, tuple[int, int]] | None = None) -> Iterator[Match]:
    """Every match of the rule's source in the graph (each set of nodes once per binding).

    With ``seed = (pattern index, node)``, only the matches where that pattern node is that
    graph node: how the search finds the matches a rewrite created without rematching all.
    With ``structural``, also the matches :func:`decline_reason` turns down (to explain them).
    With ``apart`` (id(node) -> (group, member)), no match takes two different members of one
    group: the search leaves those to the group's own merge (:mod:`taso.search.groups`), and cutting
    them while matching, not after, is what keeps matching linear in a group's size.
    """
    order = crule.order if seed is None else crule.order_from(seed[0])
    chosen: dict[int, Node] = {}
    members: dict[int, tuple[int, int]] = {}  # group -> (the member chosen nodes belong to, how many chosen nodes)
    kinds = graph.index.kinds
    apart = apart or {}

    def splits_a_group(where: tuple[int, int] | None) -> bool:
        """Whether a node of this group and member would join a chosen node of the same group and another member."""
        if where is None or where[0] not in members:
            return False
        return members[where[0]][0] != where[1]

    def choose(p_index: int, node: Node, where: tuple[int, int] | None) -> None:
        chosen[p_index] = node
        if where is not None:
            member, count = members.get(where[0], (where[1], 0))
            members[where[0]] = (member, count + 1)

    def unchoose(p_index: int, where: tuple[int, int] | None) -> None:
        del chosen[p_index]
        if where is not None:
            member, count = members[where[0]]
            if count == 1:
                del members[where[0]]
            else:
                members[where[0]] = (member, count - 1)

    def extend(depth: int, values: dict) -> Iterator[Match]:
        if depth == len(order):
            nodes = tuple(chosen[i] for i in range(len(crule.nodes)))
            if structural or _complete_match_ok(graph, crule, nodes, values):
                yield Match(crule, nodes, dict(values))
            return
        p = crule.nodes[order[depth]]
        if p.index in crule.constants:
            node = constant_node(graph, values[p.outputs[0]], p, p.index in crule.rank_free) if p.outputs[0] in values else None
            if node is not None:
                choose(p.index, node, None)
                yield from extend(depth + 1, values)
                unchoose(p.index, None)
            return
        used = {id(n) for n in chosen.values()}
        seen = set()
        if depth == 0:
            candidates = [seed[1]] if seed is not None else _anchors(graph, crule, p)
        else:
            candidates = _candidates(graph, crule, p, values)
        for node in candidates:
            if id(node) in used or id(node) in seen or node.op.name != p.op_name or len(node.inputs) != len(p.inputs):
                continue
            seen.add(id(node))
            if len(node.outputs) != len(p.outputs) or not params_fit(p, node):
                continue
            where = apart.get(id(node))
            if splits_a_group(where):
                continue
            for operands in _operand_orders(p):
                bound = _bind(values, operands, node.inputs)
                if bound is None or (not structural and not _kinds_fit(kinds, crule, operands, node.inputs)):
                    continue
                bound = _bind(bound, p.outputs, node.outputs)
                if bound is None:
                    continue
                choose(p.index, node, where)
                yield from extend(depth + 1, bound)
                unchoose(p.index, where)

    yield from extend(0, {})


def _kinds_fit(kinds: Mapping[str, tuple[int, str]], crule: CompiledRule, names: Sequence[str], graph_values: Sequence[str]) -> bool:
    """Every rule input among ``names`` binds a value of the rank and element kind its proof assumed: checked as each
    is bound, so a partial match outside the proof is dropped at once (it would be declined once complete).
    ``kinds``: each graph value's (rank, element kind), :attr:`GraphIndex.kinds`."""
    kind_of = crule.kind_of
    for name, value in zip(names, graph_values):
        wanted = kind_of.get(name)
        if wanted is not None and kinds[value] != wanted:
            return False
    return True


def _assumed(t: TensorType, rank: int, kind: str) -> bool:
    """Whether a value of type ``t`` is within what a proof assumed of an input: its rank and element kind."""
    return t.rank == rank and t.element_kind == kind


def _bind(values: dict, names: Sequence[str], graph_values: Sequence[str]) -> dict | None:
    new = None
    for name, value in zip(names, graph_values):
        current = values.get(name) if new is None else new.get(name)
        if current is None:
            if new is None:
                new = dict(values)
            new[name] = value
        elif current != value:
            return None
    return values if new is None else new


def _outside_proof(graph: Graph, crule: CompiledRule, values: dict) -> str | None:
    """Why a binding lies outside what the rule's proof assumed (an input's rank or element kind), or None."""
    for name, rank, kind in crule.input_kinds:
        t = graph.type(values[name])
        if not _assumed(t, rank, kind):
            return f"input {name} binds {values[name]!r} of type {t}, the proof assumed rank {rank} ({kind})"
    return None


def _within_proof(graph: Graph, crule: CompiledRule, values: dict) -> bool:
    """Every bound input has the rank and element kind the rule's proof assumed."""
    return _outside_proof(graph, crule, values) is None


def decline_reason(graph: Graph, crule: CompiledRule, nodes: tuple[Node, ...], values: dict) -> str | None:
    """Why a structural match of the rule's source may not be rewritten, or None when it may."""
    rule = crule.rule
    if not crule.variables <= values.keys():
        return "a rule input the source never reads cannot be bound"
    if not _within_proof(graph, crule, values):
        return _outside_proof(graph, crule, values)
    shapes = {v: graph.type(values[v]).shape for v in crule.variables}
    try:
        for index, param, expr in crule.source_exprs:
            if nodes[index].params.get(param) != resolve_expr(expr, shapes):
                return f"parameter {param} of {nodes[index].name or nodes[index].op.name} is not {resolve_expr(expr, shapes)} at these shapes"
        if not rule.constraints_hold(shapes):
            if rule.constraints_hold({v: concrete(s) for v, s in shapes.items()}):
                names = sorted(set().union(*(symbols_of(s) for s in shapes.values())))
                return f"a shape constraint of the rule holds at the measurement sizes but not at every size of {', '.join(names)}"
            return "a shape constraint of the rule is false here"
    except (KeyError, IndexError, TasoError) as e:
        return f"a shape expression does not apply here ({e})"
    # Interior values must not escape the pattern.
    inside = {id(n) for n in nodes}
    outputs = set(graph.outputs)
    for node, rn in zip(nodes, rule.source):
        if rn.outputs and rn.outputs[0] in crule.constant_values:
            continue  # a constant is never removed: others may read it
        for value, name in zip(node.outputs, rn.outputs):
            if name in crule.mapped:
                continue
            if value in outputs or any(id(user) not in inside for user, _ in graph.uses(value)):
                return f"value {value!r} inside the pattern is used outside it"
    return None


def _complete_match_ok(graph: Graph, crule: CompiledRule, nodes: tuple[Node, ...], values: dict) -> bool:
    return decline_reason(graph, crule, nodes, values) is None


@dataclass
class Plan:
    """A rewrite decided but not yet built: enough to price it and key it without an O(n) graph copy.

    The search keeps plans in its queue and builds (:meth:`materialize`) only the graphs it
    pops, so a graph with hundreds of possible rewrites costs hundreds of small plans, not
    hundreds of graph copies. A plan is also what a child graph inherits from its parent when
    the rewrite it applied left the plan's nodes and interior values alone (:meth:`on`).
    """

    parent: Graph
    removed: tuple[Node, ...]
    added: tuple[Node, ...]  # topologically ordered among themselves
    outputs: tuple[str, ...] | None  # new graph outputs when a rewrite renames one
    types: dict[str, TensorType]  # types of the values the added nodes create
    label: str = ""  # the rule that made it, as reports name it
    interior: frozenset[str] = frozenset()  # matched values that must keep all their users inside the match

    @cached_property
    def removed_ids(self) -> frozenset[int]:
        """The removed (matched and rewired) nodes, by identity."""
        return frozenset(id(n) for n in self.removed)

    def on(self, graph: Graph) -> Plan:
        """The same rewrite of ``graph``, a descendant of the parent where it is still valid (the caller's judgement)."""
        return self if graph is self.parent else Plan(graph, self.removed, self.added, self.outputs, self.types, self.label, self.interior)

    def type(self, value: str) -> TensorType:
        t = self.types.get(value)
        return t if t is not None else self.parent.type(value)

    @property
    def meta(self):
        return self.parent.meta

    @property
    def weights(self):
        """The parent's weights: a rewrite adds nodes, never weights (a cost model reads them as from a graph)."""
        return self.parent.weights

    def key(self) -> int:
        """The built graph's search key (:meth:`taso.ir.index.GraphIndex.search_key`), computed from the parent's."""
        return self.parent.index.search_key_after(self.removed, self.added, self.outputs)

    def materialize(self) -> Graph | None:
        """The rewritten graph, or None when building it reveals a cycle."""
        try:
            return self.parent.replace(remove=self.removed, add=self.added, outputs=self.outputs, new_types=self.types)
        except TasoError:
            return None


def _match_tag(crule: CompiledRule, match: Match) -> str:
    """A short deterministic tag for the values a rewrite creates: the same rewrite at the
    same place names them alike, so graphs reached by different paths compare equal."""
    text = crule.rule_id + "|" + "|".join(f"{k}={v}" for k, v in sorted(match.values.items()))
    return hashlib.blake2b(text.encode(), digest_size=5).hexdigest()


def plan_match(graph: Graph, match: Match) -> Plan | None:
    """Builds the target's nodes for a match and type-checks them; None when the rewrite does not fit."""
    plan = plan_or_reason(graph, match)
    return plan if isinstance(plan, Plan) else None


def plan_or_reason(graph: Graph, match: Match) -> Plan | str:
    """:func:`plan_match`, or why the rewrite does not fit (for ``taso optimize --explain``)."""
    crule, rule = match.rule, match.rule.rule
    values = match.values
    # A variable computed from the pattern's own outputs (two matmuls of consecutive RNN
    # steps, say) would close a cycle: reject it before building anything.
    if len(match.nodes) > 1 and graph.index.depends_on((values[v] for v in crule.variables), {values[v] for v in crule.interior}):
        return "an input of the rule is computed from the pattern's own values (the rewrite would close a cycle)"
    shapes = {v: graph.type(values[v]).shape for v in crule.variables}
    try:
        overrides: dict[int, dict] = {}
        for index, param, expr in crule.target_exprs:
            overrides.setdefault(index, {})[param] = resolve_expr(expr, shapes)
        # Target values: mapped outputs keep the source's graph names, inputs are the bindings.
        names: dict[str, str] = {v: values[v] for v in crule.variables}
        renames: dict[str, str] = {}  # graph value -> replacement, when a target output is not a new value
        tag = _match_tag(crule, match)
        for s, t in rule.outputs:
            if t in crule.variables or t in names:
                renames[values[s]] = names[t]
            else:
                names[t] = values[s]
        label = rule.name or crule.rule_id
        types: dict[str, TensorType] = {}
        new_nodes = []
        for i, (op, rn) in enumerate(zip(crule.target_ops, rule.target)):
            params = crule.target_params[i].replace(**overrides[i]) if i in overrides else crule.target_params[i]
            outs, fresh = [], []
            for o in rn.outputs:
                if o not in names:
                    names[o] = f"{o}~{tag}"
                    fresh.append(names[o])
                outs.append(names[o])
            node = Node(op, params, tuple(names[x] for x in rn.inputs), tuple(outs), f"{label}/{i}")
            if any(o in graph.types for o in fresh):
                # Made by this rewrite at this place before and still there (a constant the reverse rule wrote, which
                # the forward rule kept): the node is reused; any other node of that name would be a second definition.
                before = graph.producer(outs[0])
                if before is None or (before.op, before.params, before.inputs, before.outputs) != (op, params, node.inputs, node.outputs):
                    return f"the target's value {outs[0]!r} is defined in the graph already"
                continue
            types.update(zip(node.outputs, op.infer([types.get(v) or graph.type(v) for v in node.inputs], params)))
            new_nodes.append(node)
        for s, _ in rule.outputs:
            old = values[s]
            new = renames.get(old, old)
            if (types.get(new) or graph.type(new)) != graph.type(old):
                return f"the target's {new!r} would be {types.get(new) or graph.type(new)} where {old!r} is {graph.type(old)}"
        remove = [n for i, n in enumerate(match.nodes) if i not in crule.constants]
        outputs = None
        if renames:
            # A source value that equals an existing value: rewire its consumers and the graph outputs.
            matched = {id(n) for n in match.nodes}
            for value in renames:
                for user, _ in graph.uses(value):
                    if id(user) in matched or any(user is r for r in remove):
                        continue
                    remove.append(user)
                    new_nodes.append(Node(user.op, user.params, tuple(renames.get(v, v) for v in user.inputs), user.outputs, user.name))
            outputs = tuple(renames.get(o, o) for o in graph.outputs)
        if graph.insertion_point({id(n) for n in remove}, new_nodes) is None and graph.index.closes_cycle(new_nodes):
            raise GraphError("the rewrite would create a cycle")
    except TasoError as e:
        return f"the target does not fit here: {e}"
    interior = frozenset(values[v] for v in crule.interior if v not in crule.mapped)
    return Plan(graph, tuple(remove), tuple(new_nodes), outputs, types, label, interior)


def apply_match(graph: Graph, match: Match) -> Graph | None:
    """The graph with the match replaced by the rule's target, or None when the rewrite is not safe."""
    plan = plan_match(graph, match)
    return None if plan is None else plan.materialize()


def plans(graph: Graph, crule: CompiledRule) -> Iterator[Plan]:
    """A plan for every match of the rule whose target fits."""
    for match in find_matches(graph, crule):
        plan = plan_match(graph, match)
        if plan is not None:
            yield plan


def rewrites(graph: Graph, crule: CompiledRule) -> Iterator[Graph]:
    """Every graph obtained by applying the rule once, at each safe match."""
    for plan in plans(graph, crule):
        new = plan.materialize()
        if new is not None:
            yield new
