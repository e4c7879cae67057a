"""ONNX -> Graph.

Initializers become weights; Constant, Shape, small ConstantOfShape and small all-constant
subgraphs are folded, so the shape computations exporters write (Shape -> Gather -> Concat ->
Reshape, ConstantOfShape -> Where -> Expand, Range...) become constants where the dims are
static, and symbolic sizes where they depend on the inputs' size symbols
(:mod:`taso.onnx.symbolic`). Each node is offered to the importers registered for its op type (see
:mod:`taso.ops`), and a node no importer claims becomes an opaque node kept verbatim, so any
valid model loads and round-trips. An opaque node's output types come from ONNX shape
inference (over the model, then over the node with its folded inputs); running it is the
last resort, on plausible random values, twice. A dim that depends on the values (Pad's pads
as an input, NonZero, Unique) becomes a fresh size symbol, of which nothing is assumed; what
taso cannot type at all (a rank that depends on the values, a sequence) is :class:`Unsupported`,
and ``taso optimize`` writes such a model unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ir.dims import Dim, symbol
from ..errors import GraphError, ImportError_, ShapeError, TasoError, Unsupported
from ..ir import Graph, GraphMeta, Node, OpaqueType, Params, TensorType, is_numeric
from ..ops import Op, onnx_importers
from ..ops.onnx_versions import OLDEST_OPSET, REVIEWED_THROUGH, understood
from ..ops.opaque import opaque, value_type_proto
from ..ops.shape import dims as dims_op
from . import symbolic
from .files import external_region, map_weights
from .symbolic import is_static_dim
from .values import WORDS, element_dtype, random_value, type_of, value_info

__all__ = ["load_onnx", "read_model", "MIN_OPSET", "MAX_OPSET"]

# Every opset the installed onnx defines is read; an operator version taso's importers were not written for stays
# opaque (:mod:`taso.ops.onnx_versions`).
MIN_OPSET, MAX_OPSET = 1, onnx.defs.onnx_opset_version()
_ONNX_DOMAINS = ("", "ai.onnx")
# Folding a node whose constant inputs are all this small is always cheap.
_FOLD_MAX_INPUT_ELEMENTS = 1 << 16
# A ConstantOfShape this small (a shape computation's ones or zeros) folds; a larger one stays lazy.
_FOLD_MAX_FILL_ELEMENTS = 1 << 10
_NEVER_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def read_model(source: str | os.PathLike | onnx.ModelProto, external_data: bool = True) -> onnx.ModelProto:
    """Reads an ONNX file with clear errors for bad files.

    Args:
        external_data: load the weights a file keeps in external data files into the model; False
            leaves them there (each region is checked to exist: :func:`external_array` maps it).

    Raises:
        ImportError_: a missing, unreadable or truncated file or data file, or an IR version newer than onnx reads.
    """
    model = source if isinstance(source, onnx.ModelProto) else _read_file(os.fspath(source), external_data)
    _check_ir_version(model)
    return model


def external_array(tensor: onnx.TensorProto, base_dir: str) -> np.ndarray:
    """The weights of a tensor kept in an external data file, mapped (:func:`taso.onnx.files.map_weights`)."""
    location, offset, _ = external_region(tensor)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).newbyteorder("<")
    shape = tuple(tensor.dims)
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.zeros(shape, dtype)
    return map_weights(os.path.join(base_dir, location), dtype, offset, shape)


def _inline_small_external(model: onnx.ModelProto, base_dir: str) -> None:
    """Loads the external tensors small enough to be shapes or constants into the model: shape inference and
    folding read their values; only weights stay mapped."""
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL and int(np.prod(tuple(tensor.dims), dtype=np.int64)) <= _INLINE_MAX_ELEMENTS:
            onnx.external_data_helper.load_external_data_for_tensor(tensor, base_dir)
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.external_data[:]


# External tensors up to this many elements are loaded into the model (the shape-inference skeleton keeps them too).
_INLINE_MAX_ELEMENTS = 4096


def _check_external_regions(model: onnx.ModelProto, base_dir: str, path: str) -> None:
    """Every external tensor's region lies in a regular file beside the model (what loading it would have checked)."""
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        try:
            location, offset, length = external_region(tensor)
        except ValueError as e:
            raise ImportError_(f"{path}: cannot load external data ({e})") from None
        file = os.path.normpath(os.path.join(base_dir, location))
        if not location or os.path.isabs(location) or not file.startswith(os.path.normpath(base_dir) + os.sep) or not os.path.isfile(file):
            raise ImportError_(f"{path}: cannot load external data (tensor {tensor.name!r}: no data file {location!r} beside the model)")
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
        except Exception:  # noqa: BLE001
            raise ImportError_(f"initializer {tensor.name!r} has an element type taso does not support") from None
        needed = int(np.prod(tuple(tensor.dims), dtype=np.int64)) * dtype.itemsize
        if (length if length is not None else needed) != needed or offset + needed > os.path.getsize(file):
            raise ImportError_(f"{path}: cannot load external data (tensor {tensor.name!r}: {location!r} holds no {needed} bytes at offset {offset})")


def _read_file(path: str, external_data: bool = True) -> onnx.ModelProto:
    if not os.path.exists(path):
        raise ImportError_(f"{path}: no such file")
    if os.path.isdir(path):
        raise ImportError_(f"{path}: is a directory, not an ONNX file")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf raises several types for garbage
        raise ImportError_(f"{path}: not a valid ONNX model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'cannot parse'})") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise ImportError_(f"{path}: not a valid ONNX model (no graph; is the file truncated or of another format?)")
    if not external_data:
        _check_external_regions(model, os.path.dirname(os.path.abspath(path)), path)
        return model
    try:
        onnx.external_data_helper.load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
    except Exception as e:  # noqa: BLE001
        raise ImportError_(f"{path}: cannot load external data ({e})") from None
    return model


def _check_ir_version(model: onnx.ModelProto) -> None:
    """Refuses at load what would otherwise fail only after the whole search (an IR version from the future)."""
    if model.ir_version > onnx.IR_VERSION:
        raise ImportError_(f"the model's IR version {model.ir_version} is newer than this onnx {onnx.__version__} reads (at most {onnx.IR_VERSION}); "
                           "is the file from a newer exporter, or is its ir_version field wrong?")


_np_dtype = element_dtype  # the NumPy dtype name of an ONNX element type ("object": strings), None outside taso's


def _static_type(value_info: onnx.ValueInfoProto) -> TensorType | None:
    """The type a declaration gives at fixed sizes: an opaque value's own, a tensor's when every dim is a size."""
    opaque_value = type_of(value_info.type)
    if opaque_value is not None:
        return opaque_value
    t = value_info.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    dtype = _np_dtype(t.tensor_type.elem_type)
    dims = t.tensor_type.shape.dim
    if dtype is None or not all(is_static_dim(d) for d in dims):
        return None
    return TensorType(tuple(int(d.dim_value) for d in dims), dtype)


def _subgraph_captures(node: onnx.NodeProto) -> list[str]:
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

    def __init__(self, state: _ImportState, node: onnx.NodeProto):
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
        dtype = _np_dtype(int(elem_type))
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


class _ImportState:
    def __init__(self, model: onnx.ModelProto, opset: int, known_types: _InferredTypes):
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


class _InferredTypes:
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
        return None if vi is None else _static_type(vi)

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


def _toposort_onnx(graph: onnx.GraphProto, defined: set[str]) -> list[onnx.NodeProto]:
    producers = {}
    for n in graph.node:
        for o in n.output:
            if o:
                if o in producers or o in defined:
                    raise GraphError(f"tensor {o!r} is defined twice (second time by {n.op_type} node {n.name!r})")
                producers[o] = n
    order, state = [], {}
    for root in graph.node:
        stack = [(root, False)]
        while stack:
            n, done = stack.pop()
            key = id(n)
            if done:
                state[key] = 2
                order.append(n)
                continue
            if state.get(key) == 2:
                continue
            if state.get(key) == 1:
                raise GraphError(f"the graph has a cycle through {n.op_type} node {n.name!r}")
            state[key] = 1
            stack.append((n, True))
            for name in list(n.input) + _subgraph_captures(n):
                if not name or name in defined:
                    continue
                p = producers.get(name)
                if p is None:
                    raise GraphError(f"{n.op_type} node {n.name!r} reads {name!r}, which nothing defines")
                if state.get(id(p)) == 1:
                    raise GraphError(f"the graph has a cycle through {p.op_type} node {p.name!r}")
                if state.get(id(p)) != 2:
                    stack.append((p, False))
    return order


def _default_opset(model: onnx.ModelProto) -> int:
    """The model's ai.onnx opset; for a model that imports none (only ai.onnx.ml, say), the newest reviewed one, which only
    nodes taso itself adds would use (the written file declares it only then)."""
    versions = [o.version for o in model.opset_import if o.domain in _ONNX_DOMAINS]
    if not versions:
        return min(MAX_OPSET, REVIEWED_THROUGH)
    opset = max(versions)
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise Unsupported(f"opset {opset} is newer than this onnx {onnx.__version__} defines (at most {MAX_OPSET})")
    return opset


def load_onnx(source: str | os.PathLike | onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None,
              static: bool = False, base_dir: str | None = None) -> Graph:
    """Loads an ONNX model as a :class:`Graph`.

    Args:
        source: a path to an .onnx file (external data is loaded from beside it) or a ModelProto.
        input_shapes: the sizes to measure costs at, e.g. ``{"x": (1, 3, 224, 224)}``; symbolic
            dims stay symbolic (default sizes: 1 for a dim at axis 0, 128 for others).
        static: freeze every symbolic dim at its measurement size (a file for that size only).
        base_dir: where the external data of a ModelProto ``source`` lies (read with
            ``read_model(path, external_data=False)``): those weights are mapped, not copied.

    Returns:
        The graph; every node taso does not model is kept as an opaque node. Its
        ``meta.sizes`` names the measurement size of each symbol.

    Raises:
        ImportError_: unreadable file, unsupported opset, input shapes that contradict the model.
        GraphError: cycles, undefined or doubly defined tensors.
    """
    if not isinstance(source, onnx.ModelProto):
        base_dir = os.path.dirname(os.path.abspath(os.fspath(source)))
        source = read_model(source, external_data=False)
    if base_dir is not None:
        _inline_small_external(source, base_dir)
    model = read_model(source)
    opset = _default_opset(model)
    g = model.graph
    input_types, sizes = symbolic.input_types(model, input_shapes or {}, static, _np_dtype)
    state = _ImportState(model, opset, _InferredTypes(model, input_types))
    state.types.update(input_types)
    state.input_names.update(input_types)
    for init in g.initializer:
        try:
            external = init.data_location == onnx.TensorProto.EXTERNAL and base_dir is not None
            array = external_array(init, base_dir) if external else numpy_helper.to_array(init)
        except Exception as e:  # noqa: BLE001
            raise ImportError_(f"initializer {init.name!r} cannot be read ({e})") from None
        if _np_dtype(init.data_type) is None:
            raise ImportError_(f"initializer {init.name!r} has an element type taso does not support")
        state.weights[init.name] = array
        state.types[init.name] = TensorType.of(array)
    if g.sparse_initializer:
        raise ImportError_("sparse initializers are not supported")
    state.used_names.update(state.types)
    for n in g.node:
        state.used_names.update(n.output)
    importers = onnx_importers()
    other_opsets = tuple((o.domain, o.version) for o in model.opset_import if o.domain not in _ONNX_DOMAINS)
    all_opsets = (("", opset),) + other_opsets
    for node in _toposort_onnx(g, set(state.types)):
        try:
            _import_node(state, node, importers, all_opsets)
        except ImportError_ as e:
            if not sizes:
                raise
            measured = ", ".join(f"{k}={v}" for k, v in sorted(sizes.items()))
            raise type(e)(f"{e} (at the measurement sizes {measured}: if the model runs at other sizes only, give them with "
                          "--input-shape)") from None  # an Unsupported stays one: the model is written unchanged
    _materialize_sizes(state, g)
    outputs, output_names = [], []
    for vi in g.output:
        value = state.resolve(vi.name)
        if value not in state.types:
            raise GraphError(f"graph output {vi.name!r} is not defined")
        outputs.append(value)
        output_names.append(vi.name)
    meta = GraphMeta(
        opset=opset,
        ir_version=model.ir_version,
        output_names=tuple(output_names),
        initializer_inputs=tuple(i.name for i in g.input if i.name in state.weights),
        extra_opsets=other_opsets,
        producer=model.producer_name,
        graph_name=g.name or "graph",
        extra=_declared_dims(g, state.branch_inputs),
        sizes=tuple(sorted(sizes.items())),
        output_dim_params=tuple(_dim_params(vi) for vi in g.output) if sizes else (),
        symbol_sources=tuple(state.symbol_sources),
    )
    graph = Graph(input_types, state.weights, state.nodes, outputs, types=state.types, meta=meta)
    return graph.pruned()


def _dim_params(vi: onnx.ValueInfoProto) -> tuple[str | None, ...] | None:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    return tuple(d.dim_param or None for d in tt.shape.dim)


def _declared_dims(graph: onnx.GraphProto, branch_inputs: set[str]) -> dict[str, Any]:
    """What export needs to declare the graph inputs read by an If with a branch that cannot run at the
    fixed shapes, and the outputs, as the original did: ``{"declared_inputs": {name: dims}, "declared_outputs": ...}``,
    a dim an int, a symbol, or None (unknown); dims None when no shape is declared. Empty for other models."""
    if not branch_inputs:
        return {}

    def dims(vi: onnx.ValueInfoProto) -> tuple[int | str | None, ...] | None:
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            return None
        return tuple(int(d.dim_value) if is_static_dim(d) else (d.dim_param or None) for d in tt.shape.dim)

    return {"declared_inputs": {vi.name: dims(vi) for vi in graph.input if vi.name in branch_inputs},
            "declared_outputs": {vi.name: dims(vi) for vi in graph.output}}


def _import_node(state: _ImportState, node: onnx.NodeProto, importers, all_opsets) -> None:
    standard = node.domain in _ONNX_DOMAINS
    if standard and _fold_constant_node(state, node):
        return
    shape_errors: list[str] = []
    if standard and understood(node.op_type, state.opset) and _numeric_node(state, node):
        for _op, importer in importers.get(node.op_type, ()):
            ctx = ImportContext(state, node)
            try:
                handled = importer(ctx)
            except ShapeError as e:
                handled = False  # kept: it explains a probe failure (an Add of shapes that do not broadcast)
                shape_errors.append(str(e))
            except (KeyError, IndexError, TypeError, ValueError):
                handled = False  # an attribute combination this importer does not model
            if handled:
                state.commit(ctx)
                return
    _import_opaque(state, node, all_opsets, shape_errors)


def _numeric_node(state: _ImportState, node: onnx.NodeProto) -> bool:
    """Whether a node reads and writes only tensors of numbers: taso's operators are offered no other (an Identity of a
    sequence, a Cast to strings, a Concat of string tensors stay opaque)."""
    if not all(is_numeric(state.type(n)) for n in node.input if n):
        return False
    outputs = [state.known_types.declared(o) for o in node.output if o]
    return all(t is None or is_numeric(t) for t in outputs)


def _fold_constant_node(state: _ImportState, node: onnx.NodeProto) -> bool:
    """Constant, Shape, Size and small all-constant nodes become weights."""
    if node.op_type == "Constant":
        attr = node.attribute[0] if node.attribute else None
        if attr is None or attr.name in ("sparse_value",) or attr.type in (onnx.AttributeProto.STRING, onnx.AttributeProto.STRINGS):
            return False
        value = helper.get_attribute_value(attr)
        try:
            array = numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value, dtype=np.float32 if attr.name.startswith("value_float") else np.int64)
        except Exception as e:  # noqa: BLE001 - a tensor whose data does not fit its dims
            raise ImportError_(f"Constant node {node.name!r} holds a tensor that cannot be read ({e})") from None
        _add_weight(state, node.output[0], array)
        return True
    if _fold_symbolic_node(state, node):
        return True
    if node.op_type in ("Shape", "Size") and node.input and state.resolve(node.input[0]) in state.types:
        shape = state.type(node.input[0]).shape
        if node.op_type == "Size":
            _add_weight(state, node.output[0], np.asarray(int(np.prod(shape, dtype=np.int64)), np.int64))
            return True
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        _add_weight(state, node.output[0], np.asarray(shape[slice(start, end)], np.int64))
        return True
    if node.op_type in _NEVER_FOLD or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return False
    names = [state.resolve(n) for n in node.input if n]
    if not names or not all(n in state.weights for n in names):
        return False
    if any(state.weights[n].size > _FOLD_MAX_INPUT_ELEMENTS for n in names):
        return False
    if node.op_type == "ConstantOfShape" and int(np.prod(state.weights[names[0]], dtype=np.int64)) > _FOLD_MAX_FILL_ELEMENTS:
        return False
    results = _evaluate_alone(node, {n: state.weights[state.resolve(n)] for n in node.input if n}, state.opset)
    if results is None:
        return False
    if _grows_too_much([state.weights[n] for n in names], results):
        return False
    for name, value in zip([o for o in node.output if o], results):
        _add_weight(state, name, np.asarray(value))
    return True


def _evaluate_alone(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray] | None:
    """The node's outputs on constant inputs: ONNX's reference evaluator, else ONNX Runtime (the reference's
    GatherElements fails on a [1, 64] table indexed by [1, 32], as BERT's dynamo export has it); None when neither runs it."""
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()]
    outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    model = helper.make_model(helper.make_graph([node], "fold", inputs, outputs), opset_imports=[helper.make_opsetid("", opset)])
    try:
        from onnx.reference import ReferenceEvaluator

        return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]
    except Exception:  # noqa: BLE001 - the reference evaluator's own limits: try ONNX Runtime
        pass
    try:
        from ..measure.timing import open_session

        model.ir_version = min(model.ir_version, 10)
        return [np.asarray(r) for r in open_session(model.SerializeToString(), threads=1, optimize=False).run(None, feeds)]
    except Exception:  # noqa: BLE001 - not foldable here; import normally
        return None


def _fold_symbolic_node(state: _ImportState, node: onnx.NodeProto) -> bool:
    """A shape computation over symbolic dims (Shape of a value with a symbolic dim, then Gather,
    Concat, arithmetic...) folds into symbolic sizes; a result with no symbolic entry is a weight."""
    if state.opset < OLDEST_OPSET:
        return False  # the legacy versions' broadcast and axis attributes are not modelled here
    names = [state.resolve(n) for n in node.input if n]
    reads_sizes = any(n in state.symbolic for n in names)
    shape_of_symbolic = node.op_type in ("Shape", "Size") and names and names[0] in state.types and not state.types[names[0]].is_static
    if not (reads_sizes or shape_of_symbolic):
        return False
    values = [state.symbolic.get(n, state.weights.get(n)) for n in names]
    types = [state.types.get(n) for n in names]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    results = symbolic.fold_symbolic(node, values, types, attrs)
    if results is None or len(results) != len([o for o in node.output if o]):
        return False
    dtype = "bool" if node.op_type == "Equal" else "int64" if node.op_type in ("Shape", "Size") else next(
        (t.dtype for n, t in zip(names, types) if n in state.symbolic), "int64")
    if node.op_type == "Cast":
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"])).name
    for name, value in zip([o for o in node.output if o], results):
        static = symbolic.static_or_none(value, dtype)
        if static is not None:
            _add_weight(state, name, static)
        else:
            state.symbolic[name] = value
            state.types[name] = TensorType(tuple(value.shape), dtype)
    return True


def _materialize_sizes(state: _ImportState, graph: onnx.GraphProto) -> None:
    """Symbolic sizes that a node reads as a value (not as a parameter) are computed by a ``dims`` node."""
    read = {v for n in state.nodes for v in n.inputs} | {state.resolve(vi.name) for vi in graph.output}
    for name in [n for n in state.symbolic if n in read]:
        value = state.symbolic[name]
        t = state.types[name]
        params = dims_op.make_params(values=tuple(value.flat), shape=tuple(value.shape), dtype=t.dtype)
        state.nodes.append(Node(dims_op, params, (), (name,), name))


def _grows_too_much(inputs: list[np.ndarray], results) -> bool:
    """A fold that turns small constants into a large one (Expand, Tile of a mask) stays a node."""
    largest_input = max(a.size for a in inputs)
    return any(np.asarray(r).size > max(_FOLD_MAX_INPUT_ELEMENTS, 4 * largest_input) for r in results)


def _add_weight(state: _ImportState, name: str, array: np.ndarray) -> None:
    if _np_dtype(helper.np_dtype_to_tensor_dtype(array.dtype)) is None:
        raise TasoError(f"constant {name!r} has unsupported dtype {array.dtype}")
    state.weights[name] = array
    state.types[name] = TensorType.of(array)


def _import_opaque(state: _ImportState, node: onnx.NodeProto, all_opsets, shape_errors: Sequence[str] = ()) -> None:
    captures = [c for c in _subgraph_captures(node) if state.resolve(c) in state.types]
    present = [state.resolve(n) for n in node.input if n]
    inputs = present + [state.resolve(c) for c in captures]
    params = dict(
        op_type=node.op_type,
        domain=node.domain,
        proto=node.SerializeToString(),
        input_slots=tuple(node.input),
        captures=tuple(captures),
        opsets=all_opsets,
    )
    try:
        out_types = _opaque_output_types(state, node, captures, inputs, params)
    except ImportError_:
        if not shape_errors:
            raise
        raise ImportError_(f"{node.op_type} node {node.name!r} does not accept its input types: {shape_errors[0]}") from None
    outputs = [o for o in node.output if o]
    p = opaque.make_params(**params, out_types=tuple(((), t.encode()) if isinstance(t, OpaqueType) else (t.shape, t.dtype) for t in out_types))
    state.nodes.append(Node(opaque, p, tuple(inputs), tuple(outputs), node.name))
    state.types.update(zip(outputs, out_types))


def _opaque_output_types(state: _ImportState, node: onnx.NodeProto, captures: list[str], inputs: list[str], params: dict) -> list[TensorType]:
    """Output types of an opaque node: ONNX shape inference over the model, then over the node
    alone with its (folded) constant inputs, and only then a checked probe on random values.
    An If on a condition known only at run time is typed by running each branch (see
    :func:`_types_by_branch_probe`): inference merges the branches and cannot tell which run."""
    outputs = [o for o in node.output if o]
    declared = [state.known_types.get(o) for o in outputs] if node.op_type in ("If", "Loop", "Scan") else []
    if declared and None not in declared and any(isinstance(t, OpaqueType) for t in declared):
        return _symbolized(state, node, captures, inputs, declared)  # a sequence or optional out of a subgraph: its declared kind
    if _is_runtime_if(state, node):
        types = _types_by_branch_probe(state, node, captures, inputs, params)
        return types if not all(t.is_static for t in types) else _symbolized(state, node, captures, inputs, types)
    outputs = [o for o in node.output if o]
    types = [state.known_types.get(o) for o in outputs]
    if None in types:
        types = _types_by_node_inference(state, node, captures)
    if types is None or None in types:
        types = _types_by_probe(state, node, captures, inputs, params)
        if not all(t.is_static for t in types):
            return types  # value-dependent: symbolic already
    return _symbolized(state, node, captures, inputs, types)


def _symbolized(state: _ImportState, node: onnx.NodeProto, captures: list[str], inputs: list[str], types: list[TensorType]) -> list[TensorType]:
    """An opaque node's output types with symbolic dims, when it reads any (types at the measurement sizes otherwise).

    ONNX's symbolic inference says which dims are static and which are an input's symbol
    (over the model, then over the node alone); a dim it cannot tell becomes a fresh symbol.
    """
    if all(state.type(n).is_static and n not in state.symbolic for n in inputs):
        return types
    outputs = [o for o in node.output if o]
    by_name = _node_inference(state, node, captures, symbolic=True) or {}
    infos = [(state.known_types.symbolic_info(o), by_name.get(o)) for o in outputs]
    if node.op_type == "Range" and len(types) == 1:
        length = symbolic.range_length([state.symbolic.get(n, state.weights.get(n)) for n in inputs])
        if length is not None and int(length) == types[0].shape[0]:
            return [TensorType((length,), types[0].dtype)]
    return _with_symbols(state, inputs, outputs, types, infos)


def _with_symbols(state: _ImportState, inputs: list[str], outputs: list[str], types: list[TensorType],
                  infos: list[tuple[onnx.ValueInfoProto | None, ...]]) -> list[TensorType]:
    """``types`` (at the measurement sizes) with each dim that inference (``infos``) does not fix or name after a known
    symbol made a fresh symbol, found at export as that output's dim (``meta.symbol_sources``)."""
    labels = symbolic.dim_labels({n: state.type(n) for n in inputs})
    labels.update(symbolic.dim_labels({n: t for n, t in state.types.items() if n in state.input_names}))

    def fresh(k: int, axis: int):
        name = f"{outputs[k]}_dim{axis}"
        state.symbol_sources.append((name, outputs[k], axis))
        return symbol(name, int(types[k].shape[axis]))

    return symbolic.symbolic_types(types, infos, labels, fresh)


def _value_dependent_types(state: _ImportState, node: onnx.NodeProto, captures: list[str], inputs: list[str],
                           probed: Sequence[list[TensorType]], why: str) -> list[TensorType]:
    """The output types of an opaque node whose shapes depend on the values of its inputs (Pad's pads as an input,
    NonZero, Unique, an If whose branches give different sizes): the rank and element type that ONNX inference (or
    every probe that ran) agrees on, each dim it does not fix a fresh size symbol, measured where a probe ran.

    Raises:
        Unsupported: not even the rank or the element type is known without running the model (``why`` says more).
    """
    outputs = [o for o in node.output if o]
    by_name = _node_inference(state, node, captures, symbolic=True) or {}
    types, infos = [], []
    for k, name in enumerate(outputs):
        found = (state.known_types.symbolic_info(name), by_name.get(name), state.declared.get(name))
        declared = [vi for vi in found if vi is not None and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")]
        dtypes = {_np_dtype(vi.type.tensor_type.elem_type) for vi in found if vi is not None and vi.type.HasField("tensor_type")
                  and vi.type.tensor_type.elem_type} | {run[k].dtype for run in probed}
        ranks = {len(vi.type.tensor_type.shape.dim) for vi in declared} or {run[k].rank for run in probed}
        if len(ranks) != 1 or len(dtypes) != 1 or None in dtypes:
            raise Unsupported(f"{why}, and neither the rank nor the element type of its output {name!r} is known without running the model")
        rank, dtype = ranks.pop(), dtypes.pop()
        measured = []
        for axis in range(rank):
            fixed = [int(vi.type.tensor_type.shape.dim[axis].dim_value) for vi in declared if is_static_dim(vi.type.tensor_type.shape.dim[axis])]
            ran = [int(run[k].shape[axis]) for run in probed if run[k].rank == rank]
            measured.append(fixed[0] if fixed else max(ran[0], 1) if ran else 1)
        types.append(TensorType(tuple(measured), dtype))
        infos.append(found)
    return _with_symbols(state, inputs, outputs, types, infos)


def _is_runtime_if(state: _ImportState, node: onnx.NodeProto) -> bool:
    return node.op_type == "If" and node.domain in _ONNX_DOMAINS and bool(node.input) and state.resolve(node.input[0]) not in state.weights


def _types_by_branch_probe(state: _ImportState, node: onnx.NodeProto, captures: list[str], inputs: list[str], params: dict) -> list[TensorType]:
    """An If whose condition is computed from the inputs: each branch is run with the condition
    forced, on two sets of plausible values, at the fixed input shapes.

    Every run that succeeds must give the same output types, which are then the node's, whatever
    the condition turns out to be. A branch that fails on both probes cannot run at these shapes
    (silero-vad's 8 kHz network at 512 samples): the node, kept verbatim, fails there on ONNX
    Runtime exactly as the original does, so it is typed by the branch that runs, and the graph
    inputs it reads keep their declared dimensions at export (ONNX Runtime infers shapes inside
    both branches when it loads a model, and refuses the one that cannot run at static shapes).
    Refused: branches that run with different output types (a probe would pick one silently),
    and an If no branch of which runs.
    """
    where = f"If node {node.name!r}"
    probe = Params({**params, "out_types": ()})
    seen: dict[bool, list[list[TensorType]]] = {True: [], False: []}
    errors: dict[bool, str] = {}
    for branch in (True, False):
        for probe_index in (0, 1):
            try:
                seen[branch].append(_probed_types(state, inputs, probe, probe_index, condition=branch))
            except TasoError as e:
                errors[branch] = str(e)
    runs = [types for branch in (True, False) for types in seen[branch]]
    if not runs:
        why = f"{where}: neither branch runs at the fixed input shapes (then: {errors.get(True, '?')}; else: {errors.get(False, '?')})"
        if not _reads_sizes_from_values(state, inputs[1:]):
            raise ImportError_(why)
        return _value_dependent_types(state, node, captures, inputs, [], why)
    if any(types != runs[0] for types in runs):
        shapes = " vs ".join(dict.fromkeys(str([str(t) for t in types]) for types in runs))
        why = f"{where} chooses at run time between branches whose output types differ ({shapes})"
        return _value_dependent_types(state, node, captures, inputs, runs, why)
    if not seen[True] or not seen[False]:
        state.branch_inputs.update(_graph_inputs_read(state, node, captures))
    return runs[0]


def _graph_inputs_read(state: _ImportState, node: onnx.NodeProto, captures: list[str]) -> list[str]:
    """The real graph inputs a node reads, directly or through its subgraphs (aliases resolved)."""
    names = [state.resolve(n) for n in list(node.input) + captures if n]
    return [n for n in dict.fromkeys(names) if n in state.input_names]


def _types_by_node_inference(state: _ImportState, node: onnx.NodeProto, captures: list[str]) -> list[TensorType | None] | None:
    """ONNX shape inference on the node alone: its inputs typed as imported, constants as initializers.

    Folding makes shape arguments (Expand's shape, Pad's pads, Resize's sizes...) constant
    after the model-wide inference ran, so this sees what that one could not.
    """
    by_name = _node_inference(state, node, captures, symbolic=False)
    if by_name is None:
        return None
    return [_static_type(by_name[o]) if o in by_name else None for o in node.output if o]


def _node_inference(state: _ImportState, node: onnx.NodeProto, captures: list[str], symbolic: bool) -> dict[str, onnx.ValueInfoProto] | None:
    """ONNX shape inference of one node, its inputs typed as imported (symbolic dims named when ``symbolic``)."""
    names = list(dict.fromkeys([n for n in node.input if n] + captures))
    inputs, initializers = [], []
    for name in names:
        value = state.weights.get(state.resolve(name))
        if value is not None and value.size <= _FOLD_MAX_INPUT_ELEMENTS:
            initializers.append(numpy_helper.from_array(np.asarray(value, order="C"), name))
            continue
        t = state.type(name)
        inputs.append(value_info(name, t, t.shape if symbolic else [int(d) for d in t.shape]))
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "node", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=list(state.model.opset_import))
    model.ir_version = max(state.model.ir_version, 4)  # IR 3 would want every initializer listed as an input
    model.functions.extend(state.model.functions)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort; the probe comes next
        return None
    return {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}


def _plausible_array(t: TensorType, rng: np.random.Generator, probe: int) -> np.ndarray:
    """Random values of a type, never all zeros (zeros take If's other branch and give Pad zero pads).

    The two probes differ everywhere they can: booleans are complementary, integers come
    from 1..3 then 1..8, floats are distinct normals then small integers with repeats and
    zeros (Unique, NonZero), so a shape that depends on the values shows up as a difference.
    """
    if isinstance(t, OpaqueType):
        return random_value(t, rng)
    if t.dtype == "object":
        return rng.choice(np.asarray(WORDS, dtype=object), t.shape)
    if t.dtype.startswith("float"):
        values = rng.standard_normal(t.shape) if probe == 0 else rng.integers(-2, 3, t.shape)
        return values.astype(t.dtype)
    if t.dtype == "bool":
        pattern = (np.arange(t.size) % 2 == 0).reshape(t.shape)
        return pattern if probe == 0 else ~pattern
    return rng.integers(1, 4 if probe == 0 else 9, t.shape).astype(t.dtype)


def _probed_types(state: _ImportState, inputs: list[str], probe: Params, probe_index: int, condition: bool | None = None) -> list[TensorType]:
    """The output types of one run of an opaque node on plausible values (probe 0 or 1), weights as they are;
    ``condition`` forces an If's first input. Raises TasoError when the node does not run."""
    rng = np.random.default_rng(probe_index)
    arrays = [np.asarray(condition) if i == 0 and condition is not None else state.weights[n] if n in state.weights
              else symbolic.concrete_array(state.symbolic[n], state.types[n].dtype) if n in state.symbolic
              else _plausible_array(state.type(n), rng, probe_index) for i, n in enumerate(inputs)]
    return [TensorType.of(np.asarray(r)) if isinstance(r, np.ndarray) else type_of(value_type_proto(r)) for r in opaque.evaluate(arrays, probe)]


def _types_by_probe(state: _ImportState, node: onnx.NodeProto, captures: list[str], inputs: list[str], params: dict) -> list[TensorType]:
    """Last resort: run the node twice on different plausible values. Where its shapes depend on them, or it does not
    run on them, the dims inference does not fix become fresh size symbols (:func:`_value_dependent_types`)."""
    where = f"{node.op_type} node {node.name!r}"
    probe = Params({**params, "out_types": ()})
    seen, failure = [], None
    for probe_index in (0, 1):
        try:
            seen.append(_probed_types(state, inputs, probe, probe_index))
        except TasoError as e:
            failure = str(e)
    if failure is None and seen[0] == seen[1]:
        return seen[0]
    declared = [state.declared.get(o) for o in node.output if o]
    if failure is not None and node.domain not in _ONNX_DOMAINS and None in declared:
        raise Unsupported(f"{where} is a {node.domain} operator that does not run here ({failure}): give ONNX Runtime its kernels with "
                          "--custom-ops LIB, or declare its outputs' shapes in the file's value_info")
    if failure is not None and not _reads_sizes_from_values(state, inputs) and None in declared:
        # Data that does not fit (an Add that does not broadcast at these sizes): a model that cannot run here.
        raise ImportError_(f"cannot determine the static output shapes of {where}: ONNX shape inference gives none and running it on random inputs fails ({failure})")
    why = (f"ONNX shape inference gives no shape for {where} and it does not run on random inputs ({failure})" if failure
           else f"the output shapes of {where} depend on the values of its inputs")
    return _value_dependent_types(state, node, captures, inputs, seen, why)


def _reads_sizes_from_values(state: _ImportState, inputs: list[str]) -> bool:
    """Whether a node reads an operand computed at run time that may set its output's sizes: an integer tensor (pads,
    shapes, axes, indices), a small tensor after its first input (Resize's scales), a value with a dim that another
    node's values set, or a sequence (whose length a random one does not know). Random values for those fail where real ones run; data that does not fit fails for every value."""
    fresh = {symbol for symbol, _, _ in state.symbol_sources}
    for position, name in enumerate(inputs):
        if name in state.weights:
            continue
        t = state.type(name)
        if isinstance(t, OpaqueType) or t.dtype.startswith(("int", "uint")) or (position > 0 and t.rank <= 1) or t.symbols & fresh:
            return True  # (a dim another node's values set: the probe's measured sizes need not fit together)
    return False
