"""Cost models: measured costs are positive, cached per hardware and reused; analytic costs follow the work."""

from __future__ import annotations

import json

import numpy as np
from helpers import patch_room

import taso
import taso.cost.profiling as profiling
from taso import ops
from taso.cli import main
from taso.cost import AnalyticCost, CostCache, node_key
from taso.cost.ort_cpu import OrtCpuCost
from taso.ir import Graph, Node, TensorType


def _graph(n: int = 64) -> Graph:
    mm, relu = ops.get("matmul"), ops.get("relu")
    nodes = [Node(mm, mm.make_params(), ("x", "w"), ("y",), "mm"), Node(relu, relu.make_params(), ("y",), ("z",), "relu")]
    return Graph({"x": TensorType((1, n))}, {"w": np.ones((n, n), np.float32)}, nodes, ["z"])


def test_node_key_distinguishes_constant_inputs():
    g = _graph()
    mm = g.producer("y")
    as_input = Graph({"x": TensorType((1, 64)), "w": TensorType((64, 64))}, {}, [mm], ["y"])
    assert node_key(mm, g) != node_key(mm, as_input)


def test_an_elementwise_node_is_keyed_by_its_element_count_not_its_layout():
    tanh, add = ops.get("tanh"), ops.get("add")

    def key(op, *types):
        names = [f"x{i}" for i in range(len(types))]
        g = Graph(dict(zip(names, types)), {}, [Node(op, op.make_params(), tuple(names), ("y",), "n")], ["y"])
        return node_key(g.nodes[0], g)

    assert key(tanh, TensorType((1, 128))) == key(tanh, TensorType((128, 1))) == key(tanh, TensorType((2, 64)))
    assert key(add, TensorType((1, 128)), TensorType((1, 128))) == key(add, TensorType((128, 1)), TensorType((128, 1)))
    assert key(add, TensorType((4, 32)), TensorType((1, 1))) == key(add, TensorType((128,)), TensorType(()))
    # a broadcast's loops depend on the shapes: they stay in the key
    assert key(add, TensorType((4, 32)), TensorType((32,))) != key(add, TensorType((4, 32)), TensorType((4, 1)))
    assert key(tanh, TensorType((128,), "float16")) != key(tanh, TensorType((128,)))


class _LayoutNoise(AnalyticCost):
    """Measurement noise that depends on the layout a key shows: an activation on a row vector prices 10x (what two
    profiler runs of one microsecond kernel can disagree by)."""

    def measure(self, node, graph, key, consts):
        noisy = node.op.name in ("tanh", "sigmoid") and "float32[1," in key
        return super().measure(node, graph, key, consts) * (10.0 if noisy else 1.0)


def test_the_search_cannot_buy_layout_noise_with_transposes():
    """The shipped library proves tanh(x) = transpose(tanh(transpose(x))); priced per layout, noise made the search
    wrap 64 Tanhs of an unrolled LSTM in 128 Transposes. One price per kernel leaves it nothing to buy."""
    from taso.pipeline.library import load_rules
    from taso.search import SearchConfig, search

    tanh, sigmoid, mul = ops.get("tanh"), ops.get("sigmoid"), ops.get("mul")
    nodes = [Node(tanh, tanh.make_params(), ("x",), ("a",), "tanh"), Node(sigmoid, sigmoid.make_params(), ("x",), ("b",), "sigmoid"),
             Node(mul, mul.make_params(), ("a", "b"), ("y",), "mul")]
    graph = Graph({"x": TensorType((1, 128))}, {}, nodes, ["y"])
    best, _ = search(graph, load_rules(), _LayoutNoise(), SearchConfig(budget=50))
    assert sorted(n.op.name for n in best.nodes) == ["mul", "sigmoid", "tanh"]


def test_analytic_cost_grows_with_work():
    model = AnalyticCost()
    small, big = _graph(64), _graph(512)
    assert model.graph_cost(big) > model.graph_cost(small) > 0


def test_weight_only_nodes_cost_nothing():
    tr = ops.get("transpose")
    g = _graph()
    folded = g.replace(add=[Node(tr, tr.make_params(perm=(1, 0)), ("w",), ("wt",), "t")])
    assert AnalyticCost().graph_cost(folded) == AnalyticCost().graph_cost(g)


def test_measured_costs_are_cached_per_hardware_and_reused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    first = OrtCpuCost(threads=1)
    cost = first.graph_cost(_graph())
    first.close()
    assert cost > 0 and first.measured == 2
    second = OrtCpuCost(threads=1)
    assert second.graph_cost(_graph()) == cost and second.measured == 0  # nothing measured twice
    tables = json.loads((tmp_path / "costs.json").read_text())
    assert tables.pop("taso-cost-cache-format") == 2  # the file's format, beside the tables
    (fingerprint,) = tables
    assert "onnxruntime" in fingerprint and "threads=1" in fingerprint
    assert main(["info", "--costs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tables"][fingerprint] == len(tables[fingerprint])


def test_a_damaged_cache_is_ignored(tmp_path):
    path = tmp_path / "costs.json"
    path.write_text("{broken")
    assert CostCache(str(path)).summary() == {}


def test_profiled_kernel_times_are_split_per_run_and_skip_warm_up():
    from taso.cost.profiling import _kernel_times
    from taso.onnx.probes import FLOOR, REFERENCE

    def run(ts):
        return {"cat": "Session", "name": "model_run", "ts": ts, "dur": 50}

    def kernel(name, ts, dur):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur}

    events = [run(0), kernel("Add_0", 1, 99), kernel(REFERENCE, 2, 99),  # warm-up, skipped
              run(100), kernel("Conv_0", 101, 7), kernel("Relu_1", 110, 3), kernel(REFERENCE, 120, 20),
              run(200), kernel(REFERENCE, 201, 40), kernel(FLOOR, 210, 4), kernel("Conv_0", 230, 9)]
    profile = _kernel_times(events, skip=1)
    assert np.allclose(profile.kernels, [10e-6, 9e-6], rtol=1e-9, atol=0)
    assert np.allclose(profile.reference, [20e-6, 40e-6], rtol=1e-9, atol=0)
    assert np.allclose(profile.floor, [0.0, 4e-6], rtol=1e-9, atol=0)


def test_the_profiler_floor_is_taken_from_each_run_of_the_node_own_session(tmp_path, monkeypatch):
    """The profiler's time for a kernel that does nothing moves between sessions (2 us in one, 4 in the next, at 1 thread;
    4-8 us at 2 threads): a node is priced net of its own session's floor, not of one measured once for the machine."""
    from taso.cost import ort_cpu

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    floors = iter([2e-6, 6e-6])

    def profile(model, feeds, threads, min_total=profiling.FULL_SECONDS, **_):
        floor = next(floors, 2e-6)
        return profiling.KernelProfile([floor + 40e-6] * 8, [100e-6] * 8, [floor] * 8)  # a 40 us kernel, under either floor

    patch_room(monkeypatch, "taso.cost", "profile_kernels", profile)
    patch_room(monkeypatch, "taso.cost", "median_run", lambda session, feeds, min_seconds=0.0: 1e-6)
    model = ort_cpu.OrtCpuCost(threads=1)
    tanh = ops.get("tanh")
    node = Node(tanh, tanh.make_params(), ("x",), ("y",), "tanh")
    graph = Graph({"x": TensorType((1, 64))}, {}, [node], ["y"])
    first, _ = model.fresh(node, graph, set())
    second, _ = model.fresh(node, graph, set())
    assert abs(first - second) < 1e-12 and abs(first - 40e-6) < 1e-9


def test_measured_costs_order_tiny_and_large_operators_sensibly(tmp_path, monkeypatch):
    # Microsecond operators must not drown in the cost of calling a session from Python.
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    add, mm = ops.get("add"), ops.get("matmul")
    g = Graph({"x": TensorType((1, 512)), "y": TensorType((1, 512))}, {"w": np.ones((512, 1024), np.float32)},
              [Node(add, add.make_params(), ("x", "y"), ("s",), "add"), Node(mm, mm.make_params(), ("s", "w"), ("m",), "mm")], ["m"])
    model = OrtCpuCost(threads=1)
    add_cost, mm_cost = (model.node_cost(n, g) for n in g.nodes)
    assert 0 < add_cost < 10e-6 and add_cost * 5 < mm_cost


def test_a_profile_without_runs_is_a_clear_error():
    import pytest

    from taso.cost.profiling import _kernel_times
    from taso.errors import TasoError

    with pytest.raises(TasoError, match="--cost analytic"):
        _kernel_times([{"cat": "Node", "name": "Add_kernel_time", "ts": 0, "dur": 3}], skip=0)


def test_past_its_deadline_a_measured_model_estimates_new_nodes_and_neither_caches_nor_memoises_them(tmp_path, monkeypatch):
    """A cold cost cache must not overrun the search's time limit (a 2.4 GB transformer's search ran 31 s for 9):
    past the deadline a node never measured is priced by the roofline scaled to the nodes measured so far."""
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    model = OrtCpuCost(threads=1)
    measured = model.graph_cost(_graph(64))  # calibrates the estimates
    model.deadline = 0.0  # long past
    estimated = model.graph_cost(_graph(256))
    assert estimated > 0 and model.estimated == 2 and model.measured == 2
    assert model.graph_cost(_graph(64)) == measured, "what was measured is still used"
    model.deadline = float("inf")
    assert model.graph_cost(_graph(256)) > 0 and model.measured == 4, "the estimate was not kept: measured now"
    model.close()


def test_a_search_on_a_cold_cache_keeps_to_its_time_limit(tmp_path, monkeypatch):
    import time

    from taso.pipeline.library import load_rules
    from taso.search import SearchConfig, search

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    model = OrtCpuCost(threads=1)
    slow_fresh = model.fresh

    def slow(*args, **kwargs):  # a node that takes a second to measure, as a big weight does
        time.sleep(1.0)
        return slow_fresh(*args, **kwargs)

    monkeypatch.setattr(model, "fresh", slow)
    import taso.cost.ort_cpu as ort_cpu

    slow_bulk = ort_cpu.bulk_profile

    def slow_in_bulk(*args, **kwargs):  # and a session of nodes measured in bulk as long
        time.sleep(1.0)
        return slow_bulk(*args, **kwargs)

    monkeypatch.setattr(ort_cpu, "bulk_profile", slow_in_bulk)
    started = time.perf_counter()
    _, report = search(_graph(64), load_rules(), model, SearchConfig(time_limit=0.5))
    assert time.perf_counter() - started < 2.5 and model.deadline == float("inf")
    assert report.stop_reason.name == "TIME_LIMIT"  # what it could not measure in time it estimated or left unpriced
    model.close()


def test_a_gather_over_a_symbolic_axis_is_priced_without_deciding_its_size(tmp_path, monkeypatch):
    """BERT-base exported by TorchScript with batch and seq symbolic gathers along a [batch*seq, ...] axis: whether
    ONNX Runtime fuses such Gathers into a Split needs a fixed count, and asking ``batch*seq < 2`` refused the model."""
    import onnx.parser

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, seq, 8] x) => (float[8] y) {
            flat = Constant <value = int64[2] {-1, 8}> ()
            rows = Reshape (x, flat)
            first = Constant <value = int64 {0}> ()
            y = Gather <axis = 0> (rows, first)
        }""")
    graph = taso.load_onnx(model, {"x": (1, 4, 8)})
    assert any(n.op.name == "gather" for n in graph.nodes)
    cost = OrtCpuCost(threads=1)
    assert cost.graph_cost(graph) > 0
    cost.close()
