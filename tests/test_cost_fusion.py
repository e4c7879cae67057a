"""Fusions the runtime makes, in the per-node price: what ONNX Runtime runs inside another kernel costs nothing,
and a rewrite's price accounts for the fusions it breaks or makes around it."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import library_rewrites

import taso
from taso import ops
from taso.cost import AnalyticCost, Neighbourhood
from taso.cost.ort_cpu import OrtCpuCost
from taso.cost.ort_fusions import gather_siblings, split_gathers
from taso.ir import Graph, Node, TensorType
from taso.search.rewrite import CompiledRule, plans


class FusingAnalytic(AnalyticCost):
    """The roofline with ONNX Runtime's fusions: ``OrtCpuCost.absorbed`` without measuring anything."""

    context_sensitive = True
    absorbers = OrtCpuCost.absorbers
    absorbed = OrtCpuCost.absorbed
    shared_price = OrtCpuCost.shared_price
    _split_share = OrtCpuCost._split_share

    def fusion_neighbours(self, parent, before, after, removed, added):
        return {**super().fusion_neighbours(parent, before, after, removed, added), **gather_siblings(parent, removed, added)}


def _n(op, inputs, outputs, **params):
    o = ops.get(op)
    return Node(o, o.make_params(**params), tuple(inputs), tuple(outputs), outputs[0])


def _absorbed(graph: Graph) -> set[str]:
    around = Neighbourhood.of(graph)
    return {n.outputs[0] for n in graph.nodes if OrtCpuCost.absorbed(None, n, around)}


RNG = np.random.default_rng(0)
W = RNG.standard_normal((8, 8)).astype(np.float32)
BIAS = RNG.standard_normal(8).astype(np.float32)
KERNEL = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)


def test_an_activation_after_a_conv_and_a_bias_add_after_a_2d_matmul_are_absorbed():
    conv = Graph({"x": TensorType((1, 3, 8, 8))}, {"k": KERNEL},
                 [_n("conv2d", ["x", "k"], ["c"], pads=(1, 1, 1, 1)), _n("relu", ["c"], ["y"])], ["y"])
    assert _absorbed(conv) == {"y"}
    linear = Graph({"x": TensorType((2, 8))}, {"w": W, "b": BIAS}, [_n("matmul", ["x", "w"], ["m"]), _n("add", ["b", "m"], ["y"])], ["y"])
    assert _absorbed(linear) == {"y"}
    model = FusingAnalytic()
    assert model.graph_cost(linear) == AnalyticCost().graph_cost(Graph(linear.inputs, linear.weights, [linear.nodes[0]], ["m"]))


def test_no_fusion_where_onnx_runtime_makes_none():
    # the conv's output read twice; a graph output; a batched (3-D) matmul; a bias that is an input, not a constant row
    twice = Graph({"x": TensorType((1, 3, 8, 8))}, {"k": KERNEL},
                  [_n("conv2d", ["x", "k"], ["c"], pads=(1, 1, 1, 1)), _n("relu", ["c"], ["y"]), _n("sigmoid", ["c"], ["z"])], ["y", "z"])
    assert _absorbed(twice) == set()
    exposed = Graph({"x": TensorType((1, 3, 8, 8))}, {"k": KERNEL},
                    [_n("conv2d", ["x", "k"], ["c"], pads=(1, 1, 1, 1)), _n("relu", ["c"], ["y"])], ["y", "c"])
    assert _absorbed(exposed) == set()
    batched = Graph({"x": TensorType((2, 2, 8))}, {"w": W, "b": BIAS}, [_n("matmul", ["x", "w"], ["m"]), _n("add", ["m", "b"], ["y"])], ["y"])
    assert _absorbed(batched) == set()
    fed = Graph({"x": TensorType((2, 8)), "b": TensorType((8,))}, {"w": W}, [_n("matmul", ["x", "w"], ["m"]), _n("add", ["m", "b"], ["y"])], ["y"])
    assert _absorbed(fed) == set()
    fused_already = Graph({"x": TensorType((1, 3, 8, 8))}, {"k": KERNEL},
                          [_n("conv2d", ["x", "k"], ["c"], pads=(1, 1, 1, 1), activation="relu"), _n("sigmoid", ["c"], ["y"])], ["y"])
    assert _absorbed(fused_already) == set()


def _bn_params(prefix: str) -> dict[str, np.ndarray]:
    return {f"{prefix}{k}": (RNG.random(4) + 0.5 if k == "var" else RNG.standard_normal(4)).astype(np.float32) for k in ("scale", "shift", "mean", "var")}


def _bn(prefix: str, data: str, out: str) -> Node:
    return _n("batch_norm", [data, *(f"{prefix}{k}" for k in ("scale", "shift", "mean", "var"))], [out])


def test_a_batch_norm_after_a_conv_is_folded_and_the_activation_after_it_fused():
    # ONNX Runtime's ConvBNFusion folds the BatchNormalization into the Conv, then FusedConv takes the ReLU.
    net = Graph({"x": TensorType((1, 3, 8, 8))}, {"k": KERNEL, **_bn_params("b")},
                [_n("conv2d", ["x", "k"], ["c"], pads=(1, 1, 1, 1)), _bn("b", "c", "n"), _n("relu", ["n"], ["y"])], ["y"])
    assert _absorbed(net) == {"n", "y"}
    conv_only = Graph(net.inputs, {"k": KERNEL}, [net.nodes[0]], ["c"])
    assert FusingAnalytic().graph_cost(net) == AnalyticCost().graph_cost(conv_only)
    # Not folded: parameters that are inputs, a conv read twice, a conv whose kernel is an input.
    fed = Graph({"x": TensorType((1, 3, 8, 8)), **{k: TensorType((4,)) for k in _bn_params("b")}}, {"k": KERNEL}, net.nodes, ["y"])
    assert _absorbed(fed) == set()
    twice = Graph(net.inputs, net.weights, [*net.nodes, _n("sigmoid", ["c"], ["z"])], ["y", "z"])
    assert _absorbed(twice) == set()
    kernel_fed = Graph({"x": TensorType((1, 3, 8, 8)), "k": TensorType(KERNEL.shape)}, _bn_params("b"), net.nodes, ["y"])
    assert _absorbed(kernel_fed) == set()


def _conv_bn_net() -> Graph:
    """Two sibling Conv + BatchNormalization + ReLU of one input, summed: a merge or fold two nodes away from the ReLU changes whether it is fused."""
    k2 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [_n("conv2d", ["x", "k1"], ["c1"], pads=(1, 1, 1, 1)), _bn("b1", "c1", "n1"), _n("relu", ["n1"], ["r1"]),
             _n("conv2d", ["x", "k2"], ["c2"], pads=(1, 1, 1, 1)), _bn("b2", "c2", "n2"), _n("relu", ["n2"], ["r2"]), _n("add", ["r1", "r2"], ["y"])]
    return Graph({"x": TensorType((1, 3, 8, 8))}, {"k1": KERNEL, "k2": k2, **_bn_params("b1"), **_bn_params("b2")}, nodes, ["y"])


def _summed_linear_steps(steps: int) -> list[Node]:
    """``x{t} @ w + b`` for each step (MatMul + bias Add, one shared weight), summed over the steps, then a Tanh."""
    nodes, acc = [], None
    for t in range(steps):
        nodes += [_n("matmul", [f"x{t}", "w"], [f"m{t}"]), _n("add", [f"m{t}", "b"], [f"h{t}"])]
        if acc is None:
            acc = f"h{t}"
        else:
            nodes.append(_n("add", [acc, f"h{t}"], [f"s{t}"]))
            acc = f"s{t}"
    return nodes + [_n("tanh", [acc], ["out"])]


def _unrolled_linear(steps: int) -> Graph:
    """What an exporter emits for nn.Linear applied at each step: MatMul + bias Add with one shared weight."""
    return Graph({f"x{t}": TensorType((1, 8)) for t in range(steps)}, {"w": W, "b": BIAS}, _summed_linear_steps(steps), ["out"])


def _gathered_steps(steps: int, index_shape: tuple = (), length: int | None = None) -> Graph:
    """An exporter's unrolled ``x[:, t] @ W + b`` over the first ``steps`` of ``x`` (``length``, default all of them):
    one Gather per step at a constant index."""
    gathers = [_n("gather", ["x", f"i{t}"], [f"x{t}"], axis=1) for t in range(steps)]
    indices = {f"i{t}": np.full(index_shape, t, np.int64) for t in range(steps)}
    return Graph({"x": TensorType((1, length or steps, 8))}, {"w": W, "b": BIAS, **indices},
                 gathers + _summed_linear_steps(steps), ["out"])


def _conv_net() -> Graph:
    """Two sibling convs of one input, each with its ReLU, summed: a merge would put a Split between conv and ReLU."""
    k2 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [_n("conv2d", ["x", "k1"], ["c1"], pads=(1, 1, 1, 1)), _n("relu", ["c1"], ["r1"]),
             _n("conv2d", ["x", "k2"], ["c2"], pads=(1, 1, 1, 1)), _n("relu", ["c2"], ["r2"]), _n("add", ["r1", "r2"], ["y"])]
    return Graph({"x": TensorType((1, 3, 8, 8))}, {"k1": KERNEL, "k2": k2}, nodes, ["y"])


@pytest.mark.parametrize("graph", [_unrolled_linear(3), _gathered_steps(3), _conv_net(), _conv_bn_net(), taso.load_onnx(__import__("taso.models", fromlist=["build"]).build("nasrnn", steps=2, hidden=16))],
                         ids=["unrolled-linear", "gathered-steps", "sibling-convs", "sibling-conv-bn-relu", "nasrnn"])
def test_a_rewrites_price_is_the_child_graphs_cost(graph):
    # The search prices a child from its parent without building it: with fusions that depend on
    # the nodes around a rewrite, the two must still agree exactly, for every rewrite of the library.
    model = FusingAnalytic()
    parent_cost = model.graph_cost(graph)
    checked = 0
    for rule, plan, child in library_rewrites(graph):
        assert model.rewrite_cost(graph, parent_cost, plan.removed, plan.added, plan) == pytest.approx(model.graph_cost(child), rel=1e-12, abs=1e-15), rule
        checked += 1
    assert checked > 10


def test_merging_steps_that_share_a_weight_pays_for_the_bias_adds_it_stops_fusing():
    from rule_examples import shared_weight_merge_rule

    from taso.search import SearchConfig, search

    graph = _unrolled_linear(4)
    plain, fusing = AnalyticCost(), FusingAnalytic()
    merge = CompiledRule(shared_weight_merge_rule())
    plan = next(plans(graph, merge))
    gain_plain = plain.rewrite_cost(graph, 0.0, plan.removed, plan.added, plan)
    gain_fusing = fusing.rewrite_cost(graph, 0.0, plan.removed, plan.added, plan)
    adds = sum(plain.node_cost(n, graph) for n in graph.nodes if n.op.name == "add" and "b" in n.inputs and n.inputs[0] in ("m0", "m1"))
    assert gain_fusing == pytest.approx(gain_plain + adds)  # the two bias adds now run on their own
    _, report = search(graph, [merge.rule], fusing, SearchConfig(budget=20))
    assert report.best_cost <= fusing.graph_cost(graph)


def test_a_fused_activation_is_priced_from_the_plain_ops_measurement(tmp_path, monkeypatch):
    # One measurement of the plain Conv serves both forms: fusing a ReLU into a Conv (which ONNX
    # Runtime does itself) is never a gain, whatever load each form was timed under. A MatMul's
    # activation runs as a kernel of its own, so it costs the plain MatMul plus the activation.
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    model = OrtCpuCost(threads=1)
    conv = Graph({"x": TensorType((1, 3, 8, 8))}, {"k": KERNEL}, [_n("conv2d", ["x", "k"], ["c"], pads=(1, 1, 1, 1))], ["c"])
    plain = conv.nodes[0]
    fused = Node(plain.op, plain.params.replace(activation="relu"), plain.inputs, plain.outputs, "fused")
    assert model.node_cost(fused, conv) == model.node_cost(plain, conv) > 0
    linear = Graph({"x": TensorType((2, 8))}, {"w": W}, [_n("matmul", ["x", "w"], ["m"])], ["m"])
    mm = linear.nodes[0]
    with_tanh = Node(mm.op, mm.params.replace(activation="tanh"), mm.inputs, mm.outputs, "mm_tanh")
    tanh = Graph({"m": TensorType((2, 8))}, {}, [_n("tanh", ["m"], ["t"])], ["t"])
    assert model.node_cost(with_tanh, linear) == pytest.approx(model.node_cost(mm, linear) + model.node_cost(tanh.nodes[0], tanh))
    assert model.measured == 3  # the conv, the matmul and the tanh: nothing measured for the fused forms


def test_gathers_of_every_position_of_an_axis_run_as_one_split_as_onnx_runtime_makes_them():
    graph = _gathered_steps(4)
    around = Neighbourhood.of(graph)
    gathers = [n for n in graph.nodes if n.op.name == "gather"]
    assert all(split_gathers(g, around) == gathers for g in gathers)
    three = _gathered_steps(3, length=4)
    assert all(split_gathers(g, Neighbourhood.of(three)) is None for g in three.nodes if g.op.name == "gather"), \
        "3 Gathers of a 4-long axis stay Gathers (ONNX Runtime 1.32)"
    dynamic = Graph({"x": TensorType((1, 4, 8)), "t": TensorType((), "int64")}, {"w": W},
                    [_n("gather", ["x", "t"], ["g"], axis=1), _n("matmul", ["g", "w"], ["y"])], ["y"])
    assert split_gathers(dynamic.nodes[0], Neighbourhood.of(dynamic)) is None, "an index computed at run time"


def test_a_gather_run_in_one_split_costs_its_share_of_it_and_its_squeeze():
    model = FusingAnalytic()
    for index_shape, squeezed in (((), True), ((1,), False)):
        graph = _gathered_steps(4, index_shape)
        around = Neighbourhood.of(graph)
        gather = graph.nodes[0]
        split = _n("split", ["x"], [f"p{i}" for i in range(4)], axis=1, sizes=(1, 1, 1, 1))
        share = model.node_cost(split, Graph({"x": TensorType((1, 4, 8))}, {}, [split], list(split.outputs))) / 4
        if squeezed:
            squeeze = _n("reshape", ["g"], ["q"], shape=(1, 1, 8))
            share += model.node_cost(squeeze, Graph({"g": TensorType((1, 8))}, {}, [squeeze], ["q"]))
        assert model.cost_in(gather, around) == pytest.approx(share)
        assert model.cost_in(gather, around) != pytest.approx(model.node_cost(gather, graph))
