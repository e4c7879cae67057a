"""The :class:`Op` object: everything about one operator, declared in one place.

An operator carries its parameter schema, its shape rule, its NumPy semantics (the ground
truth every other interpreter is checked against), its ONNX mapping and, where PyTorch has the
kernel a deployment runs (cuDNN, cuBLAS, a fused elementwise kernel), its PyTorch implementation. Missing pieces
fail when the op is defined, not when it is first used. Z3 specifications live in
:mod:`taso.specs`, keyed by the op's canonical name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ShapeError
from ..ir import Params, TensorType
from ..ir.dims import Dim, holds_dims, other_sizes, rebind_value, value_symbols
from .onnx_versions import VERSIONS

__all__ = ["Param", "Op", "OnnxMapping", "REQUIRED", "define", "registry", "onnx_importers", "define_contrib_importer", "contrib_importers", "ORT_DOMAIN", "FINGERPRINT_PRIME", "modular_inverse", "as_dims"]

REQUIRED = object()

_KINDS: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "optfloat": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": lambda v: isinstance(v, bool) or v in (0, 1),
    "str": lambda v: isinstance(v, str),
    "bytes": lambda v: isinstance(v, bytes),
    "ints": lambda v: isinstance(v, tuple) and all(isinstance(x, int) for x in v),
    "optints": lambda v: isinstance(v, tuple) and all(x is None or isinstance(x, int) for x in v),
    "any": lambda v: True,
}


@dataclass(frozen=True)
class Param:
    """One operator parameter: a name, a kind (see ``_KINDS``), a default and allowed values."""

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple = ()

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise TypeError(f"parameter {self.name!r}: unknown kind {self.kind!r}")


ShapeRule = Callable[[Sequence[TensorType], Params], "TensorType | list[TensorType]"]
NumpyImpl = Callable[[Sequence[np.ndarray], Params], "np.ndarray | list[np.ndarray]"]
# ``impl(rt, tensors, params)``: ``rt`` is the runtime (:class:`taso.measure.torch_runtime.TorchRuntime`: ``rt.torch``,
# ``rt.F``, constants cached on the device); raises NotImplementedError for a case it does not cover (run on the host).
TorchImpl = Callable[[Any, Sequence[Any], Params], Any]


@dataclass(frozen=True)
class OnnxMapping:
    """How an op crosses the ONNX boundary.

    Attributes:
        op_types: the ONNX operator types whose nodes ``importer`` may turn into this op.
        importer: ``importer(ctx) -> bool`` reads ``ctx.node`` and emits IR nodes through
            ``ctx``; returning False leaves the ONNX node opaque (kept verbatim).
        exporter: ``exporter(ctx, node)`` emits ONNX nodes for one IR node.
        native_opset: the opset from which the op is one ONNX node that the exporter writes below it as a decomposition
            (ONNX's Attention at 23), so a graph whose target allows it is written at that opset (None: every opset).
    """

    op_types: tuple[str, ...]
    importer: Callable[[Any], bool] | None
    exporter: Callable[[Any, Any], None]
    native_opset: int | None = None


@dataclass(frozen=True, eq=False)
class Op:
    """An operator. Compared by identity; its ``name`` is its canonical name everywhere.

    Attributes:
        name: canonical name, used in the registry, in rule files and in reports.
        arity: (minimum, maximum) number of inputs; maximum None means variadic.
        params: the parameter schema.
        shape_rule: pure function of input types and params to output type(s).
        numpy_impl: the reference semantics, on NumPy arrays.
        onnx: the ONNX import/export mapping.
        groups: names of the operator sets this op belongs to (see :mod:`taso.ops`).
        doc: one line for people.
        torch_impl: the PyTorch implementation (:data:`TorchImpl`), None where the runtime evaluates on the host
            (operators without inputs are constants, evaluated once).
    """

    name: str
    arity: tuple[int, int | None]
    params: tuple[Param, ...]
    shape_rule: ShapeRule
    numpy_impl: NumpyImpl
    onnx: OnnxMapping
    groups: frozenset[str] = field(default_factory=frozenset)
    doc: str = ""
    exact_impl: NumpyImpl | None = None
    torch_impl: TorchImpl | None = None

    def __repr__(self) -> str:
        return f"<Op {self.name}>"

    # ---- parameters -------------------------------------------------------------------
    def make_params(self, **given: Any) -> Params:
        """Builds validated parameters, filling defaults.

        Raises:
            ShapeError: unknown, missing or ill-typed parameters.
        """
        known = {p.name for p in self.params}
        unknown = set(given) - known
        if unknown:
            raise ShapeError(f"{self.name}: unknown parameter(s) {sorted(unknown)}; expected {sorted(known)}")
        values = {}
        for p in self.params:
            if p.name in given:
                values[p.name] = given[p.name]
            elif p.default is REQUIRED:
                raise ShapeError(f"{self.name}: missing parameter {p.name!r}")
            else:
                values[p.name] = p.default
        params = Params(values)
        self.check_params(params)
        return params

    def check_params(self, params: Params) -> None:
        """Raises ShapeError unless ``params`` fits the schema exactly."""
        if set(params) != {p.name for p in self.params}:
            raise ShapeError(f"{self.name}: parameters {sorted(params)} do not match schema {[p.name for p in self.params]}")
        for p in self.params:
            v = params[p.name]
            if not _KINDS[p.kind](v):
                raise ShapeError(f"{self.name}: parameter {p.name}={v!r} is not of kind {p.kind}")
            if p.choices and v not in p.choices:
                raise ShapeError(f"{self.name}: parameter {p.name}={v!r} not in {p.choices}")

    # ---- rules ---------------------------------------------------------------------------
    def infer(self, types: Sequence[TensorType], params: Params) -> list[TensorType]:
        """Output types for these input types, or ShapeError naming the op and shapes."""
        lo, hi = self.arity
        if len(types) < lo or (hi is not None and len(types) > hi):
            want = f"{lo}" if lo == hi else f"{lo}..{hi if hi is not None else ''}"
            raise ShapeError(f"{self.name}: takes {want} inputs, got {len(types)}")
        outs = self._apply_shape_rule(types, params)
        if not all(t.is_static for t in types) or any(holds_dims(v) for v in params.values()):
            _check_follows_symbols(self, tuple(types), params, tuple(outs))
        return outs

    def _apply_shape_rule(self, types: Sequence[TensorType], params: Params) -> list[TensorType]:
        try:
            out = self.shape_rule(types, params)
        except ShapeError:
            raise
        except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError) as e:
            raise ShapeError(f"{self.name}{tuple(str(t) for t in types)} with {dict(params)}: {e}") from None
        return [out] if isinstance(out, TensorType) else list(out)

    def evaluate(self, arrays: Sequence[np.ndarray], params: Params) -> list[np.ndarray]:
        """Runs the reference semantics; always returns a list of arrays.

        The semantics are written against NumPy's API; device arrays (CuPy) flow through
        the same code by NumPy's dispatch protocols and stay on the device.
        """
        with np.errstate(all="ignore"):
            out = self.numpy_impl(arrays, params)
        return [as_array(o) for o in out] if isinstance(out, (list, tuple)) else [as_array(out)]


    def evaluate_exact(self, arrays: Sequence[np.ndarray], params: Params) -> list[np.ndarray]:
        """Runs the exact semantics over integers modulo ``FINGERPRINT_PRIME`` (for fingerprints).

        Linear and polynomial ops compute exactly what their NumPy semantics computes, reduced
        mod p; non-polynomial ones (relu, sigmoid, tanh, pooling) substitute fixed
        polynomials, as TASO's generator did, so equal fingerprints are never rounding accidents.

        Raises:
            ShapeError: the op has no exact semantics.
        """
        if self.exact_impl is None:
            raise ShapeError(f"{self.name} has no exact (modular) semantics; the generator cannot enumerate it")
        out = self.exact_impl(arrays, params)
        outs = [np.asarray(o) for o in out] if isinstance(out, (list, tuple)) else [np.asarray(out)]
        return [np.mod(o, FINGERPRINT_PRIME).astype(np.int64) for o in outs]


@functools.lru_cache(maxsize=1 << 16)
def _check_follows_symbols(op: Op, types: tuple[TensorType, ...], params: Params, outs: tuple[TensorType, ...]) -> None:
    """Re-runs the shape rule at other sizes of the symbols: the dims it returned must give the sizes it computes there.

    A rule that turned a symbolic dim into a plain int (``int(d)``, ``np.prod``, ``slice.indices``)
    would type the node for the measurement sizes only; this catches it, and the node is refused
    (left opaque at import, the rewrite declined in a search) instead of written wrong. Cached:
    a search asks about the same node types again and again.
    """
    symbols = frozenset().union(*(t.symbols for t in types), *(value_symbols(v) for v in params.values()))
    sizes = other_sizes(symbols)
    moved_types = [TensorType(rebind_value(t.shape, sizes), t.dtype) for t in types]
    moved_params = Params({k: rebind_value(v, sizes) for k, v in params.items()}) if any(holds_dims(v) for v in params.values()) else params
    try:
        moved = op._apply_shape_rule(moved_types, moved_params)
    except ShapeError as e:
        raise ShapeError(f"{op.name}: its shape depends on the sizes of {sorted(symbols)} in a way taso does not track ({e})") from None
    expected = [t.at(sizes) for t in outs]
    if [t.concrete() for t in moved] != expected:
        raise ShapeError(f"{op.name}: its output shape {[str(t) for t in outs]} does not follow the sizes of {sorted(symbols)}")


def is_device_array(value) -> bool:
    """True for arrays living on a GPU (CuPy), which NumPy must not copy to the host."""
    return hasattr(value, "__cuda_array_interface__")


def contiguous(array):
    """A C-ordered array on the array's own device: ``np.ascontiguousarray`` would copy a device array to the host
    (CuPy refuses that implicit conversion)."""
    return array_module(array).ascontiguousarray(array)


def as_array(value):
    """An array from an op's result: device arrays as they are, a value that is not a tensor (an opaque node's sequence,
    map or empty optional) as it is, anything else through np.asarray."""
    return value if is_device_array(value) or isinstance(value, (list, dict)) or value is None else np.asarray(value)


def array_module(*arrays):
    """The module that made the arrays: cupy for device arrays, numpy otherwise."""
    if any(is_device_array(a) for a in arrays):
        import cupy

        return cupy
    return np


# The prime of the exact fingerprint arithmetic: below 2**26, so a product of two residues
# fits in 52 bits and int64 accumulation over 2**11 terms cannot overflow.
FINGERPRINT_PRIME = 67_108_859


def polynomial_exact(numpy_impl: NumpyImpl) -> NumpyImpl:
    """The exact semantics of an op whose NumPy semantics is a polynomial with integer coefficients."""

    def exact(arrays, params):
        return numpy_impl([np.asarray(a, dtype=np.int64) for a in arrays], params)

    return exact


def modular_inverse(n: int) -> int:
    return pow(int(n), FINGERPRINT_PRIME - 2, FINGERPRINT_PRIME)


_REGISTRY: dict[str, Op] = {}
_ONNX_IMPORTERS: dict[str, list[tuple[Op | None, Callable]]] = {}


def define(
    name: str,
    *,
    arity: int | tuple[int, int | None],
    shape: ShapeRule,
    numpy: NumpyImpl,
    onnx: OnnxMapping,
    params: Sequence[Param] = (),
    groups: Sequence[str] = (),
    doc: str = "",
    exact: NumpyImpl | str | None = None,
    torch: TorchImpl | None = None,
) -> Op:
    """Declares an operator and adds it to the registry.

    Shape rule, NumPy semantics and ONNX exporter are mandatory. ``exact`` is the modular
    semantics used by the generator's fingerprints: a function, ``"polynomial"`` when the
    NumPy semantics already is an integer polynomial, or None for ops the generator skips.
    ``torch`` is the PyTorch implementation the GPU runtime runs, tested equal to ONNX Runtime.
    """
    if name in _REGISTRY:
        raise ValueError(f"operator {name!r} is defined twice")
    for what, rule in (("shape rule", shape), ("NumPy implementation", numpy), ("ONNX exporter", onnx.exporter)):
        if not callable(rule):
            raise TypeError(f"operator {name!r} lacks a {what}")
    if isinstance(arity, int):
        arity = (arity, arity)
    if exact == "polynomial":
        exact = polynomial_exact(numpy)
    op = Op(name, arity, tuple(params), shape, numpy, onnx, frozenset(groups), doc, exact, torch)
    if onnx.importer is not None:
        _require_versions(name, onnx.op_types)
    _REGISTRY[name] = op
    if onnx.importer is not None:
        for op_type in onnx.op_types:
            _ONNX_IMPORTERS.setdefault(op_type, []).append((op, onnx.importer))
    return op


def define_importer(op_types: Sequence[str], importer: Callable) -> None:
    """Registers an importer that produces existing ops (e.g. Gemm as matmul + add)."""
    _require_versions(getattr(importer, "__name__", "importer"), op_types)
    for op_type in op_types:
        _ONNX_IMPORTERS.setdefault(op_type, []).append((None, importer))


# (domain, op type) -> importers of another domain's operators (ONNX Runtime's com.microsoft): version 1 is the only one.
_CONTRIB_IMPORTERS: dict[tuple[str, str], list[Callable]] = {}
ORT_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib operators


def define_contrib_importer(domain: str, op_type: str, importer: Callable) -> None:
    """Registers an importer of an operator of another domain than ONNX's, into taso's ops (a contrib kernel taso
    specifies, so that a file holding it can be rewritten out of it)."""
    _CONTRIB_IMPORTERS.setdefault((domain, op_type), []).append(importer)


def contrib_importers() -> dict[tuple[str, str], list[Callable]]:
    return {k: list(v) for k, v in _CONTRIB_IMPORTERS.items()}


def _require_versions(what: str, op_types: Sequence[str]) -> None:
    """An importer reads the versions of its ONNX operators that :mod:`taso.ops.onnx_versions` lists, and no
    operator may lack that entry: which versions an importer understands is decided when it is defined."""
    missing = [t for t in op_types if t not in VERSIONS]
    if missing:
        raise TypeError(f"{what}: ONNX operator(s) {missing} have no entry in taso.ops.onnx_versions.VERSIONS")


def registry() -> dict[str, Op]:
    return dict(_REGISTRY)


def onnx_importers() -> dict[str, list[tuple[Op | None, Callable]]]:
    return {k: list(v) for k, v in _ONNX_IMPORTERS.items()}


# ---- shared helpers for the op families ---------------------------------------------------

ACTIVATIONS = ("none", "relu", "sigmoid", "tanh")


def same_type(types: Sequence[TensorType], params: Params) -> TensorType:
    """Shape rule of ops whose output has the type of their first input."""
    return types[0]


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def as_dims(values) -> tuple[int, ...]:
    """Sizes as a tuple of Python ints, symbolic dims kept (``int()`` would keep only the measured value)."""
    return tuple(v if isinstance(v, Dim) else int(v) for v in values)


def require(condition: bool, message: str) -> None:
    """Shape-rule assertion: raises ShapeError with ``message`` when ``condition`` fails."""
    if not condition:
        raise ShapeError(message)
