"""Scaled dot-product attention (ONNX's Attention, 23), defined by the forms torch's exporters write.

On heads ``[batch, heads, seq, size]`` (``head_size = 0``), attention is
``matmul(softmax(scalar_mul(matmul(q, k^T), scale) + mask, axis=3), v)``: the product scaled after it, as both
exporters write transformers' eager attention (the scale a one-element constant). Torch's
``scaled_dot_product_attention``, as both exporters write it (transformers' default attention, ``nn.MultiheadAttention``),
scales q and k^T each by the root of the scale before the product, and with a mask puts a NaN guard after the softmax,
``where(is_nan(p), 0, p)``: the rows a mask of -inf leaves nothing to attend to read zero, as ONNX's Attention
defines them (and ONNX Runtime's kernel computes them). Each is a definition of its own, checked against the NumPy
semantics and ONNX Runtime's kernel (``tests/test_attention.py``); is_nan stays uninterpreted, as softmax does: both
sides apply them to the same scores.

On projections ``[batch, seq, heads * d]`` (``head_size = d``) attention is the same on their heads: each reshaped to
``[batch, seq, heads, d]`` and transposed, the output transposed back and reshaped; the head count is the width over
``d``.

The definitions are stated at the head sizes models use, each at its default scale ``1 / sqrt(d)`` as a float32 (its
root ``d ** -0.25`` as a float32 for the split form); on heads for the masks exporters write, ``[1 or batch, 1,
queries, keys]`` (ONNX Runtime requires the query axis) or ``[queries, keys]`` (``nn.MultiheadAttention``'s); a rule
at another scale or mask shape stays unproved rather than assumed.
"""

from __future__ import annotations

import math

import numpy as np

from .base import Axiom, OpSpec, Slot, Unsupported, all_of, any_of, idiv
from .elementwise import constant
from .terms import dim, eq, op, rank, tensors

__all__ = ["specs", "axioms", "definitions", "HEAD_SIZES", "MASKS", "default_scale", "split_scale", "scales"]

HEAD_SIZES = (8, 16, 32, 64, 80, 96, 128)


def default_scale(head_size: int) -> float:
    """1 / sqrt(head size) as a file holds it (a float32)."""
    return float(np.float32(1 / math.sqrt(head_size)))


def split_scale(head_size: int) -> float:
    """The root of the scale, ``d ** -0.25``, as a file holds it (a float32): what torch's attention export scales q and
    k^T by; the product's scale is its square."""
    return float(np.float32(head_size ** -0.25))


def scales(head_size: int) -> tuple[float, ...]:
    """The scales exporters write attention at for ``head_size``: the eager form's and the split form's square (one
    where they are the same float, as at 16)."""
    return tuple(dict.fromkeys((default_scale(head_size), split_scale(head_size) ** 2)))


def _scores_mask(mask, scores) -> list:
    """Each of the mask's dims 1 or the scores' (right-aligned), as ONNX's broadcast to the scores has it."""
    if not 2 <= len(mask) <= 4:
        return [False]
    return [any_of(m == 1, m == s) for m, s in zip(mask[::-1], scores[::-1])]


def _attention_rule(dims, p):
    q, k, v = (list(d) for d in dims[:3])
    size = p["head_size"]
    if not isinstance(size, int):
        raise Unsupported("attention with a symbolic head size")
    if size:
        if not len(q) == len(k) == len(v) == 3:
            return [[0]], [False]
        heads = idiv(q[2], size)
        scores = [q[0], heads, q[1], k[1]]
        needs = [q[2] % size == 0, k[2] == q[2], v[2] == q[2], k[0] == q[0], v[0] == q[0], v[1] == k[1]]
        out = [q[0], q[1], v[2]]
    else:
        if not len(q) == len(k) == len(v) == 4:
            return [[0]], [False]
        scores = [q[0], q[1], q[2], k[2]]
        needs = [k[0] == q[0], v[0] == q[0], k[1] == q[1], v[1] == q[1], k[3] == q[3], v[2] == k[2]]
        out = [q[0], q[1], q[2], v[3]]
    if len(dims) == 4:
        needs += _scores_mask(list(dims[3]), scores)
    return [out], all_of(needs)


specs = [
    OpSpec("attention", (Slot("scale", "real"), Slot("head_size", "int")), _attention_rule,
           doc="ONNX's Attention (23) with an additive mask, defined by the exporters' form"),
]

attention, matmul, softmax, scalar_mul, add = op("attention"), op("matmul"), op("softmax"), op("scalar_mul"), op("add")
is_nan, where = op("is_nan"), op("where")
transpose, reshape = op("transpose"), op("reshape")
q, k, v, m = tensors("q k v m")
HEADS_FIRST = (0, 2, 1, 3)


def _sampler(rank_: int, head_size: int, mask: str | None):
    """q, k, v (and a mask of ``mask``'s shape: "one" or "batch" [1 or batch, 1, queries, keys], "2d" [queries, keys])
    of ``rank_`` 4 on heads or 3 on projections of heads of ``head_size``. Near misses, one in eight: another batch or
    head count for k, another head size for q, or a mask one longer on one axis (broadcasting a score axis of 1 on the
    right, where attention refuses it)."""

    def sample(rng: np.random.Generator):
        miss = int(rng.integers(0, 32))
        scores = [int(d) for d in rng.integers(1, 4, size=4)]
        mask_axis = int(rng.integers(2 if mask == "2d" else 0, 4))
        if miss == 3 and mask:  # a score axis of 1 the mask would broadcast to 2
            scores[mask_axis] = 1
        batch, heads, queries, keys = scores
        size = head_size if rank_ == 3 else int(rng.integers(1, 4))
        v_size = size if rank_ == 3 else int(rng.integers(1, 4))
        if rank_ == 4:
            valuation = {"q": (batch, heads, queries, size), "k": (batch, heads, keys, size), "v": (batch, heads, keys, v_size)}
        else:
            valuation = {"q": (batch, queries, heads * size), "k": (batch, keys, heads * size), "v": (batch, keys, heads * size)}
        if mask:
            valuation["m"] = (queries, keys) if mask == "2d" else (1 if mask == "one" else batch, 1, queries, keys)
        if miss == 0:
            valuation["k"] = (batch + 1, *valuation["k"][1:])
        elif miss == 1 and rank_ == 4:
            valuation["k"] = (batch, heads + 1, *valuation["k"][2:])
        elif miss == 2:
            valuation["q"] = (*valuation["q"][:-1], valuation["q"][-1] + 1)
        elif miss == 3 and mask:
            offset = 4 - len(valuation["m"])
            valuation["m"] = tuple(2 if i + offset == mask_axis else d for i, d in enumerate(valuation["m"]))
        return valuation

    return sample


def _mask_guards(mask: str | None, scores_batch, queries, keys) -> tuple:
    if not mask:
        return ()
    if mask == "2d":
        return (eq(rank(m), 2), eq(dim(m, 0), queries), eq(dim(m, 1), keys))
    return (eq(rank(m), 4), eq(dim(m, 0), 1 if mask == "one" else scores_batch), eq(dim(m, 1), 1), eq(dim(m, 2), queries), eq(dim(m, 3), keys))


def _on_heads(scale: float, mask: str | None) -> Axiom:
    """Attention on heads is the exporters' eager form: the scaled product of q and k^T, plus the mask, softmax, times v."""
    scores = scalar_mul(matmul(q, transpose(k, perm=(0, 1, 3, 2))), constant(scale))
    return _heads_axiom(f"attention-definition-heads{_mask_suffix(mask)}[{scale:.6g}]", scale, scores, mask, guarded=False)


def _on_heads_split(head_size: int, mask: str | None, guarded: bool) -> Axiom:
    """Attention on heads is torch's scaled_dot_product_attention as exported: q and k^T each scaled by the root of
    the scale, their product plus the mask, softmax (NaN rows zero where ``guarded``), times v."""
    root = split_scale(head_size)
    scores = matmul(scalar_mul(q, constant(root)), scalar_mul(transpose(k, perm=(0, 1, 3, 2)), constant(root)))
    name = f"attention-definition-heads-sdpa{_mask_suffix(mask)}{'-guarded' if guarded else ''}-d{head_size}"
    return _heads_axiom(name, root * root, scores, mask, guarded)


def _mask_suffix(mask: str | None) -> str:
    return f"-mask-{mask}" if mask else ""


def _heads_axiom(name: str, scale: float, scores, mask: str | None, guarded: bool) -> Axiom:
    weights = softmax(add(scores, m) if mask else scores, axis=3)
    if guarded:
        weights = where(is_nan(weights), constant(0), weights)
    same_heads = (eq(rank(q), 4), eq(rank(v), 4), eq(dim(k, 0), dim(q, 0)), eq(dim(v, 0), dim(q, 0)),
                  eq(dim(k, 1), dim(q, 1)), eq(dim(v, 1), dim(q, 1)))
    inputs = (q, k, v, m) if mask else (q, k, v)
    return Axiom(name, attention(*inputs, scale=scale, head_size=0), matmul(weights, v), _sampler(4, 0, mask),
                 when=same_heads + _mask_guards(mask, dim(q, 0), dim(q, 2), dim(k, 2)), unfold=True)


def _on_projections(head_size: int, mask: str | None, scale: float) -> Axiom:
    """Attention on projections is attention on their heads, its output's heads merged back."""
    heads = dim(q, 2) // head_size

    def split(t):
        return transpose(reshape(t, shape=(dim(t, 0), dim(t, 1), heads, head_size)), perm=HEADS_FIRST)

    inputs = (q, k, v, m) if mask else (q, k, v)
    on_heads = attention(split(q), split(k), split(v), *((m,) if mask else ()), scale=scale, head_size=0)
    # Only the ranks: each other condition on the sizes is the reshapes' or attention's own typing, the same on both sides.
    ranks = (eq(rank(q), 3), eq(rank(k), 3), eq(rank(v), 3))
    form = "" if scale == default_scale(head_size) else "-sdpa"
    return Axiom(f"attention-definition-projections{form}-d{head_size}{'-mask' if mask else ''}", attention(*inputs, scale=scale, head_size=head_size),
                 reshape(transpose(on_heads, perm=HEADS_FIRST), shape=(dim(q, 0), dim(q, 1), dim(q, 2))), _sampler(3, head_size, mask),
                 when=ranks, unfold=True)


# The masks exporters add to attention's scores: none (ViT), one for the whole batch ([1, 1, queries, keys]: GPT-2's
# causal mask), one per sequence ([batch, 1, queries, keys]: BERT's padding mask), one of the scores' last two axes
# ([queries, keys]: nn.MultiheadAttention's attn_mask)
MASKS = (None, "one", "batch", "2d")
axioms: list[Axiom] = []  # attention has its definitions only

# (after every other family's axioms in AXIOMS: specs/__init__.py)
definitions = [
    *[_on_heads(default_scale(d), mask) for d in HEAD_SIZES for mask in MASKS],
    *[_on_heads_split(d, mask, guarded) for d in HEAD_SIZES for mask in MASKS for guarded in (False, True)],
    *[_on_projections(d, mask, scale) for d in HEAD_SIZES for mask in (None, "batch") for scale in scales(d)],
]
