"""The cost cache checks itself: a wrong entry is found by a spot-check and replaced, a stale table is re-measured, within bounds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from taso.cli import main
from taso.cost import CostCache, SpotCheck, SpotCheckPolicy, node_key
from taso.cost.cache import FIXED, STALE, SUSPECT
from taso.cost.ort_cpu import OrtCpuCost, fingerprint
from taso.ir import Graph
from taso.onnx import load_onnx
from taso.search import SearchConfig, search

EVERY_ENTRY = SpotCheckPolicy(entries=10, seconds=60.0, rate=1.0, seed=0)
NEVER_DRAWN = SpotCheckPolicy(entries=10, seconds=60.0, rate=0.0, seed=0)


def _model(widths=(256, 256), relu: bool = True) -> Graph:
    """x -> MatMul by each width in turn (weights as initializers) -> Relu: an ONNX model built with onnx.helper, loaded."""
    rng = np.random.default_rng(0)
    nodes, initializers, value = [], [], "x"
    for i, (n, m) in enumerate(zip(widths, widths[1:])):
        initializers.append(helper.make_tensor(f"w{i}", TensorProto.FLOAT, [n, m], rng.standard_normal(n * m).astype(np.float32)))
        nodes.append(helper.make_node("MatMul", [value, f"w{i}"], [f"m{i}"]))
        value = f"m{i}"
    if relu:
        nodes.append(helper.make_node("Relu", [value], ["y"]))
        value = "y"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, widths[0]])],
                              [helper.make_tensor_value_info(value, TensorProto.FLOAT, [1, widths[-1]])], initializers)
    return load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _keys(graph: Graph) -> list[str]:
    consts = graph.constant_values()
    return [node_key(n, graph, consts) for n in graph.nodes]


class _Measurements:
    """Stands in for ONNX Runtime: each node costs what ``truth`` says (by key), each call counted."""

    def __init__(self, truth: dict[str, float], band: float = 0.1):
        self.truth, self.band, self.calls, self.quick = truth, band, [], []

    def __call__(self, model: OrtCpuCost, node, graph, consts, quick: bool) -> tuple[float, float]:
        key = node_key(node, graph, consts)
        self.calls.append(key)
        self.quick.append(quick)
        value = self.truth[key]
        return (value(len(self.calls)) if callable(value) else value), self.band


def _seeded(tmp_path, graph: Graph, seconds: list[float]) -> str:
    """A cache file holding ``seconds`` for the graph's nodes (with a 10% band), as a first search would have left it."""
    cache = CostCache(str(tmp_path / "costs.json"))
    for key, value in zip(_keys(graph), seconds):
        cache.record(fingerprint(1), key, value, 0.1)
    cache.save()
    return cache.path


@pytest.fixture
def fake(monkeypatch):
    """Installs a _Measurements as OrtCpuCost's measurement: tests see exactly what is measured, and when."""

    def install(truth: dict[str, float], band: float = 0.1) -> _Measurements:
        measurements = _Measurements(truth, band)
        monkeypatch.setattr(OrtCpuCost, "fresh", lambda self, node, graph, consts, quick=False: measurements(self, node, graph, consts, quick))
        return measurements

    return install


def test_a_planted_wrong_entry_is_found_replaced_and_the_search_uses_the_fresh_value(tmp_path, fake):
    graph = _model((64, 32, 48))
    keys = _keys(graph)
    truth = dict(zip(keys, (20e-6, 15e-6, 2e-6)))
    path = _seeded(tmp_path, graph, [20e-6, 150e-6, 2e-6])  # the second MatMul cached at 10x
    measurements = fake(truth)
    model = OrtCpuCost(cache=CostCache(path, spot_check=EVERY_ENTRY))
    _, report = search(graph, [], model, SearchConfig(budget=1))
    assert report.initial_cost == pytest.approx(37e-6)  # priced with the fresh value, not the planted one
    # a quick screen of every entry; the one that disagreed was measured in full, which confirmed it
    assert [(k, q) for k, q in zip(measurements.calls, measurements.quick) if not q] == [(keys[1], False)]
    entry = model.cache.entry(fingerprint(1), keys[1])
    assert entry.state == FIXED and entry.disagreement[:2] == (150e-6, 15e-6)
    model.close()
    again = CostCache(path, spot_check=NEVER_DRAWN)
    assert again.table(fingerprint(1))[keys[1]] == pytest.approx(15e-6) and again.entry(fingerprint(1), keys[1]).state == FIXED


def test_a_planted_wrong_entry_is_replaced_on_onnx_runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    graph = _model((256, 256), relu=False)
    first = OrtCpuCost()
    true_cost = first.graph_cost(graph)
    first.close()
    (key,) = _keys(graph)
    tables = json.loads((tmp_path / "costs.json").read_text())
    assert 0 < tables[fingerprint(1)][key]["band"] <= 0.5 and tables[fingerprint(1)][key]["at"] > 0
    tables[fingerprint(1)][key]["s"] *= 10
    (tmp_path / "costs.json").write_text(json.dumps(tables))
    model = OrtCpuCost(cache=CostCache(spot_check=EVERY_ENTRY))
    _, report = search(graph, [], model, SearchConfig(budget=1))
    assert report.initial_cost < 3 * true_cost  # not the planted 10x
    assert model.cache.entry(fingerprint(1), key).state in (FIXED, SUSPECT)


def test_an_entry_within_its_band_is_kept_and_a_healthy_table_costs_only_the_sample(tmp_path, fake):
    graph = _model((64, 32, 48, 16, 8))
    keys = _keys(graph)
    cached = [20e-6, 15e-6, 9e-6, 4e-6, 2e-6]
    path = _seeded(tmp_path, graph, cached)
    measurements = fake({k: v * 1.05 for k, v in zip(keys, cached)})  # within the 10% bands
    model = OrtCpuCost(cache=CostCache(path, spot_check=SpotCheckPolicy(entries=3, seconds=60.0, rate=1.0)))
    assert model.graph_cost(graph) == pytest.approx(sum(cached))  # the cached values stand
    assert len(measurements.calls) == 3 and model.measured == 0
    assert model.cache.report()["health"][fingerprint(1)]["spot_checked"] == 3


def test_the_spot_check_never_measures_more_than_its_cap(tmp_path, fake):
    graph = _model((64, 32, 48, 16, 8, 4, 2))
    keys = _keys(graph)
    path = _seeded(tmp_path, graph, [1e-6] * len(keys))
    measurements = fake({k: 1e-6 for k in keys})
    model = OrtCpuCost(cache=CostCache(path, spot_check=SpotCheckPolicy(entries=2, seconds=60.0, rate=1.0)))
    model.graph_cost(graph)
    check = model.cache.spot_check(fingerprint(1))
    assert len(measurements.calls) == 2 and check.measurements == 2 and len(check.verdicts) == 2
    # Every entry wrong: one full measurement each besides the quick one, so at most twice the cap.
    measurements = fake({k: 50e-6 for k in keys})
    model = OrtCpuCost(cache=CostCache(path, spot_check=SpotCheckPolicy(entries=2, seconds=60.0, rate=1.0, min_verdicts=99)))
    model.graph_cost(graph)
    assert len(measurements.calls) == 4 and len(model.cache.spot_check(fingerprint(1)).verdicts) == 2


def test_the_spot_check_stops_at_its_time_budget(tmp_path):
    cache = CostCache(str(tmp_path / "costs.json"), spot_check=SpotCheckPolicy(entries=100, seconds=0.05, rate=1.0))
    for i in range(20):
        cache.record("table", f"k{i}", 1e-3, 0.1)
    check = SpotCheck(cache, "table", cache.policy)

    def slow(quick: bool) -> tuple[float, float]:
        import time

        time.sleep(0.02)
        return 1e-3, 0.1

    checked = [check.verify(f"k{i}", 1e-3, slow) for i in range(20) if check.wants(f"k{i}", expected_seconds=0.02)]
    assert 1 <= len(checked) <= 3 and check.seconds < 0.05 + 0.03
    # A check expected to take longer than the budget left does not start.
    assert not SpotCheck(cache, "table", cache.policy).wants("k0", expected_seconds=1.0)


def test_a_table_that_went_stale_is_remeasured_when_used_not_trusted(tmp_path, fake):
    graph = _model((64, 32, 48, 16, 8, 4))
    keys = _keys(graph)
    path = _seeded(tmp_path, graph, [10e-6] * len(keys))
    cache = CostCache(path)
    cache.record(fingerprint(1), "add|()|float32[1,7];float32[1,7]", 3e-6, 0.1)  # another model's entry, not used here
    cache.save()
    fake({k: 40e-6 for k in keys})  # everything 4x slower now: another ONNX Runtime build
    model = OrtCpuCost(cache=CostCache(path, spot_check=SpotCheckPolicy(entries=3, seconds=60.0, rate=1.0)))
    assert model.graph_cost(graph) == pytest.approx(40e-6 * len(keys))  # no entry trusted after the sample disagreed
    check = model.cache.spot_check(fingerprint(1))
    assert len(check.verdicts) == 3 and check.marked_stale == len(keys) - 3 + 1
    assert model.measured == len(keys) - 3  # the unchecked entries, re-measured as they were used
    health = model.cache.report()["health"][fingerprint(1)]
    assert health["stale"] == 1  # only the entry nothing used yet
    assert model.cache.entry(fingerprint(1), "add|()|float32[1,7];float32[1,7]").state == STALE
    model.close()


def test_a_stale_table_is_not_remeasured_past_the_search_deadline(tmp_path, fake):
    """Re-measuring an untrusted entry obeys the time limit as measuring a missing one does: past it, the cached value
    stands (a stale table once made eqsat's 1 s extraction re-measure for 22 s)."""
    import time

    graph = _model((64, 32, 48, 16, 8, 4))
    keys = _keys(graph)
    path = _seeded(tmp_path, graph, [10e-6] * len(keys))
    stale = CostCache(path)
    assert stale.mark_stale(fingerprint(1)) == len(keys)
    stale.save()
    measurements = fake({k: 40e-6 for k in keys})
    late = OrtCpuCost(cache=CostCache(path, spot_check=NEVER_DRAWN))
    late.deadline = time.perf_counter() - 1.0  # the search's time is up
    assert late.graph_cost(graph) == pytest.approx(10e-6 * len(keys)) and measurements.calls == []
    in_time = OrtCpuCost(cache=CostCache(path, spot_check=NEVER_DRAWN))
    assert in_time.graph_cost(graph) == pytest.approx(40e-6 * len(keys)) and len(measurements.calls) == len(keys)
    late.close()
    in_time.close()


def test_an_old_format_cache_still_loads_and_its_entries_are_checked_first(tmp_path, fake):
    graph = _model((64, 32, 48, 16))
    keys = _keys(graph)
    old = {fingerprint(1): {**dict(zip(keys, (20e-6, 15e-6, 9e-6, 2e-6))), "calibration|unit": 1e-4}}
    (tmp_path / "costs.json").write_text(json.dumps(old))
    cache = CostCache(str(tmp_path / "costs.json"), spot_check=SpotCheckPolicy(entries=2, seconds=60.0, rate=0.0))
    assert cache.summary() == {fingerprint(1): 5} and cache.entry(fingerprint(1), keys[0]) is None
    assert cache.report()["health"][fingerprint(1)]["without_band"] == 4
    measurements = fake(dict(zip(keys, (20e-6, 15e-6, 9e-6, 2e-6))))
    model = OrtCpuCost(cache=cache)
    assert model.graph_cost(graph) == pytest.approx(46e-6)
    assert len(measurements.calls) == 2  # band unknown: drawn although the rate is 0, up to the cap
    model.close()
    saved = json.loads((tmp_path / "costs.json").read_text())[fingerprint(1)]
    assert saved["calibration|unit"] == 1e-4 and sum(isinstance(v, float) for v in saved.values()) == 3  # the rest as they were
    assert sum(isinstance(v, dict) and v["band"] == 0.1 for v in saved.values()) == 2


def test_info_costs_lists_suspect_and_fixed_entries(tmp_path, monkeypatch, fake, capsys):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    graph = _model((64, 32, 48))
    keys = _keys(graph)
    path = _seeded(tmp_path, graph, [20e-6, 150e-6, 2e-6])
    # keys[0]: two fresh measurements that disagree with it and with each other -> suspect; keys[1]: 10x off -> fixed.
    fake({keys[0]: lambda call: 60e-6 if call == 1 else 6e-6, keys[1]: 15e-6, keys[2]: 2e-6})
    model = OrtCpuCost(cache=CostCache(path, spot_check=SpotCheckPolicy(entries=10, seconds=60.0, rate=1.0, min_verdicts=99)))
    model.graph_cost(graph)
    model.close()
    assert main(["info", "--costs"]) == 0
    text = capsys.readouterr().out
    assert f"{fingerprint(1)}" in text and "3 spot-checked, 1 suspect, 0 stale, 1 fixed" in text
    suspect_line = next(line for line in text.splitlines() if keys[0] in line)
    assert "suspect" in suspect_line and "20.0 us cached" in suspect_line and "60.0 us fresh" in suspect_line
    assert main(["info", "--costs", "--json"]) == 0
    health = json.loads(capsys.readouterr().out)["health"][fingerprint(1)]
    assert health["suspect"] == 1 and health["fixed"] == 1 and health["spot_checked"] == 3
    worst = {w["key"]: w for w in health["worst"]}
    assert worst[keys[1]]["cached"] == pytest.approx(150e-6) and worst[keys[1]]["fresh"] == pytest.approx(15e-6) and worst[keys[1]]["band"] > 0
    assert worst[keys[0]]["state"] == "suspect"
    # A suspect entry is re-measured the next time a search uses it.
    fake({k: v for k, v in zip(keys, (20e-6, 15e-6, 2e-6))})
    later = OrtCpuCost(cache=CostCache(spot_check=NEVER_DRAWN))
    later.graph_cost(graph)
    assert later.measured == 1 and later.cache.entry(fingerprint(1), keys[0]).state != SUSPECT


def test_info_costs_check_remeasures_entries_from_their_keys(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    graph = _model((128, 256))
    model = OrtCpuCost()
    model.graph_cost(graph)
    model.close()
    matmul, relu = _keys(graph)
    tables = json.loads((tmp_path / "costs.json").read_text())
    tables[fingerprint(1)][matmul]["s"] *= 10
    (tmp_path / "costs.json").write_text(json.dumps(tables))
    assert main(["info", "--costs", "--check", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    checked = {c["key"]: c for c in report["checked_now"][fingerprint(1)]["entries"]}
    assert set(checked) == {matmul, relu}
    assert checked[matmul]["state"] in (FIXED, SUSPECT) and checked[matmul]["fresh"] < checked[matmul]["cached"] / 3
    assert report["health"][fingerprint(1)]["spot_checked"] == 2
    assert main(["info", "--costs", "--check", "1"]) == 0
    assert "checked now" in capsys.readouterr().out
    assert main(["info", "--costs", "--check", "0"]) == 2


@pytest.mark.parametrize("content, problem", [("{broken", "unreadable"), ("[1, 2]", "not a JSON object"),
                                              ('{"t": {"a": "x", "b": 1e-6}, "u": 3}', "2 damaged")])
def test_a_damaged_cache_is_ignored_with_a_clear_message(tmp_path, monkeypatch, capsys, content, problem):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    (tmp_path / "costs.json").write_text(content)
    cache = CostCache()
    assert problem in cache.problem and cache.summary() == ({"t": 1} if content.startswith('{"t"') else {})
    assert main(["info", "--costs"]) == 0
    assert problem in capsys.readouterr().out
    model = OrtCpuCost(cache=cache)  # and a search can still use it: what is lost is only measured again
    assert model.graph_cost(_model((32, 16), relu=False)) > 0
    model.close()
    assert json.loads((tmp_path / "costs.json").read_text())[fingerprint(1)]


def test_check_rebuilds_a_node_from_its_key_unless_a_constant_value_may_pick_the_kernel():
    from taso.cost.spot_checks import _single_node

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    weights = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], np.ones(108, np.float32))
    exponent = helper.make_tensor("e", TensorProto.FLOAT, [], [2.0])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Pow", ["c", "e"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                                                [weights, exponent]), opset_imports=[helper.make_opsetid("", 17)])
    conv, power = _keys(load_onnx(model))
    node, graph = _single_node(conv)
    assert node.op.name == "conv2d" and node_key(node, graph) == conv
    assert _single_node(power) is None  # Pow's exponent is a value the key does not hold
    assert _single_node("opaque|(('proto', 'abc'),)|float32[1]") is None and _single_node("nonsense") is None


def test_taso_spot_checks_0_leaves_a_planted_wrong_entry_to_be_read_as_it_is(tmp_path, fake, monkeypatch):
    # What a benchmark comparing runs in separate processes relies on: with TASO_SPOT_CHECKS=0 every run prices with
    # the table as it is, the planted 10x entry included, and nothing is re-measured.
    graph = _model((64, 32, 48))
    keys = _keys(graph)
    path = _seeded(tmp_path, graph, [20e-6, 150e-6, 2e-6])
    measurements = fake(dict(zip(keys, (20e-6, 15e-6, 2e-6))))
    monkeypatch.setenv("TASO_SPOT_CHECKS", "0")
    cache = CostCache(path)
    assert cache.policy.entries == 0
    assert OrtCpuCost(cache=cache).graph_cost(graph) == pytest.approx(172e-6) and measurements.calls == []
    monkeypatch.setenv("TASO_SPOT_CHECKS", "2")
    assert CostCache(path).policy == SpotCheckPolicy(entries=2)
    monkeypatch.delenv("TASO_SPOT_CHECKS")
    assert CostCache(path).policy == SpotCheckPolicy()


def test_a_malformed_taso_spot_checks_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TASO_SPOT_CHECKS", "few")
    path = tmp_path / "relu.onnx"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    assert main(["optimize", str(path), "-o", str(tmp_path / "out.onnx"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "TASO_SPOT_CHECKS='few'" in err and "Traceback" not in err and not (tmp_path / "out.onnx").exists()


def test_a_sub_microsecond_entry_off_by_two_disagrees_with_a_fresh_measurement():
    """The spot-check's floor is the wall clock's resolution, not the profiler's 1 us tick: at that tick a 128-float Add
    cached at 0.80 us agreed with 0.39 fresh, and could never be fixed."""
    from taso.cost.cache import agrees

    assert not agrees(0.80e-6, 0.25, 0.39e-6, 0.10)
    assert agrees(0.42e-6, 0.10, 0.39e-6, 0.10), "within their bands"
    assert agrees(40e-6, 0.10, 44e-6, 0.10), "the profiled entries are judged by their bands, as before"
