"""Generalisation's fast paths (issue 27) give the answers of their slow definitions.

:mod:`taso.generator.generalize` keeps a per-process memo of shape inference and parameter
validation, types a rule's sides without building IR graphs, and validates rules through that
memo. Each is checked here against the definition it replaced: fresh registry calls,
``Rule.side_graph`` and ``Rule.validate``, on every candidate of small generator runs.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from taso.generator import Settings, ShapeClass, generalize, parse_ops
from taso.generator.emit import build_rule
from taso.generator.enumerate import Enumerator, GraphSpec
from taso.generator.pairing import FloatCheck, pair_graphs
from taso.generator.prune import dedupe_renamings, shares_subgraph

from taso import ops as registry
from taso.errors import ShapeError, TasoError
from taso.ir import Params
from taso.rules import Rule

CONV_POOL = (
    ShapeClass("img", "i", (2, 4, 5, 5), 1, "data"),
    ShapeClass("kernel3x3", "k", (4, 4, 3, 3), 2, "weight"),
    ShapeClass("kernel1x3", "kh", (4, 4, 1, 3), 1, "weight"),
)
RUNS = {
    "default ops, depth 2": Settings(max_ops=2),
    "convolutions, depth 3": Settings(max_ops=3, ops=parse_ops("conv2d,add,concat,split,enlarge,relu"), classes=CONV_POOL),
}


def _literal_rules(settings: Settings) -> list[Rule]:
    """The rules a run generalises, before generalisation: candidates clear of common subgraphs that hold in float."""
    enumerator = Enumerator(settings)
    graphs: list[tuple[int, GraphSpec]] = []

    def visit(key, ops, last, outputs):
        graphs.append((key, GraphSpec(tuple(ops) + ((last,) if last is not None else ()), tuple(outputs))))

    for root in enumerator.roots():
        enumerator.walk(root, visit)
    check = FloatCheck(enumerator.context, settings.seed)
    kept = [c for c in dedupe_renamings(pair_graphs(graphs, enumerator.context)) if not c.trivial]
    return [build_rule(c) for c in kept if not shares_subgraph(c.candidate) and check.holds(c.candidate)]


@pytest.fixture(scope="module", params=list(RUNS))
def rules(request) -> list[Rule]:
    return _literal_rules(RUNS[request.param])


class _Fresh(generalize._ShapeMemo):
    """The memo's interface answering every call afresh from the registry: the definition the memo must match."""

    def frozen(self, items: tuple) -> Params:
        return Params(items)

    def validated(self, op: str, items: tuple) -> Params:
        return registry.get(op).make_params(**dict(items))

    def outputs(self, op: str, types: tuple, params: Params):
        try:
            return tuple(registry.get(op).infer(list(types), params))
        except ShapeError:
            return None


def _slow_evaluate_side(rule: Rule, side: str, feeds: dict) -> dict:
    """What ``generalize.evaluate_side`` computed before its fast path: through the side's IR graph."""
    graph = rule.side_graph(side, {name: array.shape for name, array in feeds.items()})
    values = dict(feeds)
    for node in graph.topological_order():
        values.update(zip(node.outputs, node.op.evaluate([values[v] for v in node.inputs], node.params)))
    return values


def _generalized(rules: list[Rule]) -> list[dict | None]:
    return [None if r is None else r.to_json() for r in generalize.generalize_all([(rule, 0) for rule in rules])]


@pytest.mark.parametrize("limit", [generalize._ShapeMemo.LIMIT, 3])
def test_memoised_generalisation_equals_generalisation_from_fresh_registry_calls(rules, monkeypatch, limit):
    """The memo is warm from every other rule, in shuffled order (and emptied every few entries with limit 3)."""
    with monkeypatch.context() as slow:
        slow.setattr(generalize, "_MEMO", _Fresh())
        slow.setattr(generalize, "evaluate_side", _slow_evaluate_side)
        slow.setattr(generalize, "_validate", Rule.validate)
        expected = _generalized(rules)
    assert sum(r is not None for r in expected) > len(rules) // 2
    monkeypatch.setattr(generalize._ShapeMemo, "LIMIT", limit)
    monkeypatch.setattr(generalize, "_MEMO", generalize._ShapeMemo())
    order = list(range(len(rules)))
    random.Random(1).shuffle(order)
    _generalized([rules[i] for i in order])  # warms the memo
    assert _generalized(rules) == expected


def test_evaluate_side_equals_evaluation_through_the_ir_graph_and_refuses_what_it_refuses(rules):
    rng = np.random.default_rng(0)
    refused = 0
    for rule in rules[:60]:
        for grow in (0, 2, 3):  # 3 breaks the parity of centred kernels: some sides must refuse it
            shapes = {i.name: tuple(d + grow if d > 1 else d for d in i.type.shape) for i in rule.inputs}
            feeds = {name: rng.standard_normal(shape) for name, shape in shapes.items()}
            for side in ("source", "target"):
                try:
                    expected = _slow_evaluate_side(rule, side, feeds)
                except TasoError:
                    refused += 1
                    with pytest.raises(TasoError):
                        generalize.evaluate_side(rule, side, feeds)
                    continue
                got = generalize.evaluate_side(rule, side, feeds)
                assert got.keys() == expected.keys()
                assert all(np.array_equal(got[k], expected[k]) for k in got)
    assert refused > 0


def _with_first_source_node(rule: Rule, **changes) -> Rule:
    return replace(rule, source=(replace(rule.source[0], **changes), *rule.source[1:]))


def _mistyped_output(rules: list[Rule]) -> Rule:
    """A rule with its first output mapped to a target value of another type."""
    for rule in rules:
        types = rule.side_graph("target").types
        s, t = rule.outputs[0]
        other = next((v for v, ty in types.items() if ty != types[t]), None)
        if other is not None:
            return replace(rule, outputs=((s, other), *rule.outputs[1:]))
    raise AssertionError("no rule has values of two types")


def test_validate_refuses_what_rule_validate_refuses(rules):
    rule = rules[0]
    first, node = rule.inputs[0], rule.source[0]
    broken = [
        replace(rule, outputs=()),
        replace(rule, inputs=(first, *rule.inputs)),
        replace(rule, constraints=({"eq": [{"dim": [first.name, 0]}, first.type.shape[0] + 1]},)),
        replace(rule, status="wrong"),
        _mistyped_output(rules),
        replace(rule, outputs=((rule.outputs[0][0], "nowhere"),)),
        _with_first_source_node(rule, inputs=("nowhere",) + node.inputs[1:]),
        _with_first_source_node(rule, params={**node.params, "bogus": 1}),
    ]
    for bad in broken:
        with pytest.raises(TasoError) as expected:
            bad.validate()
        with pytest.raises(expected.type):
            generalize._validate(bad)
    for good in rules:
        good.validate()
        generalize._validate(good)
