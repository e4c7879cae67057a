"""How taso's graphs are written as egglog terms, and what Python keeps beside the e-graph.

Every tensor value is a term of one sort ``T``. An operator application with ``k`` inputs is
``(Opk "op" "key" in_1 .. in_k)``: ``"op"`` is the operator's name, so a pattern can ask for
an op whatever its parameters, and ``"key"`` names the (operator, parameters) pair in a table
Python keeps (:class:`TermTable`), so the e-graph never parses a parameter. An application with
several outputs is a tuple term; its ``j``-th output is ``(Out tuple j)``. A graph input or
weight is ``(Op0 "leaf" "Ln")``; a one-element weight is also the fill term of its value, so a rule that
reads a constant by value (:mod:`taso.search.rewrite`) finds it.

Python gives every term it adds an integer handle, ``(Id n)``, unioned with it: that is how a
later command names an e-class, and what the type table is keyed by. Every term of an e-class
has one type (a rewrite is added only when its target's type is the source's), so a class's
type is the type of any handle in it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...ir import Graph, Params, TensorType
from ...ops import get
from ...ops.base import Op
from ...ops.constants import as_fill

LEAF = "leaf"


@dataclass(frozen=True)
class OpKey:
    """An (operator, parameters) pair as the e-graph names it."""

    op: Op
    params: Params
    outputs: int  # how many values one application defines (a tuple term when more than one)


def op_key(op: Op, params: Params) -> str:
    """The e-graph's name for an operator with these parameters: the same pair always gets the same name, and pairs
    that differ at some size of a symbolic dim different names."""
    digest = hashlib.blake2b(f"{op.name}|{params.identity()}".encode(), digest_size=8).hexdigest()
    return f"{op.name}:{digest}"


def constructor(arity: int) -> str:
    """The constructor of the applications with ``arity`` inputs."""
    return f"Op{arity}"


@dataclass
class TermTable:
    """What the e-graph's strings and handles stand for, and the type of every handle."""

    keys: dict[str, OpKey] = field(default_factory=dict)
    leaves: dict[str, str] = field(default_factory=dict)  # leaf key -> graph value name
    types: dict[int, TensorType | tuple[TensorType, ...]] = field(default_factory=dict)  # handle -> type (a tuple's: one per output)
    arities: set[int] = field(default_factory=lambda: {0})  # Op0 is in the prelude
    relations: set[str] = field(default_factory=set)  # match relations declared
    # (key, input handles, rule, rewrite) of each application a rule added; ``rewrite`` numbers the rewrites
    origins: list[tuple[str, tuple[int, ...], str, int]] = field(default_factory=list)
    rewrites: int = 0
    _next: int = 0

    def handle(self, t: TensorType | tuple[TensorType, ...]) -> int:
        """A new handle for a term of type ``t``."""
        n = self._next
        self._next += 1
        self.types[n] = t
        return n

    def key(self, op: Op, params: Params, outputs: int) -> str:
        name = op_key(op, params)
        self.keys.setdefault(name, OpKey(op, params, outputs))
        return name

    def declarations(self, arities: Sequence[int]) -> str:
        """The constructors not declared yet for applications of these arities."""
        new = sorted(set(arities) - self.arities)
        self.arities |= set(new)
        return "\n".join(f"(constructor {constructor(k)} (String String{' T' * k}) T)" for k in new)

    def application(self, key: str, inputs: Sequence[int], types: Sequence[TensorType], rule: str = "",
                    joins: Sequence[int | None] = ()) -> tuple[list[str], list[int]]:
        """The commands that add one application over the classes of these handles, and the handle of each output.

        ``joins[j]``, when given, is the class output ``j`` is known to equal (a rule's mapped output): the term joins
        it at once instead of getting a handle of its own, one egglog command instead of two. ``rule``: the rule whose
        target it is (reports name the rules an extracted graph used).
        """
        entry = self.keys[key]
        if rule:
            self.origins.append((key, tuple(inputs), rule, self.rewrites))
        joins = list(joins) or [None] * len(types)
        declaration = self.declarations([len(inputs)])
        declared = [declaration] if declaration else []
        term = f"({constructor(len(inputs))} \"{entry.op.name}\" \"{key}\"{''.join(f' (Id {i})' for i in inputs)})"
        if entry.outputs == 1:
            n = joins[0] if joins[0] is not None else self.handle(types[0])
            return [*declared, f"(Name {n} {term})"], [n]
        whole = self.handle(tuple(types))
        commands = [*declared, f"(Name {whole} {term})"]
        outs = []
        for j, t in enumerate(types):
            n = joins[j] if joins[j] is not None else self.handle(t)
            commands.append(f"(Name {n} (Out (Id {whole}) {j}))")
            outs.append(n)
        return commands, outs


def join(a: int, b: int) -> str:
    """The command that records that the classes of two handles are equal."""
    return f"(Join (Id {a}) (Id {b}))"


# Python's additions are facts (Name: handle n names term t; Join: two classes are equal) that the ruleset ``insert``
# turns into unions, all at once. NOTE: a union at the top level rebuilds the e-graph once per command: 5.8 ms per
# command on a 3,000-node e-graph, against about 0.05 ms per fact.
PRELUDE = """
(sort T)
(constructor Id (i64) T)
(constructor Out (T i64) T)
(constructor Op0 (String String) T)
(relation Name (i64 T))
(relation Join (T T))
(ruleset insert)
(rule ((Name n t)) ((union (Id n) t)) :ruleset insert)
(rule ((Join a b)) ((union a b)) :ruleset insert)
(ruleset match)
(ruleset multi)
"""
INSERT = "(run insert 1)"


def encode_graph(graph: Graph, table: TermTable, known: dict[str, int] | None = None, rule: str = "") -> tuple[str, dict[str, int]]:
    """The program that adds ``graph`` to an e-graph, and the handle of each of its values.

    ``known``: handles of inputs and weights already in the e-graph (another version of the same
    model), reused by name; ``rule``: what made this version, for reports.
    """
    known = known or {}
    table.rewrites += 1
    handles: dict[str, int] = {}
    commands = [table.declarations([0, *(len(n.inputs) for n in graph.nodes)])]
    for name in [*graph.inputs, *graph.weights]:
        if name in known:
            handles[name] = known[name]
            continue
        leaf = f"L{len(table.leaves)}"
        table.leaves[leaf] = name
        n = handles[name] = table.handle(graph.type(name))
        commands.append(f"(Name {n} (Op0 \"{LEAF}\" \"{leaf}\"))")
        fill = as_fill(graph.weights[name]) if name in graph.weights else None
        if fill is not None:
            commands.extend(table.application(table.key(get("fill"), fill, 1), [], [graph.type(name)], joins=[n])[0])
    for node in graph.topological_order():
        key = table.key(node.op, node.params, len(node.outputs))
        added, outs = table.application(key, [handles[v] for v in node.inputs], [graph.type(v) for v in node.outputs], rule)
        commands.extend(added)
        handles.update(zip(node.outputs, outs))
    commands.append(INSERT)
    return "\n".join(commands), handles
