"""Graph -> ONNX.

Each IR node is written by its op's exporter (fused activations become their own nodes), except
that a 2-D product and the bias Add after it are written as one Gemm (:func:`gemm_pairs`).
Weight-only subgraphs (for example two kernels concatenated by a rewrite) are evaluated
and written as initializers, as TASO's weight preprocessing did. The model keeps the
original's input and output names, in order, and the original's opset unless another is
requested.

Symbolic dims (:mod:`taso.ir.dims`) are written size-independent: graph inputs and outputs
declare them as ``dim_param``; a shape operand that depends on them (a Reshape's target, a
ConstantOfShape's shape, a Slice's end) uses Reshape's 0 and -1 where that suffices and is
otherwise computed at run time from the shapes of the values that carry the symbols
(Shape -> Gather -> Mul/Add/Div -> Concat), so no constant in the file bakes in a
measurement size.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import ExportError
from ..ir import Graph, Node, TensorType
from ..ir.dims import Dim, bare_symbol, floor_definition, is_static_shape, poly_terms, value_symbols
from ..ops.onnx_versions import understood, version_in_force
from .values import value_info

__all__ = ["to_onnx_model", "folding_plan", "folded_weights", "FoldingPlan", "gemm_pairs"]

# Constants that stay lazy: materialising ConstantOfShape would bloat "light" models.
_KEEP_LAZY = {"fill", "opaque", "dims"}
_MAX_FOLDED_BYTES = 1 << 30
# Broadcasts of weights stay nodes once their output is this large: a causal mask expanded to
# [batch, heads, seq, seq] would multiply the file's size.
_BROADCASTS = {"expand"}
_MAX_FOLDED_BROADCAST_BYTES = 1 << 16


class ExportContext:
    """What an op's exporter sees: ways to emit ONNX nodes and constants."""

    def __init__(self, graph: Graph, opset: int, weights_file=None):
        self.graph = graph
        self.opset = opset
        self._weights_file = weights_file  # a taso.onnx.files.WeightsFile: large tensors' bytes go there, not into the proto
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, onnx.TensorProto] = {}
        self._used = set(graph.types) | set(graph.meta.output_names)
        self._counter = 0
        self._node_name = ""
        self.defined: set[str] = set(graph.inputs) | set(graph.weights)  # values an emitted node may read so far
        self._dim_tensors: dict[tuple, str] = {}  # a dim's polynomial -> its 1-D int64 [1] tensor
        self._shape_tensors: dict[tuple, str] = {}  # a list of sizes -> its 1-D tensor
        self._shapes: dict[str, str] = {}  # a value -> its Shape tensor
        self._sources: dict[str, list[tuple[str, int]]] | None = None
        self.domains: set[str] = set()  # the other operator domains the nodes emitted use

    def fresh(self, hint: str) -> str:
        while True:
            self._counter += 1
            name = f"{hint}_{self._counter}"
            if name not in self._used:
                self._used.add(name)
                return name

    def type(self, value: str) -> TensorType:
        return self.graph.type(value)

    def error(self, message: str) -> ExportError:
        return ExportError(message)

    def onnx_dtype(self, dtype: str) -> int:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    def emit(self, op_type: str, inputs: list[str], outputs: list[str], domain: str = "", **attrs: Any) -> None:
        """Writes one node: an ai.onnx one, or one of another ``domain`` (version 1 of it, as ONNX Runtime's contrib
        operators are), whose opset the model then imports.

        Raises:
            ExportError: at this opset ``op_type`` is a version whose meaning taso does not know
                (:mod:`taso.ops.onnx_versions`): Add-6 broadcasts only with ``broadcast=1``, say.
        """
        if domain:
            self.domains.add(domain)
        elif not understood(op_type, self.opset):
            raise ExportError(f"taso cannot write {op_type} at opset {self.opset}: its version there "
                              f"({op_type}-{version_in_force(op_type, self.opset)}) is not one taso models")
        name = self.fresh(self._node_name or op_type)
        attrs = {k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v for k, v in attrs.items()}
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=name, domain=domain or None, **attrs))
        self.defined.update(outputs)

    # ---- shape operands that hold at every size ---------------------------------------------------
    def shape_tensor(self, values, dtype: str = "int64") -> str:
        """A 1-D int tensor of sizes: a constant when none is symbolic, else computed from the shapes at run time
        (once per list of sizes: the per-step Splits of an unrolled loop share one)."""
        values = tuple(values)
        if is_static_shape(values):
            return self.const(np.asarray([int(v) for v in values], dtype).reshape(len(values)))
        key = (tuple(poly_terms(v) for v in values), dtype)
        if key not in self._shape_tensors:
            self._shape_tensors[key] = self._computed_sizes(values, dtype)
        return self._shape_tensors[key]

    def _computed_sizes(self, values: tuple, dtype: str) -> str:
        parts, run = [], []
        for v in values:
            if isinstance(v, Dim):
                if run:
                    parts.append(self.const(np.asarray(run, np.int64)))
                    run = []
                parts.append(self.dim_tensor(v))
            else:
                run.append(int(v))
        if run:
            parts.append(self.const(np.asarray(run, np.int64)))
        out = parts[0] if len(parts) == 1 else self._op("Concat", parts, "sizes", axis=0)
        return out if dtype == "int64" else self._op("Cast", [out], "sizes", to=self.onnx_dtype(dtype))

    def reshape_target(self, data: str, shape, given=None) -> str:
        """Reshape's shape operand: 0 where a dim is the input's dim at the same position, -1 for one
        other symbolic dim, a run-time computation only when that does not suffice. ``given``: the data's shape, where
        the data is a value this exporter wrote (not in the graph)."""
        shape = tuple(shape)
        if is_static_shape(shape):
            return self.const(np.asarray([int(d) for d in shape], np.int64).reshape(len(shape)))
        given = self.type(data).shape if given is None else tuple(given)
        target: list[int | None] = []
        for i, d in enumerate(shape):
            if isinstance(d, Dim):
                target.append(0 if i < len(given) and given[i] == d else None)
            else:
                target.append(int(d))
        literal_zero = any(type(d) is int and int(d) == 0 for d in shape)
        if not literal_zero and target.count(None) <= 1:
            return self.const(np.asarray([-1 if t is None else t for t in target], np.int64))
        return self.shape_tensor(shape)

    def dim_tensor(self, dim: int) -> str:
        """A 1-D int64 tensor [1] holding a dim's value at run time."""
        return self._poly_tensor(poly_terms(dim))

    def _poly_tensor(self, poly) -> str:
        if poly in self._dim_tensors:
            return self._dim_tensors[poly]
        total = None
        for monomial, coefficient in poly:
            term = None
            for atom in monomial:
                factor = self._atom_tensor(atom)
                term = factor if term is None else self._op("Mul", [term, factor], "dim")
            if term is None:
                term = self.const(np.asarray([coefficient], np.int64))
            elif coefficient != 1:
                term = self._op("Mul", [term, self.const(np.asarray([coefficient], np.int64))], "dim")
            total = term if total is None else self._op("Add", [total, term], "dim")
        if total is None:
            total = self.const(np.zeros(1, np.int64))
        self._dim_tensors[poly] = total
        return total

    def _atom_tensor(self, atom: str) -> str:
        definition = floor_definition(atom)
        if definition is not None:
            numerator, k = definition
            # NOTE: integer Div truncates; the numerator is >= 0 at every size (taso.ir.dims made the atom so).
            return self._op("Div", [self._poly_tensor(numerator), self.const(np.asarray([k], np.int64))], "dim")
        value, axis = self._source(atom)
        if value not in self._shapes:
            self._shapes[value] = self._op("Shape", [value], "shape")
        return self._op("Gather", [self._shapes[value], self.const(np.asarray([axis], np.int64))], "dim", axis=0)

    def _source(self, symbol: str) -> tuple[str, int]:
        """A value already computed (a graph input first) whose shape holds the symbol itself on some axis."""
        if self._sources is None:
            self._sources = {}
            carriers = [(v, axis, bare_symbol(d)) for v, t in self.graph.inputs.items() for axis, d in enumerate(t.shape)]
            carriers += [(value, axis, name) for name, value, axis in self.graph.meta.symbol_sources]  # where an opaque node made it
            carriers += [(v, axis, bare_symbol(d)) for v, t in self.graph.types.items() for axis, d in enumerate(t.shape)]
            for value, axis, name in carriers:
                if name is not None:
                    self._sources.setdefault(name, []).append((value, axis))
        for value, axis in self._sources.get(symbol, ()):
            if value in self.defined:
                return value, axis
        raise ExportError(f"no value computed before this point carries the size {symbol!r}, so a shape that depends on it cannot be written")

    def _op(self, op_type: str, inputs: list[str], hint: str, **attrs: Any) -> str:
        out = self.fresh(hint)
        self.emit(op_type, inputs, [out], **attrs)
        return out

    def const(self, array: np.ndarray, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.initializer(name, array)
        return name

    def initializer(self, name: str, array: np.ndarray) -> None:
        # NOTE: np.asarray(order="C"), not np.ascontiguousarray, which turns a scalar into shape [1].
        array = np.asarray(array, order="C")
        written = self._weights_file.tensor(array, name) if self._weights_file is not None else None
        self.initializers[name] = written if written is not None else numpy_helper.from_array(array, name)

    def emit_proto(self, node: Node) -> None:
        """Writes an opaque node's original NodeProto with its (possibly renamed) edges."""
        p = node.params
        proto = onnx.NodeProto()
        proto.ParseFromString(p["proto"])
        present = iter(node.inputs)
        proto.input[:] = [next(present) if slot else "" for slot in p["input_slots"]]
        outputs = iter(node.outputs)
        proto.output[:] = [next(outputs) if slot else "" for slot in list(proto.output)]
        for capture, value in zip(p["captures"], list(present)):
            if capture != value:  # the subgraph reads the old name: keep it defined
                self.nodes.append(helper.make_node("Identity", [value], [capture], name=self.fresh("capture")))
        if proto.domain not in ("", "ai.onnx"):  # declared even where the file left it out (ONNX Runtime runs such files)
            self.domains.add(proto.domain)
        self.nodes.append(proto)


class FoldingPlan(NamedTuple):
    """What export evaluates into initializers, and the weight-only nodes it leaves as nodes, each with the reason."""

    folded: list[Node]
    unfolded: list[tuple[Node, str]]
    bytes_before: int = 0  # the graph's weights
    bytes_after: int = 0  # the initializers export writes (weights and folded values that a node or output reads)

    def describe(self) -> str:
        text = f"{len(self.folded)} weight-only nodes folded into initializers (weights {_size(self.bytes_before)} -> {_size(self.bytes_after)})"
        if self.unfolded:
            reasons = Counter(f"{node.op.name}: {why}" for node, why in self.unfolded)
            text += "; left as nodes: " + ", ".join(f"{n} {r}" if n > 1 else r for r, n in reasons.most_common())
        return text


def folding_plan(graph: Graph) -> FoldingPlan:
    """The nodes computed from weights alone, in topological order, that export folds (and those it does not)."""
    constant = set(graph.weights)
    folded, unfolded = [], []
    for node in graph.topological_order():
        if not all(v in constant for v in node.inputs):
            continue
        why = _why_not_folded(graph, node)
        if why:
            if node.inputs:  # a node of no inputs (a fill, run-time sizes) is no weight subgraph
                unfolded.append((node, why))
            continue
        folded.append(node)
        constant.update(node.outputs)
    folded_ids = {id(n) for n in folded}
    read = {v for n in graph.topological_order() if id(n) not in folded_ids for v in n.inputs} | set(graph.outputs)
    written = sum(graph.type(v).nbytes for v in read & constant)
    return FoldingPlan(folded, unfolded, sum(int(w.nbytes) for w in graph.weights.values()), written)


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n} B"


def folded_weights(graph: Graph, folded: list[Node] | None = None) -> dict[str, np.ndarray]:
    """The graph's weights and the values of the folded nodes (:func:`folding_plan`), each evaluated by its
    operator's reference semantics in the weights' own dtype."""
    weights: dict[str, np.ndarray] = dict(graph.weights)
    for node in folding_plan(graph).folded if folded is None else folded:
        for name, value in zip(node.outputs, node.op.evaluate([weights[v] for v in node.inputs], node.params)):
            weights[name] = value
    return weights


def _why_not_folded(graph: Graph, node: Node) -> str:
    if node.op.name in _KEEP_LAZY:
        return {"opaque": "an ONNX node kept verbatim", "dims": "sizes computed at run time"}.get(node.op.name, "kept lazy: its result is larger than its inputs")
    if not all(graph.type(o).is_static for o in node.outputs):
        return "its shape depends on a size symbol"
    out_bytes = sum(graph.type(o).nbytes for o in node.outputs)
    if out_bytes > _MAX_FOLDED_BYTES:
        return "its result is over 1 GiB"
    if node.op.name in _BROADCASTS and out_bytes > _MAX_FOLDED_BROADCAST_BYTES:
        return "a broadcast whose result would grow the file"
    return ""


def _export_order(graph: Graph) -> list[Node]:
    """The graph's nodes in an order where each node comes after the values its symbolic sizes are read from.

    A size that no graph input carries (a fresh symbol of an opaque node's output) is computed at
    run time from the value that has it; a node writing such a size (a ``dims`` node, a Reshape
    target), which may have no input at all, must follow that value in the file.
    """
    order = list(graph.topological_order())
    sources: dict[str, str | None] = {s: None for t in graph.inputs.values() for s in _bare_symbols(t.shape)}
    for symbol, value, _ in graph.meta.symbol_sources:
        if graph.is_defined(value):
            sources.setdefault(symbol, value)
    for node in order:
        for out in node.outputs:
            for s in _bare_symbols(graph.type(out).shape):
                sources.setdefault(s, out)
    after: dict[int, set[str]] = {}
    for node in order:
        symbols = frozenset().union(*(value_symbols(v) for v in node.params.values()))
        needs = {sources[s] for s in symbols if sources.get(s) is not None} - set(node.outputs)
        if needs:
            after[id(node)] = needs
    if not after:
        return order
    produced_by = {o: node for node in order for o in node.outputs}
    placed: set[int] = set()
    result: list[Node] = []
    for root in order:  # depth-first, each node after what it reads and the values its sizes come from
        stack = [(root, False)]
        while stack:
            node, ready = stack.pop()
            if ready:
                result.append(node)
                continue
            if id(node) in placed:
                continue
            placed.add(id(node))
            stack.append((node, True))
            for value in (*node.inputs, *sorted(after.get(id(node), ()))):
                producer = produced_by.get(value)
                if producer is not None and id(producer) not in placed:
                    stack.append((producer, False))
    return result


def _bare_symbols(shape) -> list[str]:
    """The size symbols that stand alone as a dim of ``shape`` (a Shape -> Gather of the value gives them)."""
    return [s for s in map(bare_symbol, shape) if s is not None]


def to_onnx_model(graph: Graph, opset: int | None = None, check: bool = True, weights_file=None) -> onnx.ModelProto:
    """Writes a graph as an ONNX model.

    Args:
        graph: the graph.
        opset: the ai.onnx opset to declare; default the imported model's.
        check: run ``onnx.checker`` (full check) on the result.
        weights_file: a :class:`taso.onnx.files.WeightsFile` that large tensors are written to as external
            data (the model then holds no weight bytes); default: every tensor embedded.

    Raises:
        ExportError: an op cannot be written at this opset, or the result fails the checker.
    """
    opset = opset or written_opset(graph)
    ctx = ExportContext(graph, opset, weights_file)
    folded = folding_plan(graph).folded
    folded_ids = {id(n) for n in folded}
    weights = folded_weights(graph, folded)
    live = graph.pruned()
    needed = {v for n in live.topological_order() if id(n) not in folded_ids for v in n.inputs} | set(graph.outputs)
    for name, array in weights.items():
        if name in needed:
            ctx.initializer(name, array)
    gemms = {add: product for add, product in gemm_pairs(live, opset).items() if id(product) not in folded_ids}
    in_gemm = {id(product) for product in gemms.values()}
    for node in _export_order(live):
        if id(node) in folded_ids or id(node) in in_gemm:
            continue
        product = gemms.get(id(node))
        if product is not None:
            ctx._node_name = product.name
            bias = node.inputs[1] if node.inputs[0] == product.outputs[0] else node.inputs[0]
            ctx.emit("Gemm", [*product.inputs, bias], list(node.outputs))
        else:
            ctx._node_name = node.name
            node.op.onnx.exporter(ctx, node)
        ctx.defined.update(node.outputs)
    ctx._node_name = ""
    output_names = graph.meta.output_names or graph.outputs
    declared_inputs, declared_outputs, verbatim = _declared_interface(live, folded_ids)
    outputs = []
    original_params = graph.meta.output_dim_params or (None,) * len(graph.outputs)
    for value, name, params in zip(graph.outputs, output_names, original_params):
        if value != name:
            ctx.nodes.append(helper.make_node("Identity", [value], [name], name=ctx.fresh("output")))
        t = graph.type(value)
        shape = declared_outputs.get(name, t.shape) if value in verbatim else _with_original_names(t.shape, params)
        outputs.append(value_info(name, t, shape))
    inputs = [value_info(n, t, declared_inputs.get(n, t.shape)) for n, t in graph.inputs.items()]
    for name in graph.meta.initializer_inputs:
        if name in ctx.initializers:
            t = TensorType.of(weights[name])
            inputs.append(helper.make_tensor_value_info(name, ctx.onnx_dtype(t.dtype), t.shape))
    onnx_graph = helper.make_graph(ctx.nodes, graph.meta.graph_name, inputs, outputs, initializer=list(ctx.initializers.values()))
    extra = dict(graph.meta.extra_opsets)
    extra.update({d: extra.get(d, 1) for d in ctx.domains})
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra.items()]
    model = helper.make_model(onnx_graph, opset_imports=opsets, producer_name="taso")
    # NOTE: at least IR 4, where an initializer need not be a graph input: IR 3 wants every initializer listed as one,
    # and a weight taso folds or derives is none (opset 9 and newer need IR 4 anyway).
    model.ir_version = max(min(graph.meta.ir_version, onnx.IR_VERSION), _min_ir_version(opset), 4)
    if check:
        _check(model)
    return model


_GEMM_OPSET = 7  # Gemm's C broadcasts from opset 7
_GEMM_DTYPES = ("float32", "float64")


def written_opset(graph: Graph) -> int:
    """The opset ``graph`` is written at: its file's, raised to the opset from which one of its ops is one ONNX node
    (ONNX's Attention from 23) where the graph's target allows (``GraphMeta.opset_limit``)."""
    native = {node.op.onnx.native_opset for node in graph.nodes} - {None}
    return max([graph.meta.opset, *(n for n in native if graph.meta.writes_natively(n))])


def gemm_pairs(graph: Graph, opset: int = _GEMM_OPSET) -> dict[int, Node]:
    """The bias Adds written with the product before them as one Gemm: id(add) -> the matmul.

    A 2-D product whose only reader adds a constant row (``[N]`` or ``[1, N]``) is what PyTorch writes as
    Gemm for ``nn.Linear``. Written back as MatMul and Add, ONNX Runtime fuses the two into a Gemm of its own,
    numbered after every node of the file, which changes the order it runs the nodes in: an LSTMCell loop that
    ran all its input products, then all its recurrent ones, ran them in turn, each weight pushing the other
    out of the cache (0.62x the file's speed at hidden 256: docs/measured.md, session 22)."""
    if opset < _GEMM_OPSET:
        return {}
    consts = graph.constant_values()
    pairs: dict[int, Node] = {}
    for add in graph.index.nodes_of("add"):
        for data, bias in (add.inputs, add.inputs[::-1]):
            product = graph.producer(data)
            if (product is None or product.op.name != "matmul" or product.params["activation"] != "none"
                    or data in graph.outputs or len(graph.uses(data)) != 1 or bias not in consts):
                continue
            a, b, out, row = (graph.type(v) for v in (*product.inputs, data, bias))
            if (a.rank == b.rank == 2 and out.dtype in _GEMM_DTYPES and row.dtype == out.dtype
                    and row.shape in ((out.shape[1],), (1, out.shape[1]))):
                pairs[id(add)] = product
                break
    return pairs


def _with_original_names(shape, params: tuple[str | None, ...] | None):
    """An output's symbolic dims under the names the original file gave them (a dim taso knows static stays an int)."""
    if params is None or len(params) != len(shape):
        return shape
    return tuple(p if isinstance(d, Dim) and p else d for d, p in zip(shape, params))


def _declared_interface(graph: Graph, folded_ids: set[int]) -> tuple[dict, dict, set[str]]:
    """The inputs to declare with the original's (symbolic) dims, the outputs likewise, and the values
    computed from those inputs by verbatim (opaque) nodes alone.

    An If whose condition comes from the inputs and one of whose branches cannot run at the fixed
    shapes (recorded at import, see ``taso.onnx.opaque_types._types_by_branch_probe``) makes ONNX
    Runtime refuse the model if the inputs it reads are declared static: it infers shapes inside
    both branches at load. Those inputs are declared as the original declared them, which is sound
    while only verbatim ONNX reads them, directly or through other verbatim nodes: that computes
    what the original computes at any shape. A node taso models there (typed for the fixed shapes)
    would run on values of other shapes, and ONNX has no cheap strict shape assertion to guard it
    with (ONNX Runtime's Concat skips its check on empty operands), so such a graph is refused.

    Raises:
        ExportError: a node taso models reads such a value.
    """
    declared = dict(graph.meta.extra.get("declared_inputs", {})) if graph.meta.extra else {}
    declared = {n: dims for n, dims in declared.items() if n in graph.inputs}
    if not declared:
        return {}, {}, set()
    verbatim = set(declared)
    for node in graph.topological_order():
        read = verbatim.intersection(node.inputs)
        if id(node) in folded_ids or not read:
            continue
        if node.op.name != "opaque":
            raise ExportError(f"{node.op.name} node{' ' + repr(node.name) if node.name else ''} reads {sorted(read)[0]!r}, which depends on input(s) {sorted(declared)} "
                              "that keep their declared dims (an If on them has a branch that cannot run at the fixed shapes, so ONNX "
                              "Runtime refuses them static); taso cannot write a node typed for the fixed shapes there")
        verbatim.update(node.outputs)
    return declared, dict(graph.meta.extra.get("declared_outputs", {})), verbatim


def _min_ir_version(opset: int) -> int:
    try:
        return helper.find_min_ir_version_for([helper.make_opsetid("", opset)], ignore_unknown=True)
    except Exception:  # noqa: BLE001
        return 7


def _check(model: onnx.ModelProto) -> None:
    """``onnx.checker``'s full check (shape inference included) of the model's skeleton: the checker
    serializes what it checks, so on a 420 MB BERT it spent 2.7 s copying weights it only reads the types of."""
    try:
        onnx.checker.check_model(weightless(model), full_check=True)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"the exported model fails onnx.checker: {str(e).splitlines()[0]}") from None


# Initializers at least this large are checked as typed graph inputs (small ones, shape tensors among them, stay:
# shape inference reads their values).
_SKELETON_MIN_BYTES = 1 << 16


def weightless(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with each large initializer declared as a graph input of its type instead: the same graph to
    check or analyse (shapes, index ranges), without its weights' bytes (nor their external data). A model with
    nothing large is returned as it is."""
    graph = model.graph
    large = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL or t.ByteSize() >= _SKELETON_MIN_BYTES]
    if not large:
        return model
    large_names = {t.name for t in large}
    skeleton = onnx.ModelProto(ir_version=max(model.ir_version, 4), producer_name=model.producer_name, domain=model.domain,
                               model_version=model.model_version)
    skeleton.opset_import.extend(model.opset_import)
    skeleton.functions.extend(model.functions)
    g = skeleton.graph
    g.name = graph.name
    g.node.extend(graph.node)
    g.output.extend(graph.output)
    g.value_info.extend(graph.value_info)
    g.initializer.extend(t for t in graph.initializer if t.name not in large_names)
    declared = {i.name for i in graph.input}
    g.input.extend(graph.input)
    g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in large if t.name not in declared)
    return skeleton
