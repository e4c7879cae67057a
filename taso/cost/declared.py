"""What a shape the file declares costs a value on ONNX Runtime's CPU, by the wall clock.

ONNX Runtime plans a value it can size before the run into a reused buffer, and allocates one it cannot size from the
memory pattern of the first run; the two differ by a fraction of a microsecond a value (why: :mod:`taso.onnx.sizing`).
Every price in the cost table is measured on models whose shapes ONNX Runtime knows, so a graph's price is what it
costs with its shapes known. What differs between a file and taso's re-export of it is the values only the file's
``value_info`` sizes: their count (:func:`taso.onnx.sizing.declared_only`) times the figure measured here.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .copies import WallReference, per_round_differences

__all__ = ["STATE_CHAIN_VALUES", "state_chain", "declared_shape_seconds"]

STATE_CHAIN_VALUES = 400  # Add and Tanh in turns: 14 us of difference in 150 us, a round's noise well under it
_WIDTH = 128


def state_chain(values: int, declared: bool, width: int = _WIDTH) -> onnx.ModelProto:
    """A chain from zeros shaped as its input (``ConstantOfShape(Shape(x))``, the way an exported recurrent cell's
    state starts), adding ``x`` and taking the Tanh in turns, ``values`` nodes in all. The batch is symbolic, so ONNX
    Runtime sizes none of the chain's values, unless ``declared`` lists them all in ``value_info`` as the dynamo
    exporter does."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("ConstantOfShape", ["shape"], ["v0"])]
    for i in range(1, values + 1):
        op, inputs = ("Add", [f"v{i - 1}", "x"]) if i % 2 else ("Tanh", [f"v{i - 1}"])
        nodes.append(helper.make_node(op, inputs, [f"v{i}"]))
    row = ["batch", width]
    graph = helper.make_graph(nodes, "state_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, row)],
                              [helper.make_tensor_value_info(f"v{values}", TensorProto.FLOAT, row)])
    if declared:
        graph.value_info.extend(helper.make_tensor_value_info(f"v{i}", TensorProto.FLOAT, row) for i in range(values))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def declared_shape_seconds(threads: int, reference: WallReference | None = None) -> float:
    """What declaring a value's shape adds to it in a running session (seconds; negative where planned reuse is the
    faster): the declared chain against the same chain undeclared, per value, the median over interleaved rounds."""
    feeds = {"x": np.random.default_rng(0).standard_normal((1, _WIDTH)).astype(np.float32)}
    undeclared, declared = (state_chain(STATE_CHAIN_VALUES, d) for d in (False, True))
    return float(np.median(per_round_differences(undeclared, declared, STATE_CHAIN_VALUES, feeds, threads, None, reference)))
