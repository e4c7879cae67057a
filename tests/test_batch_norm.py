"""Inference batch norm in the rule language: its semantics, its folding ops, and the rules about it.

What a user relies on: a BatchNormalization after a convolution is folded by a rule the
generator found and Z3 proved (not by a hand-written pass), the folded model computes what
ONNX Runtime computes for the original, and the folding ops export to ONNX even when the
statistics are graph inputs rather than constants.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, run_ort
from onnx import TensorProto, helper, numpy_helper
from taso.generator import Settings, ShapeClass, generate, parse_ops
from taso.generator.parallel import Packer
from taso.verifier.verify import verify_rule

import taso
from taso.ir import Graph, Node, TensorType, check
from taso.ops import get as get_op
from taso.rules import format_rule
from taso.search.rewrite import CompiledRule, rewrites

FOLD = ("batch_norm(conv2d(i1, k1, pads=(1,1,1,1), strides=(1,1)), ga1, be1, mu1, va1, epsilon=1e-05) ⇒ "
        "conv2d(i1, bn_kernel(k1, ga1, va1, epsilon=1e-05), bn_shift(ga1, be1, mu1, va1, epsilon=1e-05), pads=(1,1,1,1), strides=(1,1))")

BN_POOL = (
    ShapeClass("img", "i", (2, 4, 5, 5), 2, "data"),
    ShapeClass("kernel3x3", "k", (4, 4, 3, 3), 2, "weight"),
    ShapeClass("bn_scale", "ga", (4,), 1, "bn_scale"),
    ShapeClass("bn_bias", "be", (4,), 1, "bn_bias"),
    ShapeClass("bn_mean", "mu", (4,), 1, "bn_mean"),
    ShapeClass("bn_var", "va", (4,), 1, "bn_var"),
)


@pytest.fixture(scope="module")
def bn_rules():
    return generate(Settings(max_ops=3, ops=parse_ops("conv2d,concat,split,add,batch_norm,bn_kernel,bn_shift"), classes=BN_POOL)).library


def _stats(rng, channels: int, positive_var: bool = True) -> list[np.ndarray]:
    scale, bias, mean, var = (rng.standard_normal(channels).astype(np.float32) for _ in range(4))
    return [scale, bias, mean, np.abs(var) if positive_var else var]


def _node(op_name: str, inputs: list[str], output: str) -> Node:
    op = get_op(op_name)
    return Node(op, op.make_params(epsilon=1e-5), tuple(inputs), (output,), output)


def test_batch_norm_is_onnx_batch_normalization_where_the_variance_is_a_variance():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    stats = _stats(rng, 3)
    names = ["scale", "bias", "mean", "var"]
    graph = helper.make_graph([helper.make_node("BatchNormalization", ["x", *names], ["y"], epsilon=1e-3)], "bn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
                              [numpy_helper.from_array(a, n) for a, n in zip(stats, names)])
    (expected,) = run_ort(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]), {"x": x})
    (ours,) = get_op("batch_norm").evaluate([x, *stats], get_op("batch_norm").make_params(epsilon=1e-3))
    assert_close(ours, expected)


def test_the_folding_ops_export_to_onnx_when_the_statistics_are_inputs():
    # The statistics as graph inputs: nothing folds into initializers, so the ops' own ONNX spelling runs.
    rng = np.random.default_rng(1)
    names = ["scale", "bias", "mean", "var"]
    types = {"w": TensorType((4, 3, 3, 3)), **{n: TensorType((4,)) for n in names}}
    nodes = [_node("bn_kernel", ["w", "scale", "var"], "kernel"), _node("bn_shift", names, "shift")]
    graph = Graph(inputs=types, weights={}, nodes=nodes, outputs=["kernel", "shift"])
    check(graph)
    feeds = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), **dict(zip(names, _stats(rng, 4, positive_var=False)))}
    got = run_ort(taso.export_onnx(graph), feeds)
    for op_name, args, out in (("bn_kernel", ["w", "scale", "var"], got[0]), ("bn_shift", names, got[1])):
        op = get_op(op_name)
        assert_close(out, op.evaluate([feeds[a] for a in args], op.make_params(epsilon=1e-5))[0])


def test_the_generator_finds_and_z3_proves_the_conv_batch_norm_fold(bn_rules):
    texts = {format_rule(r): r for r in bn_rules}
    assert FOLD in texts, sorted(t for t in texts if "batch_norm(conv2d" in t)[:5]
    proved = verify_rule(texts[FOLD])
    assert proved.status == "proved", proved.proof


def test_every_batch_norm_rule_the_generator_finds_is_proved(bn_rules):
    results = [verify_rule(r) for r in bn_rules if any(n.op.startswith(("batch_norm", "bn_")) for n in (*r.source, *r.target))]
    assert len(results) >= 5
    assert [format_rule(r) for r in results if r.status != "proved"] == []


def test_a_proved_fold_removes_the_batch_norm_of_an_exported_conv_and_keeps_its_outputs(bn_rules):
    fold = verify_rule(next(r for r in bn_rules if format_rule(r) == FOLD))
    rng = np.random.default_rng(2)
    kernel = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    stats = _stats(rng, 8)
    names = ["scale", "bias", "mean", "var"]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", *names], ["y"], epsilon=1e-5)], "conv_bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
        [numpy_helper.from_array(kernel, "w"), *[numpy_helper.from_array(a, n) for a, n in zip(stats, names)]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    imported = taso.load_onnx(model)
    (rewritten,) = list(rewrites(imported, CompiledRule(fold)))
    assert sorted(n.op.name for n in rewritten.topological_order()) == ["bn_kernel", "bn_shift", "conv2d"]
    exported = taso.export_onnx(rewritten)
    assert [n.op_type for n in exported.graph.node] == ["Conv"]  # kernel and bias folded into initializers
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    assert_close(run_ort(exported, {"x": x})[0], run_ort(model, {"x": x})[0])


def test_a_row_holds_operators_of_five_arguments():
    packer = Packer(max_ops=3, largest=60, max_args=5)
    ops = [(3, (), (0, 1)), (7, (), (4, 5, 6, 7, 8))]
    last = (9, (2, 2), (9,))
    spec = packer.unpack(np.frombuffer(packer.pack(ops, last, [10, 11]), dtype=packer.dtype))
    assert spec.ops == (*ops, last) and spec.outputs == (10, 11)
