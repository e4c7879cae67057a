"""BERT encoder layers (Devlin et al. 2019), as PyTorch exports a Hugging Face BertLayer.

Each layer is post-norm self-attention then a feed-forward block:

    Q, K, V = x @ Wq + bq, x @ Wk + bk, x @ Wv + bv          (MatMul + Add each)
    heads   = Reshape to [B, S, heads, d] and Transpose        (K straight to [B, h, d, S])
    a       = Softmax(Q @ K^T / sqrt(d)) @ V                   (MatMul, Div, Softmax, MatMul)
    x       = LayerNorm(x + (merge heads a) @ Wo + bo)
    x       = LayerNorm(x + GELU(x @ W1 + b1) @ W2 + b2)

with GELU in the exporter's erf form ``x * (1 + erf(x / sqrt 2)) * 0.5`` (Div, Erf,
Add, Mul, Mul), LayerNormalization as the opset-17 operator, and no attention mask.
The input is the hidden-state tensor [batch, seq, hidden] after the embeddings.
"""

from __future__ import annotations

import math

import numpy as np

from ._builder import GraphBuilder, Value


def _dense(b: GraphBuilder, x: Value, out_features: int, name: str) -> Value:
    """``nn.Linear`` on a 3-D input: MatMul by the transposed weight, then Add bias."""
    std = 1.0 / math.sqrt(x.shape[-1])  # LeCun: unit-variance outputs for unit inputs
    with b.scope(name):
        weight = b.param("weight", (x.shape[-1], out_features), std)
        bias = b.param_uniform("bias", (out_features,), -0.1, 0.1)
        return b.op("Add", b.op("MatMul", x, weight), bias)


def _layer_norm(b: GraphBuilder, x: Value, name: str) -> Value:
    with b.scope(name):
        gamma = b.param_uniform("weight", (x.shape[-1],), 0.8, 1.2)
        beta = b.param_uniform("bias", (x.shape[-1],), -0.1, 0.1)
        return b.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=1e-12)


def _gelu(b: GraphBuilder, x: Value) -> Value:
    erf = b.op("Erf", b.op("Div", x, b.const(math.sqrt(2.0))))
    return b.op("Mul", b.op("Mul", x, b.op("Add", erf, b.const(1.0))), b.const(0.5))


def _attention(b: GraphBuilder, x: Value, heads: int) -> Value:
    batch, seq, hidden = x.shape
    head_dim = hidden // heads
    split = b.const([batch, seq, heads, head_dim], dtype=np.int64)
    with b.scope("attention"), b.scope("self"):
        q = b.op("Reshape", _dense(b, x, hidden, "query"), split)
        k = b.op("Reshape", _dense(b, x, hidden, "key"), split)
        v = b.op("Reshape", _dense(b, x, hidden, "value"), split)
        q = b.op("Transpose", q, perm=[0, 2, 1, 3])
        # NOTE: the exporter fuses permute(0, 2, 1, 3) and transpose(-1, -2) of K.
        k = b.op("Transpose", k, perm=[0, 2, 3, 1])
        v = b.op("Transpose", v, perm=[0, 2, 1, 3])
        scores = b.op("Div", b.op("MatMul", q, k), b.const(math.sqrt(head_dim)))
        context = b.op("MatMul", b.op("Softmax", scores, axis=-1), v)
        context = b.op("Transpose", context, perm=[0, 2, 1, 3])
        context = b.op("Reshape", context, b.const([batch, seq, hidden], dtype=np.int64))
    with b.scope("attention"), b.scope("output"):
        out = _dense(b, context, hidden, "dense")
        return _layer_norm(b, b.op("Add", out, x), "LayerNorm")


def _feed_forward(b: GraphBuilder, x: Value, intermediate: int) -> Value:
    with b.scope("intermediate"):
        y = _gelu(b, _dense(b, x, intermediate, "dense"))
    with b.scope("output"):
        y = _dense(b, y, x.shape[-1], "dense")
        return _layer_norm(b, b.op("Add", y, x), "LayerNorm")


def bert(
    b: GraphBuilder,
    *,
    batch: int = 1,
    seq: int = 64,
    hidden: int = 1024,
    heads: int = 16,
    layers: int = 8,
) -> None:
    """A stack of BERT encoder layers; the defaults are TASO's benchmark configuration.

    Args:
        b: The builder receiving the graph.
        batch: Sequences per inference.
        seq: Tokens per sequence.
        hidden: Model width; a multiple of ``heads``.
        heads: Attention heads.
        layers: Encoder layers (the feed-forward width is ``4 * hidden``).

    Raises:
        ValueError: If ``hidden`` is not a multiple of ``heads``.
    """
    if hidden % heads:
        raise ValueError(f"bert: hidden ({hidden}) must be a multiple of heads ({heads})")
    x = b.input("hidden_states", (batch, seq, hidden))
    with b.scope("encoder"):
        for index in range(layers):
            with b.scope("layer"), b.scope(index):
                x = _attention(b, x, heads)
                x = _feed_forward(b, x, 4 * hidden)
    b.output(x, "last_hidden_state")


def bert_base(
    b: GraphBuilder,
    *,
    batch: int = 1,
    seq: int = 128,
    hidden: int = 768,
    heads: int = 12,
    layers: int = 12,
) -> None:
    """BERT-base: 12 layers of width 768 with 12 heads, on 128 tokens.

    Args:
        b: The builder receiving the graph.
        batch: Sequences per inference.
        seq: Tokens per sequence.
        hidden: Model width; a multiple of ``heads``.
        heads: Attention heads.
        layers: Encoder layers (the feed-forward width is ``4 * hidden``).
    """
    bert(b, batch=batch, seq=seq, hidden=hidden, heads=heads, layers=layers)
