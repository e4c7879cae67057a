"""The output types of a node taso does not model, kept verbatim: ONNX shape inference over the model, then over the
node with its folded inputs, and only then a checked probe on plausible values. An If on a condition known only at
run time is typed by running each branch. A dim that depends on values becomes a fresh size symbol; what has no
rank or element type without running the model is :class:`~taso.errors.Unsupported`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ImportError_, TasoError, Unsupported
from ..ir import Node, OpaqueType, Params, TensorType
from ..ir.dims import symbol
from ..ops.opaque import opaque, value_type_proto
from . import symbolic
from .import_state import FOLD_MAX_INPUT_ELEMENTS, ONNX_DOMAINS, ImportState, static_type, subgraph_captures
from .symbolic import is_static_dim
from .values import WORDS, element_dtype, random_value, type_of, value_info

__all__ = ["import_opaque"]


def import_opaque(state: ImportState, node: onnx.NodeProto, all_opsets, shape_errors: Sequence[str] = ()) -> None:
    captures = [c for c in subgraph_captures(node) if state.resolve(c) in state.types]
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


def _opaque_output_types(state: ImportState, node: onnx.NodeProto, captures: list[str], inputs: list[str], params: dict) -> list[TensorType]:
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


def _symbolized(state: ImportState, node: onnx.NodeProto, captures: list[str], inputs: list[str], types: list[TensorType]) -> list[TensorType]:
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


def _with_symbols(state: ImportState, inputs: list[str], outputs: list[str], types: list[TensorType],
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


def _value_dependent_types(state: ImportState, node: onnx.NodeProto, captures: list[str], inputs: list[str],
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
        dtypes = {element_dtype(vi.type.tensor_type.elem_type) for vi in found if vi is not None and vi.type.HasField("tensor_type")
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


def _is_runtime_if(state: ImportState, node: onnx.NodeProto) -> bool:
    return node.op_type == "If" and node.domain in ONNX_DOMAINS and bool(node.input) and state.resolve(node.input[0]) not in state.weights


def _types_by_branch_probe(state: ImportState, node: onnx.NodeProto, captures: list[str], inputs: list[str], params: dict) -> list[TensorType]:
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


def _graph_inputs_read(state: ImportState, node: onnx.NodeProto, captures: list[str]) -> list[str]:
    """The real graph inputs a node reads, directly or through its subgraphs (aliases resolved)."""
    names = [state.resolve(n) for n in list(node.input) + captures if n]
    return [n for n in dict.fromkeys(names) if n in state.input_names]


def _types_by_node_inference(state: ImportState, node: onnx.NodeProto, captures: list[str]) -> list[TensorType | None] | None:
    """ONNX shape inference on the node alone: its inputs typed as imported, constants as initializers.

    Folding makes shape arguments (Expand's shape, Pad's pads, Resize's sizes...) constant
    after the model-wide inference ran, so this sees what that one could not.
    """
    by_name = _node_inference(state, node, captures, symbolic=False)
    if by_name is None:
        return None
    return [static_type(by_name[o]) if o in by_name else None for o in node.output if o]


def _node_inference(state: ImportState, node: onnx.NodeProto, captures: list[str], symbolic: bool) -> dict[str, onnx.ValueInfoProto] | None:
    """ONNX shape inference of one node, its inputs typed as imported (symbolic dims named when ``symbolic``)."""
    names = list(dict.fromkeys([n for n in node.input if n] + captures))
    inputs, initializers = [], []
    for name in names:
        value = state.weights.get(state.resolve(name))
        if value is not None and value.size <= FOLD_MAX_INPUT_ELEMENTS:
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


def _probed_types(state: ImportState, inputs: list[str], probe: Params, probe_index: int, condition: bool | None = None) -> list[TensorType]:
    """The output types of one run of an opaque node on plausible values (probe 0 or 1), weights as they are;
    ``condition`` forces an If's first input. Raises TasoError when the node does not run."""
    rng = np.random.default_rng(probe_index)
    arrays = [np.asarray(condition) if i == 0 and condition is not None else state.weights[n] if n in state.weights
              else symbolic.concrete_array(state.symbolic[n], state.types[n].dtype) if n in state.symbolic
              else _plausible_array(state.type(n), rng, probe_index) for i, n in enumerate(inputs)]
    return [TensorType.of(np.asarray(r)) if isinstance(r, np.ndarray) else type_of(value_type_proto(r)) for r in opaque.evaluate(arrays, probe)]


def _types_by_probe(state: ImportState, node: onnx.NodeProto, captures: list[str], inputs: list[str], params: dict) -> list[TensorType]:
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
    if failure is not None and node.domain not in ONNX_DOMAINS and None in declared:
        raise Unsupported(f"{where} is a {node.domain} operator that does not run here ({failure}): give ONNX Runtime its kernels with "
                          "--custom-ops LIB, or declare its outputs' shapes in the file's value_info")
    if failure is not None and not _reads_sizes_from_values(state, inputs) and None in declared:
        # Data that does not fit (an Add that does not broadcast at these sizes): a model that cannot run here.
        raise ImportError_(f"cannot determine the static output shapes of {where}: ONNX shape inference gives none and running it on random inputs fails ({failure})")
    why = (f"ONNX shape inference gives no shape for {where} and it does not run on random inputs ({failure})" if failure
           else f"the output shapes of {where} depend on the values of its inputs")
    return _value_dependent_types(state, node, captures, inputs, seen, why)


def _reads_sizes_from_values(state: ImportState, inputs: list[str]) -> bool:
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
