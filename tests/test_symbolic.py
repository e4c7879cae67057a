"""Symbolic dims: the algebra, rules that hold at some sizes only, import and export of real dynamic exports, the pipeline."""

from __future__ import annotations

import glob
import os
import re

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import taso
from taso.cli import main
from taso.errors import ShapeError
from taso.ir import Graph, Node, TensorType
from taso.ir.dims import Dim, UndecidableDim, broadcast_dims, evaluate, floordiv, prod, symbol
from taso.measure.inputs import check_sizes
from taso.measure.outputs import compare_models
from taso.ops import get
from taso.ops.base import OnnxMapping, Op

DATA = os.path.join(os.path.dirname(__file__), "data", "symbolic")
EXPORTS = sorted(glob.glob(os.path.join(DATA, "*.onnx")))


# ---- the algebra -------------------------------------------------------------------------------------

def test_a_dim_is_its_measured_int_and_its_polynomial():
    batch, seq = symbol("batch", 1), symbol("seq", 128)
    assert int(batch * seq * 12) == 1536 and str(batch * seq * 12) == "12*batch*seq"
    assert (batch * seq) // seq == batch and (seq * 4) // 4 == seq
    assert batch * seq - seq * batch == 0 and type(batch - batch) is int
    assert np.zeros((batch, 3)).shape == (1, 3)


def test_equality_means_at_every_size():
    batch = symbol("batch", 1)
    assert batch == symbol("batch", 1) and batch != 1 and not (batch == 1)
    assert batch + 0 == batch and batch * 2 != batch + 1


def test_order_answers_only_what_holds_at_every_size():
    batch, seq = symbol("batch", 1), symbol("seq", 128)
    assert batch >= 1 and batch * seq >= seq and seq + 1 > seq and max(batch * seq, seq) == batch * seq
    with pytest.raises(UndecidableDim, match="batch < seq"):
        _ = batch < seq
    with pytest.raises(UndecidableDim):
        _ = batch <= 1


def test_floor_division_is_exact_or_an_atom():
    seq = symbol("seq", 9)
    half = (seq - 1) // 2 + 1
    assert int(half) == 5 and str(half) == "(seq-1)//2+1"
    assert [evaluate(half, {"seq": n}) for n in (1, 2, 7, 8)] == [1, 1, 4, 4]
    with pytest.raises(UndecidableDim, match="may be negative"):
        floordiv(seq - 3, 2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("+-*/"), st.integers(1, 6), st.booleans()), min_size=1, max_size=6),
       st.integers(1, 50), st.integers(1, 50), st.integers(1, 50))
def test_dim_arithmetic_agrees_with_ints_at_every_size(steps, a, b, c):
    """A chain of shape arithmetic over two symbols, evaluated at other sizes, equals the same chain on ints there."""
    def run(x, y):
        acc = x
        for op, k, use_y in steps:
            operand = y if use_y else k
            if op == "+":
                acc = acc + operand
            elif op == "-":
                acc = acc + operand * 2 - operand  # stays >= 1, so floor quotients of it stay defined
            elif op == "*":
                acc = acc * operand
            else:
                acc = acc // k
        return acc

    try:
        symbolic = run(symbol("p", a), symbol("q", b))
    except UndecidableDim:
        return
    assert int(symbolic) == run(a, b)
    assert evaluate(symbolic, {"p": c, "q": a}) == run(c, a)


def test_broadcasting_needs_a_literal_one_or_the_same_dim():
    batch, seq = symbol("batch", 1), symbol("seq", 1)
    assert broadcast_dims((batch, 3), (1, 3)) == (batch, 3)
    with pytest.raises(ShapeError, match="equal at some sizes only"):
        broadcast_dims((batch, 3), (seq, 3))
    with pytest.raises(ShapeError):
        broadcast_dims((batch, 3), (3, 3))


def test_a_shape_rule_that_freezes_a_symbolic_dim_is_refused():
    """A rule that computes a dim through int() (here np.prod) types the node for the measurement sizes only."""
    leaky = Op("leaky_flatten", (1, 1), (), lambda ts, p: TensorType((int(np.prod(ts[0].shape)),), ts[0].dtype),
               lambda xs, p: xs[0].reshape(-1), OnnxMapping((), None, lambda ctx, n: None))
    batch = symbol("batch", 1)
    assert leaky.infer([TensorType((3, 4))], leaky.make_params()) == [TensorType((12,))]
    with pytest.raises(ShapeError, match="does not follow the sizes"):
        leaky.infer([TensorType((batch, 4))], leaky.make_params())
    flatten = get("reshape")
    assert flatten.infer([TensorType((batch, 4))], flatten.make_params(shape=(batch * 4,)))[0].shape == (batch * 4,)


# ---- rules at every size ------------------------------------------------------------------------------

def _two_products(rows2) -> Graph:
    """add(x1 @ w1, x2 @ w2) with x1 [batch, 4] and x2 [rows2, 4]: the merge concatenates x1 and x2 by columns."""
    batch = symbol("batch", 1)
    rng = np.random.default_rng(0)
    weights = {"w1": rng.standard_normal((4, 8)).astype(np.float32), "w2": rng.standard_normal((4, 8)).astype(np.float32)}
    matmul, add = get("matmul"), get("add")
    nodes = [Node(matmul, matmul.make_params(), ("x1", "w1"), ("p1",)), Node(matmul, matmul.make_params(), ("x2", "w2"), ("p2",)),
             Node(add, add.make_params(), ("p1", "p2"), ("y",))]
    from taso.ir import GraphMeta

    return Graph({"x1": TensorType((batch, 4)), "x2": TensorType((rows2, 4))}, weights, nodes, ["y"], meta=GraphMeta(sizes=(("batch", 1),)))


def _merge_rule():
    from taso.pipeline.library import load_rules
    from taso.search.explain import find_rules
    from taso.search.rewrite import CompiledRule

    rules = find_rules(load_rules(), "r-f4258e30d8")
    assert str(rules[0]) == "add(matmul(x1, w1), matmul(x2, w2)) ⇒ matmul(concat(x1, x2, axis=1), concat(w1, w2, axis=0))"
    return CompiledRule(rules[0])


def test_a_rule_that_holds_at_the_measurement_size_only_does_not_fire():
    """x1 has batch rows and x2 one row: equal at batch 1, where the rule would apply, and at no other size."""
    from taso.search.explain import explain_rule
    from taso.search.rewrite import plans

    crule = _merge_rule()
    assert list(plans(_two_products(symbol("batch", 1)), crule)), "rows batch and batch: the merge holds at every size"
    assert not list(plans(_two_products(1), crule)), "rows batch and 1: equal at batch 1 only"
    frozen = _two_products(1)
    static = Graph({"x1": TensorType((1, 4)), "x2": TensorType((1, 4))}, frozen.weights, frozen.nodes, ["y"])
    assert list(plans(static, crule)), "frozen at batch 1 the rule applies"
    reasons = "\n".join(explain_rule(_two_products(1), crule.rule))
    assert "batch" in reasons


# ---- real exports: import, export, run at several sizes ----------------------------------------------------

def _feeds(model: onnx.ModelProto, batch: int, seq: int, rng) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else (batch if axis == 0 else seq) for axis, d in enumerate(vi.type.tensor_type.shape.dim)]
        if vi.type.tensor_type.elem_type == TensorProto.INT64:
            feeds[vi.name] = rng.integers(0, 30, dims).astype(np.int64)
        else:
            feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def _declared(model: onnx.ModelProto) -> list[list]:
    return [[d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in [*model.graph.input, *model.graph.output]]


@pytest.mark.parametrize("path", EXPORTS, ids=[os.path.basename(p) for p in EXPORTS])
def test_a_dynamic_export_round_trips_with_its_dims_symbolic(path):
    """PyTorch exports (dynamo and TorchScript) with a symbolic batch (and sequence): re-exported with every symbolic
    input dim kept, no shape constant baked, equal to the original at batch 1, 3, 7 and sequence 5, 9, 16."""
    original = onnx.load(path)
    sequences = {vi.name: (1, 16) for vi in original.graph.input if len(vi.type.tensor_type.shape.dim) == 2}  # the tiny BERTs take 64 tokens
    graph = taso.load_onnx(original, sequences)
    exported = taso.export_onnx(graph)
    assert _declared(exported)[: len(original.graph.input)] == _declared(original)[: len(original.graph.input)]
    assert all(isinstance(d, str) for d in _declared(exported)[len(original.graph.input)][:1]), "the output keeps its batch dim symbolic"
    rng = np.random.default_rng(0)
    sets = [_feeds(original, batch, seq, rng) for batch, seq in ((1, 5), (3, 9), (7, 16))]
    result = compare_models(original, exported, sets)
    assert result.ok, result.describe()


def test_the_cell_loops_import_with_no_opaque_node_and_the_batch_symbolic():
    for name in ("lstm_cell_loop", "gru_cell_loop"):
        for exporter in ("dynamo", "torchscript"):
            graph = taso.load_onnx(os.path.join(DATA, f"{name}.{exporter}.onnx"))
            assert "opaque" not in graph.op_histogram(), (name, exporter)
            assert {str(graph.type(v).shape[0]) for n in graph.nodes if n.op.name == "matmul" for v in n.inputs[:1]} == {"batch"}


def _batch_one_reshapes(model: onnx.ModelProto) -> list[str]:
    """The Reshapes of a value computed from the inputs to a shape constant [1, N]: the measurement batch frozen in."""
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.data_type == TensorProto.INT64}
    dynamic = {i.name for i in model.graph.input}
    frozen = []
    for node in model.graph.node:
        if any(name in dynamic for name in node.input):
            dynamic.update(node.output)
            shape = constants.get(node.input[1]) if node.op_type == "Reshape" else None
            if shape is not None and shape.ndim == 1 and len(shape) == 2 and shape[0] == 1:
                frozen.append(node.name or node.output[0])
    return frozen


def test_optimize_rewrites_a_cell_loop_with_the_batch_symbolic(tmp_path, capsys):
    """The LSTMCell loop is folded into one LSTM although the batch is symbolic; the written file keeps the batch
    symbolic, and the report names the sizes the output was checked at."""
    out = tmp_path / "out.onnx"
    path = os.path.join(DATA, "lstm_cell_loop.torchscript.onnx")
    assert main(["optimize", path, "-o", str(out), "--cost", "analytic", "--time-limit", "5", "--quiet"]) == 0
    report = capsys.readouterr().out
    assert "the optimized model" in report and "at batch=1,2" in report and "lstm" in report
    written = onnx.load(str(out))
    assert _declared(written) == [["batch", 4, 32], ["Muloutput_dim_0", 32]], "the output's symbolic dim keeps the name the exporter gave it"
    assert [n.op_type for n in written.graph.node].count("LSTM") == 1
    assert not _batch_one_reshapes(written), "no [1, N] shape constant from the measurement batch"
    original = onnx.load(path)
    assert compare_models(original, written, [_feeds(original, b, 0, np.random.default_rng(b)) for b in (2, 5, 11)]).ok


def test_static_freezes_the_symbolic_dims_at_the_measurement_sizes(tmp_path):
    out = tmp_path / "out.onnx"
    path = os.path.join(DATA, "lstm_cell_loop.torchscript.onnx")
    assert main(["optimize", path, "-o", str(out), "--cost", "analytic", "--time-limit", "3", "--quiet", "--static",
                 "--input-shape", "x=5,4,32"]) == 0
    assert _declared(onnx.load(str(out))) == [[5, 4, 32], [5, 32]]


def test_measurement_sizes_default_to_1_at_axis_0_and_128_elsewhere_never_past_what_the_file_runs_at():
    """(tests/test_size_bounds.py: this BERT gathers rows up to seq of a 32-row position table.)"""
    graph = taso.load_onnx(os.path.join(DATA, "bert_tiny.dynamo.onnx"))
    assert dict(graph.meta.sizes) == {"batch": 1, "seq": 32}
    assert check_sizes(graph) == [{"batch": 2, "seq": 16}]
    graph = taso.load_onnx(os.path.join(DATA, "bert_tiny.dynamo.onnx"), {"input_ids": (1, 8)})
    assert check_sizes(graph) == [{"batch": 2, "seq": 9}, {"batch": 2, "seq": 16}, {"batch": 2, "seq": 4}]
    graph = taso.load_onnx(os.path.join(DATA, "bert_tiny.dynamo.onnx"), {"input_ids": (2, 16)})
    assert dict(graph.meta.sizes) == {"batch": 2, "seq": 16} and str(graph.inputs["input_ids"]) == "int64[batch,seq]"


@pytest.mark.parametrize("shape,message", [
    ("ids=1,5", r"--input-shape names unknown input\(s\) \['ids'\]"),
    ("input_ids=1,5,7", r"--input-shape input_ids=1,5,7 does not fit the declared shape \[batch,seq\]"),
    ("input_ids=0,5", "with positive integers"),
])
def test_bad_measurement_sizes_are_exit_2_in_one_line(tmp_path, capsys, shape, message):
    import re

    out = tmp_path / "out.onnx"
    assert main(["optimize", os.path.join(DATA, "bert_tiny.dynamo.onnx"), "-o", str(out), "--cost", "analytic", "--input-shape", shape]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and err.count("\n") == 1 and not out.exists()


def test_one_symbol_given_two_sizes_is_refused():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 3])
    model = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "g", [x, y], [z]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(taso.TasoError, match="gives the symbol 'n' two sizes, 2 and 4"):
        taso.load_onnx(model, {"x": (2, 3), "y": (4, 3)})


# ---- shape computations, fuzzed against ONNX Runtime --------------------------------------------------------

def _shape_chain_model(rng: np.random.Generator) -> tuple[onnx.ModelProto, list[tuple[int, int]]]:
    """x [b, s, 8] reshaped by a target an exporter could compute from Shape(x): each entry is b, s, a product
    or quotient of them with constants, or a constant, the last one -1 at random; then a Relu."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"])]
    inits = []

    def const(name, values):
        inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def dim(axis):
        out = f"d{axis}"
        nodes.append(helper.make_node("Gather", ["shape", const(f"i{axis}", [axis])], [out], axis=0))
        return out

    b, s, c = dim(0), dim(1), dim(2)
    choice = rng.integers(0, 5)
    if choice == 0:
        parts = [b, s, c]
    elif choice == 1:
        nodes.append(helper.make_node("Mul", [b, s], ["bs"]))
        parts = ["bs", c]
    elif choice == 2:
        nodes.append(helper.make_node("Mul", [s, c], ["sc"]))
        parts = [b, "sc"]
    elif choice == 3:
        nodes.append(helper.make_node("Div", [c, const("two", [2])], ["half"]))
        parts = [b, s, const("k2", [2]), "half"]
    else:
        nodes.append(helper.make_node("Mul", [b, s], ["bs"]))
        nodes.append(helper.make_node("Mul", ["bs", c], ["bsc"]))
        parts = ["bsc"]
    if rng.integers(0, 2) and len(parts) > 1:
        parts[rng.integers(0, len(parts))] = const("minus", [-1])
    nodes.append(helper.make_node("Concat", parts, ["target"], axis=0))
    nodes.append(helper.make_node("Reshape", ["x", "target"], ["r"]))
    nodes.append(helper.make_node("Relu", ["r"], ["y"]))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), [(1, 5), (3, 2), (7, 9)]


@pytest.mark.parametrize("seed", range(12))
def test_shape_computations_fold_symbolically_and_export_runs_at_every_size(seed):
    model, sizes = _shape_chain_model(np.random.default_rng(seed))
    graph = taso.load_onnx(model)
    assert "opaque" not in graph.op_histogram(), "the Shape chain folds into the reshape's symbolic target"
    exported = taso.export_onnx(graph)
    rng = np.random.default_rng(seed)
    sets = [{"x": rng.standard_normal((b, s, 8)).astype(np.float32)} for b, s in sizes]
    assert compare_models(model, exported, sets).ok


def test_prod_is_symbolic():
    batch = symbol("batch", 2)
    assert prod((batch, 3, batch)) == batch * batch * 3 and isinstance(prod((batch, 1)), Dim)


def test_a_rewrite_wrong_at_other_sizes_only_is_rejected_and_the_search_runs_again(tmp_path):
    """A planted "proved" rule, mean over rows = the first row, holds at batch 1 (the measurement size) only: the
    check at batch 2 catches it, the search runs again without it, and the report says why."""
    from taso.cost import AnalyticCost
    from taso.pipeline.library import load_rules
    from taso.pipeline.run import optimize_model
    from taso.pipeline.source import ModelSource
    from taso.rules import Library, Rule, RuleInput, RuleNode
    from taso.search import SearchConfig

    class SliceIsFree(AnalyticCost):  # so that the planted rewrite pays
        def node_cost(self, node, graph, consts):
            return 0.0 if node.op.name == "slice" else super().node_cost(node, graph, consts)

    x = RuleInput("x", "act", TensorType((1, 4)))
    planted = Rule((x,), (RuleNode("reduce_mean", {"axes": (0,), "keepdims": 1}, ("x",), ("a",)),),
                   (RuleNode("slice", {"starts": (0,), "ends": (1,), "axes": (0,), "steps": (1,)}, ("x",), ("b",)),), (("a", "b"),),
                   name="planted-first-row", status="proved")
    Library([planted]).save(tmp_path / "planted.json")
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 4] x) => (float[1, 4] y) { m = ReduceMean <axes = [0], keepdims = 1> (x)  y = Relu (m) }""")
    onnx.save(model, str(tmp_path / "rows.onnx"))
    outcome = optimize_model(ModelSource.from_file(str(tmp_path / "rows.onnx")), load_rules(str(tmp_path / "planted.json")),
                             SliceIsFree(), SearchConfig(budget=5), confirm=False)
    assert outcome.kept == "input" and outcome.model is None
    assert len(outcome.notes) == 1 and "matched at the measurement sizes but not at batch=1,2" in outcome.notes[0]
    assert "without the rules it applied (planted-first-row)" in outcome.notes[0]
    static = optimize_model(ModelSource.from_file(str(tmp_path / "rows.onnx"), static=True), load_rules(str(tmp_path / "planted.json")),
                            SliceIsFree(), SearchConfig(budget=5), confirm=False)
    assert static.kept == "optimized", "frozen at batch 1 the rewrite is right"


def test_user_inputs_at_any_size_of_a_symbolic_dim_join_the_check(tmp_path, capsys):
    path, out, feeds = os.path.join(DATA, "gru_cell_loop.dynamo.onnx"), tmp_path / "out.onnx", tmp_path / "x.npz"
    np.savez(feeds, x=np.random.default_rng(0).standard_normal((5, 3, 24)).astype(np.float32))
    assert main(["optimize", path, "-o", str(out), "--cost", "analytic", "--budget", "3", "--quiet", "--inputs", str(feeds)]) == 0
    np.savez(feeds, x=np.zeros((5, 3, 25), np.float32))
    assert main(["optimize", path, "-o", str(out), "--cost", "analytic", "--budget", "3", "--quiet", "--inputs", str(feeds)]) == 2
    assert "the model expects float32[batch,3,24]" in capsys.readouterr().err


def test_a_dim_pickles_with_its_floor_atoms():
    """Dims cross process boundaries (Ray workers) with what their floor quotients mean (>= 0, not a symbol >= 1)."""
    import pickle

    from taso.ir import dims

    half = (symbol("seq", 9) - 1) // 2 + 1
    atom = next(a for m, _ in half.poly for a in m)
    data = pickle.dumps(half)
    dims._FLOORS.pop(atom)
    restored = pickle.loads(data)
    assert restored == half and evaluate(restored, {"seq": 4}) == 2 and restored - 1 >= 0


def test_measurement_sizes_the_model_cannot_run_at_are_named_with_the_way_out(tmp_path, capsys):
    """A tiny BERT's position table has 64 rows: at seq 128 its embeddings do not broadcast. The slice of the table is
    a fresh size symbol (min(seq, 64)), so the model loads at 128 when a user asks for it; the check cannot run it
    there, so the input is written unchanged, and the note names the sizes and the way out. By default it is
    measured at 64, the largest it runs at."""
    from taso.cli import main

    source, out = os.path.join(DATA, "bert_hf_tiny.torchscript.onnx"), tmp_path / "out.onnx"
    assert main(["optimize", source, "-o", str(out), "--cost", "analytic", "--quiet", "--input-shape", "input_ids=1,128"]) == 0
    assert out.read_bytes() == open(source, "rb").read()
    note = capsys.readouterr().err
    assert re.search(r"written unchanged: .*at the measurement sizes batch=1, seq=128 .*--input-shape", note), note
    assert main(["optimize", source, "-o", str(out), "--cost", "analytic", "--quiet"]) == 0
    assert "written unchanged" not in capsys.readouterr().err


def test_a_size_times_a_fraction_is_not_frozen():
    """Cast(h) * 0.5 is not a whole number at every size: it stays a run-time computation, never the measured value."""
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1, h] x) => (float[1, h] y) {
            s = Shape <start = 1> (x)
            f = Cast <to = 1> (s)
            half = Constant <value = float[1] {0.5}> ()
            m = Mul (f, half)
            y = Add (x, m)
        }""")
    graph = taso.load_onnx(model, {"x": (1, 8)})
    exported = taso.export_onnx(graph)
    assert not [t for t in exported.graph.initializer if numpy_helper.to_array(t).tolist() == [4.0]], "h * 0.5 at h=8 baked in"
    sets = [{"x": np.random.default_rng(n).standard_normal((1, n)).astype(np.float32)} for n in (3, 8, 11)]
    assert compare_models(model, exported, sets).ok
