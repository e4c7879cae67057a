"""Matrix products: batched matmul with a fused activation; Gemm and ONNX Runtime's FusedMatMul imported as matmul/transpose/add."""

from __future__ import annotations

import numpy as np

from ..ir import TensorType
from ..ir.dims import broadcast_dims
from .base import ORT_DOMAIN, OnnxMapping, define, define_contrib_importer, define_importer, require
from .elementwise import ACTIVATION_PARAM, BINARY_OPS, apply_activation, emit_with_activation, exact_with_activation, scalar_mul, torch_activation
from .shape import transpose


def _matmul_shape(types, p) -> TensorType:
    a, b = types
    require(a.dtype == b.dtype, f"matmul: operands have different dtypes {a.dtype} and {b.dtype}")
    require(a.rank >= 1 and b.rank >= 1, "matmul: operands must have rank >= 1")
    a_shape = (1,) + a.shape if a.rank == 1 else a.shape
    b_shape = b.shape + (1,) if b.rank == 1 else b.shape
    require(a_shape[-1] == b_shape[-2], f"matmul: inner dimensions differ: {a.shape} @ {b.shape}")
    batch = tuple(broadcast_dims(a_shape[:-2], b_shape[:-2]))
    out = batch + (a_shape[-2], b_shape[-1])
    if a.rank == 1:
        out = out[:-2] + out[-1:]
    if b.rank == 1:
        out = out[:-1]
    return TensorType(out, a.dtype)


def _matmul(xs, p):
    a, b = xs
    return apply_activation(p["activation"], np.matmul(a, b))


def _import_matmul(ctx) -> bool:
    ctx.emit(matmul, list(ctx.inputs[:2]), ctx.outputs)
    return True


matmul = define(
    "matmul",
    arity=2,
    params=[ACTIVATION_PARAM],
    shape=_matmul_shape,
    numpy=_matmul,
    torch=lambda rt, xs, p: torch_activation(rt, p["activation"], rt.torch.matmul(xs[0], xs[1])),
    onnx=OnnxMapping(("MatMul",), _import_matmul, lambda ctx, n: emit_with_activation(ctx, "MatMul", list(n.inputs), n)),
    groups=("linear_in_each", "has_activation"),
    doc="NumPy matmul (batched, broadcasting) followed by an optional activation",
    exact=exact_with_activation(_matmul),
)


def _import_gemm(ctx) -> bool:
    """Gemm(A, B, C) = alpha * op(A) @ op(B) + beta * C, imported as transpose/matmul/scalar_mul/add."""
    a, b = ctx.inputs[0], ctx.inputs[1]
    c = ctx.inputs[2] if len(ctx.inputs) > 2 else ""
    if ctx.type(a).rank != 2 or ctx.type(b).rank != 2 or ctx.attr_names - {"alpha", "beta", "transA", "transB", "broadcast"}:
        return False
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    dtype = ctx.type(a).dtype
    if ctx.attr("transA", 0):
        a = ctx.emit(transpose, [a], perm=(1, 0))[0]
    if ctx.attr("transB", 0):
        # nn.Linear's constant weight is transposed once for the whole model, not once per Gemm
        b = ctx.derived_weight(b, "transposed", np.transpose) if ctx.const(b) is not None else ctx.emit(transpose, [b], perm=(1, 0))[0]
    product_out = ctx.outputs if not c and alpha == 1.0 else None
    y = ctx.emit(matmul, [a, b], product_out)[0]
    if alpha != 1.0:
        y = ctx.emit(scalar_mul, [y, ctx.weight(np.asarray([alpha], dtype), "alpha")], None if c else ctx.outputs)[0]
    if c:
        if beta != 1.0:
            c = ctx.emit(scalar_mul, [c, ctx.weight(np.asarray([beta] * 1, dtype).reshape((1,) * max(1, ctx.type(c).rank)), "beta")])[0]
        ctx.emit(BINARY_OPS["add"], [y, c], ctx.outputs)
    return True


define_importer(("Gemm",), _import_gemm)


def _import_fused_matmul(ctx) -> bool:
    """FusedMatMul (com.microsoft) = alpha * op(A) @ op(B), op a swap of the last two axes where transA / transB say,
    read as transpose/matmul/scalar_mul. ONNX Runtime fuses exactly these back at load (its MatMulScale and
    transpose fusions), so it is never written: the written form runs as the fused kernel. transBatchA / transBatchB
    keep the node opaque."""
    if ctx.attr_names - {"alpha", "transA", "transB", "transBatchA", "transBatchB"} or ctx.attr("transBatchA", 0) or ctx.attr("transBatchB", 0):
        return False
    a, b = ctx.inputs[:2]
    for flag, name in (("transA", "a"), ("transB", "b")):
        if not ctx.attr(flag, 0):
            continue
        value = a if name == "a" else b
        rank = ctx.type(value).rank
        if rank < 2:
            return False
        perm = (*range(rank - 2), rank - 1, rank - 2)
        swapped = (ctx.derived_weight(value, f"swapped{rank}", lambda w, perm=perm: np.transpose(w, perm)) if ctx.const(value) is not None
                   else ctx.emit(transpose, [value], perm=perm)[0])
        a, b = (swapped, b) if name == "a" else (a, swapped)
    alpha = float(ctx.attr("alpha", 1.0))
    y = ctx.emit(matmul, [a, b], ctx.outputs if alpha == 1.0 else None)[0]
    if alpha != 1.0:
        ctx.emit(scalar_mul, [y, ctx.weight(np.asarray([alpha], ctx.type(a).dtype), "alpha")], ctx.outputs)
    return True


define_contrib_importer(ORT_DOMAIN, "FusedMatMul", _import_fused_matmul)

__all__ = ["matmul"]
