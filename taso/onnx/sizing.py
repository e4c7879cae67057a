"""Which of a model's values ONNX Runtime sizes before it runs, and which only because the file declares their shapes.

ONNX Runtime's memory planner reuses a dead buffer for a new value, or writes a value over its input, only when it
knows both shapes before the run. A value it cannot size is allocated afresh, and from the second run on every such
value sits in one block laid out by the first run (the memory pattern): a pointer bump. On this machine the planned
reuse is the slower of the two, by about 0.06 us a value: a chain of 400 small Add and Tanh nodes runs 0.43 us a node
with its shapes known and 0.36 without (``benchmarks/costs/bench_declared_shapes.py``; docs/measured.md, session 28).

Exporters differ here. The dynamo exporter declares every intermediate shape in ``value_info``, TorchScript's
declares none, and a recurrent cell's state starts from ``ConstantOfShape(Shape(x))`` whose output (and everything
computed from it) ONNX's shape inference cannot size when the batch is symbolic. A GRU h128 over 64 steps from
dynamo runs 3-5% slower than the same graph without its ``value_info``; taso never writes ``value_info``, so its
output gains that whether or not a rewrite applies. :func:`declared_only` counts the values behind the difference.
"""

from __future__ import annotations

import onnx
from onnx import shape_inference

from .exporter import weightless

__all__ = ["declared_only", "fully_sized"]


def fully_sized(value: onnx.ValueInfoProto) -> bool:
    """Whether every dim of the value's shape is known: a number, or a named symbol both sides of a comparison share
    (ONNX's inference names a dim it cannot tell ``unk__N``: nothing else shares it)."""
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
        return False
    return all(d.HasField("dim_value") or (d.HasField("dim_param") and not d.dim_param.startswith("unk__"))
               for d in tensor.shape.dim)


def declared_only(model: onnx.ModelProto) -> int:
    """How many node outputs ONNX Runtime sizes only because ``model`` declares their shapes in ``value_info``: what
    taso's re-export (which declares none) leaves it to allocate afresh. 0 for a file without ``value_info``.

    Inferred, not run: ONNX's shape inference with the file's declarations dropped, and again with data propagated
    through shape computations but every symbolic input dim unknown (ONNX Runtime folds ``Shape`` of a static value
    into a constant, never one with a symbolic dim). Outputs computed from constants alone are left out: ONNX
    Runtime folds them into initializers.
    """
    graph = model.graph
    declared = {v.name for v in graph.value_info if fully_sized(v)}
    if not declared:
        return 0
    skeleton = weightless(model)
    if skeleton is model:  # nothing large: weightless handed the model itself back, which must stay as it is
        skeleton = onnx.ModelProto()
        skeleton.CopyFrom(model)
    del skeleton.graph.value_info[:]
    inferred = _inferred_sized(skeleton, propagate=False)
    if inferred is None:
        return 0  # ONNX cannot infer this graph's shapes: nothing is counted that might not differ
    sized = inferred | (_inferred_sized(_symbols_unknown(skeleton), propagate=True) or set())
    folded = _constant_values(graph, model.ir_version)
    return sum(1 for node in graph.node for out in node.output if out in declared and out not in sized and out not in folded)


def _inferred_sized(model: onnx.ModelProto, propagate: bool) -> set[str] | None:
    """The values ONNX's shape inference sizes fully; None where it fails."""
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=propagate)
    except Exception:  # an op ONNX cannot infer stops nothing here: taso's own import already accepted the model
        return None
    g = inferred.graph
    return {v.name for v in (*g.value_info, *g.output) if fully_sized(v)}


def _symbols_unknown(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose graph inputs' symbolic dims are unknown (no name): what data propagation may use is then only
    what is static, as for ONNX Runtime's constant folding."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                dim.Clear()
    return copy


def _constant_values(graph: onnx.GraphProto, ir_version: int) -> set[str]:
    """Values computed from initializers and Constant nodes alone (the graph's nodes are in topological order). From
    IR 4 on, an initializer also listed as an input can be overridden, and ONNX Runtime folds nothing it feeds."""
    constant = {t.name for t in graph.initializer}
    if ir_version >= 4:
        constant -= {i.name for i in graph.input}
    for node in graph.node:
        if all(not v or v in constant for v in node.input):
            constant.update(v for v in node.output if v)
    return constant
