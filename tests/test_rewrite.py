"""The rewrite engine: rules fire where their pattern is, not on near-misses, and keep results equal."""

from __future__ import annotations

import numpy as np
import pytest
from rule_examples import add_commute_rule, all_rules, matmul_assoc_rule, relu_fusion_rule, shared_input_merge_rule, shared_weight_merge_rule

from taso import ops
from taso.ir import Graph, Node, TensorType, check
from taso.search.rewrite import CompiledRule, find_matches, rewrites


def _n(op, inputs, outputs, **params):
    o = ops.get(op)
    return Node(o, o.make_params(**params), tuple(inputs), tuple(outputs), outputs[0])


def _w(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _feeds(graph, seed=1):
    return {k: _w(*t.shape, seed=seed) for k, t in graph.inputs.items()}


def _assert_same_outputs(a: Graph, b: Graph):
    feeds = _feeds(a)
    for (ka, va), (kb, vb) in zip(a.run(feeds).items(), b.run(feeds).items()):
        assert ka == kb
        np.testing.assert_allclose(va, vb, rtol=1e-4, atol=1e-5)


def _attention_like() -> Graph:
    """x @ Wq, x @ Wk, x @ Wv with real model shapes (not the rule's 4x4 examples), each then relu'd."""
    weights = {f"w{k}": _w(16, 8, seed=i) for i, k in enumerate("qkv")}
    nodes = [_n("matmul", ["x", f"w{k}"], [k]) for k in "qkv"] + [_n("relu", [k], [f"r{k}"]) for k in "qkv"]
    nodes.append(_n("concat", ["rq", "rk", "rv"], ["out"], axis=1))
    return Graph({"x": TensorType((3, 16))}, weights, nodes, ["out"])


@pytest.mark.parametrize("make", [shared_input_merge_rule, relu_fusion_rule])
def test_rule_fires_on_model_shapes_and_keeps_outputs(make):
    graph = _attention_like()
    results = list(rewrites(graph, CompiledRule(make())))
    assert results, "the rule should match"
    for new in results:
        check(new)
        _assert_same_outputs(graph, new)


def test_shared_input_merge_matches_each_pair_of_siblings():
    matches = list(find_matches(_attention_like(), CompiledRule(shared_input_merge_rule())))
    pairs = {frozenset(n.outputs[0] for n in m.nodes) for m in matches}
    assert pairs == {frozenset("qk"), frozenset("qv"), frozenset("kv")}


def test_split_sizes_come_from_the_matched_shapes():
    graph = Graph({"x": TensorType((3, 16))}, {"a": _w(16, 5), "b": _w(16, 7, seed=1)},
                  [_n("matmul", ["x", "a"], ["p"]), _n("matmul", ["x", "b"], ["q"]), _n("concat", ["p", "q"], ["out"], axis=1)], ["out"])
    new = next(rewrites(graph, CompiledRule(shared_input_merge_rule())))
    split = new.index.nodes_of("split")[0]
    assert split.params["sizes"] in ((5, 7), (7, 5))
    _assert_same_outputs(graph, new)


def test_no_match_on_a_near_miss():
    # Different first operands: no shared input, so the Q/K/V merge must not fire.
    graph = Graph({"x": TensorType((3, 16)), "y": TensorType((3, 16))}, {"a": _w(16, 8), "b": _w(16, 8, seed=1)},
                  [_n("matmul", ["x", "a"], ["p"]), _n("matmul", ["y", "b"], ["q"]), _n("add", ["p", "q"], ["out"])], ["out"])
    assert list(find_matches(graph, CompiledRule(shared_input_merge_rule()))) == []
    # A fused activation is a different parameter: relu fusion needs a plain matmul.
    fused = Graph({"x": TensorType((3, 16))}, {"a": _w(16, 8)}, [_n("matmul", ["x", "a"], ["p"], activation="tanh"), _n("relu", ["p"], ["out"])], ["out"])
    assert list(find_matches(fused, CompiledRule(relu_fusion_rule()))) == []


def test_interior_value_used_elsewhere_blocks_the_rewrite():
    # s0 = x@y is also a graph output: re-associating would lose it.
    graph = Graph({"x": TensorType((4, 4))}, {"y": _w(4, 4), "z": _w(4, 4, seed=1)},
                  [_n("matmul", ["x", "y"], ["s0"]), _n("matmul", ["s0", "z"], ["s1"])], ["s1", "s0"])
    assert list(rewrites(graph, CompiledRule(matmul_assoc_rule()))) == []
    single = Graph(graph.inputs, graph.weights, graph.nodes, ["s1"])
    (new,) = list(rewrites(single, CompiledRule(matmul_assoc_rule())))
    _assert_same_outputs(single, new)


def test_shared_weight_merge_batches_two_applications_of_one_weight():
    graph = Graph({"x": TensorType((1, 8)), "y": TensorType((1, 8))}, {"w": _w(8, 8)},
                  [_n("matmul", ["x", "w"], ["a"]), _n("matmul", ["y", "w"], ["b"]), _n("mul", ["a", "b"], ["out"])], ["out"])
    new = next(rewrites(graph, CompiledRule(shared_weight_merge_rule())))
    assert new.op_histogram()["matmul"] == 1
    _assert_same_outputs(graph, new)


def test_commutative_ops_match_in_either_operand_order():
    graph = Graph({"x": TensorType((2, 4)), "y": TensorType((2, 4))}, {}, [_n("add", ["y", "x"], ["out"])], ["out"])
    assert len(list(find_matches(graph, CompiledRule(add_commute_rule())))) == 2


def test_every_example_rule_applies_to_its_own_source():
    for rule in all_rules():
        source = rule.side_graph("source")
        results = list(rewrites(source, CompiledRule(rule)))
        assert results, rule.name
        for new in results:
            _assert_same_outputs(source, new)


def test_a_shape_expression_that_does_not_fit_the_rank_declines_the_match():
    # The merge's split sizes read dimension 1 of w1; a rank-1 "weight" cannot provide it.
    graph = Graph({"x": TensorType((3, 16))}, {"a": _w(16), "b": _w(16, seed=1)},
                  [_n("matmul", ["x", "a"], ["p"]), _n("matmul", ["x", "b"], ["q"]), _n("add", ["p", "q"], ["out"])], ["out"])
    assert list(rewrites(graph, CompiledRule(shared_input_merge_rule()))) == []


def test_narrowing_the_anchor_by_its_inputs_producers_finds_exactly_the_same_matches():
    """find_matches anchors only on nodes whose input the pattern says another pattern node computes
    (GraphIndex.fed_by): a necessary condition, so every rule finds the same matches, in the same order, as
    anchoring on every node of the op."""
    import os

    from taso.onnx import load_onnx
    from taso.pipeline.library import load_rules
    from taso.search.core import RuleIndex

    for name in ("lstm_cell_loop.dynamo.onnx", "gru_cell_loop.torchscript.onnx"):
        graph = load_onnx(os.path.join(os.path.dirname(__file__), "data", "symbolic", name))
        index = RuleIndex(load_rules(), connected_only=False)
        index.admit(graph)
        narrowed = 0
        for crule in index.compiled:
            found = [(tuple(id(n) for n in m.nodes), tuple(sorted(m.values.items()))) for m in find_matches(graph, crule)]
            feeds, crule.anchor_feeds = crule.anchor_feeds, ()
            try:
                every = [(tuple(id(n) for n in m.nodes), tuple(sorted(m.values.items()))) for m in find_matches(graph, crule)]
            finally:
                crule.anchor_feeds = feeds
            assert found == every, crule.label
            narrowed += bool(feeds)
        assert narrowed > 100, "most rules' roots read another pattern node"


def test_dropping_partial_matches_outside_the_proof_keeps_exactly_the_matches_not_declined():
    """A rule input bound to a value of another rank or element kind ends the partial match at once; the matches
    left are exactly the complete ones decline_reason accepts."""
    import os

    from taso.onnx import load_onnx
    from taso.pipeline.library import load_rules
    from taso.search.core import RuleIndex
    from taso.search.rewrite import decline_reason

    for name in ("lstm_cell_loop.dynamo.onnx", "gru_cell_loop.torchscript.onnx"):
        graph = load_onnx(os.path.join(os.path.dirname(__file__), "data", "symbolic", name))
        index = RuleIndex(load_rules(), connected_only=False)
        index.admit(graph)
        for crule in index.compiled:
            kept = [(tuple(id(n) for n in m.nodes), tuple(sorted(m.values.items()))) for m in find_matches(graph, crule)]
            accepted = [(tuple(id(n) for n in m.nodes), tuple(sorted(m.values.items()))) for m in find_matches(graph, crule, structural=True)
                        if decline_reason(graph, crule, m.nodes, m.values) is None]
            assert kept == accepted, crule.label


def test_a_pattern_output_past_the_producers_outputs_is_no_match_not_an_error():
    """Seeded at the relu, the pattern's split must produce the relu's input as its second output; the graph's producer
    there (a sigmoid) has one output. Found by depth-4 rules (split, then an op on one part) in the search."""
    from rule_examples import _inp

    from taso.rules import Rule, RuleNode

    split = RuleNode("split", {"axis": 1, "sizes": (2, 2)}, ("x",), ("a", "b"))
    rule = Rule(inputs=(_inp("x", "act", (2, 4)),), source=(split, RuleNode("relu", {}, ("b",), ("c",))),
                target=(split, RuleNode("relu", {}, ("b",), ("d",))), outputs=(("c", "d"),), name="split-then-relu")
    graph = Graph({"x": TensorType((2, 4))}, {}, [_n("sigmoid", ["x"], ["s"]), _n("relu", ["s"], ["out"])], ["out"])
    relu = graph.index.nodes_of("relu")[0]
    crule = CompiledRule(rule)
    seed = next(i for i, p in enumerate(crule.nodes) if p.op_name == "relu")
    assert list(find_matches(graph, crule, seed=(seed, relu))) == []
