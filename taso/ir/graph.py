"""The graph IR: typed tensors, immutable nodes, persistent graphs.

Design (see docs/design.md, "Graph IR"):

* A value is named by a string, as in ONNX. Every value has a :class:`TensorType` (shape,
  NumPy dtype name), recorded in ``Graph.types``. A dimension is an ``int`` or a symbolic
  :class:`~taso.ir.dims.Dim` (``batch``, ``seq*2``), itself an int worth its value at the
  measurement sizes: cost models and executors see the measured shape, shape rules and
  rule matching the symbolic one (:mod:`taso.ir.dims`).
* A :class:`Node` is immutable: an operator, its parameters, input value names and output
  value names. Nodes never change after creation.
* A :class:`Graph` is immutable too. A rewrite builds a new graph with
  :meth:`Graph.replace`, which shares every untouched node, type and weight array with the
  old one: the search creates thousands of variants, so copy-with-change must cost a dict
  copy, not a deep copy. Use-def chains (:meth:`Graph.producer`, :meth:`Graph.uses`) and
  the topological order are derived lazily and cached, so they can never go stale.
* What matching and the search look graphs up by (the per-op index, ancestor bit sets, the
  search key) lives in :mod:`taso.ir.index`, reached as ``graph.index``.

The IR never imports onnx; conversion lives in :mod:`taso.onnx`.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GraphError, ShapeError
from .dims import concrete, concrete_value, evaluate, holds_dims, is_static_shape, symbols_of

if TYPE_CHECKING:
    from ..ops.base import Op
    from .index import GraphIndex

__all__ = ["TensorType", "OpaqueType", "is_numeric", "Params", "Node", "Graph", "check", "folds_when_constant"]


@cache
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


@dataclass(frozen=True)
class TensorType:
    """A tensor's shape (ints and symbolic :class:`~taso.ir.dims.Dim` s) and element type (a NumPy dtype name such as 'float32')."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def is_static(self) -> bool:
        """No dimension depends on a size symbol."""
        return is_static_shape(self.shape)

    @property
    def symbols(self) -> frozenset[str]:
        return symbols_of(self.shape)

    def concrete(self) -> TensorType:
        """The type at the measurement sizes, every dim a plain int (what cost caches are keyed by)."""
        return self if self.is_static else TensorType(concrete(self.shape), self.dtype)

    def at(self, sizes: Mapping[str, int]) -> TensorType:
        """The type when each size symbol takes the value ``sizes`` gives it."""
        return self if self.is_static else TensorType(tuple(evaluate(d, sizes) for d in self.shape), self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def element_kind(self) -> str:
        """What a proof's input stands for: "real" for floats of every width (the reals the proofs speak of), else the dtype."""
        return "real" if self.dtype.startswith(("float", "bfloat")) else self.dtype

    @property
    def size(self) -> int:
        shape = self.shape
        if all(type(d) is int for d in shape):
            return math.prod(shape)  # the common case, without NumPy's per-call overhead (prices read it per node)
        return int(np.prod(shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * _itemsize(self.dtype)

    @classmethod
    def of(cls, array: np.ndarray) -> TensorType:
        return cls(tuple(int(d) for d in array.shape), array.dtype.name)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    @property
    def key(self) -> str:
        """The measured type as text: what a cost is keyed by (``str`` shows the symbols)."""
        return f"{self.dtype}[{','.join(map(repr, self.shape))}]"


@dataclass(frozen=True)
class OpaqueType(TensorType):
    """A value that is not a tensor: a sequence, a map or an optional, which only opaque nodes read and write.

    ``proto`` is its ONNX ``TypeProto``, serialized: what export declares for it and what the output
    check draws values of. Its shape is ``()`` and it holds no bytes taso prices.
    """

    dtype: str = "opaque"
    proto: bytes = b""

    @property
    def size(self) -> int:
        return 0

    @property
    def nbytes(self) -> int:
        return 0

    @property
    def element_kind(self) -> str:
        return "opaque"

    def __str__(self) -> str:
        return f"opaque<{self.proto.hex()[:16]}>"

    @property
    def key(self) -> str:
        return f"opaque:{hashlib.sha1(self.proto).hexdigest()[:16]}"

    def encode(self) -> str:
        """The type as a parameter value (an opaque node's output types are parameters)."""
        return "opaque:" + self.proto.hex()

    @staticmethod
    def decode(shape: tuple, dtype: str) -> TensorType:
        """The type a (shape, dtype) pair of :meth:`encode` or a tensor type stands for."""
        return OpaqueType((), "opaque", bytes.fromhex(dtype[7:])) if dtype.startswith("opaque:") else TensorType(tuple(shape), dtype)


def is_numeric(t: TensorType) -> bool:
    """Whether a value is a tensor of numbers or booleans: what taso's operators read and its rules rewrite. Strings
    (dtype ``object``) and :class:`OpaqueType` values pass through opaque nodes only."""
    return not isinstance(t, OpaqueType) and t.dtype != "object"


class Params(Mapping):
    """An immutable, hashable mapping of operator parameters.

    Values are ints, floats, strings, bools, bytes or tuples of those, so that a node's
    parameters can be hashed, compared and serialised to JSON without special cases.
    """

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()):
        pairs = items.items() if isinstance(items, Mapping) else items
        self._items = tuple(sorted((str(k), _freeze(v)) for k, v in pairs))
        self._hash = hash(self._items)

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Params) and self._items == other._items

    def __repr__(self) -> str:
        return "Params(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"

    def replace(self, **changes: Any) -> Params:
        """Returns a copy with some parameters changed."""
        return Params({**dict(self._items), **changes})

    def canonical(self) -> str:
        """A stable text form with every symbolic dim as its value at the measurement sizes (bytes values by digest):
        what a cost is keyed by, since a node is measured at those sizes."""
        return repr(tuple((k, _digest_bytes(v)) for k, v in self._items))

    def identity(self) -> str:
        """A stable text form that tells apart parameters equal only at the measurement sizes: what says two nodes
        compute the same thing (structural hashes, the e-graph's operator names).

        A reshape to ``[batch, 1, 1, seq]`` and one to ``[1, 1, 1, seq]`` are the same at batch 1 and
        different at batch 2; keyed by :meth:`canonical`, an e-graph took one for the other.
        """
        if not any(holds_dims(v) for _, v in self._items):
            return self.canonical()
        return repr(tuple((k, _symbolic_form(_digest_bytes(v))) for k, v in self._items))


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (int, float, str, bool, bytes)) or value is None:
        return value
    raise TypeError(f"operator parameter values must be scalars, strings or tuples, got {type(value).__name__}")


def _symbolic_form(value: Any) -> Any:
    """A dim as its polynomial (str), tuples element by element; other values as they are."""
    if isinstance(value, tuple):
        return tuple(_symbolic_form(v) for v in value)
    return ("dim", str(value)) if holds_dims(value) else value


def _digest_bytes(value: Any) -> Any:
    if isinstance(value, bytes):
        return hashlib.blake2b(value, digest_size=16).hexdigest()
    return value


@dataclass(frozen=True, eq=False)
class Node:
    """One operator application. Immutable: edges change only by building a new graph.

    Attributes:
        op: the operator (from :mod:`taso.ops`).
        params: its parameters, validated against ``op.params``.
        inputs: names of the values it reads, in the operator's argument order.
        outputs: names of the values it defines.
        name: a label for people and for ONNX export; not part of the structure.
    """

    op: Op
    params: Params
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    name: str = ""

    @cached_property
    def signature(self) -> int:
        """A digest of op, params and edge names (the search keys graphs by their sum: :mod:`taso.ir.index`)."""
        text = f"{self.op.name}|{self.params.identity()}|{','.join(self.inputs)}|{','.join(self.outputs)}"
        return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=16).digest(), "little")

    def concrete(self) -> Node:
        """The node at the measurement sizes: every symbolic dim in its parameters a plain int (what a cost is measured on)."""
        if not any(holds_dims(v) for v in self.params.values()):
            return self
        return Node(self.op, Params({k: concrete_value(v) for k, v in self.params.items()}), self.inputs, self.outputs, self.name)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.params.items() if not isinstance(v, bytes))
        return f"{','.join(self.outputs)} = {self.op.name}({', '.join(self.inputs)}{'; ' + params if params else ''})"


@dataclass(frozen=True)
class GraphMeta:
    """Facts about where a graph came from that export needs to reproduce its interface."""

    opset: int = 17
    ir_version: int = 8
    output_names: tuple[str, ...] = ()
    # Initializers that the original model also declared as (overridable) graph inputs.
    initializer_inputs: tuple[str, ...] = ()
    # Other opset imports (custom domains) of the original model.
    extra_opsets: tuple[tuple[str, int], ...] = ()
    producer: str = "taso"
    graph_name: str = "taso"
    extra: Mapping[str, Any] = field(default_factory=dict)
    # The measurement size of each size symbol of the inputs, (name, size) sorted; empty for a static graph.
    sizes: tuple[tuple[str, int], ...] = ()
    # The original's name for each symbolic dim of each output (None where it named none), kept at export.
    output_dim_params: tuple[tuple[str | None, ...] | None, ...] = ()
    # Where each size symbol no input carries comes from: (symbol, value, axis), the value an opaque node's output.
    symbol_sources: tuple[tuple[str, str, int], ...] = ()
    # The largest size of each size symbol at which the file runs, where the file implies one: (symbol, size, why).
    size_bounds: tuple[tuple[str, int, str], ...] = ()
    # The newest opset the graph's target lets the export raise the file's to, for an op that is one ONNX node only from
    # a later opset than the file's (ONNX's Attention, 23); None: the file's own opset (taso.pipeline.targets).
    opset_limit: int | None = None

    def writes_natively(self, native_opset: int | None) -> bool:
        """Whether an op that is one ONNX node from ``native_opset`` on is written as that node (else decomposed)."""
        return native_opset is not None and max(self.opset, self.opset_limit or 0) >= native_opset


class Graph:
    """An immutable dataflow graph with static shapes.

    Args:
        inputs: graph inputs in order, name -> type.
        weights: constant tensors (ONNX initializers), name -> array. Arrays are shared
            between graph versions and must never be written to.
        nodes: the operator applications, in any order (the topological order is derived).
        outputs: names of the values the graph returns, in order.
        types: the type of every value. Computed from the nodes' shape rules when omitted.
        meta: import provenance used by the exporter.

    Raises:
        GraphError: a value is defined twice, used without a definition, or the nodes form
            a cycle.
    """

    def __init__(
        self,
        inputs: Mapping[str, TensorType],
        weights: Mapping[str, np.ndarray],
        nodes: Iterable[Node],
        outputs: Sequence[str],
        types: Mapping[str, TensorType] | None = None,
        meta: GraphMeta | None = None,
    ):
        self._inputs = dict(inputs)
        self._weights = dict(weights)
        self._nodes = tuple(nodes)
        self._outputs = tuple(outputs)
        self.meta = meta or GraphMeta(output_names=self._outputs)
        if types is None:
            types = _infer_types(self._inputs, self._weights, self.topological_order())
        self._types = dict(types)

    # ---- read-only views -------------------------------------------------------------
    @property
    def inputs(self) -> Mapping[str, TensorType]:
        return MappingProxyType(self._inputs)

    @property
    def weights(self) -> Mapping[str, np.ndarray]:
        return MappingProxyType(self._weights)

    @property
    def nodes(self) -> tuple[Node, ...]:
        """The nodes in topological order."""
        return self.topological_order()

    @property
    def outputs(self) -> tuple[str, ...]:
        return self._outputs

    @property
    def types(self) -> Mapping[str, TensorType]:
        return MappingProxyType(self._types)

    def type(self, value: str) -> TensorType:
        try:
            return self._types[value]
        except KeyError:
            raise GraphError(f"value {value!r} is not defined in the graph") from None

    def __len__(self) -> int:
        return len(self._nodes)

    def __repr__(self) -> str:
        return f"<Graph {len(self._inputs)} inputs, {len(self._weights)} weights, {len(self._nodes)} nodes, outputs {list(self._outputs)}>"

    # ---- derived structure (cached: the graph is immutable) ---------------------------
    @cached_property
    def _producers(self) -> dict[str, tuple[Node, int]]:
        producers: dict[str, tuple[Node, int]] = {}
        for node in self._nodes:
            for i, out in enumerate(node.outputs):
                if out in producers or out in self._inputs or out in self._weights:
                    raise GraphError(f"value {out!r} is defined twice (second time by {node.op.name} node {node.name!r})")
                producers[out] = (node, i)
        return producers

    @cached_property
    def _uses(self) -> dict[str, list[tuple[Node, int]]]:
        uses: dict[str, list[tuple[Node, int]]] = {}
        for node in self._nodes:
            for i, value in enumerate(node.inputs):
                uses.setdefault(value, []).append((node, i))
        return uses

    @cached_property
    def _positions(self) -> dict[int, int]:
        return {id(n): i for i, n in enumerate(self.topological_order())}

    @cached_property
    def index(self) -> GraphIndex:
        """Lookups for matching and the search (per-op index, ancestor bit sets, search key): :mod:`taso.ir.index`."""
        from .index import GraphIndex

        return GraphIndex(self, self._nodes)

    def constant_values(self) -> frozenset[str]:
        """Values computable from weights alone (weights and weight-only subgraphs), folded at export.

        A value whose shape depends on a size symbol is not one: no initializer holds it at every size.
        """
        if self.__dict__.get("_consts") is None:
            const = set(self._weights)
            for node in self.topological_order():
                if all(v in const for v in node.inputs) and folds_when_constant(node, self._types.__getitem__):
                    const.update(node.outputs)
            self.__dict__["_consts"] = frozenset(const)
        return self.__dict__["_consts"]

    def fresh_name(self, hint: str) -> str:
        """A value name not used in this graph."""
        i = len(self._types)
        while f"{hint}_{i}" in self._types or f"{hint}_{i}" in self._inputs:
            i += 1
        return f"{hint}_{i}"

    def producer(self, value: str) -> Node | None:
        """The node that defines ``value``, or None for inputs and weights."""
        hit = self._producers.get(value)
        return hit[0] if hit else None

    def uses(self, value: str) -> list[tuple[Node, int]]:
        """The (node, input position) pairs that read ``value``."""
        return self._uses.get(value, [])

    def is_defined(self, value: str) -> bool:
        return value in self._inputs or value in self._weights or value in self._producers

    def topological_order(self) -> tuple[Node, ...]:
        """Nodes ordered so that every value is defined before it is used (stable: ties keep insertion order)."""
        if self.__dict__.get("_topo") is None:
            self.__dict__["_topo"] = _toposort(self._nodes, self._producers, self._inputs, self._weights)
        return self.__dict__["_topo"]

    def op_histogram(self) -> Counter:
        return Counter(node.op.name for node in self._nodes)

    @property
    def is_static(self) -> bool:
        """No value's shape depends on a size symbol."""
        return all(t.is_static for t in self._inputs.values())

    def parameter_count(self) -> int:
        """Elements in weights and in constant-producing nodes (e.g. ConstantOfShape weights)."""
        constants = sum(self._types[o].size for n in self._nodes if n.op.arity == (0, 0) for o in n.outputs)
        return sum(int(w.size) for w in self._weights.values()) + constants

    # ---- copy with change ---------------------------------------------------------------
    def replace(
        self,
        remove: Iterable[Node] = (),
        add: Iterable[Node] = (),
        new_weights: Mapping[str, np.ndarray] | None = None,
        outputs: Sequence[str] | None = None,
        new_types: Mapping[str, TensorType] | None = None,
    ) -> Graph:
        """Returns a new graph with some nodes removed and others added.

        A replacement that reuses a removed node's output names keeps every consumer of
        those values wired, so a rewrite never has to rebuild the nodes around it. Types
        of values produced by added nodes are taken from ``new_types`` or inferred from the
        op's shape rule. Dangling types of removed values are dropped.

        Raises:
            GraphError: a node to remove is not in the graph, or the result is malformed.
            ShapeError: an added node does not type-check.
        """
        removed = {id(n) for n in remove}
        order = self.topological_order()
        kept: list[Node] = []
        for node in order:
            if id(node) not in removed:
                kept.append(node)
        if len(kept) != len(order) - len(removed):
            raise GraphError("replace(): asked to remove a node that is not in the graph")
        added = _toposort_local(list(add))
        weights = self._weights if not new_weights else {**self._weights, **new_weights}
        types = dict(self._types)
        for node in order:
            if id(node) in removed:
                for out in node.outputs:
                    types.pop(out, None)
        if new_weights:
            types.update({k: TensorType.of(v) for k, v in new_weights.items()})
        for node in added:
            if new_types and all(o in new_types for o in node.outputs):
                out_types = [new_types[o] for o in node.outputs]
            else:
                try:
                    in_types = [types[v] for v in node.inputs]
                except KeyError as e:
                    raise GraphError(f"{node.op.name} node {node.name!r} reads {e.args[0]!r}, which nothing defines") from None
                out_types = node.op.infer(in_types, node.params)
            types.update(zip(node.outputs, out_types))
        # NOTE: the added nodes go right after the last kept node producing one of their
        # inputs; when every kept consumer of their outputs comes later, that order is valid
        # by construction (no O(n) sort). Otherwise the order is recomputed, which also
        # detects a cycle the rewrite would create.
        valid_at = self.insertion_point(removed, added)
        if valid_at is not None:
            cut = sum(1 for n in order[: valid_at + 1] if id(n) not in removed)
            candidate = kept[:cut] + added + kept[cut:]
        else:
            candidate = kept + added
        graph = Graph(self._inputs, weights, candidate, self._outputs if outputs is None else outputs, types=types, meta=self.meta)
        if valid_at is not None:
            graph.__dict__["_topo"] = tuple(candidate)
        else:
            graph.topological_order()  # raises when the replacement closes a cycle
        return graph

    def insertion_point(self, removed: set[int], added: Sequence[Node]) -> int | None:
        """Where added nodes can go in this graph's order so that it stays topological.

        Returns the position after which they fit (after the last kept node producing one
        of their inputs, when every kept consumer of their outputs comes later), or None
        when no such single place exists and the order must be recomputed (which also finds
        a cycle the replacement would close; ``graph.index.closes_cycle`` tells beforehand).
        """
        created = {o for n in added for o in n.outputs}
        position = self._positions
        last_input = max((position[id(p[0])] for n in added for v in n.inputs if v not in created
                          for p in (self._producers.get(v),) if p is not None and id(p[0]) not in removed), default=-1)
        first_use = min((position[id(user)] for o in created for user, _ in self.uses(o) if id(user) not in removed), default=len(position))
        return last_input if last_input < first_use else None

    def with_outputs(self, outputs: Sequence[str]) -> Graph:
        """Returns the same graph returning other values (for example an intermediate)."""
        meta = GraphMeta(**{**self.meta.__dict__, "output_names": tuple(outputs)})
        return Graph(self._inputs, self._weights, self._nodes, outputs, self._types, meta)

    def pruned(self) -> Graph:
        """Returns the graph without nodes and weights that no output depends on."""
        live: set[str] = set(self._outputs)
        keep: list[Node] = []
        for node in reversed(self.topological_order()):
            if any(o in live for o in node.outputs):
                keep.append(node)
                live.update(node.inputs)
        weights = {k: v for k, v in self._weights.items() if k in live}
        if len(keep) == len(self._nodes) and len(weights) == len(self._weights):
            return self
        types = {k: t for k, t in self._types.items() if k in live or k in self._inputs}
        for node in keep:
            types.update({o: self._types[o] for o in node.outputs})
        return Graph(self._inputs, weights, reversed(keep), self._outputs, types, self.meta)

    # ---- hashing -------------------------------------------------------------------------
    def structural_hash(self) -> str:
        """A digest of the computation, independent of node order and intermediate names.

        Two graphs hash equal when they apply the same operators with the same parameters
        to the same graph inputs and weights (by name) and return them in the same order.
        Stable across processes (blake2b, not Python's salted ``hash``).
        """
        if self.__dict__.get("_shash") is None:
            digests = value_digests(self)
            h = hashlib.blake2b(digest_size=16)
            for out in self._outputs:
                h.update(digests[out])
            self.__dict__["_shash"] = h.hexdigest()
        return self.__dict__["_shash"]

    # ---- execution -----------------------------------------------------------------------
    def run(self, inputs: Mapping[str, np.ndarray], device=None) -> dict[str, np.ndarray]:
        """Runs the graph on the reference executor (NumPy, or ``device=cupy``); returns host outputs by export name."""
        from .execute import run

        return run(self, inputs, device)


def folds_when_constant(node: Node, type_of) -> bool:
    """Whether export evaluates ``node`` into an initializer once its inputs are constant: not a verbatim
    ONNX node, not sizes computed at run time, and no output whose shape depends on a size symbol."""
    return node.op.name not in ("opaque", "dims") and all(type_of(o).is_static for o in node.outputs)


def _toposort_local(nodes: list[Node]) -> list[Node]:
    """Orders nodes among themselves (values they do not define count as available)."""
    if len(nodes) < 2:
        return nodes
    produced = {o: i for i, n in enumerate(nodes) for o in n.outputs}
    order, state = [], [0] * len(nodes)

    def visit(i: int) -> None:
        if state[i] == 2:
            return
        if state[i] == 1:
            raise GraphError(f"the added nodes form a cycle through {nodes[i].op.name}")
        state[i] = 1
        for v in nodes[i].inputs:
            if v in produced:
                visit(produced[v])
        state[i] = 2
        order.append(nodes[i])

    for i in range(len(nodes)):
        visit(i)
    return order


def value_digests(graph: Graph) -> dict[str, bytes]:
    """The structural digest of every value (see :meth:`Graph.structural_hash`)."""
    digests: dict[str, bytes] = {}
    for name in graph.inputs:
        digests[name] = hashlib.blake2b(b"in\0" + name.encode(), digest_size=16).digest()
    for name in graph.weights:
        digests[name] = hashlib.blake2b(b"w\0" + name.encode(), digest_size=16).digest()
    for node in graph.topological_order():
        h = hashlib.blake2b(digest_size=16)
        h.update(node.op.name.encode() + b"\0" + node.params.identity().encode())
        for v in node.inputs:
            h.update(digests[v])
        node_digest = h.digest()
        for i, out in enumerate(node.outputs):
            digests[out] = hashlib.blake2b(node_digest + i.to_bytes(2, "little"), digest_size=16).digest()
    return digests


def _toposort(nodes, producers, inputs, weights) -> tuple[Node, ...]:
    index = {id(n): i for i, n in enumerate(nodes)}
    missing_before: dict[int, int] = {}
    users: dict[int, list[Node]] = {}
    ready: list[int] = []
    for node in nodes:
        deps = set()
        for v in node.inputs:
            if v in inputs or v in weights:
                continue
            hit = producers.get(v)
            if hit is None:
                raise GraphError(f"{node.op.name} node {node.name!r} reads {v!r}, which nothing defines")
            deps.add(id(hit[0]))
        missing_before[id(node)] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(node)
        if not deps:
            ready.append(index[id(node)])
    import heapq

    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        node = nodes[heapq.heappop(ready)]
        order.append(node)
        for user in users.get(id(node), ()):
            missing_before[id(user)] -= 1
            if missing_before[id(user)] == 0:
                heapq.heappush(ready, index[id(user)])
    if len(order) != len(nodes):
        stuck = [n for n in nodes if missing_before[id(n)] > 0]
        raise GraphError(f"the graph has a cycle through {len(stuck)} nodes, e.g. {stuck[0].op.name} node {stuck[0].name!r}")
    return tuple(order)


def _infer_types(inputs, weights, order: Iterable[Node]) -> dict[str, TensorType]:
    types: dict[str, TensorType] = dict(inputs)
    types.update({k: TensorType.of(v) for k, v in weights.items()})
    for node in order:
        out_types = node.op.infer([types[v] for v in node.inputs], node.params)
        types.update(zip(node.outputs, out_types))
    return types


def check(graph: Graph) -> None:
    """Verifies a graph's invariants; raises on the first violation.

    Checks: every value is defined once; every node input is defined; the graph is
    acyclic; every node's parameters fit its op; every recorded type equals what the op's
    shape rule infers; every output is defined.

    Raises:
        GraphError: on a structural problem.
        ShapeError: when a recorded type disagrees with the shape rule.
    """
    graph.topological_order()  # raises on undefined inputs, double definitions and cycles
    for name, array in graph.weights.items():
        if graph.types.get(name) != TensorType.of(array):
            raise ShapeError(f"weight {name!r} has type {TensorType.of(array)} but the graph records {graph.types.get(name)}")
    for node in graph.topological_order():
        node.op.check_params(node.params)
        inferred = node.op.infer([graph.type(v) for v in node.inputs], node.params)
        recorded = [graph.type(o) for o in node.outputs]
        if list(inferred) != recorded:
            raise ShapeError(f"{node.op.name} node {node.name!r}: outputs recorded as {[str(t) for t in recorded]}, shape rule gives {[str(t) for t in inferred]}")
    for out in graph.outputs:
        if not graph.is_defined(out):
            raise GraphError(f"graph output {out!r} is not defined")
