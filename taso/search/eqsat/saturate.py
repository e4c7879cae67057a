"""Equality saturation: grow an egglog e-graph of a graph with the proved rules, within limits.

Each iteration runs every admitted rule's query once (egglog's e-matching, congruence and
union-find), reads the new matches, and adds the targets of those the guards accept
(:mod:`taso.search.eqsat.patterns`). A rule is admitted once every operator of its source occurs in
the e-graph (as in the backtracking search) and every producer-reader pair of operators in its
source does too: declaring a rule to egglog costs more than matching it. The loop stops when
an iteration adds nothing (saturated), or at the node, iteration or time limit.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import egglog.bindings as egglog
import numpy as np

from ...ir import Graph
from ...rules import Rule, operator_variant
from ..rewrite import CompiledRule, Match
from .patterns import RulePattern
from .terms import INSERT, PRELUDE, TermTable, encode_graph, join

__all__ = ["Limits", "Saturation", "saturate", "EGraph", "enode_count", "tensor_rows"]


@dataclass(frozen=True)
class Limits:
    """How far saturation may grow the e-graph.

    Attributes:
        nodes: the most e-nodes (each application, tuple output and leaf counts one).
        iterations: the most rounds of matching.
        seconds: wall-clock seconds for saturation.
        multi_iterations: the rounds that run rules whose source has several outputs (Tensat's k_multi).
        matches_per_rule: the most matches of one rule added per round (egg's match limit): an associativity
            rule's matches grow with every round, and the rest would wait behind them.
    """

    nodes: int = 5_000
    iterations: int = 10
    seconds: float = 5.0
    multi_iterations: int = 1
    matches_per_rule: int = 1_000


@dataclass
class Saturation:
    """What saturation did: why it stopped, and the counts per round."""

    stop_reason: str = "saturated"
    iterations: int = 0
    matches: int = 0  # matches read from the e-graph
    applied: int = 0  # matches whose target was added
    cycles: int = 0  # matches not added because they would close a cycle
    terms: int = 0  # e-nodes at the end
    seconds: float = 0.0
    fired: dict[str, int] = field(default_factory=dict)  # rule label -> targets added
    texts: dict[str, str] = field(default_factory=dict)  # rule label -> the rule as people read it


class EGraph:
    """An egglog e-graph holding a taso graph, with the term table beside it."""

    def __init__(self, graph: Graph):
        self.egraph = egglog.EGraph()
        self.table = TermTable()
        self.run(PRELUDE)
        text, self.handles = encode_graph(graph, self.table)
        self.run(text)
        self.graph = graph
        self.weights = dict(graph.weights)  # the input's, and those of the versions added since

    def add_version(self, version: Graph, rule: str) -> bool:
        """Adds another graph computing the same outputs (the input with a group merge applied and cleaned up, say):
        its terms join those already there, and its outputs the input's. False, and nothing added, when it names a
        weight the e-graph holds with other values."""
        if any(name in self.weights and self.weights[name] is not array and not np.array_equal(self.weights[name], array)
               for name, array in version.weights.items()):
            return False
        known = {name: self.handles[name] for name in (*version.inputs, *version.weights) if name in self.handles}
        text, handles = encode_graph(version, self.table, known, rule)
        for name, array in version.weights.items():
            self.weights.setdefault(name, array)
        # A rewrite keeps a value's name only for the same value (a rule's target takes over its source's output names),
        # so a name both graphs compute is one class; and the outputs are equal by position.
        same = [(handles[v], self.handles[v]) for v in version.types if v in handles and v in self.handles and v not in known]
        joins = [join(a, b) for a, b in same + list(zip((handles[o] for o in version.outputs), (self.handles[o] for o in self.graph.outputs)))]
        self.run(text + "\n" + "\n".join(joins) + "\n" + INSERT)
        self.handles.update({name: handles[name] for name in version.weights if name not in self.handles})
        return True

    def run(self, program: str) -> None:
        """Runs egglog commands, a few kilobytes of text at a time.

        NOTE: egglog's parser keeps a copy of the source text with every span it makes, so memory grows with the square
        of one program's length (80 rules in one program: 0.7 GB; 450: out of memory). Declaring NasRNN's 1,124 rules
        took 2.4 GB in chunks of 16 KB, 0.78 GB in 4 KB and 0.33 GB in 512 characters, which was also the fastest.
        """
        chunk: list[str] = []
        size = 0
        for line in program.splitlines(keepends=True):
            if size + len(line) > _CHUNK and _balanced(chunk):
                self._run("".join(chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line)
        self._run("".join(chunk))

    def _run(self, text: str) -> None:
        if text.strip():
            self.egraph.run_program(*self.egraph.parse_program(text))

    def freeze(self):
        return self.egraph.freeze()

    def classes(self, frozen) -> dict[int, int]:
        """E-class (egglog's value, hashed) -> the smallest handle in it."""
        found: dict[int, int] = {}
        for row in frozen.functions["Id"].rows:
            cls, handle = hash(row.output), self.egraph.value_to_i64(row.inputs[0])
            if handle < found.get(cls, handle + 1):
                found[cls] = handle
        return found

    def edges(self) -> set[tuple[str, str]]:
        """The (reader, producer) pairs of operator variants in the e-graph: an application of the first reads a class
        holding an application of the second (through a tuple's output for a multi-output one)."""
        frozen, value = self.freeze(), self.egraph
        variant = {key: operator_variant(entry.op.name, entry.params) for key, entry in self.table.keys.items()}
        of_class: dict[int, set[str]] = {}
        readers: list[tuple[str, list[int]]] = []
        outs: list[tuple[int, int]] = []
        for name, row in tensor_rows(frozen):
            if name == "Out":
                outs.append((hash(row.output), hash(row.inputs[0])))
                continue
            key = value.value_to_string(row.inputs[1])
            if key in variant:
                of_class.setdefault(hash(row.output), set()).add(variant[key])
                readers.append((variant[key], [hash(c) for c in row.inputs[2:]]))
        for out, whole in outs:
            of_class.setdefault(out, set()).update(of_class.get(whole, ()))
        return {(reader, producer) for reader, children in readers for c in children for producer in of_class.get(c, ())}

    def variants(self) -> set[str]:
        """The operator variants present, as rules are indexed by them."""
        return {operator_variant(entry.op.name, entry.params) for entry in self.table.keys.values()}


def saturate(egraph: EGraph, rules: Iterable[Rule | CompiledRule], limits: Limits, connected_only: bool = True,
             excluded: frozenset[str] = frozenset(), seeds: Iterable[Match] = (), decomposed: frozenset[str] = frozenset()) -> Saturation:
    """Grows ``egraph`` with the rules; returns what it did.

    ``seeds``: matches found on the input graph by other means (the group merges of :mod:`taso.search.groups`, whose k-ary
    rules no e-matching finds), added before the first round; ``decomposed``: ops no rewrite may make
    (:func:`taso.search.core.decomposed_ops`).
    """
    from ..core import RuleIndex

    started = time.perf_counter()
    report = Saturation()
    index = RuleIndex(rules, connected_only, excluded, decomposed)
    patterns: dict[str, RulePattern] = {}  # rule id -> its pattern
    numbered: list[RulePattern] = []  # by the number its matches are tagged with
    seen: set[tuple] = set()
    rule_edges: dict[str, frozenset[tuple[str, str]]] = {}
    _add_seeds(egraph, seeds, report)
    setting_up = 0.0  # the last round's seconds before its first match was read
    while True:
        if report.iterations >= limits.iterations:
            report.stop_reason = "iteration limit"
            break
        # Declaring a round's new rules and matching them cannot be interrupted: a round is not begun when the last one's
        # took longer than the time left (BERT's fourth round took 3 s of it, and saturation ran 8.7 s of a 5.4 s share).
        round_started = time.perf_counter()
        if report.iterations and round_started + setting_up - started > limits.seconds:
            report.stop_reason = "time limit"
            break
        edges = egraph.edges()
        index.admit_variants(egraph.variants(), lambda rule: _source_edges(rule, rule_edges) <= edges)
        program = []
        for crule in index.compiled:
            if crule.rule_id not in patterns:
                pattern = patterns[crule.rule_id] = RulePattern(crule, len(numbered))
                numbered.append(pattern)
                program.append(pattern.program(egraph.table))
        egraph.run("\n".join(program))
        egraph.run("(run match 1)" + ("(run multi 1)" if report.iterations < limits.multi_iterations else ""))
        report.iterations += 1
        frozen = egraph.freeze()
        classes = egraph.classes(frozen)
        size = enode_count(frozen)
        handles_before = len(egraph.table.types)
        commands: list[str] = []
        added = 0  # matches added this round
        per_rule: dict[int, int] = {}
        reach = _Reach(frozen, classes)
        setting_up = time.perf_counter() - round_started
        for pattern, key, row in _new_matches(egraph, frozen, numbered, classes, seen, started + limits.seconds):
            if time.perf_counter() - started > limits.seconds:  # a round can read many matches and add few
                break
            if per_rule.get(pattern.number, 0) >= limits.matches_per_rule:
                continue  # read again next round
            per_rule[pattern.number] = per_rule.get(pattern.number, 0) + 1
            seen.add(key)
            report.matches += 1
            if reach.closes_cycle(pattern, row[0]):
                report.cycles += 1
                continue
            applied = pattern.apply(egraph.table, *row)
            if applied is None:
                continue
            commands.extend(applied.commands)
            commands.extend(join(a, b) for a, b in applied.unions)
            added += 1
            report.applied += 1
            report.fired[pattern.crule.label] = report.fired.get(pattern.crule.label, 0) + 1
            report.texts.setdefault(pattern.crule.label, str(pattern.crule.rule))
            # New handles bound the e-nodes added from above: most targets are congruent to terms already there
            # (BERT's third round added 3,362 handles and ended at 1,638 e-nodes), so the limit is checked on the
            # e-graph itself once the bound reaches it.
            near_limit = size + len(egraph.table.types) - handles_before >= limits.nodes
            if near_limit or added % _BATCH == 0:
                # Unions of this round change what each class is computed from: add them, and filter the rest against that.
                egraph.run("\n".join(commands) + "\n" + INSERT)
                commands = []
                after = egraph.freeze()
                size, handles_before = enode_count(after), len(egraph.table.types)
                if size >= limits.nodes:
                    report.stop_reason = "node limit"
                    break
                reach = _Reach(after, egraph.classes(after))
        if report.stop_reason == "saturated" and time.perf_counter() - started > limits.seconds:
            report.stop_reason = "time limit"
        if not added:
            break
        egraph.run("\n".join(commands) + "\n" + INSERT)
        if report.stop_reason != "saturated":
            break
    report.terms = enode_count(egraph.freeze())
    report.seconds = time.perf_counter() - started
    return report


class _Reach:
    """Which classes each class is computed from, in the e-graph as a round found it: Tensat's cycle filter.

    A rewrite that would make a class read itself is not added:

    * a target read from an input that is computed from the source's output (two products of
      consecutive steps of a recurrent cell: the backtracking search rejects it too);
    * a target that *is* one of the rule's inputs (``split(concat(x, y))[0] = x``, ``x`` from
      ``transpose(transpose(x))``): the source is computed from that input, so the union closes a
      cycle. Such cycles let the extraction's integer program compute a value from itself; ordering
      every class of the large strongly connected components they make took minutes on NasRNN. The
      clean-up after the search (:mod:`taso.search.cleanup`) removes what these rules would.

    Kept as one bit set per class over the condensation of the class graph, updated every
    ``_BATCH`` matches added; extraction orders what cycles remain.
    """

    def __init__(self, frozen, classes: dict[int, int]):
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_nodes_from(classes)
        for name, row in tensor_rows(frozen):
            for child in (row.inputs[:1] if name == "Out" else row.inputs[2:]):
                graph.add_edge(hash(row.output), hash(child))
        condensed = nx.condensation(graph)
        members = condensed.graph["mapping"]  # class -> component
        below: dict[int, int] = {}
        for component in reversed(list(nx.topological_sort(condensed))):
            bits = 1 << component
            for child in condensed.successors(component):
                bits |= below[child]
            below[component] = bits
        self._component = {handle: members[cls] for cls, handle in classes.items() if cls in members}
        self._below = below

    def depends(self, a: int, b: int) -> bool:
        """Whether the class of handle ``a`` is computed from that of ``b`` (or is it)."""
        ca, cb = self._component.get(a), self._component.get(b)
        return ca is not None and cb is not None and bool(self._below[ca] >> cb & 1)

    def closes_cycle(self, pattern: RulePattern, handles: list[int]) -> bool:
        """Whether adding this match may close a cycle. Also a merge of a value with itself (two outputs of the source
        in one class): it gains nothing, and through later unions (``relu(relu(x)) = relu(x)``) it closed cycles."""
        n = len(pattern.columns.variables)
        outputs = handles[n:pattern.classes]
        return (pattern.renames or len(set(outputs)) < len(outputs)
                or any(self.depends(v, s) for v in handles[:n] for s in outputs))


def _add_seeds(egraph: EGraph, seeds: Iterable[Match], report: Saturation) -> None:
    """Adds the targets of matches found on the input graph, under the same guards as e-matched ones."""
    commands: list[str] = []
    for match in seeds:
        pattern = RulePattern(match.rule, -1)
        handles = [egraph.handles[match.values[v]] for v in (*pattern.columns.variables, *pattern.columns.outputs)]
        keys = [egraph.table.key(match.nodes[i].op, match.nodes[i].params, len(match.nodes[i].outputs)) for i in pattern.columns.params]
        applied = pattern.apply(egraph.table, handles, keys)
        report.matches += 1
        if applied is None:
            continue
        commands += applied.commands + [join(a, b) for a, b in applied.unions]
        report.applied += 1
        report.fired[match.rule.label] = report.fired.get(match.rule.label, 0) + 1
    egraph.run("\n".join(commands) + "\n" + INSERT)


def _new_matches(egraph: EGraph, frozen, numbered: list[RulePattern], classes: dict[int, int], seen: set[tuple], deadline: float):
    """(pattern, key, (handles, parameter keys)) for each match not in ``seen``, by pattern number (rows in table order);
    none when reading them all would pass ``deadline`` (BERT's fourth round took 4 s to read before its first match)."""
    value = egraph.egraph
    found: list[tuple[int, list[int], list[str]]] = []
    for relation in sorted(egraph.table.relations):
        for k, row in enumerate(frozen.functions[relation].rows):
            if k % 1024 == 1023 and time.perf_counter() > deadline:
                return
            number = value.value_to_i64(row.inputs[0])
            pattern = numbered[number]
            handles = [classes[hash(v)] for v in row.inputs[1:1 + pattern.classes]]
            keys = [value.value_to_string(v) for v in row.inputs[1 + pattern.classes:]]
            key = (number, *handles, *keys)
            if key not in seen:
                found.append((key, handles, keys))
    found.sort(key=lambda item: item[0][0])
    for key, handles, keys in found:
        yield numbered[key[0]], key, (handles, keys)


_BATCH = 256  # matches added between two updates of the cycle filter
_CHUNK = 512  # characters of egglog text parsed at once


def _source_edges(rule: Rule, memo: dict[str, frozenset[tuple[str, str]]]) -> frozenset[tuple[str, str]]:
    """The (reader, producer) pairs of operator variants in a rule's source: a match needs each in the e-graph."""
    found = memo.get(rule.id)
    if found is None:
        producer = {o: n for n in rule.source for o in n.outputs}
        found = memo[rule.id] = frozenset((operator_variant(n.op, n.params), operator_variant(producer[v].op, producer[v].params))
                                          for n in rule.source for v in n.inputs if v in producer)
    return found


def _balanced(lines: list[str]) -> bool:
    """Whether these lines close every parenthesis they open (a command may span lines)."""
    text = "".join(lines)
    return text.count("(") == text.count(")")


def tensor_rows(frozen):
    """(table, row) for the e-nodes of a frozen e-graph that stand for tensors: applications (``Opk``) and tuple
    outputs (``Out``), not handles or match relations."""
    for name, fn in frozen.functions.items():
        if name == "Out" or (name[:2] == "Op" and name[2:].isdigit()):
            for row in fn.rows:
                yield name, row


def enode_count(frozen) -> int:
    """The e-nodes of a frozen e-graph that stand for tensors."""
    return sum(1 for _ in tensor_rows(frozen))
