"""Group merges: k rewrites of one kind made in one proved step.

An unrolled recurrent cell multiplies every step's input by the same weight. Merging all
of those products into one product over the concatenated rows is what wins, but a search
that merges two at a time must make each pairwise merge pay before it sees the next, and
on a long loop it stops at a tree of small merges or runs out of time. A *family* here is
a k-ary rule schema; for a group of k sites found in a graph, the family's rule at arity k
rewrites all of them at once.

Soundness: the rule at each arity is an ordinary :class:`~taso.rules.Rule`, proved by the
verifier with the n-way laws of :mod:`taso.specs.nary` and shipped, with its proof, in
``taso/data/groups.jsonl.gz`` (``python -m taso.verifier.build_groups``). The optimizer
uses an arity only when the rule it builds for it has the id of a proved rule in that file.

Matching is linear: sites are grouped by what they share (the weight and the bias, or the
input), so a 64-step cell's group is found in one pass over its products, never by the
backtracking matcher that a 64-node pattern would send into a combinatorial search.
"""

from __future__ import annotations

import functools
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..ir import Graph, Node
from ..rules import SHIPPED_DATA, Library, Rule
from .rewrite import CompiledRule, Match, decline_reason

__all__ = ["Family", "SharedWeightRows", "SharedInputColumns", "FAMILIES", "GroupLibrary", "MIN_GROUP", "MAX_GROUP", "GROUP_LIBRARY", "GroupMatch", "Groups", "find_groups",
           "merged", "merge_chain", "ChainStep"]

MIN_GROUP = 3  # two sites are the pairwise library's job
MAX_GROUP = 64  # the largest arity shipped proved; a larger group is merged in chunks of this size
GROUP_LIBRARY = os.path.join(SHIPPED_DATA, "groups.jsonl.gz")


@dataclass(frozen=True)
class Site:
    """One place a family's per-site pattern occurs: its nodes in the rule's per-site source order and its bindings."""

    nodes: tuple[Node, ...]
    values: dict[str, str]  # per-site rule names ("x", "m", "s") -> graph values


@dataclass(frozen=True)
class Family(ABC):
    """A k-ary rule schema and the linear-time finder of its groups."""

    name: str
    doc: str
    max_arity: int = MAX_GROUP  # the largest arity shipped proved; a larger group is merged in chunks of this size
    site_input: str = field(default="x", init=False)  # the per-site input: sites whose inputs are computed by another site are not merged

    @abstractmethod
    def rule(self, k: int) -> Rule:
        """The family's rule at arity k: per-site names suffixed with the site's number (x0, x1, ...)."""

    @abstractmethod
    def groups(self, graph: Graph) -> Iterator[tuple[dict[str, str], list[Site]]]:
        """(shared bindings, sites) per candidate group (not yet ordered, nor checked independent)."""


@dataclass(frozen=True)
class SharedWeightRows(Family):
    """k products ``x_i @ w`` (plus the same bias ``b``, with ``bias``) -> one product over the rows of all ``x_i``, split back.

    ``[x_0 @ w (+ b), ..., x_{k-1} @ w (+ b)]`` = ``split(concat(x_0, ..., x_{k-1}, axis=0) @ w (+ b), axis=0)``, for
    2-D ``x_i`` and ``w`` and a 1-D ``b`` (the bias after the product, which ONNX Runtime fuses into one Gemm).
    """

    bias: bool = False

    @functools.cache
    def rule(self, k: int) -> Rule:
        xs = [f"x{i}" for i in range(k)]
        inputs = [{"name": x, "class": "act", "shape": [2, 4], "dtype": "float32"} for x in xs]
        inputs.append({"name": "w", "class": "mat", "shape": [4, 4], "dtype": "float32"})
        plain = {"activation": "none"}
        source, target = [], [{"op": "concat", "params": {"axis": 0}, "inputs": xs, "outputs": ["t0"]},
                              {"op": "matmul", "params": plain, "inputs": ["t0", "w"], "outputs": ["t1"]}]
        constraints = [{"eq": [{"dim": [x, 1]}, {"dim": ["w", 0]}]} for x in xs]
        if self.bias:
            inputs.append({"name": "b", "class": "vec", "shape": [4], "dtype": "float32"})
            constraints.append({"eq": [{"dim": ["b", 0]}, {"dim": ["w", 1]}]})
            for i, x in enumerate(xs):
                source += [{"op": "matmul", "params": plain, "inputs": [x, "w"], "outputs": [f"m{i}"]},
                           {"op": "add", "params": {}, "inputs": [f"m{i}", "b"], "outputs": [f"s{i}"]}]
            target.append({"op": "add", "params": {}, "inputs": ["t1", "b"], "outputs": ["t2"]})
        else:
            source = [{"op": "matmul", "params": plain, "inputs": [x, "w"], "outputs": [f"s{i}"]} for i, x in enumerate(xs)]
        parts = [f"o{i}" for i in range(k)]
        target.append({"op": "split", "params": {"axis": 0, "sizes": [2] * k}, "inputs": [target[-1]["outputs"][0]], "outputs": parts})
        return Rule.from_json({
            "name": f"{self.name}-{k}", "inputs": inputs, "source": source, "target": target,
            "outputs": [[f"s{i}", o] for i, o in enumerate(parts)],
            "params": [{"side": "target", "node": len(target) - 1, "param": "sizes", "value": [{"dim": [x, 0]} for x in xs]}],
            "constraints": constraints,
        })

    def groups(self, graph: Graph) -> Iterator[tuple[dict[str, str], list[Site]]]:
        by_key: dict[tuple[str, ...], list[Site]] = {}
        for node in graph.index.nodes_of("matmul"):
            if node.params["activation"] != "none" or node.outputs[0] in graph.outputs:
                continue
            x, w = node.inputs
            if graph.type(x).rank != 2 or graph.type(w).rank != 2:
                continue
            if not self.bias:
                by_key.setdefault((w,), []).append(Site((node,), {"x": x}))
                continue
            readers = graph.uses(node.outputs[0])
            if len(readers) != 1 or readers[0][0].op.name != "add":
                continue
            add = readers[0][0]
            b = add.inputs[1] if add.inputs[0] == node.outputs[0] else add.inputs[0]
            if b == node.outputs[0] or graph.type(b).rank != 1:
                continue
            by_key.setdefault((w, b), []).append(Site((node, add), {"x": x, "m": node.outputs[0]}))
        for key, sites in by_key.items():
            if len(sites) >= MIN_GROUP:
                yield dict(zip(("w", "b"), key)), sites


@dataclass(frozen=True)
class SharedInputColumns(Family):
    """k products ``x @ w_i`` -> one product of ``x`` by the columns of all ``w_i``, split back.

    ``[x @ w_0, ..., x @ w_{k-1}]`` = ``split(x @ concat(w_0, ..., w_{k-1}, axis=1), axis=1)`` for 2-D ``x`` and ``w_i``:
    the gates of a recurrent cell computed from one state by separate weights. With ``rank=3``, a batch of rows ``x``
    (a transformer's Q, K and V projections of one sequence), split along its last axis. With weights for ``w_i`` the
    concatenation is folded into one initializer at export.
    """

    rank: int = 2  # the shared input's
    site_input: str = field(default="w", init=False)

    @functools.cache
    def rule(self, k: int) -> Rule:
        ws = [f"w{i}" for i in range(k)]
        last = self.rank - 1
        inputs = [{"name": "x", "class": "act", "shape": [2, 4] if self.rank == 2 else [2, 3, 4], "dtype": "float32"}]
        inputs += [{"name": w, "class": "mat", "shape": [4, 4], "dtype": "float32"} for w in ws]
        plain = {"activation": "none"}
        parts = [f"o{i}" for i in range(k)]
        return Rule.from_json({
            "name": f"{self.name}-{k}", "inputs": inputs,
            "source": [{"op": "matmul", "params": plain, "inputs": ["x", w], "outputs": [f"s{i}"]} for i, w in enumerate(ws)],
            "target": [{"op": "concat", "params": {"axis": 1}, "inputs": ws, "outputs": ["t0"]},
                       {"op": "matmul", "params": plain, "inputs": ["x", "t0"], "outputs": ["t1"]},
                       {"op": "split", "params": {"axis": last, "sizes": [2] * k}, "inputs": ["t1"], "outputs": parts}],
            "outputs": [[f"s{i}", o] for i, o in enumerate(parts)],
            "params": [{"side": "target", "node": 2, "param": "sizes", "value": [{"dim": [w, 1]} for w in ws]}],
            "constraints": [{"eq": [{"dim": ["x", last]}, {"dim": [w, 0]}]} for w in ws],
        })

    def groups(self, graph: Graph) -> Iterator[tuple[dict[str, str], list[Site]]]:
        by_input: dict[str, list[Site]] = {}
        for node in graph.index.nodes_of("matmul"):
            if node.params["activation"] != "none" or node.outputs[0] in graph.outputs:
                continue
            x, w = node.inputs
            if graph.type(x).rank == self.rank and graph.type(w).rank == 2:
                by_input.setdefault(x, []).append(Site((node,), {"w": w}))
        for x, sites in by_input.items():
            if len(sites) >= MIN_GROUP:
                yield {"x": x}, sites


FAMILIES: tuple[Family, ...] = (
    SharedWeightRows("shared-weight-rows", "k products sharing a weight -> one product over their concatenated rows, split back"),
    SharedWeightRows("shared-weight-rows-bias", "k products sharing a weight and a bias -> one product and bias over their concatenated rows, split back", bias=True),
    SharedInputColumns("shared-input-columns", "k products sharing an input -> one product by their concatenated weight columns, split back"),
    SharedInputColumns("shared-input-columns-3d", "k products sharing a batch of rows -> one product by their concatenated weight columns, "
                       "split back", max_arity=8, rank=3),
)
_BY_NAME = {family.name: family for family in FAMILIES}  # a rule at arity k is named "<family>-<k>"


class GroupLibrary:
    """The proved arities of every family (``taso/data/groups.jsonl.gz``), compiled on first use."""

    def __init__(self, rules: Sequence[Rule]):
        self._proved = {r.id: r for r in rules if r.status == "proved"}
        self._compiled: dict[str, CompiledRule] = {}

    @classmethod
    @functools.cache
    def shipped(cls) -> GroupLibrary:
        return cls(list(Library.load(GROUP_LIBRARY)))

    def __len__(self) -> int:
        return len(self._proved)

    def rules(self) -> list[Rule]:
        return list(self._proved.values())

    @staticmethod
    def describe(rule: Rule) -> str:
        """One line for reports: the family's doc at this arity (the rule itself is a page long)."""
        family = _BY_NAME.get(rule.name.rsplit("-", 1)[0])
        return f"{family.doc} (k={len(rule.outputs)}, proved from {len((rule.proof or {}).get('axioms', ()))} axioms)" if family else str(rule)

    def proved(self, family: Family, k: int) -> Rule | None:
        """The family's rule at arity k as the file proves it (with its proof), when the file proves exactly that rule."""
        return self._proved.get(family.rule(k).id)

    def compiled(self, family: Family, k: int) -> CompiledRule | None:
        """:meth:`proved`, compiled for matching (once per rule)."""
        rule = self.proved(family, k)
        if rule is None:
            return None
        crule = self._compiled.get(rule.id)
        if crule is None:
            crule = self._compiled[rule.id] = CompiledRule(rule)
        return crule


@dataclass(frozen=True)
class GroupMatch:
    """A group found in a graph: the match of the family's rule at its arity, and the sites it merges."""

    match: Match
    sites: tuple[Site, ...]


@dataclass
class Groups:
    """What :func:`find_groups` found in one graph.

    Attributes:
        merges: one group merge per set of independent sites (chunks of at most the family's largest arity).
        apart: id(node) -> (group, site) for the nodes of every group's sites, and of every chain of
            sites (each computed from the one before: the recurrent product of an unrolled cell).
            The search matches no other rule across two sites of one group: a group merge does
            that for all of them at once, and any merge of two sites of a chain closes a cycle.
    """

    merges: list[GroupMatch] = field(default_factory=list)
    apart: dict[int, tuple[int, int]] = field(default_factory=dict)
    _next: int = 0  # the next group number in ``apart``

    def keep_apart(self, sites: Sequence[Site]) -> None:
        """Registers ``sites`` as one group of ``apart`` (a node already in one keeps its first group)."""
        for j, site in enumerate(sites):
            for node in site.nodes:
                self.apart.setdefault(id(node), (self._next, j))
        self._next += 1


def find_groups(graph: Graph, library: GroupLibrary, families: Sequence[Family] = FAMILIES, excluded: frozenset[str] = frozenset()) -> Groups:
    """The group merges of every family in ``graph``, and the sites no pairwise rule should join (see :class:`Groups`).

    Sites are kept in topological order when no earlier kept site computes their inputs: merging
    a site with one it depends on would close a cycle.
    """
    found = Groups()
    index = graph.index
    for family in families:
        for shared, sites in family.groups(graph):
            sites.sort(key=lambda site: index.position(site.nodes[0].outputs[0]))
            read = family.site_input
            if all(index.depends_on([later.values[read]], set(earlier.nodes[-1].outputs)) for earlier, later in zip(sites, sites[1:])):
                found.keep_apart(sites)
                continue
            kept = index.independent([[s.values[read]] for s in sites], [s.nodes[-1].outputs for s in sites])
            chosen = [sites[i] for i in kept]
            for start in range(0, len(chosen), family.max_arity):
                chunk = chosen[start:start + family.max_arity]
                crule = library.compiled(family, len(chunk)) if len(chunk) >= MIN_GROUP else None
                if crule is None or crule.label in excluded:
                    continue
                values, nodes = dict(shared), []
                for i, site in enumerate(chunk):
                    nodes.extend(site.nodes)
                    values.update({f"{name}{i}": value for name, value in site.values.items()})
                    values[f"s{i}"] = site.nodes[-1].outputs[0]
                if decline_reason(graph, crule, tuple(nodes), values) is None:  # the check every pairwise match passes
                    found.merges.append(GroupMatch(Match(crule, tuple(nodes), values), tuple(chunk)))
                found.keep_apart(chunk)
    return found


def merged(graph: Graph, match: Match, clean: bool = True) -> tuple[Graph, bool] | None:
    """``graph`` with one group merge applied and (with ``clean``) cleaned up, and whether clean-up changed it (None
    when the merge does not apply).

    What makes an unrolled cell's merge pay is the clean-up after it: the k gathers that fed the
    merged product become one transpose (:mod:`taso.search.cleanup`)."""
    from .cleanup import clean_up
    from .rewrite import plan_match

    plan = plan_match(graph, match)
    built = plan.materialize() if plan is not None else None
    if built is None:
        return None
    if not clean:
        return built, False
    cleaned = clean_up(built)[0]
    return cleaned, cleaned is not built


CHAIN = 32  # most group merges one chain makes


@dataclass(frozen=True)
class ChainStep:
    """A version of :func:`merge_chain`: the merges made so far, the graph, and whether clean-up changed the last merge's graph."""

    rules: tuple[CompiledRule, ...]
    graph: Graph
    cleaned: bool


def merge_chain(graph: Graph, library: GroupLibrary, excluded: frozenset[str] = frozenset(), deadline: float = float("inf"),
                limit: int = CHAIN, clean: bool = True) -> Iterator[ChainStep]:
    """Versions of ``graph`` with one group merge more each, cleaned up (with ``clean``).

    Each step applies the first group found that merges (one taking the most nodes of each site first), until none
    is left, ``limit`` merges or ``deadline``.
    Why a chain: a merge can make the next group (NasRNN's products share an input only once their
    rows are merged), and on NasRNN each of the last per-step column merges is priced a loss alone
    (2.0 ms -> 2.04-2.09 ms) while the last of them, with every other in place, brings the recurrent
    weights back into the cache (1.95 ms -> 1.69 ms): a search that must see each merge pay before
    the next stops short of it.
    """
    rules: tuple[CompiledRule, ...] = ()
    current = graph
    for _ in range(limit):
        if time.perf_counter() > deadline:
            return
        # A merge that takes more of each site (the bias after each product, too) goes before one that takes less.
        for found in sorted(find_groups(current, library, excluded=excluded).merges, key=lambda m: -len(m.sites[0].nodes)):
            step = merged(current, found.match, clean)
            if step is not None:
                break
        else:
            return
        current, rules = step[0], (*rules, found.match.rule)
        yield ChainStep(rules, current, step[1])
