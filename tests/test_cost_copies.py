"""Copies of a one-node model: the cold-read penalty measured on them (taso.cost.copies), and which reads the cost
model prices that way (taso.cost.residency, taso.cost.ort_cpu)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from taso.cost import copies
from taso.cost.ort_cpu import OrtCpuCost
from taso.cost.residency import CacheSizes
from taso.ir import Graph, Node, TensorType
from taso.ops import get

MB = 1 << 20


def _gemm(k: int = 8, n: int = 4) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "W", "b"], ["y"])], "one",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                              [numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "W"),
                               numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_cycle_of_own_weights_stands_for_the_bytes_between_reads_only_at_the_l2s_scale():
    caches = CacheSizes(l1=32 << 10, l2=MB, l3=36 * MB)
    assert caches.cycle(own=768 << 10, evicted=MB) == 2, "an unrolled GRU h256: the other weight, as large, between reads"
    assert caches.cycle(own=256 << 10, evicted=MB) == 5
    assert caches.cycle(own=MB, evicted=MB) == 2 and caches.cycle(own=MB, evicted=2 * MB) is None
    assert caches.cycle(own=MB, evicted=8 * MB) is None, "NasRNN's products: the shared L3 decides, not the L2"
    assert caches.cycle(own=8 * MB, evicted=8 * MB) is None
    assert caches.cycle(own=2 * MB, evicted=2 * MB, threads=2) == 2, "two cores, two L2s"
    assert caches.cycle(own=0, evicted=MB) is None


def test_cycled_copies_read_the_weights_in_turn_each_with_values_of_its_own():
    proto = _gemm()
    cycled = copies.cycled_copies(proto, "W", cycle=3, copies=6)
    weights = {t.name: numpy_helper.to_array(t) for t in cycled.graph.initializer}
    own = weights["W"]
    assert [n.input[1] for n in cycled.graph.node] == ["W", "W~cycle1", "W~cycle2"] * 2
    assert np.array_equal(weights["W~cycle1"], own + 1) and np.array_equal(weights["W~cycle2"], own + 2)
    assert all(n.input[0] == "x" and n.input[2] == "b" for n in cycled.graph.node), "every copy reads the same input and bias"
    assert len({n.output[0] for n in cycled.graph.node}) == 6
    assert copies.cycled_copies(proto, "not-a-weight", cycle=2, copies=4) is None


def test_the_cold_read_penalty_compares_the_same_kernels_reading_one_weight_and_a_cycle(monkeypatch):
    """Only the weights' reuse distance differs between the two models timed: the same number of copies of the node."""
    timed = []

    def differences(base, more, per, feeds, threads, in_place, reference=None):
        timed.append((base, more, per))
        return [3e-6, 4e-6, 5e-6]

    monkeypatch.setattr(copies, "per_round_differences", differences)
    seconds, band = copies.cold_read_penalty(_gemm().SerializeToString(), {}, 1, "W", cycle=2)
    (base, cycled, per), = timed
    assert seconds == pytest.approx(4e-6) and band > 0
    assert len(base.graph.node) == len(cycled.graph.node) == per == 16
    assert {n.input[1] for n in base.graph.node} == {"W"}
    assert [n.input[1] for n in cycled.graph.node[:4]] == ["W", "W~cycle1", "W", "W~cycle1"]
    assert copies.cold_read_penalty(_gemm().SerializeToString(), {}, 1, "V", cycle=2) is None


def test_the_cycled_copies_run_on_onnx_runtime_and_compute_each_weights_product():
    ort = pytest.importorskip("onnxruntime")
    proto = _gemm()
    cycled = copies.cycled_copies(proto, "W", cycle=2, copies=4)
    del cycled.graph.output[:]
    cycled.graph.output.extend(helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, [1, 4]) for n in cycled.graph.node)
    x = np.ones((1, 8), np.float32)
    outputs = ort.InferenceSession(cycled.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    w, b = (numpy_helper.to_array(t) for t in proto.graph.initializer)
    for i, y in enumerate(outputs):
        np.testing.assert_allclose(y, x @ (w + (i % 2)) + b, rtol=1e-5)


class _Keys(OrtCpuCost):
    """Records which probe each penalty would be measured by; measures nothing."""

    def __init__(self, l2: int):
        super().__init__(threads=1)
        self.caches = CacheSizes(l1=1 << 10, l2=l2, l3=16 * l2)
        self.looked_up: list[str] = []

    def cold_penalty(self, node, graph, consts, evicted, cycle=None):
        self.looked_up.append(f"penalty cycle={cycle}")
        return 1e-6, 0.1


def _product(k: int, n: int) -> tuple[Node, Graph]:
    node = Node(get("matmul"), get("matmul").make_params(), ("x", "W"), ("y",), "p")
    return node, Graph({"x": TensorType((1, k))}, {"W": np.zeros((k, n), np.float32)}, [node], ["y"])


def test_a_penalty_from_own_weights_is_named_apart_from_the_profiled_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    model = _Keys(l2=64 << 10)
    node, graph = _product(128, 128)  # 64 KB
    consts = graph.constant_values()
    model.read_penalty(node, graph, consts, evicted=64 << 10)
    model.read_penalty(node, graph, consts, evicted=256 << 10)  # 5 weights of 64 KB: past twice the 64 KB L2
    assert model.looked_up == ["penalty cycle=2", "penalty cycle=None"]
    keys = sorted(key.rpartition("@")[2] for key in model.cache.table(model.fingerprint))
    assert keys == ["after-own-weights-2", "after-products-pairs-256K"]


def test_a_round_in_which_the_reference_ran_slow_is_dropped_and_more_rounds_taken(monkeypatch):
    """A slow stretch slowed a 0.39 us Add to 0.80 and the reference timed in the same rounds 1.6-2.5x, but in another it
    slowed the reference 1.75x and left a product reading a 3 MB weight at its speed: rescaled, that product came out
    at 18.6 us where it takes 31. The rounds the reference ran calm in are kept, more taken while most were not."""
    calm, slowed = 1e-6, 2.3
    rounds = [1.0, 1.0, slowed, slowed, slowed, 1.0, slowed]  # most rounds disturbed: the median alone would not do
    calls = []

    def samples(measures, count):
        assert len(measures) == 3 and count == copies.WALL_CLOCK_ROUNDS, "the reference is timed in the same rounds"
        calls.append(count)
        base = [10e-6 for s in rounds]
        more = [b + 32 * calm for b in base]  # the node keeps its speed in the slow stretch
        return [base, more, [20e-6 * s for s in rounds]]

    monkeypatch.setattr(copies, "interleaved_samples", samples)
    reference = copies.WallReference(threads=1, calibrated=20e-6)
    proto = _gemm()
    feeds = {"x": np.ones((1, 8), np.float32)}  # the sessions are warmed before the (faked) rounds
    deltas = copies.per_round_differences(proto, copies.with_copies(proto, 33), 32, feeds, 1, None, reference)
    assert len(calls) == 2, "3 calm rounds of 7: another 7 taken"
    assert deltas == pytest.approx([calm] * 6)
    seconds, _ = copies.median_and_band(deltas)
    assert seconds == pytest.approx(calm)

    rounds[:] = [slowed] * 7  # never calm: every round rescaled, as a stretch slowing both alike would need
    calls.clear()
    deltas = copies.per_round_differences(proto, copies.with_copies(proto, 33), 32, feeds, 1, None, reference)
    assert len(calls) == copies.ROUND_SETS and deltas == pytest.approx([calm / slowed] * 7 * copies.ROUND_SETS)


def test_a_reference_is_calibrated_at_its_calm_speed(monkeypatch):
    """The median of 15 samples back to back once calibrated a 2-thread table's reference at 1.8x its calm time, and
    every price of that table came out 1.8x: samples spread over a third of a second, the lower quartile."""
    times = iter(([51e-6] * 2 + [28.6e-6] * 3) * copies.CALIBRATION_SESSIONS)  # each session's samples
    monkeypatch.setattr(copies.time, "sleep", lambda seconds: None)
    reference = copies.WallReference(threads=2)
    monkeypatch.setattr(copies.WallReference, "time", lambda self: next(times))
    assert reference.calibrate() == pytest.approx(28.6e-6)


def test_a_slow_stretch_longer_than_one_sessions_samples_does_not_set_the_reference(monkeypatch):
    """One table calibrated its reference at 50.6 us in a slow stretch of the machine, where it takes 28.5, and priced
    every node 1.6-1.7x what the graph paid: the lowest of a few sessions' calibrations, each in a fresh session."""
    sessions = iter([50.6e-6, 28.5e-6, 35.2e-6])
    opened = []
    monkeypatch.setattr(copies.time, "sleep", lambda seconds: None)

    def sample(self):
        if self._session is None:
            self._session, speed = "session", next(sessions)
            opened.append(speed)
        return opened[-1]

    monkeypatch.setattr(copies.WallReference, "time", sample)
    assert copies.WallReference(threads=2).calibrate() == pytest.approx(28.5e-6)
    assert len(opened) == copies.CALIBRATION_SESSIONS


def test_the_wall_reference_is_calibrated_once_per_table_and_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(copies.WallReference, "time", lambda self: 21e-6)
    model = OrtCpuCost(threads=1)
    assert model.wall_reference().calibrated == pytest.approx(21e-6)
    model.close()
    monkeypatch.setattr(copies.WallReference, "time", lambda self: 40e-6)  # a slower minute: the table keeps its unit
    again = OrtCpuCost(threads=1)
    assert again.wall_reference().calibrated == pytest.approx(21e-6)
    again.close()


def test_the_reference_runs_on_onnx_runtime():
    pytest.importorskip("onnxruntime")
    reference = copies.WallReference(threads=1)
    assert 0 < reference.calibrate() < 0.01
    assert reference.rescaled([1e-6], [reference.calibrated]) == pytest.approx([1e-6])


def test_with_threads_copies_run_after_a_split_product_and_still_compute_the_node(monkeypatch):
    """After a run's first split kernel the workers spin beside every node that follows (taso.measure.timing.session_options):
    with more than one thread, a node's copies are timed so; at one thread there are no workers."""
    import onnxruntime as ort

    model, x = _gemm(), np.ones((1, 8), np.float32)
    spinning = copies.spun_up(model)
    assert spinning.graph.node[0].name == copies.SPIN_UP
    gated = {v for n in spinning.graph.node if n.op_type == "Gemm" for v in n.input} - {"W", "b"}
    assert [n.output[0] for n in spinning.graph.node if n.op_type == "Add"] == list(gated), "the node reads x after the product"
    session = ort.InferenceSession(spinning.SerializeToString(), providers=["CPUExecutionProvider"])
    got, spin = session.run(None, copies.spin_up_feeds({"x": x}))
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, expected)
    assert spin.shape == (1, 1024)

    timed = []
    monkeypatch.setattr(copies, "interleaved_samples", lambda measures, rounds: [[1.0], [2.0]])
    monkeypatch.setattr(copies, "fastest_run", lambda *a, **k: 0.0)

    class Session:
        def run(self, outputs, feeds):
            assert (copies.SPIN_UP in feeds) == (len(timed) > 2)

    monkeypatch.setattr(copies, "copies_session", lambda proto, threads, in_place=None: timed.append(proto) or Session())
    for threads in (1, 2):
        copies.per_round_differences(model, copies.with_copies(model, 3), 2, {"x": x}, threads, None)
    assert [m.graph.node[0].name == copies.SPIN_UP for m in timed] == [False, False, True, True]
