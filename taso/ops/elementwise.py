"""Element-wise operators: activations, unary math, broadcasting binary arithmetic, casts."""

from __future__ import annotations

import math

import numpy as np

from ..ir import Params, TensorType
from ..ir.dims import broadcast_dims
from .base import (ACTIVATIONS, FINGERPRINT_PRIME, ORT_DOMAIN, OnnxMapping, Param, array_module, as_array, define, define_contrib_importer,
                   define_importer, require, same_type)

# ---- unary operators: one table row each -----------------------------------------------------

_host_erf = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x):
    if array_module(x) is np:
        return _host_erf(x)
    import cupyx.scipy.special

    return cupyx.scipy.special.erf(x.astype("float64"))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype, copy=False)


def _cast_like(fn):
    return lambda x: as_array(fn(x)).astype(x.dtype, copy=False)


# name -> (NumPy semantics, ONNX op type, groups)
_UNARY = {
    "relu": (lambda x: np.maximum(x, x.dtype.type(0)), "Relu", ("activation", "elementwise", "unary")),
    "sigmoid": (_sigmoid, "Sigmoid", ("activation", "elementwise", "unary")),
    "tanh": (np.tanh, "Tanh", ("activation", "elementwise", "unary")),
    "erf": (_cast_like(_erf), "Erf", ("elementwise", "unary")),
    "sqrt": (np.sqrt, "Sqrt", ("elementwise", "unary")),
    "exp": (np.exp, "Exp", ("elementwise", "unary")),
    "log": (np.log, "Log", ("elementwise", "unary")),
    "neg": (np.negative, "Neg", ("elementwise", "unary")),
    "abs": (np.abs, "Abs", ("elementwise", "unary")),
    "reciprocal": (_cast_like(np.reciprocal), "Reciprocal", ("elementwise", "unary")),
    "floor": (np.floor, "Floor", ("elementwise", "unary")),
    "ceil": (np.ceil, "Ceil", ("elementwise", "unary")),
}


def _float_only(name: str):
    """A rounding kernel: torch's ``name`` on floats, the identity on integers (as NumPy's floor and ceil are)."""
    return lambda rt, x: getattr(rt.torch, name)(x) if x.is_floating_point() else x


# name -> the PyTorch kernel of the same semantics (the result is cast to the declared type by the runtime)
_UNARY_TORCH = {
    "relu": lambda rt, x: rt.torch.relu(x),
    "sigmoid": lambda rt, x: rt.torch.sigmoid(x),
    "tanh": lambda rt, x: rt.torch.tanh(x),
    "erf": lambda rt, x: rt.torch.erf(x),
    "sqrt": lambda rt, x: rt.torch.sqrt(x),
    "exp": lambda rt, x: rt.torch.exp(x),
    "log": lambda rt, x: rt.torch.log(x),
    "neg": lambda rt, x: rt.torch.neg(x),
    "abs": lambda rt, x: rt.torch.abs(x),
    "reciprocal": lambda rt, x: rt.torch.reciprocal(x),
    "floor": _float_only("floor"),
    "ceil": _float_only("ceil"),
}


def _unary_importer(name: str):
    def importer(ctx) -> bool:
        if ctx.attr_names:
            return False
        ctx.emit(UNARY_OPS[name], [ctx.inputs[0]], ctx.outputs)
        return True

    return importer


def _exporter_as(onnx_type):
    def exporter(ctx, node) -> None:
        ctx.emit(onnx_type, list(node.inputs), list(node.outputs))

    return exporter


def _mod_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (np.asarray(a, np.int64) % FINGERPRINT_PRIME) * (np.asarray(b, np.int64) % FINGERPRINT_PRIME) % FINGERPRINT_PRIME


# Fixed polynomial stand-ins for the activations in the exact (fingerprint) semantics, as in
# TASO: distinct per activation, so relu(x) never fingerprints like sigmoid(x) or x.
_EXACT_ACTIVATION = {
    "relu": lambda x: (_mod_mul(x, x) + 3 * x) % FINGERPRINT_PRIME,
    "sigmoid": lambda x: (_mod_mul(_mod_mul(x, x), x) + 2) % FINGERPRINT_PRIME,
    "tanh": lambda x: (_mod_mul(_mod_mul(x, x), x) + 5 * x) % FINGERPRINT_PRIME,
    "neg": lambda x: -x,
}


def apply_activation_exact(activation: str, x: np.ndarray) -> np.ndarray:
    """The fused activation's exact stand-in (see ``_EXACT_ACTIVATION``)."""
    return x if activation == "none" else _EXACT_ACTIVATION[activation](np.asarray(x, np.int64))


def exact_with_activation(numpy_impl):
    """Exact semantics of a linear op with a fused activation: the linear part, then the stand-in."""

    def exact(arrays, params):
        linear = numpy_impl([np.asarray(a, np.int64) for a in arrays], params.replace(activation="none"))
        return apply_activation_exact(params["activation"], np.asarray(linear) % FINGERPRINT_PRIME)

    return exact


UNARY_OPS = {}
for _name, (_fn, _onnx_type, _groups) in _UNARY.items():
    UNARY_OPS[_name] = define(
        _name,
        arity=1,
        shape=same_type,
        numpy=(lambda fn: lambda xs, p: fn(xs[0]))(_fn),
        onnx=OnnxMapping((_onnx_type,), _unary_importer(_name), _exporter_as(_onnx_type)),
        groups=_groups,
        doc=f"element-wise {_name}",
        exact=(lambda f: (lambda xs, p: f(np.asarray(xs[0], np.int64))))(_EXACT_ACTIVATION[_name]) if _name in _EXACT_ACTIVATION else None,
        torch=(lambda kernel: lambda rt, xs, p: kernel(rt, xs[0]))(_UNARY_TORCH[_name]),
    )


def apply_activation(activation: str, x: np.ndarray) -> np.ndarray:
    """Applies a fused activation (one of ``ACTIVATIONS``) with the unary op's semantics."""
    if activation == "none":
        return x
    return UNARY_OPS[activation].evaluate([x], Params())[0]


def torch_activation(rt, activation: str, y):
    """A fused activation on a PyTorch tensor, with the unary op's kernel."""
    return y if activation == "none" else _UNARY_TORCH[activation](rt, y)


def emit_with_activation(ctx, onnx_type: str, inputs, node, **attrs) -> None:
    """Exports a node with a fused activation as the main ONNX node plus a separate activation node.

    The original TASO exporter dropped fused activations; here they always become nodes.
    """
    activation = node.params["activation"]
    if activation == "none":
        ctx.emit(onnx_type, inputs, list(node.outputs), **attrs)
        return
    tmp = ctx.fresh(node.outputs[0] + "_pre_" + activation)
    ctx.emit(onnx_type, inputs, [tmp], **attrs)
    ctx.emit(_UNARY[activation][1], [tmp], list(node.outputs))


ACTIVATION_PARAM = Param("activation", "str", "none", ACTIVATIONS)

# ---- parametrised unary operators --------------------------------------------------------------


def _leaky_relu(xs, p):
    x = xs[0]
    return np.where(x >= 0, x, x * x.dtype.type(p["alpha"])).astype(x.dtype, copy=False)


def _import_leaky_relu(ctx) -> bool:
    ctx.emit(leaky_relu, [ctx.inputs[0]], ctx.outputs, alpha=float(ctx.attr("alpha", 0.01)))
    return True


leaky_relu = define(
    "leaky_relu",
    arity=1,
    params=[Param("alpha", "float", 0.01)],
    shape=same_type,
    numpy=_leaky_relu,
    torch=lambda rt, xs, p: rt.F.leaky_relu(xs[0], p["alpha"]) if xs[0].is_floating_point() else rt.torch.where(xs[0] >= 0, xs[0], xs[0] * p["alpha"]),
    onnx=OnnxMapping(("LeakyRelu",), _import_leaky_relu, lambda ctx, n: ctx.emit("LeakyRelu", list(n.inputs), list(n.outputs), alpha=n.params["alpha"])),
    groups=("elementwise", "unary"),
    doc="x if x >= 0 else alpha * x",
)


def _hard_sigmoid(xs, p):
    x = xs[0]
    return np.clip(x * x.dtype.type(p["alpha"]) + x.dtype.type(p["beta"]), 0, 1).astype(x.dtype, copy=False)


hard_sigmoid = define(
    "hard_sigmoid",
    arity=1,
    params=[Param("alpha", "float", 0.2), Param("beta", "float", 0.5)],
    shape=same_type,
    numpy=_hard_sigmoid,
    torch=lambda rt, xs, p: rt.torch.clamp(xs[0] * p["alpha"] + p["beta"], 0, 1),
    onnx=OnnxMapping(
        ("HardSigmoid",),
        lambda ctx: bool(ctx.emit(hard_sigmoid, [ctx.inputs[0]], ctx.outputs, alpha=float(ctx.attr("alpha", 0.2)), beta=float(ctx.attr("beta", 0.5)))),
        lambda ctx, n: ctx.emit("HardSigmoid", list(n.inputs), list(n.outputs), alpha=n.params["alpha"], beta=n.params["beta"]),
    ),
    groups=("elementwise", "unary"),
    doc="max(0, min(1, alpha * x + beta))",
)


def _hard_swish(xs, p):
    x = xs[0]
    return (x * _hard_sigmoid([x], Params({"alpha": 1 / 6, "beta": 0.5}))).astype(x.dtype, copy=False)


def _export_hard_swish(ctx, node) -> None:
    if ctx.opset >= 14:
        ctx.emit("HardSwish", list(node.inputs), list(node.outputs))
    else:
        tmp = ctx.fresh(node.outputs[0] + "_hs")
        ctx.emit("HardSigmoid", [node.inputs[0]], [tmp], alpha=1 / 6, beta=0.5)
        ctx.emit("Mul", [node.inputs[0], tmp], list(node.outputs))


hard_swish = define(
    "hard_swish",
    arity=1,
    shape=same_type,
    numpy=_hard_swish,
    torch=lambda rt, xs, p: rt.F.hardswish(xs[0]),
    onnx=OnnxMapping(("HardSwish",), lambda ctx: bool(ctx.emit(hard_swish, [ctx.inputs[0]], ctx.outputs)), _export_hard_swish),
    groups=("elementwise", "unary"),
    doc="x * hard_sigmoid(x; 1/6, 1/2)",
)


def _gelu(xs, p):
    x = xs[0]
    x64 = x.astype(np.float64)
    if p["approximate"] == "tanh":
        y = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    else:
        y = 0.5 * x64 * (1 + _erf(x64 / math.sqrt(2)))
    return y.astype(x.dtype)


def _export_gelu(ctx, node) -> None:
    """ONNX's Gelu from opset 20; below it, the decomposition that defines it (``taso.specs.elementwise``)."""
    if ctx.opset >= 20:
        ctx.emit("Gelu", list(node.inputs), list(node.outputs), approximate=node.params["approximate"])
        return
    x = node.inputs[0]
    dtype = ctx.type(x).dtype

    def apply(op_type: str, *inputs: str, output: str | None = None) -> str:
        out = output or ctx.fresh(f"{node.outputs[0]}_{op_type.lower()}")
        ctx.emit(op_type, list(inputs), [out])
        return out

    def const(value: float) -> str:
        return ctx.const(np.asarray(value, dtype))

    if node.params["approximate"] == "none":  # x * (1 + erf(x / sqrt(2))) * 0.5
        phi = apply("Add", apply("Erf", apply("Div", x, const(math.sqrt(2)))), const(1))
        apply("Mul", apply("Mul", x, phi), const(0.5), output=node.outputs[0])
        return
    # 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))
    cubic = apply("Mul", apply("Pow", x, const(3)), const(0.044715))
    phi = apply("Add", apply("Tanh", apply("Mul", apply("Add", x, cubic), const(math.sqrt(2 / math.pi)))), const(1))
    apply("Mul", apply("Mul", x, const(0.5)), phi, output=node.outputs[0])


gelu = define(
    "gelu",
    arity=1,
    params=[Param("approximate", "str", "none", ("none", "tanh"))],
    shape=same_type,
    numpy=_gelu,
    torch=lambda rt, xs, p: rt.F.gelu(xs[0], approximate=p["approximate"]),
    onnx=OnnxMapping(("Gelu",), lambda ctx: bool(ctx.emit(gelu, [ctx.inputs[0]], ctx.outputs, approximate=ctx.attr("approximate", "none"))), _export_gelu),
    groups=("elementwise", "unary"),
    doc="x * Phi(x), exact (erf) or tanh approximation",
)


def _import_ort_gelu(bias_input: bool, approximate: str):
    """ONNX Runtime's Gelu, FastGelu and BiasGelu (its transformers optimizer writes them) as a GELU of x, plus the bias
    where there is one; ONNX Runtime fuses them back at load where that is how it runs them."""

    def importer(ctx) -> bool:
        if ctx.attr_names or len(ctx.outputs) != 1 or not 1 <= len(ctx.inputs) <= 2 or (bias_input and len(ctx.inputs) != 2):
            return False
        x = ctx.inputs[0]
        if len(ctx.inputs) == 2 and ctx.inputs[1]:
            x = ctx.emit(BINARY_OPS["add"], [x, ctx.inputs[1]])[0]
        if approximate == "tanh":
            ctx.emit(fast_gelu, [x], ctx.outputs)
        else:
            ctx.emit(gelu, [x], ctx.outputs, approximate=approximate)
        return True

    return importer


fast_gelu = define(
    "fast_gelu",
    arity=1,
    shape=same_type,
    numpy=lambda xs, p: _gelu(xs, {"approximate": "tanh"}),
    torch=lambda rt, xs, p: rt.F.gelu(xs[0], approximate="tanh"),
    onnx=OnnxMapping((), None, lambda ctx, node: ctx.emit("FastGelu", list(node.inputs), list(node.outputs), domain=ORT_DOMAIN)),
    groups=("elementwise", "unary", "ort"),
    doc="ONNX Runtime's FastGelu (the tanh GELU), defined as gelu(approximate='tanh')",
)
define_contrib_importer(ORT_DOMAIN, "FastGelu", _import_ort_gelu(False, "tanh"))
define_contrib_importer(ORT_DOMAIN, "Gelu", _import_ort_gelu(False, "none"))
define_contrib_importer(ORT_DOMAIN, "BiasGelu", _import_ort_gelu(True, "none"))


def _clip(xs, p):
    x = xs[0]
    lo = -np.inf if p["min"] is None else p["min"]
    hi = np.inf if p["max"] is None else p["max"]
    if x.dtype.kind != "f":  # integer bounds: infinities become the type's limits
        lo = np.iinfo(x.dtype).min if not np.isfinite(lo) else lo
        hi = np.iinfo(x.dtype).max if not np.isfinite(hi) else hi
    return np.clip(x, x.dtype.type(lo), x.dtype.type(hi)).astype(x.dtype, copy=False)


def _import_clip(ctx) -> bool:
    if ctx.opset < 11:
        lo, hi = ctx.attr("min", None), ctx.attr("max", None)
    else:
        bounds = []
        for i in (1, 2):
            name = ctx.inputs[i] if len(ctx.inputs) > i else ""
            if not name:
                bounds.append(None)
                continue
            value = ctx.const(name)
            if value is None:
                return False
            bounds.append(value.item())
        lo, hi = bounds
    ctx.emit(clip, [ctx.inputs[0]], ctx.outputs, min=lo, max=hi)
    return True


def _export_clip(ctx, node) -> None:
    lo, hi = node.params["min"], node.params["max"]
    if ctx.opset < 11:
        attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        ctx.emit("Clip", [node.inputs[0]], list(node.outputs), **attrs)
        return
    dtype = ctx.type(node.inputs[0]).dtype
    inputs = [node.inputs[0], "" if lo is None else ctx.const(np.asarray(lo, dtype)), "" if hi is None else ctx.const(np.asarray(hi, dtype))]
    while inputs[-1] == "":
        inputs.pop()
    ctx.emit("Clip", inputs, list(node.outputs))


clip = define(
    "clip",
    arity=1,
    params=[Param("min", "optfloat", None), Param("max", "optfloat", None)],
    shape=same_type,
    numpy=_clip,
    torch=lambda rt, xs, p: rt.torch.clamp(xs[0], min=p["min"], max=p["max"]) if p["min"] is not None or p["max"] is not None else xs[0],
    onnx=OnnxMapping(("Clip",), _import_clip, _export_clip),
    groups=("elementwise", "unary"),
    doc="min(max(x, min), max); None means unbounded",
)


def _cast_shape(types, p):
    return TensorType(types[0].shape, p["to"])


def _import_cast(ctx) -> bool:
    to = ctx.dtype_of_onnx(ctx.attr("to"))
    if to is None:
        return False
    if to == ctx.type(ctx.inputs[0]).dtype:
        ctx.alias(ctx.outputs[0], ctx.inputs[0])  # cast to the same type is the identity
    else:
        ctx.emit(cast, [ctx.inputs[0]], ctx.outputs, to=to)
    return True


cast = define(
    "cast",
    arity=1,
    params=[Param("to", "str")],
    shape=_cast_shape,
    numpy=lambda xs, p: xs[0].astype(p["to"]),
    torch=lambda rt, xs, p: xs[0].to(rt.dtype(p["to"])),
    onnx=OnnxMapping(("Cast",), _import_cast, lambda ctx, n: ctx.emit("Cast", list(n.inputs), list(n.outputs), to=ctx.onnx_dtype(n.params["to"]))),
    groups=("elementwise", "unary"),
    doc="element type conversion (a cast to the same type is removed at import)",
)

# ---- broadcasting binary operators --------------------------------------------------------------


def broadcast_shape(types, p) -> TensorType:
    require(all(t.dtype == types[0].dtype for t in types), f"operands have different dtypes {[t.dtype for t in types]}")
    return TensorType(tuple(broadcast_dims(*(t.shape for t in types))), types[0].dtype)


def _int_div(a, b):
    if a.dtype.kind in "iu":
        return np.trunc(np.true_divide(a, np.where(b == 0, 1, b))).astype(a.dtype)
    return np.true_divide(a, b).astype(a.dtype, copy=False)


def _pow(a, b):
    return np.power(a.astype(np.float64) if a.dtype.kind == "f" else a, b).astype(a.dtype)


# name -> (NumPy semantics, ONNX op type, groups)
_BINARY = {
    "add": (np.add, "Add", ("elementwise", "binary", "commutative", "associative", "linear")),
    "sub": (np.subtract, "Sub", ("elementwise", "binary", "linear")),
    "mul": (np.multiply, "Mul", ("elementwise", "binary", "commutative", "associative")),
    "div": (_int_div, "Div", ("elementwise", "binary")),
    "pow": (_pow, "Pow", ("elementwise", "binary")),
    "max": (np.maximum, "Max", ("elementwise", "binary", "commutative", "associative")),
    "min": (np.minimum, "Min", ("elementwise", "binary", "commutative", "associative")),
}


def _int_div_torch(rt, a, b):
    if a.is_floating_point():
        return rt.torch.div(a, b)
    return rt.torch.div(a, rt.torch.where(b == 0, rt.torch.ones_like(b), b), rounding_mode="trunc")


_BINARY_TORCH = {
    "add": lambda rt, a, b: rt.torch.add(a, b),
    "sub": lambda rt, a, b: rt.torch.sub(a, b),
    "mul": lambda rt, a, b: rt.torch.mul(a, b),
    "div": _int_div_torch,
    "pow": lambda rt, a, b: rt.torch.pow(a, b),
    "max": lambda rt, a, b: rt.torch.maximum(a, b),
    "min": lambda rt, a, b: rt.torch.minimum(a, b),
}


def _pow_shape(types, p):
    return TensorType(tuple(broadcast_dims(types[0].shape, types[1].shape)), types[0].dtype)


def _binary_importer(name: str):
    def importer(ctx) -> bool:
        op = BINARY_OPS[name]
        if len(ctx.inputs) != 2 or ctx.attr_names - {"broadcast"} or ctx.attr("broadcast", 1) != 1 and ctx.opset < 7:
            return False
        a, b = ctx.inputs
        if op is mul:
            # Multiplying by a one-element constant is TASO's scalar multiplication.
            for x, s in ((a, b), (b, a)):
                sv, tx, ts = ctx.const(s), ctx.type(x), ctx.type(s)
                if sv is not None and sv.size == 1 and ts.rank <= tx.rank and ts.dtype == tx.dtype:
                    ctx.emit(scalar_mul, [x, s], ctx.outputs)
                    return True
        ctx.emit(op, [a, b], ctx.outputs)
        return True

    return importer


BINARY_OPS = {}
for _name, (_fn, _onnx_type, _groups) in _BINARY.items():
    BINARY_OPS[_name] = define(
        _name,
        arity=2,
        shape=_pow_shape if _name == "pow" else broadcast_shape,
        numpy=(lambda fn: lambda xs, p: as_array(fn(xs[0], xs[1])))(_fn),
        onnx=OnnxMapping((_onnx_type,), _binary_importer(_name), _exporter_as(_onnx_type)),
        groups=_groups,
        doc=f"element-wise {_name} with NumPy broadcasting",
        exact="polynomial" if _name in ("add", "sub", "mul") else None,
        torch=(lambda kernel: lambda rt, xs, p: kernel(rt, xs[0], xs[1]))(_BINARY_TORCH[_name]),
    )

add, sub, mul, div = BINARY_OPS["add"], BINARY_OPS["sub"], BINARY_OPS["mul"], BINARY_OPS["div"]

# The same sum written as ONNX's Sum: ONNX Runtime's load-time fusions match Add by its op type, and on some machines
# the kernel one makes is slower than the Add and the node it reads (SkipLayerNormalization, 4-7x on an AMD EPYC
# core: benchmarks/costs/bench_fused_kernels.py). Only a rewrite writes it, where the measured costs say the fusion
# does not pay; a Sum in a file is read as adds.
sum_ = define(
    "sum",
    arity=2,
    shape=broadcast_shape,
    numpy=lambda xs, p: as_array(np.add(xs[0], xs[1])),
    onnx=OnnxMapping(("Sum",), None, _exporter_as("Sum")),
    groups=("elementwise", "commutative", "linear"),
    doc="x + y with NumPy broadcasting, written as ONNX Sum, which no load-time fusion of ONNX Runtime takes in",
    exact="polynomial",
    torch=lambda rt, xs, p: rt.torch.add(xs[0], xs[1]),
)


def _scalar_mul_shape(types, p):
    require(types[1].size == 1, f"scalar_mul: the scale must hold one element, got shape {types[1].shape}")
    require(types[1].rank <= types[0].rank, "scalar_mul: the scale has a higher rank than the tensor")
    require(types[0].dtype == types[1].dtype, "scalar_mul: operands have different dtypes")
    return types[0]


scalar_mul = define(
    "scalar_mul",
    arity=2,
    shape=_scalar_mul_shape,
    numpy=lambda xs, p: (xs[0] * xs[1]).astype(xs[0].dtype, copy=False),
    torch=lambda rt, xs, p: xs[0] * xs[1],
    onnx=OnnxMapping(("Mul",), None, _exporter_as("Mul")),
    groups=("elementwise", "linear"),
    doc="x * s for a one-element tensor s (TASO's smul: commutes with every linear op)",
    exact="polynomial",
)


# ---- comparisons and selection (attention masks: masked_fill is Equal -> Where) ------------------------


def _comparison_shape(types, p) -> TensorType:
    require(types[0].dtype == types[1].dtype, f"operands have different dtypes {[t.dtype for t in types]}")
    return TensorType(tuple(broadcast_dims(types[0].shape, types[1].shape)), "bool")


def _comparison_importer(name: str):
    def importer(ctx) -> bool:
        if len(ctx.inputs) != 2 or ctx.attr_names:
            return False
        ctx.emit(COMPARISON_OPS[name], list(ctx.inputs), ctx.outputs)
        return True

    return importer


# name -> (NumPy semantics, ONNX op type)
_COMPARISONS = {"equal": (np.equal, "Equal"), "less": (np.less, "Less"), "greater": (np.greater, "Greater")}
_COMPARISONS_TORCH = {"equal": "eq", "less": "lt", "greater": "gt"}
COMPARISON_OPS = {}
for _name, (_fn, _onnx_type) in _COMPARISONS.items():
    COMPARISON_OPS[_name] = define(
        _name,
        arity=2,
        shape=_comparison_shape,
        numpy=(lambda fn: lambda xs, p: as_array(fn(xs[0], xs[1])))(_fn),
        onnx=OnnxMapping((_onnx_type,), _comparison_importer(_name), _exporter_as(_onnx_type)),
        groups=("elementwise", "comparison"),
        doc=f"element-wise {_name} comparison with NumPy broadcasting, a bool tensor",
        torch=(lambda kernel: lambda rt, xs, p: getattr(rt.torch, kernel)(xs[0], xs[1]))(_COMPARISONS_TORCH[_name]),
    )


def _import_is_nan(ctx) -> bool:
    if len(ctx.inputs) != 1 or ctx.attr_names or not ctx.type(ctx.inputs[0]).dtype.startswith("float"):
        return False
    ctx.emit(is_nan, list(ctx.inputs), ctx.outputs)
    return True


is_nan = define(
    "is_nan",
    arity=1,
    shape=lambda types, p: TensorType(types[0].shape, "bool"),
    numpy=lambda xs, p: as_array(np.isnan(xs[0])),
    torch=lambda rt, xs, p: rt.torch.isnan(xs[0]),
    onnx=OnnxMapping(("IsNaN",), _import_is_nan, _exporter_as("IsNaN")),
    groups=("elementwise",),
    doc="whether each element is NaN, a bool tensor (the guard torch's attention export puts after its softmax)",
)


def _where_shape(types, p) -> TensorType:
    condition, x, y = types
    require(condition.dtype == "bool", f"where: the condition must be bool, got {condition.dtype}")
    require(x.dtype == y.dtype, f"where: operands have different dtypes {x.dtype} and {y.dtype}")
    return TensorType(tuple(broadcast_dims(condition.shape, x.shape, y.shape)), x.dtype)


def _import_where(ctx) -> bool:
    if len(ctx.inputs) != 3 or ctx.attr_names:
        return False
    ctx.emit(where, list(ctx.inputs), ctx.outputs)
    return True


where = define(
    "where",
    arity=3,
    shape=_where_shape,
    numpy=lambda xs, p: as_array(np.where(xs[0], xs[1], xs[2])),
    torch=lambda rt, xs, p: rt.torch.where(xs[0], xs[1], xs[2]),
    onnx=OnnxMapping(("Where",), _import_where, _exporter_as("Where")),
    groups=("elementwise",),
    doc="condition ? x : y element-wise, with NumPy broadcasting",
)


def _import_variadic(op):
    """Sum/Max/Min with n inputs become a chain of binary ops."""

    def importer(ctx) -> bool:
        names = [n for n in ctx.inputs if n]
        if len(names) == 1:
            ctx.alias(ctx.outputs[0], names[0])
            return True
        if len(names) == 2:
            return False if op is not add else bool(ctx.emit(op, names, ctx.outputs))
        acc = names[0]
        for i, name in enumerate(names[1:]):
            last = i == len(names) - 2
            acc = ctx.emit(op, [acc, name], ctx.outputs if last else None)[0]
        return True

    return importer


define_importer(("Sum",), _import_variadic(add))
define_importer(("Max",), _import_variadic(BINARY_OPS["max"]))
define_importer(("Min",), _import_variadic(BINARY_OPS["min"]))

__all__ = ["UNARY_OPS", "BINARY_OPS", "COMPARISON_OPS", "is_nan", "where", "apply_activation", "apply_activation_exact", "exact_with_activation", "emit_with_activation", "ACTIVATION_PARAM", "broadcast_shape"]
