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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import GraphError, ImportError_, ShapeError, TasoError, Unsupported
from ..ir import Graph, GraphMeta, Node, TensorType, is_numeric
from ..ops import contrib_importers, onnx_importers
from ..ops.onnx_versions import OLDEST_OPSET, REVIEWED_THROUGH, understood
from ..ops.shape import dims as dims_op
from . import symbolic
from .files import external_region, map_weights
from .import_state import FOLD_MAX_INPUT_ELEMENTS, ONNX_DOMAINS, ImportContext, ImportState, InferredTypes, subgraph_captures
from .opaque_types import import_opaque
from .symbolic import is_static_dim
from .values import element_dtype

__all__ = ["load_onnx", "read_model", "external_array", "MIN_OPSET", "MAX_OPSET"]


# Every opset the installed onnx defines is read; an operator version taso's importers were not written for stays
# opaque (:mod:`taso.ops.onnx_versions`).
MIN_OPSET, MAX_OPSET = 1, onnx.defs.onnx_opset_version()


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
            for name in list(n.input) + subgraph_captures(n):
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
    versions = [o.version for o in model.opset_import if o.domain in ONNX_DOMAINS]
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
    bounds = symbolic.implied_size_bounds(model)
    input_types, sizes = symbolic.input_types(model, input_shapes or {}, static, element_dtype, bounds)
    state = ImportState(model, opset, InferredTypes(model, input_types))
    state.size_bounds = {symbol: size for symbol, (size, _why) in bounds.items()}
    state.types.update(input_types)
    state.input_names.update(input_types)
    for init in g.initializer:
        try:
            external = init.data_location == onnx.TensorProto.EXTERNAL and base_dir is not None
            array = external_array(init, base_dir) if external else numpy_helper.to_array(init)
        except Exception as e:  # noqa: BLE001
            raise ImportError_(f"initializer {init.name!r} cannot be read ({e})") from None
        if element_dtype(init.data_type) is None:
            raise ImportError_(f"initializer {init.name!r} has an element type taso does not support")
        state.weights[init.name] = array
        state.types[init.name] = TensorType.of(array)
    if g.sparse_initializer:
        raise ImportError_("sparse initializers are not supported")
    state.used_names.update(state.types)
    for n in g.node:
        state.used_names.update(n.output)
    importers = onnx_importers()
    other_opsets = tuple((o.domain, o.version) for o in model.opset_import if o.domain not in ONNX_DOMAINS)
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
        size_bounds=tuple(sorted((s, *b) for s, b in bounds.items() if s in sizes)),
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


_CONTRIB = contrib_importers()


def _import_node(state: ImportState, node: onnx.NodeProto, importers, all_opsets) -> None:
    standard = node.domain in ONNX_DOMAINS
    if standard and _fold_constant_node(state, node):
        return
    shape_errors: list[str] = []
    if standard and understood(node.op_type, state.opset) and _numeric_node(state, node):
        candidates = [importer for _op, importer in importers.get(node.op_type, ())]
    else:  # another domain's operator taso specifies (ONNX Runtime's SkipLayerNormalization), else opaque
        candidates = _CONTRIB.get((node.domain, node.op_type), []) if _numeric_node(state, node) else []
    for importer in candidates:
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
    import_opaque(state, node, all_opsets, shape_errors)


def _numeric_node(state: ImportState, node: onnx.NodeProto) -> bool:
    """Whether a node reads and writes only tensors of numbers: taso's operators are offered no other (an Identity of a
    sequence, a Cast to strings, a Concat of string tensors stay opaque)."""
    if not all(is_numeric(state.type(n)) for n in node.input if n):
        return False
    outputs = [state.known_types.declared(o) for o in node.output if o]
    return all(t is None or is_numeric(t) for t in outputs)


def _fold_constant_node(state: ImportState, node: onnx.NodeProto) -> bool:
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
    if any(state.weights[n].size > FOLD_MAX_INPUT_ELEMENTS for n in names):
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


def _fold_symbolic_node(state: ImportState, node: onnx.NodeProto) -> bool:
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


def _materialize_sizes(state: ImportState, graph: onnx.GraphProto) -> None:
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
    return any(np.asarray(r).size > max(FOLD_MAX_INPUT_ELEMENTS, 4 * largest_input) for r in results)


def _add_weight(state: ImportState, name: str, array: np.ndarray) -> None:
    if element_dtype(helper.np_dtype_to_tensor_dtype(array.dtype)) is None:
        raise TasoError(f"constant {name!r} has unsupported dtype {array.dtype}")
    state.weights[name] = array
    state.types[name] = TensorType.of(array)
