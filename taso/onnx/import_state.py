"""What an import holds while it reads a model: the values' types and weights so far (:class:`ImportState`), the
types ONNX shape inference gives (:class:`InferredTypes`, computed on first use), and what an operator's importer
sees of one node (:class:`ImportContext`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import GraphError, ShapeError
from ..ir import Node, TensorType
from ..ir.dims import Dim
from ..ops import Op
from .symbolic import is_static_dim
from .values import element_dtype, type_of, value_info

__all__ = ["ImportContext", "ImportState", "InferredTypes"]


ONNX_DOMAINS = ("", "ai.onnx")


# Folding a node whose constant inputs are all this small is always cheap.
FOLD_MAX_INPUT_ELEMENTS = 1 << 16




def static_type(value_info: onnx.ValueInfoProto) -> TensorType | None:
    """The type a declaration gives at fixed sizes: an opaque value's own, a tensor's when every dim is a size."""
    opaque_value = type_of(value_info.type)
    if opaque_value is not None:
        return opaque_value
    t = value_info.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    dtype = element_dtype(t.tensor_type.elem_type)
    dims = t.tensor_type.shape.dim
    if dtype is None or not all(is_static_dim(d) for d in dims):
        return None
    return TensorType(tuple(int(d.dim_value) for d in dims), dtype)


def subgraph_captures(node: onnx.NodeProto) -> list[str]:
    """Names read inside a node's subgraphs that the subgraphs do not define themselves."""
    captured: list[str] = []

    def walk(graph: onnx.GraphProto, outer_defined: set[str]) -> None:
        defined = set(outer_defined) | {i.name for i in graph.input} | {i.name for i in graph.initializer}
        for n in graph.node:
            for name in n.input:
                if name and name not in defined and name not in captured:
                    captured.append(name)
            for attr in n.attribute:
                for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                    walk(sub, defined)
            defined.update(n.output)

    for attr in node.attribute:
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            walk(sub, set())
    return captured


class ImportContext:
    """What an op's importer sees: the current ONNX node and ways to emit IR for it.

    Emitted nodes are buffered; they enter the graph only when the importer returns True.
    """

    def __init__(self, state: ImportState, node: onnx.NodeProto):
        self._state = state
        self.node = node
        self.op_type = node.op_type
        self.opset = state.opset
        self.inputs = [state.resolve(n) if n else "" for n in node.input]
        self.outputs = list(node.output)
        self._attrs = {a.name: a for a in node.attribute}
        self.attr_names = set(self._attrs)
        self.pending_nodes: list[Node] = []
        self.pending_types: dict[str, TensorType] = {}
        self.pending_weights: dict[str, np.ndarray] = {}
        self.pending_derived: dict[tuple[str, str], str] = {}
        self.pending_aliases: dict[str, str] = {}

    def size_bound(self, symbol: str) -> int | None:
        """The largest size of ``symbol`` at which the file runs, where the file implies one (:mod:`taso.onnx.size_bounds`)."""
        return self._state.size_bounds.get(symbol)

    def attr(self, name: str, default: Any = None) -> Any:
        if name not in self._attrs:
            return default
        value = helper.get_attribute_value(self._attrs[name])
        if isinstance(value, onnx.TensorProto):
            return numpy_helper.to_array(value)
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, list):
            return tuple(v.decode() if isinstance(v, bytes) else v for v in value)
        return value

    def type(self, name: str) -> TensorType:
        name = self.pending_aliases.get(name, name)
        if name in self.pending_types:
            return self.pending_types[name]
        return self._state.type(name)

    def const(self, name: str, symbolic: bool = False) -> np.ndarray | None:
        """The value of a constant input, or None when it is computed at run time.

        A shape computed from symbolic dims is a constant only to an importer that keeps its
        entries as they are (``symbolic=True``: an object array of ints and dims); to any
        other it is a run-time value, so no ``int()`` can freeze it at the measurement sizes.
        """
        if not name:
            return None
        name = self.pending_aliases.get(name, self._state.resolve(name))
        value = self.pending_weights.get(name, self._state.weights.get(name))
        if value is None and symbolic:
            return self._state.symbolic.get(name)
        return value

    def dtype_of_onnx(self, elem_type: int) -> str | None:
        """The dtype of an ONNX element type that taso's operators compute on (None for strings and the rest)."""
        dtype = element_dtype(int(elem_type))
        return dtype if dtype != "object" else None

    def emit(self, op: Op, inputs: Sequence[str], outputs: Sequence[str] | None = None, **params: Any) -> list[str]:
        inputs = [self.pending_aliases.get(i, i) for i in inputs]
        p = op.make_params(**params)
        out_types = op.infer([self.type(i) for i in inputs], p)
        names = list(outputs) if outputs is not None else [self._state.fresh(f"{self.node.name or self.op_type}_{op.name}") for _ in out_types]
        if len(names) != len(out_types):
            raise ShapeError(f"{op.name}: produces {len(out_types)} outputs, {len(names)} names given")
        self.pending_nodes.append(Node(op, p, tuple(inputs), tuple(names), self.node.name))
        self.pending_types.update(zip(names, out_types))
        return names

    def weight(self, array: np.ndarray, hint: str = "const") -> str:
        name = self._state.fresh(f"{self.node.name or self.op_type}_{hint}")
        self.pending_weights[name] = array
        self.pending_types[name] = TensorType.of(array)
        return name

    def derived_weight(self, source: str, how: str, make: Callable[[np.ndarray], np.ndarray]) -> str:
        """The name of ``make(source's value)``, one weight per (source, how) for the whole model.

        Every ``Gemm(x_t, W, transB=1)`` of an unrolled RNN then reads the *same* transposed
        weight, so rules that merge products sharing a weight can see that they do.
        """
        key = (self._state.resolve(source), how)
        name = self._state.derived.get(key) or self.pending_derived.get(key)
        if name is None:
            name = self.pending_derived[key] = self.weight(np.ascontiguousarray(make(self.const(source))), how)
        return name

    def alias(self, dst: str, src: str) -> None:
        self.pending_aliases[dst] = self.pending_aliases.get(src, src)


class ImportState:
    def __init__(self, model: onnx.ModelProto, opset: int, known_types: InferredTypes):
        self.model = model
        self.opset = opset
        self.known_types = known_types  # from ONNX shape inference: static types only
        self.weights: dict[str, np.ndarray] = {}
        self.symbolic: dict[str, np.ndarray] = {}  # shape computations over symbolic dims: object arrays of ints and dims
        self.symbol_sources: list[tuple[str, str, int]] = []  # fresh symbols of opaque outputs: (symbol, value, axis)
        self.declared = {vi.name: vi for vi in model.graph.value_info}  # what the file says of its values (a custom op's outputs)
        self.types: dict[str, TensorType] = {}
        self.nodes: list[Node] = []
        self.aliases: dict[str, str] = {}
        self.derived: dict[tuple[str, str], str] = {}  # (weight, how) -> the derived weight (see ImportContext.derived_weight)
        self.used_names: set[str] = set()
        self.input_names: set[str] = set()
        # Graph inputs read by an If with a branch that cannot run at the fixed shapes (see _types_by_branch_probe).
        self.branch_inputs: set[str] = set()
        self.size_bounds: dict[str, int] = {}  # the largest size of a symbol at which the file runs (taso.onnx.size_bounds)
        self._counter = 0

    def resolve(self, name: str) -> str:
        return self.aliases.get(name, name)

    def type(self, name: str) -> TensorType:
        name = self.resolve(name)
        if name in self.types:
            return self.types[name]
        raise GraphError(f"value {name!r} is used before it is defined")

    def fresh(self, hint: str) -> str:
        while True:
            self._counter += 1
            name = f"{hint}_{self._counter}"
            if name not in self.used_names:
                self.used_names.add(name)
                return name

    def commit(self, ctx: ImportContext) -> None:
        self.nodes.extend(ctx.pending_nodes)
        self.types.update(ctx.pending_types)
        self.weights.update(ctx.pending_weights)
        self.derived.update(ctx.pending_derived)
        for dst, src in ctx.pending_aliases.items():
            self.aliases[dst] = self.resolve(src)


class InferredTypes:
    """Static types from ONNX shape inference, computed on first use (most models never need them).

    Inference runs on a skeleton of the model: large initializers are replaced by typed graph
    inputs, so a 400 MB model is not copied and serialised just to type its opaque nodes.
    """

    _SKELETON_MAX_ELEMENTS = 4096

    def __init__(self, model: onnx.ModelProto, input_types: dict[str, TensorType]):
        self._model, self._input_types = model, input_types
        self._infos: dict[str, onnx.ValueInfoProto] | None = None
        self._symbolic_infos: dict[str, onnx.ValueInfoProto] | None = None

    def declared(self, name: str) -> TensorType | None:
        """What inference says of a value's kind, as :meth:`get` does, where it is not a tensor of numbers (None else:
        nodes taso models type their own outputs)."""
        infos = self._symbolic_infos if self._symbolic_infos is not None else self._infos
        vi = infos.get(name) if infos is not None else None
        if vi is None:
            return None
        opaque_value = type_of(vi.type)
        if opaque_value is not None:
            return opaque_value
        if vi.type.tensor_type.elem_type == onnx.TensorProto.STRING:
            return TensorType((), "object")
        return None

    def get(self, name: str) -> TensorType | None:
        """The static type inference gives a value at the measurement sizes."""
        if self._infos is None:
            self._infos = self._infer({n: t.shape for n, t in self._input_types.items()}, symbolic=False)
        vi = self._infos.get(name)
        return None if vi is None else static_type(vi)

    def symbolic_info(self, name: str) -> onnx.ValueInfoProto | None:
        """What inference says of a value's dims when the inputs' symbolic dims are named (see :mod:`taso.onnx.symbolic`)."""
        if self._symbolic_infos is None:
            self._symbolic_infos = self._infer({n: [str(d) if isinstance(d, Dim) else d for d in t.shape] for n, t in self._input_types.items()},
                                               symbolic=True)
        return self._symbolic_infos.get(name)

    def _infer(self, shapes: Mapping[str, Sequence], symbolic: bool) -> dict[str, onnx.ValueInfoProto]:
        g = self._model.graph
        small = [t for t in g.initializer if int(np.prod(t.dims, dtype=np.int64)) <= self._SKELETON_MAX_ELEMENTS]
        large = [t for t in g.initializer if int(np.prod(t.dims, dtype=np.int64)) > self._SKELETON_MAX_ELEMENTS]
        inputs = []
        for vi in g.input:
            t = self._input_types.get(vi.name)
            inputs.append(value_info(vi.name, t, shapes[vi.name]) if t else vi)
        declared = {vi.name for vi in inputs}
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in large if t.name not in declared]
        # NOTE: the outputs' declared shapes are left out: a file may declare at one size what its nodes compute at any.
        outputs = list(g.output) if not symbolic else [helper.make_empty_tensor_value_info(o.name) for o in g.output]
        skeleton_graph = helper.make_graph(list(g.node), g.name, inputs, outputs, initializer=small)
        skeleton = helper.make_model(skeleton_graph, opset_imports=list(self._model.opset_import))
        skeleton.ir_version = self._model.ir_version
        skeleton.functions.extend(self._model.functions)
        try:
            inferred = onnx.shape_inference.infer_shapes(skeleton, data_prop=True)
        except Exception:  # noqa: BLE001 - inference is only a hint; opaque nodes fall back to execution
            return {}
        return {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
