"""Constant tensors with no inputs: filled tensors (ONNX ConstantOfShape) and TASO's special constants.

TASO's rules introduce constants that no model contains (the identity convolution kernel,
the identity matrix, all-ones, the average-pooling kernel): each is an operator with a
static shape parameter, so rules can mention them and export can materialise them.
"""

from __future__ import annotations

import numpy as np

from ..ir import TensorType
from .base import OnnxMapping, Param, as_dims, define, modular_inverse, require


def _fill_shape(types, p) -> TensorType:
    require(all(d >= 0 for d in p["shape"]), f"fill: negative dimension in {p['shape']}")
    return TensorType(tuple(p["shape"]), p["dtype"])


def _import_constant_of_shape(ctx) -> bool:
    shape = ctx.const(ctx.inputs[0], symbolic=True)
    if shape is None:
        return False
    value = ctx.attr("value", None)
    value = np.zeros(1, np.float32) if value is None else value
    ctx.emit(fill, [], ctx.outputs, shape=as_dims(shape.reshape(-1)), value=value.reshape(-1)[0].item(), dtype=value.dtype.name)
    return True


def _export_fill(ctx, node) -> None:
    p = node.params
    shape = ctx.shape_tensor(p["shape"])
    ctx.emit("ConstantOfShape", [shape], list(node.outputs), value=np.asarray([p["value"]], dtype=p["dtype"]))


fill = define(
    "fill",
    arity=0,
    params=[Param("shape", "ints"), Param("value", "float", 0.0), Param("dtype", "str", "float32")],
    shape=_fill_shape,
    numpy=lambda xs, p: np.full(p["shape"], p["value"], dtype=p["dtype"]),
    onnx=OnnxMapping(("ConstantOfShape",), _import_constant_of_shape, _export_fill),
    groups=("constant",),
    doc="a tensor of one repeated value (all-ones when value=1)",
    exact=lambda xs, p: np.full(p["shape"], _integral(p["value"]), dtype=np.int64),
)


def as_fill(array: np.ndarray):
    """A one-element weight as the fill node it equals (its shape, value and type), or None.

    A rule that reads a constant by value (the 0.5 of a GELU) writes it as a fill node; a file holds the
    same constant as a weight, and this is the one place that says when the two are the same value.
    """
    if array.size != 1 or array.dtype.kind != "f":
        return None
    return fill.make_params(shape=tuple(int(d) for d in array.shape), value=float(array.reshape(-1)[0]), dtype=array.dtype.name)


def _integral(value: float) -> int:
    if float(value) != int(value):
        raise ValueError(f"fill value {value} has no exact integer semantics")
    return int(value)


def _initializer_exporter(ctx, node) -> None:
    """TASO's constants are exported as initializers holding their value."""
    value = node.op.evaluate([], node.params)[0]
    ctx.emit("Identity", [ctx.const(value, node.outputs[0] + "_value")], list(node.outputs))


def _eye_shape(types, p) -> TensorType:
    require(p["n"] > 0, "eye: n must be positive")
    return TensorType((p["n"], p["n"]), p["dtype"])


eye = define(
    "eye",
    arity=0,
    params=[Param("n", "int"), Param("dtype", "str", "float32")],
    shape=_eye_shape,
    numpy=lambda xs, p: np.eye(p["n"], dtype=p["dtype"]),
    onnx=OnnxMapping((), None, _initializer_exporter),
    groups=("constant",),
    doc="the n x n identity matrix (matmul(x, eye) = x)",
    exact="polynomial",
)


def _kernel_shape(out_per_group: bool):
    def rule(types, p) -> TensorType:
        kh, kw = p["kernel"]
        require(p["channels"] > 0 and kh % 2 == 1 and kw % 2 == 1, f"kernel {kh}x{kw} must have odd sides and channels > 0")
        return TensorType((p["channels"], 1 if out_per_group else p["channels"], kh, kw), p["dtype"])

    return rule


def _conv_identity(xs, p):
    c, (kh, kw) = p["channels"], p["kernel"]
    w = np.zeros((c, c, kh, kw), dtype=p["dtype"])
    w[np.arange(c), np.arange(c), kh // 2, kw // 2] = 1
    return w


_KERNEL_PARAMS = [Param("channels", "int"), Param("kernel", "ints"), Param("dtype", "str", "float32")]

conv_identity = define(
    "conv_identity",
    arity=0,
    params=_KERNEL_PARAMS,
    shape=_kernel_shape(False),
    numpy=_conv_identity,
    onnx=OnnxMapping((), None, _initializer_exporter),
    groups=("constant",),
    doc="the C x C x KH x KW kernel whose SAME-padded convolution is the identity",
    exact="polynomial",
)

pool_kernel = define(
    "pool_kernel",
    arity=0,
    params=_KERNEL_PARAMS,
    shape=_kernel_shape(True),
    numpy=lambda xs, p: np.full((p["channels"], 1) + tuple(p["kernel"]), 1.0 / (p["kernel"][0] * p["kernel"][1]), dtype=p["dtype"]),
    onnx=OnnxMapping((), None, _initializer_exporter),
    groups=("constant",),
    doc="the depthwise C x 1 x KH x KW kernel of 1/(KH*KW): conv(x, it, groups=C) = avg_pool2d with padding counted",
    exact=lambda xs, p: np.full((p["channels"], 1) + tuple(p["kernel"]), modular_inverse(p["kernel"][0] * p["kernel"][1]), dtype=np.int64),
)

__all__ = ["fill", "as_fill", "eye", "conv_identity", "pool_kernel"]
