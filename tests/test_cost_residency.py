"""Where a weight lives when its node runs: reuse distances, the price of a cold read, and a search that sees both."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import library_rewrites, patch_room
from onnx import TensorProto, helper, numpy_helper

import taso
import taso.cost.cold_reads as cold_reads
import taso.cost.copies as copies_module
import taso.cost.profiling as profiling
import taso.onnx.probes as probes
from taso import ops
from taso.cost.model import CostModel, _roofline_seconds
from taso.cost.ort_cpu import OrtCpuCost
from taso.cost.ort_fusions import first_seen, onnx_runtime_weight_order, weight_order
from taso.cost.profiling import profiled_runs
from taso.cost.residency import CacheSizes, WeightReads
from taso.ir import Graph, Node, TensorType
from taso.onnx.probes import COLD, EVICT, WARM, cold_then_warm
from taso.search.rewrite import CompiledRule, plans


def _n(op, inputs, outputs, **params):
    o = ops.get(op)
    return Node(o, o.make_params(**params), tuple(inputs), tuple(outputs), outputs[0])


def _reads(weights: str, nbytes: dict[str, int]) -> WeightReads:
    """Reads of one-letter weights in the order written."""
    return WeightReads.of((i, _n("relu", [f"v{i}"], [f"y{i}"]), w, nbytes[w]) for i, w in enumerate(weights))


def test_a_reads_distance_is_what_other_weights_were_read_since_its_weights_last_read_run_after_run():
    sizes = {"W": 800, "U": 800, "A": 100, "B": 50, "C": 10}
    # An unrolled GRU as ONNX Runtime runs it: input weight W and recurrent weight U read in turn at each of 32 steps.
    assert _reads("WU" * 32, sizes).distances() == [800.0] * 64
    # An unrolled LSTM as it runs it: all 32 input products, then the 32 recurrent ones; one cold read of each a run.
    lstm = _reads("W" * 32 + "U" * 32, sizes).distances()
    assert lstm == [800.0] + [0.0] * 31 + [800.0] + [0.0] * 31
    # The input products merged into one: the recurrent weight is read back to back after it.
    assert _reads("W" + "U" * 32, sizes).distances() == [800.0, 800.0] + [0.0] * 31
    # Each other weight counts once however often it is read between; a weight read once has all the others between.
    assert _reads("ABCCBA", sizes).distances() == [0.0, 100.0, 150.0, 0.0, 10.0, 60.0]
    assert _reads("AB", sizes).distances() == [50.0, 100.0]


def test_changed_reads_drop_the_removed_nodes_and_put_the_new_ones_where_the_first_removed_one_ran():
    a, b, c, d = (_n("relu", [v], [v + "y"]) for v in "abcd")
    reads = WeightReads.of([(0, a, "W", 10), (1, b, "W", 10), (5, c, "V", 30)])
    after = reads.changed([a, c], [(d, "U", 20), (a, "X", 5)], at=0)
    assert after.nodes == [d, a, b] and after.weights == ["U", "X", "W"] and after.bytes == {"W": 10, "U": 20, "X": 5}
    assert reads.nodes == [a, b, c], "the parent's reads are not changed"
    assert reads.changed([b], [(d, "U", 20)], at=7).weights == ["W", "V", "U"]


@pytest.mark.parametrize("name", ["lstm_cell_loop", "gru_cell_loop", "bert_tiny"])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_the_run_order_is_the_order_onnx_runtime_reads_the_weights_of_real_exports_in(name, exporter):
    # PyTorch's exports (tests/data/symbolic), and what taso writes for the cells after merging their products:
    # the order residency prices by must be the one ONNX Runtime runs, or an LSTM is priced as a GRU.
    model = onnx.load(f"{__import__('os').path.dirname(__file__)}/data/symbolic/{name}.{exporter}.onnx")
    graph = taso.load_onnx(model)
    theirs = onnx_runtime_weight_order(model, 1024)
    assert len(theirs) >= 6 and first_seen(weight_order(graph, 1024)) == first_seen(theirs)
    if name != "bert_tiny":
        merged = taso.optimize(graph, cost="analytic", time_limit=5.0)
        assert len(merged.nodes) < len(graph.nodes)
        written = taso.export_onnx(merged)
        assert first_seen(weight_order(taso.load_onnx(written), 1024)) == first_seen(onnx_runtime_weight_order(written, 1024))


@pytest.mark.parametrize("name", ["lstm_cell_loop", "gru_cell_loop", "bert_tiny"])
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_taso_writes_a_file_back_in_the_order_onnx_runtime_ran_it(name, exporter):
    # PyTorch writes nn.Linear as Gemm; written back as MatMul + Add, ONNX Runtime's fused Gemms took new places in its
    # order and an LSTMCell loop that read all input weights, then all recurrent ones, read them in turn.
    model = onnx.load(f"{__import__('os').path.dirname(__file__)}/data/symbolic/{name}.{exporter}.onnx")
    assert first_seen(onnx_runtime_weight_order(taso.export_onnx(taso.load_onnx(model)), 1024)) == first_seen(onnx_runtime_weight_order(model, 1024))


def test_the_run_order_gives_nodes_onnx_runtime_fuses_the_fused_nodes_place():
    # Each step's recurrent product and the sum after it become one FusedGemm (MatMul + Add, then the Tanh), numbered
    # after the file's nodes: ONNX Runtime runs W and U in turn; merged, W once and then U's products in turn.
    from rule_examples import shared_weight_merge_rule

    graph = _cell(6)
    plan = next(p for p in plans(graph, CompiledRule(shared_weight_merge_rule())) if {"W"} <= {v for n in p.removed for v in n.inputs})
    for g in (graph, plan.materialize()):
        written = taso.export_onnx(g)
        assert first_seen(weight_order(g, 512)) == first_seen(onnx_runtime_weight_order(written, 512)), [n.op_type for n in written.graph.node]


def test_eviction_sizes():
    caches = CacheSizes(l1=32 << 10, l2=1 << 20, l3=32 << 20)
    assert caches.eviction(own=400 << 10, between=400 << 10) is None, "both fit the L2"
    assert caches.eviction(own=400 << 10, between=400 << 10, again=True) == 512 << 10, \
        "both fit the L2, but the weight is read in turn with the other within a run (an unrolled GRU)"
    assert caches.eviction(own=400 << 10, between=100 << 10, again=True) is None, "too little between its reads"
    assert caches.eviction(own=800 << 10, between=800 << 10, threads=2) is None, "two cores' L2s"
    assert caches.eviction(own=800 << 10, between=800 << 10) == 1 << 20, "the nearest power of two"
    assert caches.eviction(own=4 << 20, between=50 << 10) is None, "too little to move the weight out"
    assert caches.eviction(own=1 << 20, between=3 << 20) == 4 << 20
    assert caches.eviction(own=1 << 20, between=5 << 30) == 64 << 20, "at most twice the L3"


def test_this_machines_caches_are_read_and_ordered():
    caches = CacheSizes.of_this_machine()
    assert 0 < caches.l1 <= caches.l2 <= caches.l3


class _Priced(OrtCpuCost):
    """OrtCpuCost's residency with the roofline for a node's price and a made-up cold penalty: nothing is measured,
    and the caches are a few KB, so small graphs have weights that leave them."""

    def __init__(self):
        super().__init__(threads=1)
        self.caches = CacheSizes(l1=128, l2=1 << 10, l3=16 << 10)  # the bias (64 bytes) is not a weight here
        self.penalties_measured: list[int] = []

    def measure(self, node, graph, key, consts):
        return _roofline_seconds(node, graph, key, consts) or 1e-6

    def cold_penalty(self, node, graph, consts, evicted, cycle=None):
        self.penalties_measured.append(evicted)
        weight = max(graph.type(v).concrete().nbytes for v in node.inputs if v in consts)
        return weight * 1e-9 * (1 + evicted.bit_length()), 0.1


@pytest.fixture
def priced(tmp_path, monkeypatch) -> _Priced:
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    return _Priced()


def _cell(steps: int, hidden: int = 16) -> Graph:
    """An unrolled recurrent cell as exporters write it: h = tanh(x_t W + b + h U) at each step, W and U shared."""
    rng = np.random.default_rng(0)
    weights = {"W": rng.standard_normal((hidden, hidden)).astype(np.float32), "U": rng.standard_normal((hidden, hidden)).astype(np.float32),
               "b": rng.standard_normal(hidden).astype(np.float32)}
    nodes, h = [], "h"
    for t in range(steps):
        nodes += [_n("matmul", [f"x{t}", "W"], [f"i{t}"]), _n("add", [f"i{t}", "b"], [f"ib{t}"]), _n("matmul", [h, "U"], [f"r{t}"]),
                  _n("add", [f"ib{t}", f"r{t}"], [f"s{t}"]), _n("tanh", [f"s{t}"], [f"h{t}"])]
        h = f"h{t}"
    inputs = {"h": TensorType((1, hidden)), **{f"x{t}": TensorType((1, hidden)) for t in range(steps)}}
    return Graph(inputs, weights, nodes, [h])


def test_a_graph_pays_for_the_weights_it_reads_cold(priced):
    warm = CostModel.graph_cost(priced, _cell(4))  # CostModel.graph_cost: the nodes' own prices
    assert priced.graph_cost(_cell(4)) > warm
    assert set(priced.penalties_measured) == {1 << 10}, "W and U (1 KB each) with 1 KB of the other between reads"
    one_weight = Graph({"x": TensorType((1, 16))}, {"W": _cell(1).weights["W"]}, [_n("matmul", ["x", "W"], ["y"])], ["y"])
    assert priced.graph_cost(one_weight) == CostModel.graph_cost(priced, one_weight), "nothing between its reads"


def test_the_surcharges_are_each_products_cold_reads_and_add_up_to_the_whole_price(priced):
    """eqsat's extraction prices node by node and reads here what the whole price adds at each node."""
    cell = _cell(4)
    surcharges = priced.surcharges(cell)
    products = {id(n) for n in cell.nodes if n.op.name == "matmul"}
    assert surcharges and set(surcharges) <= products and all(s > 0 for s in surcharges.values())
    assert sum(surcharges.values()) == pytest.approx(priced.graph_cost(cell) - CostModel.graph_cost(priced, cell), rel=1e-12)
    one_weight = Graph({"x": TensorType((1, 16))}, {"W": cell.weights["W"]}, [_n("matmul", ["x", "W"], ["y"])], ["y"])
    assert priced.surcharges(one_weight) == {}


@pytest.mark.parametrize("graph", [_cell(4), taso.load_onnx(__import__("taso.models", fromlist=["build"]).build("nasrnn", steps=2, hidden=16))],
                         ids=["cell", "nasrnn"])
def test_a_rewrites_price_is_the_child_graphs_cost_with_residency(priced, graph):
    # A rewrite that changes which weights are read, or how often, moves other reads between cache levels: the search's
    # price of the child (from its parent, without building it) must be the child's cost wherever the child runs its
    # weight reads in the order that price assumed (the parent's, the new reads in the first removed node's place).
    from taso.cost.model import Neighbourhood

    parent_cost = priced.graph_cost(graph)
    checked = moved = reordered = 0
    for rule, plan, child in library_rewrites(graph):
        priced_child = priced.rewrite_cost(graph, parent_cost, plan.removed, plan.added, plan)
        assumed = priced.child_reads(graph, plan.removed, plan.added, Neighbourhood.after(graph, plan.removed, plan.added, plan))
        assumed = assumed or priced.parent_reads(graph)[0]
        if [id(n) for n in assumed.nodes] != [id(n) for n in priced.parent_reads(child)[0].nodes]:
            reordered += 1  # priced in an order ONNX Runtime will not run: the search re-prices what it builds
            continue
        assert priced_child == pytest.approx(priced.graph_cost(child), rel=1e-12, abs=1e-15), rule
        checked += 1
        moved += priced.parent_reads(child)[1] != priced.parent_reads(graph)[1]
    assert checked > 10 and moved > 0


def test_the_search_reports_its_best_graph_at_that_graphs_own_cost(priced):
    # Rewrites are priced in their parent's run order; what the search keeps and reports is priced in its own.
    from taso.pipeline.library import load_rules
    from taso.search import SearchConfig, search

    graph = taso.load_onnx(__import__("taso.models", fromlist=["build"]).build("nasrnn", steps=2, hidden=16))
    best, report = search(graph, load_rules(), priced, SearchConfig(budget=10, time_limit=30.0))
    assert best is not graph and report.best_cost == pytest.approx(priced.graph_cost(best), rel=1e-12)
    assert report.initial_cost == pytest.approx(priced.graph_cost(graph), rel=1e-12) and report.best_cost < report.initial_cost


def test_merging_the_input_products_prices_the_recurrent_reads_warm(priced):
    from rule_examples import shared_weight_merge_rule

    graph = _cell(4)
    plan = next(p for p in plans(graph, CompiledRule(shared_weight_merge_rule())) if {"W"} <= {v for n in p.removed for v in n.inputs})
    child = plan.materialize()
    before, after = priced.parent_reads(graph)[1], priced.parent_reads(child)[1]
    assert 0 < after < before, "U's four reads now have a quarter of W between them"
    delta = priced.rewrite_cost(graph, 0.0, plan.removed, plan.added, plan)
    plain = CostModel.rewrite_cost(priced, graph, 0.0, plan.removed, plan.added, plan)
    assert delta == pytest.approx(plain + after - before) and delta < plain


def _product(hidden: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "p",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, hidden])],
                              [numpy_helper.from_array(rng.standard_normal((hidden, hidden)).astype(np.float32), "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_cold_and_warm_copies_run_after_the_eviction_and_in_that_order():
    import onnxruntime as ort

    pair = cold_then_warm(_product(64))
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    feeds = {"x": x, f"{EVICT}_x": np.ones(1 << 16, np.float32)}
    session = ort.InferenceSession(pair.SerializeToString(), providers=["CPUExecutionProvider"])
    y, y_warm = (session.run(["y", "y~warm"], feeds))
    expected = ort.InferenceSession(_product(64).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(y_warm, expected)
    events = profiled_runs(pair, feeds, threads=1, min_total=0.0, min_runs=3, max_runs=3)
    kernels = sorted((e["ts"], e["dur"], e["name"]) for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"))
    run = [k for k in kernels if k[0] >= [e["ts"] for e in events if e.get("name") == "model_run"][-1]]
    first = {prefix: min(ts for ts, _, name in run if name.startswith(prefix)) for prefix in (f"{EVICT}_read", COLD, WARM)}
    last = {prefix: max(ts + dur for ts, dur, name in run if name.startswith(prefix)) for prefix in (f"{EVICT}_read", COLD, WARM)}
    assert last[f"{EVICT}_read"] <= first[COLD] and last[COLD] <= first[WARM]
    assert sum(name.startswith(COLD) for _, _, name in run) == sum(name.startswith(WARM) for _, _, name in run) == 2


def test_a_read_penalty_is_each_evicting_runs_time_against_the_median_of_resting_runs(monkeypatch):
    """Every run of the evicting session runs products over that many bytes of weights of their own before the node,
    as a graph runs its other products between two reads of a weight. A copy run right after an evicting read of a
    buffer, or runs that each read a buffer, measured a fraction of what a graph pays (docs/measured.md, session 22)."""

    seen = []

    def runs(proto, feeds, threads, min_total, min_runs, max_runs, in_place=None):
        seen.append(proto)
        timed, events, ts = [[10, 12, 11], [30, 31]][len(seen) - 1], [], 0
        for us in [50] * profiling.WARM_UP_RUNS + timed:
            events += [{"cat": "Session", "name": "model_run", "ts": ts, "dur": 100},
                       {"cat": "Node", "name": f"{COLD}0_kernel_time", "ts": ts + 1, "dur": us, "args": {"op_name": "MatMul"}}]
            ts += 200
        return events

    patch_room(monkeypatch, "taso.cost", "profiled_runs", runs)
    x = np.ones((1, 64), np.float32)
    assert cold_reads.profile_cold_penalty(_product(64).SerializeToString(), {"x": x}, 1, 8 << 20) == pytest.approx([19e-6, 20e-6])
    resting, evicting = ({t.name: t for t in m.graph.initializer} for m in seen)
    evicted = sum(numpy_helper.to_array(t).nbytes for name, t in evicting.items() if name.startswith(EVICT) and name not in resting)
    assert evicted == 8 << 20, "the evicting model reads 8 MB of weights of its own; the resting one none"
    assert [n.op_type for n in seen[1].graph.node].count("MatMul") == 1 + (8 << 20) // (4 << 20)


def test_a_read_penalty_is_the_median_over_pairs_of_sessions(monkeypatch, tmp_path):
    """One pair of sessions can differ by more than the penalty (BERT's [1, 64, 1024] x [1024, 4096] product: 0, 492, 0
    and 2004 us in four pairs): the penalty kept is the median over several pairs, an outlier pair outvoted."""

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    pairs = iter([[0.0, 0.0, 0.0], [2004e-6] * 3, [150e-6, 160e-6, 170e-6]])
    calls = []

    def one_pair(model, feeds, threads, evicted, in_place=None):
        calls.append(evicted)
        return next(pairs)

    patch_room(monkeypatch, "taso.cost", "profile_cold_penalty", one_pair)
    graph = Graph({"x": TensorType((1, 16))}, {"W": np.ones((16, 16), np.float32)}, [_n("matmul", ["x", "W"], ["y"])], ["y"])
    seconds, _ = OrtCpuCost(threads=1).cold_penalty(graph.nodes[0], graph, graph.constant_values(), 8 << 20)
    assert len(calls) == cold_reads._PENALTY_PAIRS == 3
    assert seconds == pytest.approx(160e-6)


def test_a_read_penalty_is_measured_on_onnx_runtime_once_per_evicting_run():

    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    deltas = cold_reads.profile_cold_penalty(_product(64).SerializeToString(), {"x": x}, 1, 1 << 16, min_total=0.0)
    assert len(deltas) == 15 and all(isinstance(d, float) for d in deltas)


def test_a_model_without_a_computed_input_has_no_cold_copy():
    graph = helper.make_graph([helper.make_node("Relu", ["c"], ["y"])], "k", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.ones(2, np.float32), "c")])
    assert cold_then_warm(helper.make_model(graph)) is None


def test_a_node_is_priced_on_its_second_run_after_the_reference_with_the_floor_after_it(monkeypatch):
    """A weight the node has just read stays in the caches for its second copy; the floor kernel runs after both,
    where the profiler's overhead is what it is in the copy timed (a floor run first took 6-7 us, a Sigmoid after it 5)."""

    seen = {}

    def profiled(proto, *args, **kwargs):
        seen["events"] = events = profiled_runs(proto, *args, **kwargs)
        return events

    patch_room(monkeypatch, "taso.cost", "profiled_runs", profiled)
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    profile = profiling.profile_kernels(_product(64).SerializeToString(), {"x": x}, threads=1, min_total=0.0, min_runs=3, warm=True)
    events = seen["events"]
    runs = [e["ts"] for e in events if e.get("name") == "model_run"]
    kernels = sorted((e["ts"], e["dur"], e["name"]) for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"))
    last_run = [k for k in kernels if k[0] >= runs[-1]]
    order = [probes.REFERENCE, COLD, WARM, probes.FLOOR]
    spans = [(min(ts for ts, _, name in last_run if name.startswith(p)), max(ts + dur for ts, dur, name in last_run if name.startswith(p)))
             for p in order]
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)), dict(zip(order, spans))
    assert len(profile.kernels) == len(runs) - 3 and all(k > 0 for k in profile.kernels)
    assert profile.kernels[-1] == pytest.approx(sum(dur for ts, dur, name in last_run if name.startswith(WARM)) * 1e-6)


def test_a_node_whose_copies_cannot_be_ordered_is_timed_once():

    graph = helper.make_graph([helper.make_node("Not", ["b"], ["y"])], "n", [helper.make_tensor_value_info("b", TensorProto.BOOL, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.BOOL, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    profile = profiling.profile_kernels(model.SerializeToString(), {"b": np.ones(4, bool)}, threads=1, min_total=0.0, min_runs=3, warm=True)
    assert len(profile.kernels) == 3 and all(k > 0 for k in profile.kernels)


def test_copies_of_a_node_all_run_where_a_node_is_timed_by_the_wall_clock(tmp_path):
    """The wall-clock price is what the copies add over one: ONNX Runtime must run every copy (its common-subexpression
    elimination, on by default, would fold identical nodes into one and price the node at zero)."""
    import json

    from taso.cost.copies import copies_session
    from taso.onnx.probes import with_copies

    many = with_copies(_product(64), 5)
    session = copies_session(many, threads=1, enable_profiling=True, profile_file_prefix=str(tmp_path / "p"))
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    (y,) = session.run(None, {"x": x})
    import onnxruntime as ort

    expected = ort.InferenceSession(_product(64).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, expected)
    with open(session.end_profiling(), encoding="utf-8") as f:
        events = json.load(f)
    ops_run = [e["args"]["op_name"] for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    assert len(ops_run) >= 5 and len(ops_run) % 5 == 0  # MatMul and Relu each five times (or fused, five times)


def test_a_node_under_the_profilers_resolution_is_priced_by_the_wall_clock(monkeypatch, tmp_path):

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    patch_room(monkeypatch, "taso.cost", "profile_kernels", lambda *a, **k: profiling.KernelProfile([3e-6] * 8, [100e-6] * 8, [2e-6] * 8))
    patch_room(monkeypatch, "taso.cost", "median_run", lambda session, feeds, min_seconds=0.0: 1e-6)
    patch_room(monkeypatch, "taso.cost", "wall_clock_marginal", lambda model, feeds, threads, in_place=None, reference=None, copies=33: (0.7e-6, 0.1))
    model = OrtCpuCost(threads=1)
    node = _n("tanh", ["x"], ["y"])
    graph = Graph({"x": TensorType((1, 64))}, {}, [node], ["y"])
    assert model.fresh(node, graph, set()) == (0.7e-6, 0.1)
    patch_room(monkeypatch, "taso.cost", "profile_kernels", lambda *a, **k: profiling.KernelProfile([400e-6] * 8, [100e-6] * 8, [2e-6] * 8))
    seconds, _ = model.fresh(node, graph, set())
    assert seconds > 100e-6  # a node the profiler resolves keeps its profiled price


def test_with_threads_a_node_up_to_1ms_is_priced_by_the_wall_clock_a_long_one_with_fewer_copies(monkeypatch, tmp_path):
    """At 2 threads the profiler priced split products above what copies of them measured and the graph paid: a GRU
    h512's per-step product at 70-77 us against 58; with the workers spinning within a run, [64,256] x [256,1024] at
    310 us against 180, [64,512] x [512,2048] at 1.1 ms against 0.73. At 1 thread the two agreed within 10%, and 30 us
    stays the bound there. The table says which; a node over 100 us is timed with fewer copies, never fewer than 8."""

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    copies_asked = []

    def copies(model, feeds, threads, in_place=None, reference=None, copies=copies_module.COPIES):
        copies_asked.append(copies)
        return 58e-6, 0.1

    patch_room(monkeypatch, "taso.cost", "median_run", lambda session, feeds, min_seconds=0.0: 1e-6)
    patch_room(monkeypatch, "taso.cost", "wall_clock_marginal", copies)
    node = _n("tanh", ["x"], ["y"])
    graph = Graph({"x": TensorType((1, 64))}, {}, [node], ["y"])
    threaded, single = OrtCpuCost(threads=2), OrtCpuCost(threads=1)
    for profiled in (72e-6, 150e-6, 900e-6):
        patch_room(monkeypatch, "taso.cost", "profile_kernels", lambda *a, **k: profiling.KernelProfile([profiled] * 8, [100e-6] * 8, [2e-6] * 8))
        assert threaded.fresh(node, graph, set()) == (58e-6, 0.1)
        assert single.fresh(node, graph, set())[0] > 60e-6
    assert copies_asked == [copies_module.COPIES, 22, 8]
    patch_room(monkeypatch, "taso.cost", "profile_kernels", lambda *a, **k: profiling.KernelProfile([2e-3] * 8, [100e-6] * 8, [2e-6] * 8))
    assert threaded.fresh(node, graph, set())[0] > 1e-3, "a node of milliseconds keeps its profiled price"
    assert "under-1000us-by-wall-clock" in threaded.fingerprint and "under-30us-by-wall-clock" in single.fingerprint


def test_a_noisy_wall_clock_measurement_is_taken_again_and_the_steadier_kept():
    """Copies of a merged product once came out at 1,384 us with their rounds spread over 27%, where before and after
    they took 725-743 us spread over 10%."""
    from taso.cost.profiling import steadier

    runs = iter([(1384e-6, 0.27), (730e-6, 0.10)])
    assert steadier(lambda: next(runs)) == (730e-6, 0.10)
    runs = iter([(730e-6, 0.10), (1384e-6, 0.27)])
    assert steadier(lambda: next(runs)) == (730e-6, 0.10), "a steady one is not taken again"
    runs = iter([(700e-6, 0.25), (1384e-6, 0.40)])
    assert steadier(lambda: next(runs)) == (700e-6, 0.25)


def test_the_layout_conversions_around_a_lone_convolution_are_not_part_of_its_price():
    """Alone, a convolution runs between a ReorderInput and a ReorderOutput (ONNX Runtime's blocked layout); in a graph
    of convolutions it pays neither. Counted, two sibling convolutions measured alone paid the input's conversion twice
    and merged once: a saving no graph has (Inception-v3's merges, predicted 1.05x, measured 0.94x)."""

    def kernel(name, op, ts, dur):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}

    events = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 1000},
              kernel("ReorderInput", "ReorderInput", 10, 90), kernel("y_nchwc", "Conv", 110, 231),
              kernel("ReorderOutput", "ReorderOutput", 350, 35), kernel(probes.REFERENCE, "MatMul", 400, 100)]
    times = profiling.role_times(events, 0, (probes.REFERENCE,))
    assert times[profiling._WORK] == [pytest.approx(231e-6)] and times[probes.REFERENCE] == [pytest.approx(100e-6)]
