"""The cell-ceiling models (taso.models.cells, which benchmarks/end_to_end/bench_cell_ceiling.py times): the hand-merged cells compute the unrolled cells' function and
really merge the input projections of all steps into one product.

Tiny configurations (hidden 8, steps 3), TorchScript exporter (a fraction of a second per export).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from taso.models import cells  # noqa: E402 - after the importorskips
from taso.models.symbolic_exports import op_histogram  # noqa: E402

HIDDEN, STEPS = 8, 3


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ceiling")


@pytest.mark.parametrize("cell", cells.CELLS)
def test_merged_module_equals_unrolled_in_pytorch(cell: str) -> None:
    original = cells.original_spec(cell, HIDDEN, STEPS)
    ceiling = cells.ceiling_spec(original)
    assert ceiling.module is not original.module
    for name, value in original.module.cell.state_dict().items():  # the same weights, copied
        assert torch.equal(ceiling.module.cell.state_dict()[name], value)
    torch.manual_seed(3)
    with torch.no_grad():
        for batch in (1, 4):
            x = torch.randn(batch, STEPS, HIDDEN)
            want, got = original.module(x), ceiling.module(x)
            assert got.shape == want.shape == (batch, HIDDEN)
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cell", cells.CELLS)
def test_merged_export_equals_original_on_onnx_runtime(cell: str, out_dir: Path) -> None:
    path_original, path_ceiling = cells.prepare(cell, HIDDEN, STEPS, "torchscript", out_dir)  # asserts the match itself
    assert cells.max_relative_difference(path_original, path_ceiling, HIDDEN, STEPS, batches=(1, 2, 5), seed=7) <= cells.RTOL
    # the batch stays symbolic in the ceiling's export, as in the original's
    x = onnx.load(str(path_ceiling)).graph.input[0]
    assert x.type.tensor_type.shape.dim[0].dim_param


@pytest.mark.parametrize("cell", cells.CELLS)
def test_merged_export_has_one_input_projection(cell: str, out_dir: Path) -> None:
    path_original, path_ceiling = cells.prepare(cell, HIDDEN, STEPS, "torchscript", out_dir)
    weight = cells.original_spec(cell, HIDDEN, STEPS).module.cell.weight_ih.detach().numpy()
    assert cells.input_projections(onnx.load(str(path_original)), weight) == STEPS
    assert cells.input_projections(onnx.load(str(path_ceiling)), weight) == 1


def test_input_projections_follows_a_transposed_weight() -> None:
    """A MatMul by the transposed weight (or a Transpose of it) counts too: the count does not depend on how an
    exporter writes the product."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.arange(12, dtype=np.float32).reshape(4, 3)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "wT"], ["a"]),
         helper.make_node("Transpose", ["w"], ["w_t"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "w_t"], ["b"]),
         helper.make_node("Gemm", ["x", "w", "x"], ["c"], transB=1),
         helper.make_node("MatMul", ["x", "other"], ["d"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])], [],
        [numpy_helper.from_array(weight.T.copy(), "wT"), numpy_helper.from_array(weight, "w"),
         numpy_helper.from_array(np.ones((3, 4), np.float32), "other")])
    assert cells.input_projections(helper.make_model(graph), weight) == 3


@pytest.mark.parametrize("cell", cells.CELLS)
def test_merged_export_adds_nothing_but_the_merge(cell: str, out_dir: Path) -> None:
    """The ceiling's graph is the original's with the input projections merged: the same gate arithmetic (no
    Shape/Div/Slice chains from a traced chunk, which would slow the ceiling down), steps - 1 fewer Gemms, and only
    the Reshapes of the merge as new operators."""
    path_original, path_ceiling = cells.prepare(cell, HIDDEN, STEPS, "torchscript", out_dir)
    before, after = op_histogram(onnx.load(str(path_original))), op_histogram(onnx.load(str(path_ceiling)))
    assert set(after) <= set(before) | {"Reshape"}
    assert after.get("Reshape") == 2
    assert after["Gemm"] == before["Gemm"] - (STEPS - 1)
    for op in ("Sigmoid", "Tanh", "Mul", "Add", "Split"):
        assert after[op] == before[op], op
