"""Rank lifting (verifier/lift.py): rules found on 2-D activations, lifted to batched ones and proved again."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import assert_close, run_ort
from onnx import TensorProto, helper, numpy_helper
from taso.verifier.build_library import DEFAULT_OUTPUT
from taso.verifier.lift import Skip, lift_library, lift_rule
from taso.verifier.verify import Settings, verify_rule

import taso
from taso.rules import Library, LibraryFile
from taso.search.explain import explain_rule
from taso.search.rewrite import CompiledRule, rewrites

QKV = "r-d27dff9e37"  # [matmul(x1, w1), matmul(x1, w2)] => split(matmul(x1, concat(w1, w2, axis=1)), axis=1)
ROWS = "r-1eb8b1a96b"  # [matmul(x1, w1), matmul(x2, w1)] => split(matmul(concat(x1, x2, axis=0), w1), axis=0)
MIXED = "r-4f672acf80"  # [matmul(x1, w1), matmul(w2, w1)] => split(matmul(concat(x1, w2, axis=0), w1), axis=0)


@pytest.fixture(scope="module")
def shipped() -> Library:
    return Library.load(DEFAULT_OUTPUT)


def _base(shipped: Library) -> Library:
    return Library([r for r in shipped.rules if not r.extra.get("lifted_from")], shipped.header)


def _lifted_in(shipped: Library, rule_id: str):
    return next(r for r in shipped.rules if r.extra.get("lifted_from") == rule_id)


def test_the_lifted_shared_input_merge_is_proved_and_shipped(shipped):
    rule = shipped.by_id(QKV)
    lifted = lift_rule(rule)
    assert [i.type.rank for i in lifted.inputs] == [3, 2, 2]  # the activation gains the batch, the weights do not
    assert lifted.target[2].op == "split" and lifted.target[2].params["axis"] == 2
    assert lifted.target[0].op == "concat" and lifted.target[0].params["axis"] == 1  # weights: unchanged
    assert {"eq": [{"dim": ["x1", 2]}, {"dim": ["w1", 0]}]} in lifted.constraints
    proved = verify_rule(lifted, Settings(explain=True))
    assert proved.status == "proved", proved.proof
    assert "matmul-concat-columns-3d" in proved.proof["axioms"]
    assert _lifted_in(shipped, QKV).id == proved.id


def test_an_axis_0_concat_of_activations_is_lifted_to_the_sequence_axis(shipped):
    lifted = lift_rule(shipped.by_id(ROWS))
    concat = next(n for n in lifted.target if n.op == "concat")
    split = next(n for n in lifted.target if n.op == "split")
    assert concat.params["axis"] == 1 and split.params["axis"] == 1  # rows of each batch, not batches
    assert verify_rule(lifted).status == "proved"


def test_the_naive_lifts_are_refuted_by_the_verifier(shipped):
    # Keeping the axes as they were: the merge splits the sequence axis by the weights' widths,
    # and the row merge concatenates batches but splits them by sequence lengths.
    for rule_id in (QKV, ROWS):
        naive = lift_rule(shipped.by_id(rule_id), naive=True)
        result = verify_rule(naive)
        assert result.status == "refuted", (rule_id, result.proof)


def test_a_concat_of_a_batched_and_an_unbatched_value_is_refused(shipped):
    with pytest.raises(Skip, match="concat of a batched and an unbatched"):
        lift_rule(shipped.by_id(MIXED))


def test_a_rule_without_a_2d_activation_is_not_lifted(shipped):
    rule = next(r for r in shipped.rules if r.inputs and all(i.shape_class == "mat" for i in r.inputs))
    with pytest.raises(Skip):
        lift_rule(rule)


def _projections_model(batch: int = 2, seq: int = 5, k: int = 8, n1: int = 6, n2: int = 7) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((k, n1)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((k, n2)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["q"]), helper.make_node("MatMul", ["x", "w2"], ["k"]),
             helper.make_node("Relu", ["q"], ["qr"]), helper.make_node("Tanh", ["k"], ["kt"])]
    graph = helper.make_graph(nodes, "projections", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, k])],
                              [helper.make_tensor_value_info("qr", TensorProto.FLOAT, [batch, seq, n1]),
                               helper.make_tensor_value_info("kt", TensorProto.FLOAT, [batch, seq, n2])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_lifted_rule_rewrites_a_3d_model_correctly_on_onnx_runtime(shipped):
    model = _projections_model()
    graph = taso.load_onnx(model)
    assert not list(rewrites(graph, CompiledRule(shipped.by_id(QKV))))  # the 2-D rule stays outside its proof
    rewritten = list(rewrites(graph, CompiledRule(_lifted_in(shipped, QKV))))
    assert len(rewritten) == 2  # (w1, w2) and (w2, w1)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)}
    want = run_ort(model, feeds)
    for graph in rewritten:
        assert sorted(n.op.name for n in graph.nodes) == ["concat", "matmul", "relu", "split", "tanh"]
        got = run_ort(taso.export_onnx(graph), feeds)
        for g, w in zip(got, want):
            assert_close(g, w, what="lifted merge")


def test_the_lifted_rule_applies_only_at_rank_3():
    graph2d = taso.load_onnx(_projections_model_2d())
    lib = Library.load(DEFAULT_OUTPUT)
    lifted = _lifted_in(lib, QKV)
    lines = explain_rule(graph2d, lifted)
    assert not any("the rule applies here" in line for line in lines)
    assert any("the proof assumed rank 3" in line for line in lines)
    assert any("the rule applies here" in line for line in explain_rule(graph2d, lib.by_id(QKV)))


def _projections_model_2d() -> onnx.ModelProto:
    model = _projections_model()
    graph = model.graph
    for value in list(graph.input) + list(graph.output):
        dims = value.type.tensor_type.shape.dim
        del dims[0]
    return model


def test_lifting_the_shipped_library_gives_what_it_ships(shipped):
    base = _base(shipped)
    out = lift_library(base, verify=False)
    shipped_lifted = [r for r in shipped.rules if r.extra.get("lifted_from")]
    counts = shipped.header["lift"]
    assert (out.eligible, len(out.candidates), sum(out.skipped.values())) == (counts["eligible"], counts["lifted"], counts["skipped"])
    assert len(shipped_lifted) == counts["proved"]
    candidate_ids = {r.extra["lifted_from"] for r in out.candidates}
    assert {r.extra["lifted_from"] for r in shipped_lifted} <= candidate_ids
    assert all(r.status == "proved" for r in shipped_lifted)


def test_the_library_still_loads_with_its_digest_and_keeps_every_original_rule(shipped):
    file = LibraryFile.read(DEFAULT_OUTPUT)
    assert file.trusted and file.digest == shipped.header["digest"]
    assert all(e.status == "proved" for e in file.index)
    original = [r for r in shipped.rules if not r.extra.get("lifted_from")]
    assert len(original) == shipped.header["counts"]["proved"]
    lifted = [r for r in shipped.rules if r.extra.get("lifted_from")]
    assert shipped.rules == original + lifted  # lifted rules are appended: every original position and id unchanged


def test_a_lifted_rule_is_not_exported_to_tasos_format(shipped):
    from taso.verifier import taso_export as te
    from taso.verifier import taso_import as ti

    te.from_rule(shipped.by_id(QKV))  # the 2-D rule exports
    with pytest.raises(ti.Unconvertible, match="rank 3"):
        te.from_rule(_lifted_in(shipped, QKV))  # TASO's format has no shapes: it would read back as the 2-D rule with axis 2
