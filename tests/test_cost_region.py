"""Fusion-aware region costs: what a region holds, that both sides compute the same thing, and the bookkeeping.

Timings belong in benchmarks (benchmarks/costs/bench_cost_models.py compares predictions with
measured speedups); here the timing is replaced where the test is about caching and budgets.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from taso import ops
from taso.cost import make_cost_model
from taso.cost.region import RegionCost, region_pair, region_signature
from taso.ir import Graph, Node, TensorType
from taso.pipeline.library import load_rules
from taso.search.explain import find_rules
from taso.search.rewrite import CompiledRule, find_matches, plan_match
from tests.helpers import assert_close

MERGE_SHARED_WEIGHT = "[matmul(x1, w1), matmul(x2, w1)] ⇒"  # the shipped rule that merges two products with one weight


def _unrolled(steps: int, prefix: str = "", rows: int = 1, bias: bool = True) -> Graph:
    """``relu(x_t · W + b)`` (or ``relu(x_t · W)``) for ``steps`` inputs and one weight: the input projections of an unrolled RNN."""
    mm, add, relu = ops.get("matmul"), ops.get("add"), ops.get("relu")
    nodes, outputs = [], []
    for t in range(steps):
        x, y, z, r = (f"{prefix}{n}{t}" for n in ("x", "y", "z", "r"))
        nodes += [Node(mm, mm.make_params(), (x, f"{prefix}w"), (y,), f"mm{t}")]
        nodes += [Node(add, add.make_params(), (y, f"{prefix}b"), (z,), f"add{t}")] if bias else []
        nodes += [Node(relu, relu.make_params(), (z if bias else y,), (r,), f"relu{t}")]
        outputs.append(r)
    rng = np.random.default_rng(0)
    weights = {f"{prefix}w": rng.standard_normal((16, 32)).astype(np.float32), f"{prefix}b": rng.standard_normal((1, 32)).astype(np.float32)}
    return Graph({f"{prefix}x{t}": TensorType((rows, 16)) for t in range(steps)}, weights, nodes, outputs)


def _plans(graph: Graph):
    (rule,) = [r for r in find_rules(load_rules(), MERGE_SHARED_WEIGHT) if "concat(x1, x2, axis=0)" in str(r)][:1]
    crule = CompiledRule(rule)
    return [p for p in (plan_match(graph, m) for m in find_matches(graph, crule)) if p is not None]


def _run(region: Graph, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    from taso.onnx import to_onnx_model

    session = ort.InferenceSession(to_onnx_model(region).SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {k: feeds[k] for k in region.inputs})


def test_a_region_holds_the_rewrite_with_the_nodes_it_could_fuse_with():
    graph = _unrolled(2)
    plan = _plans(graph)[0]
    before, after = region_pair(graph, plan.removed, plan.added, plan)
    assert sorted(n.op.name for n in before.nodes) == ["add", "add", "matmul", "matmul"]
    assert sorted(n.op.name for n in after.nodes) == ["add", "add", "concat", "matmul", "split"]
    # the consumers (the bias adds ONNX Runtime fuses into Gemm) are the regions' outputs on both sides
    assert before.outputs == after.outputs and set(before.outputs) == {"z0", "z1"}
    assert set(before.weights) >= {"w", "b"} and set(before.inputs) == {"x0", "x1"}


def test_both_sides_of_a_region_compute_the_same_values_on_onnx_runtime():
    graph = _unrolled(3)
    rng = np.random.default_rng(1)
    feeds = {f"x{t}": rng.standard_normal((1, 16)).astype(np.float32) for t in range(3)}
    plans = _plans(graph)
    assert plans
    for plan in plans:
        before, after = region_pair(graph, plan.removed, plan.added, plan)
        for got, want in zip(_run(after, feeds), _run(before, feeds)):
            assert_close(got, want, what="region after vs before")


def test_the_signature_ignores_value_names_but_not_shapes():
    a, b = _unrolled(2), _unrolled(2, prefix="other_")
    pa, pb = _plans(a)[0], _plans(b)[0]
    assert region_signature(*region_pair(a, pa.removed, pa.added, pa)) == region_signature(*region_pair(b, pb.removed, pb.added, pb))
    wider = _unrolled(2, rows=2)
    pw = _plans(wider)[0]
    assert region_signature(*region_pair(wider, pw.removed, pw.added, pw)) != region_signature(*region_pair(a, pa.removed, pa.added, pa))


class _Timed(RegionCost):
    """Region timing replaced by a fixed answer: the tests are about what is timed, not how fast."""

    def __init__(self, base, **kw):
        super().__init__(base, **kw)
        self.timed = 0

    def _time_delta(self, before, after):
        self.timed += 1
        return -1e-6


def test_regions_are_timed_once_shared_by_isomorphic_places_and_budgeted():
    graph = _unrolled(3)
    plans = _plans(graph)
    model = _Timed(make_cost_model("analytic"), max_regions=1)
    deltas = [model.rewrite_cost(graph, 0.0, p.removed, p.added, p) for p in plans]
    # every pair of steps is the same region up to names: timed once, reused for the others
    assert len(plans) > 1 and model.timed == 1 and model.regions_reused == len(plans) - 1 and set(deltas) == {-1e-6}
    wider = _unrolled(3, rows=2)
    other = _plans(wider)[0]
    per_node = make_cost_model("analytic").rewrite_cost(wider, 0.0, other.removed, other.added, other)
    # a new region once the budget is spent: priced per node, not timed
    assert model.rewrite_cost(wider, 0.0, other.removed, other.added, other) == pytest.approx(per_node)
    assert model.timed == 1 and model.per_node == 1


def test_a_region_cost_persists_per_hardware(tmp_path, monkeypatch):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TASO_SPOT_CHECKS", "0")  # a spot check may re-measure the region's entry: this is about the cache
    graph = _unrolled(2)
    plan = _plans(graph)[0]
    from taso.cost.ort_cpu import OrtCpuCost

    first = _Timed(OrtCpuCost())
    priced = first.rewrite_cost(graph, 0.0, plan.removed, plan.added, plan)  # the timed delta, at most what the region costs per node
    first.close()
    tables = json.loads((tmp_path / "costs.json").read_text())
    (fingerprint,) = [f for f in tables if "|regions-v" in f]
    assert "threads=1" in fingerprint and len(tables[fingerprint]) == 1
    second = _Timed(OrtCpuCost())
    assert second.rewrite_cost(graph, 0.0, plan.removed, plan.added, plan) == pytest.approx(priced) and -1e-6 <= priced < 0
    assert second.timed == 0 and second.regions_reused == 1


def test_an_opaque_core_is_priced_per_node():
    graph = _unrolled(2)
    plan = _plans(graph)[0]
    opaque = ops.get("opaque")
    fake = Node(opaque, plan.removed[0].params, plan.removed[0].inputs, plan.removed[0].outputs, "opaque")
    assert region_pair(graph, (fake,), plan.added, plan) is None
    model = _Timed(make_cost_model("analytic"))
    model.rewrite_cost(graph, 0.0, (fake,), plan.added, plan)
    assert model.timed == 0 and model.per_node == 1


def test_the_region_model_is_chosen_by_name():
    model = make_cost_model("ort-cpu-region")
    assert isinstance(model, RegionCost) and "|regions-v" in model.fingerprint and model.name == "ort-cpu-region"


def test_a_gain_most_rounds_do_not_agree_on_counts_as_none():
    from taso.cost.region import _significant_difference

    before = [10.0] * 9
    assert _significant_difference(before, [9.0] * 9) == -1.0  # every round faster: a gain
    assert _significant_difference(before, [9.0] * 5 + [10.5] * 4) == 0.0  # 5 of 9: noise
    assert _significant_difference(before, [11.0] * 5 + [9.5] * 4) == 1.0  # a loss is kept as measured


def test_a_gain_larger_than_a_quarter_of_the_region_is_measured_again_and_the_smaller_kept(monkeypatch):
    """A burst of load on one side once cached -58 us for removing one Add from a 29 us region."""
    import taso.measure.timing

    answers = iter([([29e-6] * 9, [-29e-6] * 9), ([29e-6] * 9, [27.5e-6] * 9)])
    monkeypatch.setattr(taso.measure.timing, "interleaved_samples", lambda measures, rounds: next(answers))
    graph = _unrolled(2)
    plan = _plans(graph)[0]
    delta = RegionCost(make_cost_model("analytic"))._time_delta(*region_pair(graph, plan.removed, plan.added, plan))
    assert delta == pytest.approx(-1.5e-6)


def test_a_rewrite_saves_at_most_what_its_region_costs():
    graph = _unrolled(2)
    plan = _plans(graph)[0]
    model = _Timed(make_cost_model("analytic"))
    model._time_delta = lambda before, after: -1.0  # a second saved by a microsecond region: noise
    before, _ = region_pair(graph, plan.removed, plan.added, plan)
    whole = sum(make_cost_model("analytic").node_cost(n, graph) for n in before.nodes)
    assert model.rewrite_cost(graph, 0.0, plan.removed, plan.added, plan) == pytest.approx(-whole)


def test_the_search_reprices_an_inherited_rewrite_whose_neighbours_changed():
    """A region price is measured with the rewrite's neighbours; once an applied rewrite changed them, it is stale."""
    from taso.cost import AnalyticCost
    from taso.search.backtracking import _all_options, _inherited_options, _Pricer
    from taso.search.core import RuleIndex

    graph = _unrolled(3, bias=False)
    merge = _plans(graph)[0]  # merges two steps' products: their ReLUs now read the merged product's split
    index = RuleIndex(load_rules())
    index.admit(graph)
    repriced = {}
    for sensitive in (False, True):
        model = AnalyticCost()
        model.context_sensitive = sensitive
        pricer = _Pricer(model)
        parent_options = _all_options(graph, index.compiled, pricer)
        child = merge.materialize()
        index.admit(child)
        priced: list = []
        original = model.rewrite_cost
        model.rewrite_cost = lambda parent, cost, removed, added, plan: priced.append(removed) or original(parent, cost, removed, added, plan)
        inherited = _inherited_options(child, merge, parent_options, index.seeds, index.compiled, pricer)
        kept = {frozenset(map(id, o.removed)) for o, _ in inherited}
        repriced[sensitive] = [r for r in priced if frozenset(map(id, r)) in kept and any(r is o.removed for o, _ in parent_options)]
    assert repriced[False] == []  # per-node prices do not depend on neighbours: inherited as they were
    assert repriced[True], "an option next to the merged products (their ReLUs) is priced again"


def test_the_search_deadline_reaches_the_per_node_model_a_region_model_wraps(tmp_path, monkeypatch):
    """Past the search's time limit the wrapped per-node model estimates too, and a region model does not memoise it."""
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    model = make_cost_model("ort-cpu-region")
    model.deadline = 0.0
    assert model.base.deadline == 0.0
    graph = _unrolled(2)
    estimated = model.graph_cost(graph)
    assert estimated > 0 and model.estimated == model.base.estimated > 0
    model.deadline = float("inf")
    assert model.base.deadline == float("inf")
    model.graph_cost(graph)
    assert model.base.measured > 0, "measured once the deadline is lifted: the estimates were not kept"
    model.close()
