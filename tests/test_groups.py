"""Group merges (taso.search.groups): k sites of one kind rewritten in one proved step.

What a user relies on: every arity the optimizer uses is a proved rule in the shipped file (and the
file is what the code builds); the n-way laws those proofs rest on hold in NumPy; a group is found in
one pass, recurrent (dependent) sites are never merged, big groups are chunked; and an optimized cell
loop computes what the original does, at sizes it was not measured at.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import onnx
import pytest
from helpers import assert_close, run_ort
from taso.specs.nary import nary_axioms
from taso.verifier.axiom_check import check_shape_rules, validate_axiom
from taso.verifier.encode import encode_rule
from taso.verifier.verify import Settings, relevant_axioms, verify_rule

import taso
from taso import ops
from taso.cli import main
from taso.cost import AnalyticCost
from taso.ir import Graph, Node, TensorType
from taso.rules import Library
from taso.search import SearchConfig, search
from taso.search.groups import FAMILIES, MAX_GROUP, MIN_GROUP, GroupLibrary, find_groups, merged

DATA = os.path.join(os.path.dirname(__file__), "data", "symbolic")


# ---- the proofs -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 4, 8])
def test_the_n_way_laws_hold_in_numpy_with_their_ill_typed_cases(n):
    for axiom in nary_axioms(n):
        report = validate_axiom(axiom, trials=12)
        assert report.ok and report.sampled_defined > 0, (axiom.name, report.failures[:2])
        assert not check_shape_rules(axiom), axiom.name


def test_the_64_way_laws_hold_in_numpy():
    for axiom in nary_axioms(64):
        if axiom.name.endswith(("-0", "-31", "-63")) or "rows" in axiom.name:
            report = validate_axiom(axiom, trials=3, perturbed=2)
            assert report.ok and report.sampled_defined > 0, (axiom.name, report.failures[:2])


def test_the_n_way_laws_start_at_three():
    with pytest.raises(ValueError, match="start at arity 3"):
        nary_axioms(2)


def test_the_shipped_file_proves_exactly_the_rules_the_families_build():
    shipped = {r.id: r for r in Library.load(taso.search.groups.GROUP_LIBRARY)}
    for family in FAMILIES:
        for k in range(MIN_GROUP, family.max_arity + 1):
            rule = family.rule(k)
            assert rule.id in shipped, f"{rule.name} is not in the shipped file: rebuild it (python -m taso.verifier.build_groups)"
            proof = shipped[rule.id].proof
            assert shipped[rule.id].status == "proved" and proof["prover"] == "z3" and f"split-concat-{k}-0" in proof["axioms"]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_group_rule_proves_live_from_the_n_way_laws(family):
    proved = verify_rule(family.rule(5), Settings(timeout_s=30))
    assert proved.status == "proved", proved.proof
    assert proved.id == family.rule(5).id, "proved as built: no shape constraint added"


def test_a_group_rule_with_its_parts_swapped_is_not_proved():
    rule = FAMILIES[0].rule(4)
    (s0, o0), (s1, o1), *rest = rule.outputs
    swapped = dataclasses.replace(rule, outputs=((s0, o1), (s1, o0), *rest))
    assert verify_rule(swapped, Settings(timeout_s=10)).status != "proved"
    assert verify_rule(swapped, Settings(timeout_s=10, precheck=False)).status != "proved", "Z3 alone must not prove it either"


def test_the_n_way_laws_reach_z3_only_for_the_arities_a_rule_mentions():
    names = {a.name for a in relevant_axioms(encode_rule(FAMILIES[0].rule(3)).symbols)}
    assert "matmul-concat-rows-3" in names and "split-concat-3-2" in names and not any(n.endswith("-4-0") for n in names)


def test_the_library_uses_an_arity_only_when_the_file_proves_it():
    library = GroupLibrary([FAMILIES[0].rule(3).with_status("proved", {"prover": "z3"}), FAMILIES[0].rule(4)])  # 4: a candidate
    assert library.compiled(FAMILIES[0], 3) is not None
    assert library.compiled(FAMILIES[0], 4) is None and library.compiled(FAMILIES[1], 3) is None


# ---- finding groups -----------------------------------------------------------------------------------


def _n(op, inputs, outputs, **params):
    o = ops.get(op)
    return Node(o, o.make_params(**params), tuple(inputs), tuple(outputs), outputs[0])


def _products(k: int, chained: bool = False, rows: int = 2) -> Graph:
    """k products x_i @ w (x_i an input of its own, or the previous product when ``chained``), summed into the output."""
    inputs = {f"x{i}": TensorType((rows, 8)) for i in range(1 if chained else k)}
    weights = {"w": np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)}
    nodes = [_n("matmul", [f"h{i - 1}" if chained and i else f"x{i}", "w"], [f"h{i}"]) for i in range(k)]
    nodes += [_n("add", [f"s{i - 1}" if i > 1 else "h0", f"h{i}"], [f"s{i}"]) for i in range(1, k)]
    return Graph(inputs, weights, nodes, [f"s{k - 1}"])


def test_a_group_of_independent_products_is_found_and_one_merge_covers_it():
    found = find_groups(_products(5), GroupLibrary.shipped())
    (merge,) = [m for m in found.merges if m.match.rule.label == "shared-weight-rows-5"]
    assert len(merge.sites) == 5 and len(found.apart) == 5


def test_the_q_k_and_v_of_one_sequence_are_merged_in_one_step():
    """A transformer layer's three projections of one (batch, seq, hidden) input, each by a weight of its own."""
    rng = np.random.default_rng(1)
    weights = {f"w{i}": rng.standard_normal((16, 8 * (i + 1))).astype(np.float32) for i in range(3)}
    nodes = [_n("matmul", ["x", f"w{i}"], [f"p{i}"]) for i in range(3)] + [_n("relu", [f"p{i}"], [f"y{i}"]) for i in range(3)]
    graph = Graph({"x": TensorType((2, 5, 16))}, weights, nodes, ["y0", "y1", "y2"])
    (merge,) = find_groups(graph, GroupLibrary.shipped()).merges
    assert merge.match.rule.label == "shared-input-columns-3d-3" and len(merge.sites) == 3
    child, _ = merged(graph, merge.match)
    assert sum(n.op.name == "matmul" for n in child.nodes) == 1
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    for got, want in zip(run_ort(taso.export_onnx(child), {"x": x}), run_ort(taso.export_onnx(graph), {"x": x}), strict=True):
        assert_close(got, want)


def test_a_chain_of_products_is_never_merged_and_its_sites_are_kept_apart():
    found = find_groups(_products(6, chained=True), GroupLibrary.shipped())
    assert not found.merges and len({g for g, _ in found.apart.values()}) == 1 and len(found.apart) == 6


def test_a_group_larger_than_the_largest_proved_arity_is_merged_in_chunks():
    found = find_groups(_products(MAX_GROUP + 5), GroupLibrary.shipped())
    assert sorted(len(m.sites) for m in found.merges) == [5, MAX_GROUP]


def test_a_search_merges_the_group_in_one_step_and_the_result_computes_the_same():
    graph = _products(7)
    best, report = search(graph, [], AnalyticCost(), SearchConfig(budget=5))
    assert report.applied == {"shared-weight-rows-7": 1}
    assert best.op_histogram()["matmul"] == 1
    feeds = {f"x{i}": np.random.default_rng(i).standard_normal((2, 8)).astype(np.float32) for i in range(7)}
    assert_close(run_ort(taso.export_onnx(best), feeds), run_ort(taso.export_onnx(graph), feeds))


def test_a_group_merge_is_not_used_when_its_label_is_excluded_or_groups_are_off():
    graph = _products(4)
    for config in (SearchConfig(budget=5, excluded=frozenset({"shared-weight-rows-4"})), SearchConfig(budget=5, groups=False)):
        _, report = search(graph, [], AnalyticCost(), config)
        assert "shared-weight-rows-4" not in report.applied


def _gates(k: int, chained: bool = False) -> Graph:
    """k products x @ w_i of one input by weights of their own (or, when ``chained``, each by the previous product), summed."""
    rng = np.random.default_rng(1)
    weights = {f"w{i}": rng.standard_normal((8, 8)).astype(np.float32) for i in range(1 if chained else k)}
    nodes = [_n("matmul", ["x", f"g{i - 1}" if chained and i else f"w{i}"], [f"g{i}"]) for i in range(k)]
    nodes += [_n("add", [f"s{i - 1}" if i > 1 else "g0", f"g{i}"], [f"s{i}"]) for i in range(1, k)]
    return Graph({"x": TensorType((8, 8))}, weights, nodes, [f"s{k - 1}"])


def test_products_sharing_an_input_merge_into_one_product_by_the_concatenated_weights():
    graph = _gates(6)
    (merge,) = find_groups(graph, GroupLibrary.shipped()).merges
    assert merge.match.rule.label == "shared-input-columns-6" and len(merge.sites) == 6
    best, report = search(graph, [], AnalyticCost(), SearchConfig(budget=5))
    assert report.applied == {"shared-input-columns-6": 1} and best.op_histogram()["matmul"] == 1
    feeds = {"x": np.random.default_rng(2).standard_normal((8, 8)).astype(np.float32)}
    assert_close(run_ort(taso.export_onnx(best), feeds), run_ort(taso.export_onnx(graph), feeds))


def test_a_group_outside_its_proofs_element_kind_is_not_merged():
    graph = _gates(4)
    ints = Graph({"x": TensorType((8, 8), "int32")}, {k: v.astype(np.int32) for k, v in graph.weights.items()},
                 list(graph.nodes), list(graph.outputs))
    assert find_groups(graph, GroupLibrary.shipped()).merges, "the float graph is merged"
    assert not find_groups(ints, GroupLibrary.shipped()).merges, "the proofs speak of reals: int32 products stay apart"


def test_products_whose_weight_is_the_previous_product_are_a_chain_and_never_merged():
    found = find_groups(_gates(5, chained=True), GroupLibrary.shipped())
    assert not found.merges and len(found.apart) == 5


class _OnlyTheWholeChainPays(AnalyticCost):
    """A price landscape like NasRNN's measured one: every single rewrite a loss, every graph with some but not all of
    its groups merged dearer than the input, the graph with none left the cheapest."""

    def __init__(self, graph: Graph):
        super().__init__()
        self.input = graph

    def graph_cost(self, graph: Graph) -> float:
        if graph is self.input:
            return 10.0
        return 11.0 if find_groups(graph, GroupLibrary.shipped()).merges else 1.0

    def rewrite_cost(self, parent, parent_cost, removed, added, child) -> float:
        return parent_cost + 1.0


def test_the_search_reaches_a_graph_only_the_whole_chain_of_group_merges_makes_pay():
    from taso.search.groups import merge_chain

    graph = taso.load_onnx(__import__("taso.models", fromlist=["build"]).build("nasrnn", steps=3, hidden=16))
    chain = list(merge_chain(graph, GroupLibrary.shipped()))
    assert len(chain) >= 3 and not find_groups(chain[-1].graph, GroupLibrary.shipped()).merges
    best, report = search(graph, [], _OnlyTheWholeChainPays(graph), SearchConfig(budget=20))
    assert report.best_cost == 1.0 and not find_groups(best, GroupLibrary.shipped()).merges
    assert sum(report.applied.values()) == len(chain) and set(report.applied) == {s.rules[-1].label for s in chain}
    feeds = {x: np.random.default_rng(3).standard_normal(t.shape).astype(np.float32) for x, t in graph.inputs.items()}
    assert_close(run_ort(taso.export_onnx(best), feeds), run_ort(taso.export_onnx(graph), feeds))


# ---- on exporters' files ------------------------------------------------------------------------------


@pytest.mark.parametrize("name,steps", [("lstm_cell_loop", 4), ("gru_cell_loop", 3)])
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_cell_loop_is_folded_into_one_fused_node_and_still_runs_at_other_batches(tmp_path, name, exporter, steps):
    """Under the analytic cost the fused LSTM / GRU beats merging the loop's input projections (which it subsumes)."""
    path = os.path.join(DATA, f"{name}.{exporter}.onnx")
    out = tmp_path / "out.onnx"
    report = tmp_path / "report.json"
    assert main(["optimize", path, "-o", str(out), "--cost", "analytic", "--time-limit", "5", "--quiet", "--report", str(report)]) == 0
    applied = json.loads(report.read_text())["applied"]
    cell = name.split("_")[0]
    assert applied == {f"{cell}-cell-start": 1, f"{cell}-cell-extend": steps - 1}, applied
    original, written = onnx.load(path), onnx.load(str(out))
    assert [n.op_type for n in written.graph.node].count(cell.upper()) == 1
    hidden = original.graph.input[0].type.tensor_type.shape.dim[2].dim_value
    for batch in (1, 3, 7):
        feeds = {"x": np.random.default_rng(batch).standard_normal((batch, steps, hidden)).astype(np.float32)}
        assert_close(run_ort(written, feeds), run_ort(original, feeds), what=f"batch {batch}")


def test_taso_info_lists_each_group_family_with_its_proved_arities(capsys):
    assert main(["info", taso.search.groups.GROUP_LIBRARY]) == 0
    text = capsys.readouterr().out
    for family in FAMILIES:
        assert f"  {family.name}: {family.doc}  [Z3, k = {MIN_GROUP}..{family.max_arity}]" in text
    assert "k=64: " in text and "matmul-concat-rows-64" in text


def test_no_groups_leaves_a_cell_loop_to_the_library_rules(tmp_path):
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    path = os.path.join(DATA, "lstm_cell_loop.torchscript.onnx")
    assert main(["optimize", path, "-o", str(out), "--cost", "analytic", "--time-limit", "3", "--quiet", "--no-groups", "--report", str(report)]) == 0
    assert not any(name.startswith("shared-weight-rows") for name in json.loads(report.read_text())["applied"])
