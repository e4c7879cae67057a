"""A node measured alone hands its large weights to ONNX Runtime in place (taso.cost.in_place)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from test_search import _n

from taso.cost import make_cost_model
from taso.cost.in_place import InPlaceWeights, in_place_session
from taso.ir import Graph, TensorType
from taso.onnx import to_onnx_model


def _gather_from(table: np.ndarray) -> Graph:
    return Graph({"i": TensorType((64,), "int64")}, {"table": table}, [_n("gather", ["table", "i"], ["y"], axis=0)], ["y"])


def test_a_large_weight_is_named_not_copied_and_the_session_reads_the_array_itself():
    table = np.random.default_rng(0).standard_normal((8192, 1024)).astype(np.float32)  # 32 MB
    in_place = InPlaceWeights()
    model = to_onnx_model(_gather_from(table), check=False, weights_file=in_place).SerializeToString()
    assert len(model) < 4096, "the model names the table; its bytes are not in it"
    assert set(in_place.arrays) == {"table"} and in_place.arrays["table"] is table
    session = in_place_session(model, ort.SessionOptions(), in_place)
    indices = np.arange(0, 8192, 128, dtype=np.int64)
    (got,) = session.run(None, {"i": indices})
    np.testing.assert_array_equal(got, table[indices])


def test_small_weights_stay_in_the_model():
    table = np.ones((16, 4), np.float32)
    in_place = InPlaceWeights()
    model = to_onnx_model(_gather_from(table), check=False, weights_file=in_place)
    assert not in_place.arrays and model.graph.initializer[0].raw_data


def test_a_node_reading_a_large_weight_is_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path))
    graph = _gather_from(np.random.default_rng(1).standard_normal((8192, 1024)).astype(np.float32))
    model = make_cost_model("ort-cpu")
    cost = model.node_cost(graph.nodes[0], graph, graph.constant_values())
    assert 0.0 < cost < 0.01 and not model.estimated
