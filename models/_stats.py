"""Size and cost counts for ONNX graphs: nodes, parameters, FLOPs.

The FLOP estimate counts only the dense linear algebra (Conv, MatMul, Gemm) as two
operations per multiply-add, the convention of the TASO paper and of most model cards.
Element-wise operators, pooling and normalisation are memory-bound and left out.

:func:`node_flops` is called by the graph builder as it emits each node;
:func:`model_stats` recounts a finished ``ModelProto`` from scratch with ONNX shape
inference, so the two paths can be checked against each other.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

_FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16})


def node_flops(
    op_type: str,
    input_shapes: Sequence[tuple[int, ...]],
    output_shape: tuple[int, ...],
    node: onnx.NodeProto,
) -> int:
    """Returns 2 x the multiply-adds of one Conv, MatMul or Gemm node, else 0.

    Args:
        op_type: The ONNX operator.
        input_shapes: The static shapes of the node's inputs, in order.
        output_shape: The static shape of its (first) output.
        node: The node itself, for attributes such as Gemm's ``transA``.
    """
    outputs = math.prod(output_shape)
    if op_type == "Conv":
        # Each output element reduces over C_in/group x kernel positions.
        return 2 * outputs * math.prod(input_shapes[1][1:])
    if op_type == "MatMul":
        return 2 * outputs * input_shapes[0][-1]
    if op_type == "Gemm":
        trans_a = next(
            (helper.get_attribute_value(a) for a in node.attribute if a.name == "transA"), 0
        )
        a_shape = input_shapes[0]
        return 2 * outputs * (a_shape[0] if trans_a else a_shape[1])
    return 0


@dataclass(frozen=True)
class ModelStats:
    """Counts of one model.

    Attributes:
        nodes: Number of nodes in the main graph.
        parameters: Elements of the floating-point, non-scalar initializers (weights,
            biases and normalisation statistics; not shape constants or scalars).
        flops: Estimated floating-point operations of one inference (see module doc).
        ops: Node count per operator type.
    """

    nodes: int
    parameters: int
    flops: int
    ops: dict[str, int]


def model_stats(model: onnx.ModelProto) -> ModelStats:
    """Counts nodes, parameters and FLOPs of a model with static shapes.

    Raises:
        ValueError: If shape inference leaves a Conv, MatMul or Gemm shape unknown.
    """
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    graph = inferred.graph
    shapes: dict[str, tuple[int, ...]] = {
        init.name: tuple(init.dims) for init in graph.initializer
    }
    for info in [*graph.input, *graph.value_info, *graph.output]:
        dims = info.type.tensor_type.shape.dim
        shapes[info.name] = tuple(d.dim_value for d in dims)
    flops = 0
    for node in graph.node:
        try:
            in_shapes = [shapes[name] for name in node.input]
            out_shape = shapes[node.output[0]]
        except KeyError as missing:
            if node.op_type in ("Conv", "MatMul", "Gemm"):
                raise ValueError(f"no inferred shape for {missing} of {node.name}") from None
            continue
        flops += node_flops(node.op_type, in_shapes, out_shape, node)
    parameters = sum(
        math.prod(init.dims)
        for init in graph.initializer
        if init.data_type in _FLOAT_TYPES and len(init.dims) > 0
    )
    return ModelStats(
        nodes=len(graph.node),
        parameters=parameters,
        flops=flops,
        ops=dict(Counter(node.op_type for node in graph.node)),
    )
