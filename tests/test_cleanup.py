"""Clean-up (taso.search.cleanup): what a graph simplifier removes, removed exactly, on ONNX files as exporters write them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import model_from_text, run_ort
from onnx import TensorProto, helper, numpy_helper
from taso.specs import AXIOMS

from taso.ir import TensorType
from taso.onnx import folding_plan, load_onnx
from taso.pipeline.source import export_onnx
from taso.rules import Rule, RuleInput, RuleNode
from taso.search.cleanup import CLEANUPS, clean_up


def _cleaned(model: onnx.ModelProto, **load):
    graph = load_onnx(model, **load)
    cleaned, report = clean_up(graph)
    return graph, cleaned, report, export_onnx(cleaned)


def _weights_model(w1: np.ndarray, w2: np.ndarray) -> onnx.ModelProto:
    """x @ W1 + x @ W2, W1 and W2 two initializers (an exporter's copy of a tied or deep-copied weight)."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["a"]), helper.make_node("MatMul", ["x", "W2"], ["b"]), helper.make_node("Add", ["a", "b"], ["y"])],
        "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_projection_of_tied_weights_is_computed_once_and_the_file_keeps_its_symbolic_batch():
    w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    model = _weights_model(w, w.copy())
    _, cleaned, report, out = _cleaned(model)
    assert report.steps == {"tied-weights": 1, "common-subexpression": 1}
    assert cleaned.op_histogram() == {"matmul": 1, "add": 1} and len(cleaned.weights) == 1
    assert report.weight_bytes_after == w.nbytes and report.nodes_after == 2
    assert out.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 4, 8)).astype(np.float32)
        np.testing.assert_array_equal(run_ort(out, {"x": x})[0], run_ort(model, {"x": x})[0])


@pytest.mark.parametrize("w2, tied", [
    (lambda w: w * 1.0000001, False),  # one ulp apart is another weight
    (lambda w: np.where(w == 0, -0.0, w).astype(np.float32), False),  # -0.0 is not 0.0 bit for bit
    (lambda w: w.astype(np.float32).copy(), True),
], ids=["nearly-equal", "signed-zero", "equal"])
def test_weights_are_tied_only_when_equal_bit_for_bit(w2, tied):
    w = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    w[0, 0] = 0.0
    _, cleaned, report, _ = _cleaned(_weights_model(w, w2(w)))
    assert (report.steps["tied-weights"] == 1) is tied
    assert len(cleaned.weights) == (1 if tied else 2)


def test_nan_weights_with_the_same_bits_are_one_weight():
    w = np.full((8, 8), np.nan, np.float32)
    _, cleaned, _, _ = _cleaned(_weights_model(w, w.copy()))
    assert len(cleaned.weights) == 1


def test_overridable_initializers_are_never_tied():
    """An IR-3 style initializer listed as a graph input can be fed at run time: two of them are two tensors."""
    w = np.ones((8, 8), np.float32)
    model = _weights_model(w, w.copy())
    model.graph.input.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, [8, 8]) for n in ("W1", "W2")])
    graph = load_onnx(model)
    if set(graph.meta.initializer_inputs) != {"W1", "W2"}:
        pytest.skip("this import does not keep initializer inputs overridable")
    assert clean_up(graph)[1].steps["tied-weights"] == 0


def test_random_nodes_are_never_merged():
    """Two RandomUniformLike nodes on the same input draw two tensors: merging them would change the model."""
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[2, 3] y) {
            a = RandomUniformLike <seed: float = 1.0> (x)
            b = RandomUniformLike <seed: float = 1.0> (x)
            y = Sub(a, b)
        }""")
    graph = load_onnx(model)
    assert clean_up(graph)[1].steps["common-subexpression"] == 0


def test_two_outputs_computed_alike_keep_both_names():
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[3, 2] y1, float[3, 2] y2) {
            y1 = Transpose <perm = [1, 0]> (x)
            y2 = Transpose <perm = [1, 0]> (x)
        }""")
    _, cleaned, report, out = _cleaned(model)
    assert report.steps["common-subexpression"] == 1 and len(cleaned) == 1
    assert [o.name for o in out.graph.output] == ["y1", "y2"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y1, y2 = run_ort(out, {"x": x})
    np.testing.assert_array_equal(y1, x.T)
    np.testing.assert_array_equal(y2, x.T)


def _random_chain(rng: np.random.Generator, dtype: int) -> onnx.ModelProto:
    """A chain of Transposes, Reshapes, Squeezes and Unsqueezes over a random shape, each sometimes computed twice."""
    rank = int(rng.integers(1, 5))
    shape = [int(d) for d in rng.choice([1, 2, 3, 4], size=rank)]
    nodes, inits, value, current = [], [], "x", list(shape)
    for i in range(int(rng.integers(2, 7))):
        kind = rng.choice(["Transpose", "Reshape", "Unsqueeze", "Squeeze"])
        out = f"v{i}"
        if kind == "Transpose" and current:
            perm = [int(p) for p in rng.permutation(len(current))]
            nodes.append(helper.make_node("Transpose", [value], [out], perm=perm))
            current = [current[p] for p in perm]
        elif kind == "Reshape" and current:
            target = list(current)
            rng.shuffle(target)
            if len(target) > 1 and rng.random() < 0.5:
                target = [target[0] * target[1], *target[2:]]
            inits.append(numpy_helper.from_array(np.asarray(target, np.int64), f"s{i}"))
            nodes.append(helper.make_node("Reshape", [value, f"s{i}"], [out]))
            current = target
        elif kind == "Unsqueeze" and len(current) < 5:
            axis = int(rng.integers(0, len(current) + 1))
            inits.append(numpy_helper.from_array(np.asarray([axis], np.int64), f"a{i}"))
            nodes.append(helper.make_node("Unsqueeze", [value, f"a{i}"], [out]))
            current.insert(axis, 1)
        elif kind == "Squeeze" and 1 in current:
            axis = current.index(1)
            inits.append(numpy_helper.from_array(np.asarray([axis], np.int64), f"a{i}"))
            nodes.append(helper.make_node("Squeeze", [value, f"a{i}"], [out]))
            current.pop(axis)
        else:
            continue
        if rng.random() < 0.3:  # the same node again, read by the output: a common subexpression
            twin = nodes[-1]
            nodes.append(helper.make_node(twin.op_type, list(twin.input), [out + "_twin"], **{a.name: helper.get_attribute_value(a) for a in twin.attribute}))
            nodes.append(helper.make_node("Add" if dtype != TensorProto.BOOL else "And", [out, out + "_twin"], [out + "_sum"]))
            out = out + "_sum"
        value = out
    outputs = [helper.make_tensor_value_info(value, dtype, None)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", dtype, shape)], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64], ids=["float32", "float16", "int64"])
def test_random_transpose_and_reshape_chains_are_shortened_exactly(dtype):
    """Fuzzed compositions of data movement (and duplicated nodes): the cleaned file equals the input on ONNX
    Runtime bit for bit, never has more nodes, and a second clean-up finds nothing."""
    rng = np.random.default_rng(dtype)
    shortened = 0
    for case in range(60):
        model = _random_chain(rng, dtype)
        graph, cleaned, report, out = _cleaned(model)
        assert len(cleaned) <= len(graph), case
        assert not clean_up(cleaned)[1].changed, case
        shortened += report.changed
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        x = (rng.standard_normal(shape) * 10).astype(helper.tensor_dtype_to_np_dtype(dtype))
        np.testing.assert_array_equal(run_ort(out, {"x": x})[0], run_ort(model, {"x": x})[0], err_msg=f"case {case}")
    assert shortened > 20  # the fuzzer reaches the clean-ups


def test_symbolic_reshape_round_trips_are_removed_and_the_file_still_runs_at_every_size():
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, seq, 8] x) => (float[batch, seq, 8] y) {
            s1 = Constant <value: tensor = int64[2] {0, -1}> ()
            s2 = Constant <value: tensor = int64[3] {0, -1, 8}> ()
            a = Reshape(x, s1)
            b = Reshape(a, s2)
            t = Transpose <perm = [1, 0, 2]> (b)
            u = Transpose <perm = [1, 0, 2]> (t)
            y = Relu(u)
        }""")
    _, cleaned, report, out = _cleaned(model)
    assert cleaned.op_histogram() == {"relu": 1}
    assert report.steps["identity-reshape"] == 1 and report.steps["identity-transpose"] == 1
    assert [d.dim_param for d in out.graph.output[0].type.tensor_type.shape.dim][:2] == ["batch", "seq"]
    for batch, seq in ((1, 5), (3, 2)):
        x = np.random.default_rng(0).standard_normal((batch, seq, 8)).astype(np.float32)
        np.testing.assert_array_equal(run_ort(out, {"x": x})[0], np.maximum(x, 0))


def test_every_cleanup_names_the_axiom_it_applies_or_says_why_it_holds():
    axioms = {a.name for a in AXIOMS}
    for cleanup in CLEANUPS:
        assert cleanup.proof, cleanup.name
        if cleanup.axiom:
            ranks = (3,) * cleanup.axiom.count("{}")
            assert cleanup.axiom.format(*ranks) in axioms, cleanup.name


def test_a_transpose_pair_of_a_rank_the_specs_do_not_cover_is_left_alone():
    """The specs state transpose axioms for ranks 2 to 4: a rank-5 pair (as in nn.MultiheadAttention's dynamo export)
    is not an instance of a proved equality, so it stays."""
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3, 4, 5, 6] x) => (float[2, 3, 4, 5, 6] y) {
            t = Transpose <perm = [1, 0, 2, 3, 4]> (x)
            y = Transpose <perm = [1, 0, 2, 3, 4]> (t)
        }""")
    assert not _cleaned(model)[2].changed


def _inp(name: str, shape) -> RuleInput:
    return RuleInput(name, "tensor", TensorType(tuple(shape)))


@pytest.mark.parametrize("rule", [
    Rule((_inp("x", (2, 3, 4)),), (RuleNode("transpose", {"perm": (1, 2, 0)}, ("x",), ("a",)), RuleNode("transpose", {"perm": (2, 0, 1)}, ("a",), ("b",))),
         (), (("b", "x"),), name="identity-transpose after transpose-pair"),
    Rule((_inp("x", (2, 3, 4)),), (RuleNode("transpose", {"perm": (1, 0, 2)}, ("x",), ("a",)), RuleNode("transpose", {"perm": (0, 2, 1)}, ("a",), ("b",))),
         (RuleNode("transpose", {"perm": (1, 2, 0)}, ("x",), ("c",)),), (("b", "c"),), name="transpose-pair"),
    Rule((_inp("x", (2, 3, 4)),), (RuleNode("reshape", {"shape": (6, 4)}, ("x",), ("a",)), RuleNode("reshape", {"shape": (4, 6)}, ("a",), ("b",))),
         (RuleNode("reshape", {"shape": (4, 6)}, ("x",), ("c",)),), (("b", "c"),), name="reshape-pair"),
    Rule((_inp("x", (2, 3, 4)),), (RuleNode("reshape", {"shape": (2, 3, 4)}, ("x",), ("a",)),), (), (("a", "x"),), name="identity-reshape"),
], ids=lambda r: r.name)
def test_cleanup_instances_are_proved_by_the_verifier(rule):
    from taso.verifier.verify import Settings, verify_rule

    assert verify_rule(rule, Settings(timeout_s=10.0, precheck=False)).status == "proved"


def test_folding_says_what_it_left_unfolded_and_why():
    """A mask broadcast from a small constant to a large one stays a node (the file must not grow), and the plan says so."""
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[64, 512, 512] x) => (float[64, 512, 512] y) {
            m = Constant <value: tensor = float[1, 1, 1] {2.0}> ()
            s = Constant <value: tensor = int64[3] {64, 512, 512}> ()
            w = Constant <value: tensor = float[4, 4] {1,2,3,4, 5,6,7,8, 9,10,11,12, 13,14,15,16}> ()
            e = Expand(m, s)
            y = Mul(x, e)
        }""")
    plan = folding_plan(load_onnx(model))
    assert [(n.op.name, why) for n, why in plan.unfolded] == [("expand", "a broadcast whose result would grow the file")]
    assert "left as nodes: expand: a broadcast whose result would grow the file" in plan.describe()


def test_taso_info_lists_the_cleanups_with_their_proofs(capsys):
    from taso.cli import main
    from taso.pipeline.library import DEFAULT_LIBRARY

    assert main(["info", DEFAULT_LIBRARY]) == 0
    out = capsys.readouterr().out
    for cleanup in CLEANUPS:
        assert f"{cleanup.name}" in out and cleanup.proof in out


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["float32", "float16"])
def test_folded_weights_have_onnx_runtimes_bits_in_their_own_dtype(dtype):
    """The weight-only subgraphs exporters leave (transposed, split, scaled, normalised weights) fold into initializers
    of the weight's own dtype whose values are bit for bit what ONNX Runtime computes from the same subgraph, each
    operator's result rounded to the dtype as ONNX specifies. (ONNX Runtime's CPU float16 kernels run a chain of
    float16 operators in float32 unless each intermediate is a graph output: the reference declares them all.)"""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((6, 8)) * 3).astype(np_dtype)
    v = (rng.random((8,)) + 0.5).astype(np_dtype)
    graph = helper.make_graph([
        helper.make_node("Transpose", ["W"], ["wt"], perm=[1, 0]),
        helper.make_node("Split", ["wt", "sizes"], ["w1", "w2"], axis=0),
        helper.make_node("Sqrt", ["V"], ["root"]),
        helper.make_node("Unsqueeze", ["root", "axis1"], ["root_col"]),
        helper.make_node("Slice", ["root_col", "zero", "three", "zero"], ["r1"]),
        helper.make_node("Mul", ["w1", "r1"], ["scaled"]),
        helper.make_node("Div", ["w2", "c"], ["divided"]),
        helper.make_node("Concat", ["scaled", "divided"], ["merged"], axis=0),
        helper.make_node("Sub", ["merged", "c"], ["shifted"]),
        helper.make_node("MatMul", ["x", "shifted"], ["y"]),
    ], "fold", [helper.make_tensor_value_info("x", dtype, [2, 8])], [helper.make_tensor_value_info("y", dtype, [2, 6])], [
        numpy_helper.from_array(w, "W"), numpy_helper.from_array(v, "V"), numpy_helper.from_array(np.asarray([3, 5], np.int64), "sizes"),
        numpy_helper.from_array(np.asarray([1], np.int64), "axis1"), numpy_helper.from_array(np.asarray([0], np.int64), "zero"),
        numpy_helper.from_array(np.asarray([3], np.int64), "three"), numpy_helper.from_array(np.asarray(0.7, np_dtype), "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = export_onnx(load_onnx(model))
    assert [n.op_type for n in out.graph.node] == ["MatMul"]
    folded = numpy_helper.to_array(next(t for t in out.graph.initializer if t.name in out.graph.node[0].input))
    reference = onnx.ModelProto()
    reference.CopyFrom(model)
    intermediates = [o for node in model.graph.node[:-1] for o in node.output]
    reference.graph.output.extend(helper.make_tensor_value_info(o, dtype, None) for o in intermediates)
    x = rng.standard_normal((2, 8)).astype(np_dtype)
    expected = run_ort(reference, {"x": x})[1 + intermediates.index("shifted")]
    assert folded.dtype == np_dtype
    np.testing.assert_array_equal(folded.view(np.uint8), expected.view(np.uint8))


def _bias_model(op: str, bias: np.ndarray, x_shape, weight_first: bool = False) -> onnx.ModelProto:
    inputs = ["b", "x"] if weight_first else ["x", "b"]
    graph = helper.make_graph([helper.make_node(op, inputs, ["s"]), helper.make_node("Relu", ["s"], ["y"])], "bias",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(bias, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op, bias, x_shape, weight_first, dropped", [
    ("Add", np.zeros(8, np.float32), [2, 4, 8], False, True),  # a zero bias (random-init transformers export them)
    ("Add", np.full(8, -0.0, np.float32), [2, 4, 8], True, True),
    ("Mul", np.ones((4, 8), np.float32), [2, 4, 8], False, True),  # a unit scale
    ("Add", np.zeros((2, 4, 8), np.float32), [2, 4, 8], False, True),
    ("Add", np.full(8, 1e-30, np.float32), [2, 4, 8], False, False),  # not zero
    ("Add", np.zeros((3, 8), np.float32), [8], False, False),  # zeros that broadcast x to a larger shape
    ("Mul", np.ones((4, 1), np.float32), [2, 4, 8], False, False),  # ones of x's dims but not its trailing ones
], ids=["zero-bias", "negative-zero-bias-first", "unit-scale", "same-shape", "tiny", "broadcasting", "not-trailing"])
def test_a_neutral_weight_operand_is_dropped_only_where_an_axiom_says_so(op, bias, x_shape, weight_first, dropped):
    model = _bias_model(op, bias, x_shape, weight_first)
    _, cleaned, report, out = _cleaned(model)
    assert (report.steps["neutral-operand"] == 1) is dropped
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    np.testing.assert_array_equal(run_ort(out, {"x": x})[0], run_ort(model, {"x": x})[0])


def test_the_neutral_operand_cleanup_names_axioms_of_the_specs():
    axioms = {a.name for a in AXIOMS}
    cited = {f"{name}-{r}d" for name in ("add-zeros", "mul-ones") for r in (1, 2, 3, 4)}
    cited |= {f"{name}-trailing-{r}d-{k}" for name in ("add", "mul") for r in (2, 3, 4) for k in range(1, r)} | {"add-comm", "mul-comm"}
    assert cited <= axioms, sorted(cited - axioms)


@pytest.mark.parametrize("node, kept", [
    ('Slice(x, zero3, big3, axes3)', False),  # 0:INT64_MAX on every axis: the whole tensor
    ('Slice(x, zero1, dim1, ax1)', False),
    ('Slice(x, one1, big1, ax1)', True),  # drops a row
    ('Pad(x, zeros6)', False),
    ('Pad(x, pads6)', True),
], ids=["whole", "whole-one-axis", "drops-a-row", "zero-pad", "real-pad"])
def test_a_slice_of_everything_and_a_pad_of_nothing_are_removed_on_a_symbolic_batch(node, kept):
    model = model_from_text(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 4, 6] x) => (float[batch, 4, 6] y) {{
            zero3 = Constant <value: tensor = int64[3] {{0, 0, 0}}> ()
            big3 = Constant <value: tensor = int64[3] {{9223372036854775807, 9223372036854775807, 9223372036854775807}}> ()
            axes3 = Constant <value: tensor = int64[3] {{0, 1, 2}}> ()
            zero1 = Constant <value: tensor = int64[1] {{0}}> ()
            one1 = Constant <value: tensor = int64[1] {{1}}> ()
            dim1 = Constant <value: tensor = int64[1] {{6}}> ()
            big1 = Constant <value: tensor = int64[1] {{9223372036854775807}}> ()
            ax1 = Constant <value: tensor = int64[1] {{2}}> ()
            zeros6 = Constant <value: tensor = int64[6] {{0, 0, 0, 0, 0, 0}}> ()
            pads6 = Constant <value: tensor = int64[6] {{0, 1, 0, 0, 0, 1}}> ()
            s = {node}
            y = Relu(s)
        }}""")
    _, cleaned, report, out = _cleaned(model)
    assert (len(cleaned) == 2) is kept, report.describe()
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 4, 6)).astype(np.float32)
        np.testing.assert_array_equal(run_ort(out, {"x": x})[0], run_ort(model, {"x": x})[0])


def test_the_search_cleans_up_what_its_merges_duplicate_and_prices_it_so():
    """Merging NasRNN's per-step products builds the same concatenation more than once; the search shares it at
    once (a free move in its trace), so the graphs it prices and returns hold no common subexpression left by
    its rewrites but the last one's, and clean-up is never reported as a rule."""
    import taso.models as zoo

    from taso.cost import make_cost_model
    from taso.pipeline.library import load_rules
    from taso.search import CLEAN_UP, SearchConfig, search

    graph = load_onnx(zoo.build("nasrnn"))
    rules, model = load_rules(), make_cost_model("analytic")
    best, report = search(graph, rules, model, SearchConfig(budget=30))
    unclean, unclean_report = search(graph, rules, model, SearchConfig(budget=30, clean_up=False))
    assert report.cleaned > 0 and any(step.rule == CLEAN_UP for step in report.trace) and CLEAN_UP not in report.applied
    assert clean_up(best)[1].steps["common-subexpression"] <= 1 < clean_up(unclean)[1].steps["common-subexpression"]
    assert report.best_cost <= unclean_report.best_cost


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_pytorch_transformer_decoder_projects_its_memory_once_and_keeps_its_symbolic_batch(exporter):
    """nn.TransformerDecoder deep-copies one layer, so (exported by PyTorch, either exporter) both layers project the
    same memory by equal weights: clean-up ties the weights and computes the projection once (the simplifiers'
    15% on the 3-layer decoder), and the written file still runs at every batch size."""
    import os

    path = os.path.join(os.path.dirname(__file__), "data", "symbolic", f"transformer_decoder.{exporter}.onnx")
    model = onnx.load(path)
    graph, cleaned, report, out = _cleaned(model)
    assert report.steps["tied-weights"] >= 7 and report.steps["common-subexpression"] >= 14
    assert cleaned.op_histogram()["matmul"] == graph.op_histogram()["matmul"] - 1
    assert out.graph.input[0].type.tensor_type.shape.dim[0].dim_param == model.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        feeds = {"tgt": rng.standard_normal((batch, 8, 32)).astype(np.float32), "memory": rng.standard_normal((batch, 12, 32)).astype(np.float32)}
        np.testing.assert_allclose(run_ort(out, feeds)[0], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-5)


def _gathers_model(gather_axis: int, concat_axis: int, indices=(0, 1, 2), scalar: bool = True) -> onnx.ModelProto:
    """concat(gather(x, i, axis=gather_axis) for i in indices, axis=concat_axis) over x of shape [batch, 3, 3]."""
    shape = "" if scalar else "[1]"
    consts = "\n".join(f"i{k} = Constant <value: tensor = int64{shape} {{{i}}}> ()" for k, i in enumerate(indices))
    gathers = "\n".join(f"g{k} = Gather <axis: int = {gather_axis}> (x, i{k})" for k in range(len(indices)))
    parts = ", ".join(f"g{k}" for k in range(len(indices)))
    return model_from_text(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 3, 3] x) => (float[?, ?] y) {{
            {consts}
            {gathers}
            c = Concat <axis: int = {concat_axis}> ({parts})
            y = Relu(c)
        }}""")


@pytest.mark.parametrize("gather_axis", [1, 2])
@pytest.mark.parametrize("concat_axis", [0, 1])
def test_a_concatenation_of_every_slice_is_a_transpose_and_reshape_at_every_batch(gather_axis, concat_axis):
    model = _gathers_model(gather_axis, concat_axis)
    _, cleaned, report, out = _cleaned(model)
    assert report.steps["gathered-slices"] == 1 and "gather" not in cleaned.op_histogram() and "concat" not in cleaned.op_histogram()
    for batch in (1, 2, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 3)).astype(np.float32)
        np.testing.assert_array_equal(run_ort(out, {"x": x})[0], run_ort(model, {"x": x})[0])


def test_a_chain_of_concatenations_of_every_slice_is_one_transpose_and_reshape():
    """concat(concat(g0, g1), g2) on one axis, as folding a recurrent loop a cell at a time leaves its steps' inputs."""
    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 3, 3] x) => (float[?, ?] y) {
            i0 = Constant <value: tensor = int64 {0}> ()
            i1 = Constant <value: tensor = int64 {1}> ()
            i2 = Constant <value: tensor = int64 {2}> ()
            g0 = Gather <axis: int = 1> (x, i0)
            g1 = Gather <axis: int = 1> (x, i1)
            g2 = Gather <axis: int = 1> (x, i2)
            c01 = Concat <axis: int = 0> (g0, g1)
            c = Concat <axis: int = 0> (c01, g2)
            y = Relu(c)
        }""")
    _, cleaned, report, out = _cleaned(model)
    assert report.steps["gathered-slices"] == 1 and "gather" not in cleaned.op_histogram() and "concat" not in cleaned.op_histogram()
    for batch in (1, 4):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 3)).astype(np.float32)
        np.testing.assert_array_equal(run_ort(out, {"x": x})[0], run_ort(model, {"x": x})[0])


@pytest.mark.parametrize("indices, scalar", [((1, 0, 2), True), ((0, 1), True), ((0, 1, 2), False)],
                         ids=["out-of-order", "not-every-slice", "rank-1-indices"])
def test_slices_that_are_not_the_whole_in_order_are_left_alone(indices, scalar):
    _, cleaned, report, _ = _cleaned(_gathers_model(1, 0, indices, scalar))
    assert "gathered-slices" not in report.steps and "concat" in cleaned.op_histogram()
