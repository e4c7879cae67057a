"""Scaled dot-product attention as one operator: ONNX's Attention (opset 23).

``attention(q, k, v[, mask])`` is ``softmax(q @ k^T * scale + mask) @ v`` over the last two axes. With
``head_size = 0`` its inputs are already split into heads, ``[batch, heads, seq, size]``; with ``head_size = d``
they are the projections ``[batch, seq, heads * d]`` (v's too), and the split into heads and the
merge of the output are part of the operator, as Attention-23's 3-D form has them. That form is where the kernel
gains on ONNX Runtime's CPU: the exporters' reshapes and transposes around the products go with them
(``benchmarks/costs/bench_attention_kernels.py``). The head size, not the head count, is the parameter: the rules
into the 3-D form are then stated per head size with the head count a quotient of a width by a constant, which Z3
decides (linear integer arithmetic).

The mask is additive (a float tensor each of whose dims is 1 or the scores' dim, right-aligned); Attention's boolean
masks, causal flag, past keys, soft cap, windows and extra outputs are not modelled, and a node using them stays
opaque. Below opset 23 (or where the graph's target does not allow raising the opset) the operator is written as the
form the exporters write.

ONNX Runtime's own attention kernels, MultiHeadAttention and Attention (com.microsoft: its transformers optimizer
writes them), are read into this operator, Attention's packed projection as the product and the split before it, so a
file that holds them is rewritten like any other. They are not written: on ONNX Runtime's CPU, Attention-23 runs
1.23-1.39x the exporters' form and MultiHeadAttention level with it to 1.12x (``bench_attention_kernels.py``).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import TensorType
from .base import ORT_DOMAIN, OnnxMapping, Param, define, define_contrib_importer, require
from .elementwise import add
from .linalg import matmul
from .onnx_versions import understood
from .shape import split

__all__ = ["attention", "head_split", "ATTENTION_OPSET"]

ATTENTION_OPSET = 23  # ONNX's Attention


def head_split(q_shape, shape, head_size: int) -> tuple:
    """``shape`` (q's, k's or v's) as ``[batch, heads, seq, size]``, the head count that of q ``[batch, seq, heads *
    head_size]`` (``head_size`` 0: the shape as it is)."""
    if not head_size:
        return tuple(shape)
    heads = q_shape[2] // head_size
    return (shape[0], heads, shape[1], shape[2] // heads)


def _attention_shape(types, p) -> TensorType:
    q, k, v = types[:3]
    size = p["head_size"]
    rank = 3 if size else 4
    require(q.rank == k.rank == v.rank == rank, f"attention: inputs of rank {q.rank}, {k.rank}, {v.rank}, not {rank}")
    require(q.dtype == k.dtype == v.dtype, "attention: inputs of several dtypes")
    if size:
        require(all(isinstance(t.shape[2], int) for t in (q, k, v)), "attention: a symbolic width")
        heads = q.shape[2] // size
        require(q.shape[2] == k.shape[2] == v.shape[2] == heads * size, f"attention: widths {q.shape[2]}, {k.shape[2]}, {v.shape[2]} are not heads of size {size}")
    qh, kh, vh = (head_split(q.shape, t.shape, size) for t in (q, k, v))
    require(qh[:2] == kh[:2] == vh[:2], f"attention: batch and heads differ between {q.shape}, {k.shape}, {v.shape}")
    require(qh[3] == kh[3], f"attention: q's head size {qh[3]} is not k's {kh[3]}")
    require(kh[2] == vh[2], f"attention: k has {kh[2]} positions, v {vh[2]}")
    if len(types) == 4:
        mask, scores = types[3], (qh[0], qh[1], qh[2], kh[2])
        require(mask.dtype == q.dtype and 2 <= mask.rank <= 4, f"attention: the mask must be a float tensor of rank 2 to 4, not {mask}")
        require(all(m == 1 or m == s for m, s in zip(mask.shape[::-1], scores[::-1])),
                f"attention: mask {mask.shape} does not broadcast to the scores {scores}")
    return TensorType((q.shape[0], q.shape[1], v.shape[2]) if size else (*qh[:3], vh[3]), q.dtype)


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    return x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(0, 2, 1, 3)


def _attention(xs, p):
    size = p["head_size"]
    q, k, v = (t.astype(np.float64) for t in xs[:3])
    if size:
        heads = q.shape[2] // size
        q, k, v = (_heads(t, heads) for t in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) * p["scale"]
    if len(xs) == 4:
        scores = scores + xs[3]
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    y = (e / e.sum(axis=-1, keepdims=True)) @ v
    if size:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y.astype(xs[0].dtype)


def _attention_torch(rt, xs, p):
    size = p["head_size"]
    q, k, v = xs[:3]
    if size:
        heads = q.shape[2] // size
        q, k, v = (t.unflatten(2, (heads, -1)).transpose(1, 2) for t in (q, k, v))
    y = rt.F.scaled_dot_product_attention(q, k, v, attn_mask=xs[3] if len(xs) == 4 else None, scale=p["scale"])
    return y.transpose(1, 2).flatten(2) if size else y


def _import_attention(ctx) -> bool:
    """Attention-23 with an additive float mask or none, one output, no past keys, no causal flag or soft cap, and as
    many key heads as query heads; the default scale is 1 / sqrt(head size)."""
    inputs = list(ctx.inputs)
    allowed = {"q_num_heads", "kv_num_heads", "scale", "is_causal", "softcap", "qk_matmul_output_mode", "softmax_precision"}
    if (len([o for o in ctx.outputs if o]) != 1 or not ctx.outputs[0] or len(inputs) > 4 or not all(inputs[:3])
            or ctx.attr_names - allowed or ctx.attr("is_causal", 0) or ctx.attr("softcap", 0.0) or ctx.attr("qk_matmul_output_mode", 0)):
        return False
    q = ctx.type(inputs[0])
    if q.rank == 3:
        heads = int(ctx.attr("q_num_heads", 0))
        widths = {ctx.type(i).shape[2] for i in inputs[:3]}
        if not heads or int(ctx.attr("kv_num_heads", 0)) != heads or widths != {q.shape[2]} or not isinstance(q.shape[2], int) or q.shape[2] % heads:
            return False
        split_size = head_size = q.shape[2] // heads
    elif q.rank == 4:
        head_size, split_size = q.shape[3], 0
    else:
        return False
    mask = inputs[3] if len(inputs) == 4 and inputs[3] else None
    if mask is not None and ctx.type(mask).dtype != q.dtype:
        return False  # a boolean mask
    if not isinstance(head_size, int):
        return False
    scale = float(ctx.attr("scale", 1 / math.sqrt(head_size)))
    ctx.emit(attention, inputs[:3] + ([mask] if mask else []), ctx.outputs[:1], scale=scale, head_size=split_size)
    return True


def _import_ort_multi_head_attention(ctx) -> bool:
    """MultiHeadAttention (com.microsoft) on separate q, k, v ``[batch, seq, heads * size]`` of one width: its bias an
    Add to each, its attention bias the additive mask. A key padding mask, past keys, the causal flag, packed or
    head-split inputs, or an output beyond the first keep the node opaque."""
    inputs = list(ctx.inputs) + [""] * (10 - len(ctx.inputs))
    if (ctx.attr_names - {"num_heads", "scale", "mask_filter_value", "unidirectional"} or ctx.attr("unidirectional", 0)
            or not all(inputs[:3]) or any(inputs[4:5] + inputs[6:]) or not ctx.outputs[0] or any(ctx.outputs[1:])):
        return False
    q, k, v = inputs[:3]
    width = ctx.type(q).shape[2] if ctx.type(q).rank == 3 else None
    if not isinstance(width, int) or {ctx.type(t).rank for t in (k, v)} != {3} or {ctx.type(t).shape[2] for t in (k, v)} != {width}:
        return False
    if inputs[3]:
        q, k, v = (ctx.emit(add, [t, b])[0] for t, b in zip((q, k, v), ctx.emit(split, [inputs[3]], axis=0, sizes=(width,) * 3)))
    return _emit_on_projections(ctx, q, k, v, inputs[5], width)


def _import_ort_attention(ctx) -> bool:
    """Attention (com.microsoft): ``x @ weights + bias`` split into q, k and v of one width, then attention on them; its
    attention bias the additive mask. A mask index, past keys, the causal flag or rotary embeddings keep it opaque."""
    inputs = list(ctx.inputs) + [""] * (7 - len(ctx.inputs))
    allowed = {"num_heads", "scale", "mask_filter_value", "unidirectional", "qkv_hidden_sizes", "do_rotary", "past_present_share_buffer"}
    if (ctx.attr_names - allowed or ctx.attr("unidirectional", 0) or ctx.attr("do_rotary", 0) or ctx.attr("past_present_share_buffer", 0)
            or not all(inputs[:2]) or any(inputs[3:5] + inputs[6:]) or not ctx.outputs[0] or any(ctx.outputs[1:])):
        return False
    x, weights, bias = inputs[:3]
    packed = ctx.type(weights).shape[1]
    sizes = tuple(ctx.attr("qkv_hidden_sizes", ())) or ((packed // 3,) * 3 if isinstance(packed, int) and packed % 3 == 0 else ())
    if ctx.type(x).rank != 3 or len(set(sizes)) != 1 or sum(sizes) != packed:
        return False
    projected = ctx.emit(matmul, [x, weights])[0]
    if bias:
        projected = ctx.emit(add, [projected, bias])[0]
    q, k, v = ctx.emit(split, [projected], axis=2, sizes=sizes)
    return _emit_on_projections(ctx, q, k, v, inputs[5], sizes[0])


def _emit_on_projections(ctx, q: str, k: str, v: str, mask: str, width: int) -> bool:
    """attention on projections of ``width`` split into the node's ``num_heads`` heads, at its scale (default
    1 / sqrt(head size)), the mask a float tensor where there is one."""
    heads = int(ctx.attr("num_heads", 0))
    if heads <= 0 or width % heads or (mask and ctx.type(mask).dtype != ctx.type(q).dtype):
        return False
    size = width // heads
    scale = float(ctx.attr("scale", 0.0)) or 1 / math.sqrt(size)  # ONNX Runtime reads a scale of 0 as the default
    ctx.emit(attention, [q, k, v] + ([mask] if mask else []), ctx.outputs[:1], scale=scale, head_size=size)
    return True


def _export_attention(ctx, node) -> None:
    """Attention where the model's opset holds Attention-23; otherwise the form the exporters write."""
    if ctx.opset >= ATTENTION_OPSET and understood("Attention", ctx.opset):
        inputs = list(node.inputs)
        if len(inputs) == 4:
            inputs[3] = _full_mask(ctx, node)
        size = node.params["head_size"]
        count = ctx.type(node.inputs[0]).shape[2] // size if size else 0
        ctx.emit("Attention", inputs, list(node.outputs), scale=float(node.params["scale"]), **({"q_num_heads": count, "kv_num_heads": count} if count else {}))
    else:
        _export_written_out(ctx, node)


def _full_mask(ctx, node) -> str:
    """The mask with the scores' query axis (ONNX Runtime 1.32 requires it; ONNX's Attention only broadcast)."""
    mask = node.inputs[3]
    shape = ctx.type(mask).shape
    q_shape = ctx.type(node.inputs[0]).shape
    queries = head_split(q_shape, q_shape, node.params["head_size"])[2]
    if len(shape) >= 2 and shape[-2] == queries:
        return mask
    full = ctx.fresh(f"{mask}_expanded")
    ctx.emit("Expand", [mask, ctx.shape_tensor((*shape[:-2], queries, shape[-1]))], [full])
    return full


def _export_written_out(ctx, node) -> None:
    """softmax(q @ k^T * scale + mask) @ v as torch's exporters write it, the heads split and merged by Reshape and
    Transpose around it (ONNX Runtime fuses the transpose and the scale into its product at load)."""
    size, out = node.params["head_size"], node.outputs[0]
    q_type = ctx.type(node.inputs[0])
    heads = q_type.shape[2] // size if size else 0

    def apply(op_type: str, *inputs: str, output: str | None = None, **attrs) -> str:
        value = output or ctx.fresh(f"{out}_{op_type.lower()}")
        ctx.emit(op_type, list(inputs), [value], **attrs)
        return value

    def heads_of(value: str, perm: list[int]) -> str:
        if not heads:
            return apply("Transpose", value, perm=perm) if perm != [0, 1, 2, 3] else value
        batch, seq, width = ctx.type(value).shape
        return apply("Transpose", apply("Reshape", value, ctx.reshape_target(value, (batch, seq, heads, width // heads))), perm=perm)

    # q and v as [batch, heads, seq, size] and k transposed to [batch, heads, size, seq]
    split, k_split = ([0, 2, 1, 3], [0, 2, 3, 1]) if heads else ([0, 1, 2, 3], [0, 1, 3, 2])
    q, k_t, v = heads_of(node.inputs[0], split), heads_of(node.inputs[1], k_split), heads_of(node.inputs[2], split)
    scores = apply("Mul", apply("MatMul", q, k_t), ctx.const(np.asarray(node.params["scale"], q_type.dtype)))
    if len(node.inputs) == 4:
        scores = apply("Add", scores, node.inputs[3])
    product = apply("MatMul", apply("Softmax", scores, axis=-1), v, output=None if heads else out)
    if heads:
        merged = apply("Transpose", product, perm=[0, 2, 1, 3])
        merged_shape = (*q_type.shape[:2], heads, ctx.type(out).shape[2] // heads)
        apply("Reshape", merged, ctx.reshape_target(merged, ctx.type(out).shape, merged_shape), output=out)


attention = define(
    "attention",
    arity=(3, 4),
    params=[Param("scale", "float"), Param("head_size", "int", 0)],
    shape=_attention_shape,
    numpy=_attention,
    torch=_attention_torch,
    onnx=OnnxMapping(("Attention",), _import_attention, _export_attention, native_opset=ATTENTION_OPSET),
    groups=("attention",),
    doc="softmax(q @ k^T * scale + mask) @ v (ONNX's Attention); head_size > 0: q, k, v are [batch, seq, heads * head_size]",
)
define_contrib_importer(ORT_DOMAIN, "MultiHeadAttention", _import_ort_multi_head_attention)
define_contrib_importer(ORT_DOMAIN, "Attention", _import_ort_attention)
