"""A proved rule as an egglog query, and what Python checks and adds for each place it matches.

egglog finds every binding of a rule's source in the e-graph (modulo the equalities found so
far) and records it in one relation per rule: the e-class of each rule input, of each mapped
source output, and the parameter key of each source node whose parameters depend on shapes.
Python then applies the same guards as the backtracking search's matcher: each input has the
rank and element kind the proof assumed, the shape-dependent parameters are what the rule's
expressions give at these shapes, the rule's shape constraints hold (at every size of a
symbolic dim), and the target type-checks with the source's output types. Only then are the
target's terms added and unioned with the source's outputs.

The e-graph keeps both sides, so the checks the graph matcher makes because it *replaces*
the source (interior values used elsewhere, cycles) are not needed here: extraction picks an
acyclic choice (:mod:`taso.search.eqsat.extract`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ...errors import TasoError
from ...ir import TensorType
from ...ops import COMMUTATIVE, get
from ...rules import resolve_expr
from ..rewrite import CompiledRule, _assumed
from .terms import TermTable, constructor, op_key


@dataclass(frozen=True)
class Columns:
    """What a rule's match relation holds, in order: inputs, mapped source outputs, parameter keys."""

    variables: tuple[str, ...]
    outputs: tuple[str, ...]
    params: tuple[int, ...]  # source node indices whose parameters are shape expressions


@dataclass(frozen=True)
class Applied:
    """What adding one match's target changes: the commands, and the classes each mapped output joins."""

    commands: list[str]
    unions: list[tuple[int, int]]


class RulePattern:
    """One directed rule as an egglog rule writing its matches, tagged with ``number``, into a relation.

    Rules whose matches have the same columns share one relation (:attr:`relation`): egglog's every
    command costs time in proportion to its tables, and one table per rule made adding a match's
    target cost 0.7 ms with 2,000 rules (0.1 ms with one table).
    """

    def __init__(self, crule: CompiledRule, number: int):
        self.crule = crule
        self.number = number
        rule = crule.rule
        self.columns = Columns(tuple(sorted(crule.variables)), tuple(s for s, _ in rule.outputs),
                               tuple(n.index for n in crule.nodes if n.literal is None))
        self.classes = len(self.columns.variables) + len(self.columns.outputs)
        self.relation = f"M{self.classes}_{len(self.columns.params)}"
        # A source with several outputs (two products sharing a weight) matches every pair of its roots' classes: run
        # in the first rounds only (Tensat's multi-pattern rules), or the pairs of their variants swamp the e-graph.
        self.multi = len(self.columns.outputs) > 1
        self.ruleset = "multi" if self.multi else "match"
        self.renames = any(t in crule.variables for _, t in rule.outputs)  # a source value equals one of the inputs
        self._vars = {name: f"v{i}" for i, name in enumerate(self.columns.variables)}

    def program(self, table: TermTable) -> str:
        """The relation's declaration and one egglog rule per operand order of the commutative source nodes."""
        arities = {len(n.inputs) for n in self.crule.nodes}
        parts = [table.declarations(sorted(arities))]
        if self.relation not in table.relations:
            table.relations.add(self.relation)
            sorts = " ".join(["i64"] + ["T"] * self.classes + ["String"] * len(self.columns.params))
            parts.append(f"(relation {self.relation} ({sorts}))")
        for orders in self._operand_orders():
            parts.append(self._rule(orders))
        return "\n".join(p for p in parts if p)

    def _operand_orders(self):
        choices = []
        for n in self.crule.nodes:
            if n.op_name in COMMUTATIVE and len(n.inputs) == 2 and n.inputs[0] != n.inputs[1]:
                choices.append((n.inputs, (n.inputs[1], n.inputs[0])))
            else:
                choices.append((n.inputs,))
        return itertools.product(*choices)

    def _value(self, name: str) -> str:
        """The query's expression for a rule value: a variable for an input, the producing term (or its output) otherwise."""
        producer = self.crule.producer.get(name)
        if producer is None:
            return self._vars[name]
        if len(producer.outputs) == 1:
            return f"t{producer.index}"
        return f"(Out t{producer.index} {producer.outputs.index(name)})"

    def _rule(self, orders) -> str:
        facts = []
        for n, inputs in zip(self.crule.nodes, orders):
            params = f"\"{_literal_key(n)}\"" if n.literal is not None else f"p{n.index}"
            args = "".join(" " + self._value(v) for v in inputs)
            facts.append(f"(= t{n.index} ({constructor(len(inputs))} \"{n.op_name}\" {params}{args}))")
        row = [str(self.number)] + [self._vars[v] for v in self.columns.variables]
        for k, s in enumerate(self.columns.outputs):
            facts.append(f"(= o{k} {self._value(s)})")
            row.append(f"o{k}")
        row += [f"p{i}" for i in self.columns.params]
        return f"(rule ({' '.join(facts)})\n      (({self.relation} {' '.join(row)})) :ruleset {self.ruleset})"

    def apply(self, table: TermTable, classes: list[int], keys: list[str]) -> Applied | None:
        """Checks one match (handles of its columns' classes, the parameter keys) and builds its target; None when a
        guard declines it."""
        crule, rule = self.crule, self.crule.rule
        table.rewrites += 1
        handle = dict(zip(self.columns.variables + self.columns.outputs, classes))
        types: dict[str, TensorType] = {}
        for v in self.columns.variables:
            t = table.types[handle[v]]
            if isinstance(t, tuple) or not _assumed(t, *crule.kind_of[v]):
                return None
            types[v] = t
        shapes = {v: t.shape for v, t in types.items()}
        try:
            source_params = {index: table.keys[key].params for index, key in zip(self.columns.params, keys)}
            for index, params in source_params.items():
                if not all(params.get(k) == v for k, v in crule.nodes[index].fixed):
                    return None
            for index, param, expr in crule.source_exprs:
                if source_params[index].get(param) != resolve_expr(expr, shapes):
                    return None
            if not rule.constraints_hold(shapes):
                return None
            overrides: dict[int, dict] = {}
            for index, param, expr in crule.target_exprs:
                overrides.setdefault(index, {})[param] = resolve_expr(expr, shapes)
            where = {v: handle[v] for v in crule.variables}
            value_types = dict(types)
            sources: dict[str, list[int]] = {}  # target value -> the source classes it equals
            for s, t in rule.outputs:
                sources.setdefault(t, []).append(handle[s])
            planned = []  # each target node with its parameters and output types, all checked before any is added
            for i, (op, rn) in enumerate(zip(crule.target_ops, rule.target)):
                params = crule.target_params[i].replace(**overrides[i]) if i in overrides else crule.target_params[i]
                out_types = op.infer([value_types[v] for v in rn.inputs], params)
                for o, t in zip(rn.outputs, out_types):
                    if any(table.types[h] != t for h in sources.get(o, ())):
                        return None  # the target's value would not have the source's type
                value_types.update(zip(rn.outputs, out_types))
                planned.append((op, params, rn, out_types))
        except (TasoError, KeyError, IndexError):
            return None
        if any(t in crule.variables and table.types[where[t]] != table.types[classes[0]] for t, classes in sources.items()):
            return None
        # Only now is anything added to the table: a match declined halfway once left the table naming handles (and a
        # constructor declaration) that no command ever gave the e-graph, and extraction failed on them (KeyError).
        commands: list[str] = []
        for op, params, rn, out_types in planned:
            joins = [sources[o][0] if o in sources else None for o in rn.outputs]
            added, outs = table.application(table.key(op, params, len(rn.outputs)), [where[v] for v in rn.inputs], out_types, crule.label, joins)
            commands.extend(added)
            where.update(zip(rn.outputs, outs))
        unions = [(c, where[t]) for t, classes in sources.items() for c in classes if c != where[t]]
        return Applied(commands, unions)


def _literal_key(n) -> str:
    """The key a graph node with exactly this pattern node's op and parameters has in the e-graph."""
    return op_key(get(n.op_name), n.literal)
