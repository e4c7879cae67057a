"""ONNX's Attention (23): its definitions (the exporters' eager form and torch's scaled_dot_product_attention, NaN
guard and all) checked against ONNX Runtime's kernel, the proved rules from what exporters write into it, the files
they take in, and the opset ``--target ort`` may raise a file to."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import run_ort
from onnx import TensorProto, helper

import taso
from taso.onnx import to_onnx_model
from taso.pipeline.library import EXPORTER_FORMS
from taso.pipeline.targets import ORT_OPSET, opset_limit, with_opset_limit
from taso.rules import Library
from taso.search.cleanup import clean_up
from taso.search.rewrite import CompiledRule, apply_match, find_matches

DATA = Path(__file__).parent / "data" / "symbolic"


def _attention_rules() -> list:
    return [r for r in Library.load(EXPORTER_FORMS).rules if any(n.op == "attention" for n in r.target)]


def _rule(name: str):
    return next(r for r in _attention_rules() if r.name == name)


def _feeds(rule, rng, masked_row: bool = False) -> dict[str, np.ndarray]:
    feeds = {i.name: rng.standard_normal(i.type.shape).astype(np.float32) for i in rule.inputs}
    if "m" in feeds:
        feeds["m"] = np.where(rng.random(feeds["m"].shape) < 0.3, -np.inf, 0).astype(np.float32)
        if masked_row:
            feeds["m"][..., 1, :] = -np.inf  # query 1 attends to nothing
    return feeds


# ---- the definitions, against ONNX Runtime's kernel ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["attention-heads-mask-batch[0.176777]", "attention-heads[0.125]", "attention-heads-sdpa-mask-batch-guarded-d16",
                                  "attention-heads-sdpa-mask-2d-d64", "attention-heads-sdpa-d32", "attention-projections-d32-mask-one",
                                  "attention-heads-to-projections-sdpa-d64-mask", "attention-heads-to-projections-eager-d16"])
def test_onnx_runtimes_attention_kernel_computes_each_exporters_form(name):
    """Each side on ONNX Runtime: the exporter's form as standard operators (opset 17), the fused side as one Attention
    node (opset 23), and taso's NumPy semantics of it, at the rule's example shapes."""
    rule = _rule(name)
    feeds = _feeds(rule, np.random.default_rng(0))
    written_out = run_ort(to_onnx_model(rule.side_graph("source"), opset=17), feeds)[0]
    fused_model = to_onnx_model(rule.side_graph("target"), opset=ORT_OPSET)
    assert [n.op_type for n in fused_model.graph.node].count("Attention") == 1
    fused = run_ort(fused_model, feeds)[0]
    numpy_side = rule.side_graph("target")
    by_numpy = numpy_side.run(feeds)[numpy_side.outputs[0]]
    np.testing.assert_allclose(fused, written_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(by_numpy, written_out, rtol=1e-4, atol=1e-5)


def test_a_query_with_nothing_to_attend_to_reads_zero_from_the_guarded_form_and_from_the_kernel():
    """A mask of -inf over a whole row: softmax gives NaN there; torch's guard makes the row zero, and so does ONNX's
    Attention (as its definition says and ONNX Runtime computes), so the guarded form is the one that rewrites into it."""
    rule = _rule("attention-heads-sdpa-mask-batch-guarded-d16")
    feeds = _feeds(rule, np.random.default_rng(1), masked_row=True)
    written_out = run_ort(to_onnx_model(rule.side_graph("source"), opset=17), feeds)[0]
    fused = run_ort(to_onnx_model(rule.side_graph("target"), opset=ORT_OPSET), feeds)[0]
    assert not np.isnan(written_out).any() and np.all(written_out[..., 1, :] == 0)
    np.testing.assert_allclose(fused, written_out, rtol=1e-4, atol=1e-5)


# ---- the rules -------------------------------------------------------------------------------------------------------


def test_every_attention_rule_is_proved_from_an_attention_definition():
    rules = _attention_rules()
    assert len(rules) == 138 and all(r.status == "proved" for r in rules)
    for rule in rules:
        assert any(a.startswith("attention-definition") for a in rule.proof["axioms"]), rule.name
    sdpa = [r for r in rules if "sdpa" in r.name and not r.name.startswith("attention-heads-to")]
    assert all(any("-sdpa" in a for a in r.proof["axioms"]) for r in sdpa)


@pytest.mark.parametrize("name,param,wrong", [("attention-heads-sdpa-mask-one-guarded-d64", "scale", 0.125),
                                              ("attention-projections-d32", "head_size", 16),
                                              ("attention-heads-to-projections-sdpa-d64-mask", "scale", 0.2)])
def test_an_attention_rule_with_another_scale_or_head_size_is_not_proved(name, param, wrong):
    """d ** -0.25 squared is not 1 / sqrt(d) in float32 at d = 64: the split form's rule holds at its own scale only."""
    from taso.verifier.verify import Settings, verify_rules

    rule = _rule(name)
    target = rule.target[-1]
    changed = type(target)(target.op, {**target.params, param: wrong}, target.inputs, target.outputs)
    candidate = type(rule)(inputs=rule.inputs, source=rule.source, target=(*rule.target[:-1], changed), outputs=rule.outputs,
                           params=rule.params, constraints=rule.constraints)
    assert verify_rules(Library([candidate]).rules, Settings(timeout_s=10))[0].status != "proved"


# ---- the files exporters write ---------------------------------------------------------------------------------------


def _taken_in(path: Path) -> taso.ir.Graph:
    graph, _ = clean_up(taso.load_onnx(str(path)))
    crules = [CompiledRule(r) for r in _attention_rules()]
    for _round in range(2):  # the rules into attention on heads, then onto projections where the heads are split
        for crule in crules:
            while (match := next(iter(find_matches(graph, crule)), None)) is not None:
                graph = apply_match(graph, match)
        graph, _ = clean_up(graph)
    return graph


@pytest.mark.parametrize("name,feeds,shared", [
    ("bert_hf_tiny.dynamo", "bert", 0), ("bert_hf_tiny.torchscript", "bert", 0), ("bert_tiny.dynamo", "ids", 0), ("bert_tiny.torchscript", "ids", 0),
    ("transformer_decoder.dynamo", "decoder", 2), ("transformer_decoder.torchscript", "decoder", 0)])
def test_the_rules_take_in_every_attention_of_real_exports(name, feeds, shared):
    """transformers' BERT (its default attention: torch's scaled_dot_product_attention, padding mask and NaN guard), a
    hand-written BERT (eager), and nn.TransformerDecoder (nn.MultiheadAttention: no mask and a causal [q, k] one), by
    both exporters: every softmax becomes an attention, and the file written at opset 23 runs equal to the export on
    ONNX Runtime at sizes other than the ones taso measured. ``shared``: nn.TransformerDecoder clones its layer, so the
    dynamo export's two cross-attentions scale the same keys of the memory, which clean-up computes once; a rewrite
    would leave that scaled key to the other, so those two stay as they are."""
    path = DATA / f"{name}.onnx"
    before = sum(n.op_type == "Softmax" for n in onnx.load(str(path)).graph.node)
    graph = _taken_in(path)
    ops = [n.op.name for n in graph.nodes]
    assert ops.count("attention") == before - shared and ops.count("softmax") == shared and "is_nan" not in ops
    assert opset_limit(graph, "ort") == ORT_OPSET
    model = taso.export_onnx(with_opset_limit(graph, ORT_OPSET))
    assert sum(n.op_type == "Attention" for n in model.graph.node) == before - shared
    rng = np.random.default_rng(2)
    if feeds == "decoder":
        inputs = {"tgt": rng.standard_normal((3, 8, 32)).astype(np.float32), "memory": rng.standard_normal((3, 12, 32)).astype(np.float32)}
    else:
        seq = 20 if feeds == "ids" else 40
        inputs = {"input_ids": rng.integers(0, 100, (3, seq)).astype(np.int64)}
        if feeds == "bert":
            inputs["attention_mask"] = np.ones((3, seq), np.int64)
            inputs["attention_mask"][1, seq // 2:] = 0
    for got, want in zip(run_ort(model, inputs), run_ort(str(path), inputs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_default_target_keeps_the_files_opset_and_the_ort_target_raises_it():
    graph = taso.load_onnx(str(DATA / "bert_hf_tiny.torchscript.onnx"))
    assert graph.meta.opset == 17 and opset_limit(graph, "onnx") is None and opset_limit(graph, "ort") == ORT_OPSET


def _one_opaque_node(op_type: str, opset: int, inputs: int, **attrs) -> taso.ir.Graph:
    names = [f"x{k}" for k in range(inputs)]
    graph = helper.make_graph([helper.make_node(op_type, names, ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4, 3]) for n in names[:1]],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(np.ones(2 if op_type == "GroupNormalization" else 4, np.float32), n) for n in names[1:]])
    return taso.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


@pytest.mark.parametrize("op_type,opset,inputs,attrs,raised", [
    ("Hardmax", 17, 1, {"axis": -1}, True),  # versions 13 to 23: new element types only
    ("GroupNormalization", 18, 3, {"num_groups": 2}, False),  # 21 reads its scale per channel, 18 per group
    ("ReduceL2", 17, 1, {"axes": [1]}, False)])  # 18 reads its axes from an input: ONNX's converter rewrites the node
def test_the_ort_target_raises_the_opset_only_where_every_node_it_keeps_means_the_same_there(op_type, opset, inputs, attrs, raised):
    graph = _one_opaque_node(op_type, opset, inputs, **attrs)
    assert [n.op.name for n in graph.nodes] == ["opaque"]
    assert opset_limit(graph, "ort") == (ORT_OPSET if raised else None)


def test_a_default_run_says_what_attention_the_ort_target_would_add():
    """The exporter's form at the file's opset 17: the default target writes it as it is, and the report's note counts
    the place where --target ort would write Attention (the analytic costs price the one node below the form)."""
    from taso.cost import make_cost_model
    from taso.pipeline.targets import ort_gain

    source = _rule("attention-heads-sdpa-mask-batch-guarded-d64").side_graph("source", {"q": (2, 12, 128, 64), "kt": (2, 12, 64, 128),
                                                                                         "v": (2, 12, 128, 64), "m": (2, 1, 128, 128)})
    assert source.meta.opset < ORT_OPSET and opset_limit(source, "onnx") is None
    gain = ort_gain(source, make_cost_model("analytic"))
    assert gain.places == 1 and "ONNX's Attention at opset 23" in gain.note()
