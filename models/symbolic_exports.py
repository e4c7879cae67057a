"""Real exporter output with symbolic (dynamic) dimensions, for taso's symbolic-dimension tests and benchmark.

Hand-written ONNX fixtures only show the shapes their author thought of. This script exports small
PyTorch models the way users do — through both of PyTorch's ONNX exporters, with the batch (and,
for the transformer, the sequence) dimension left symbolic — so the importer meets what the
exporters really write: ``dim_param`` inputs, ``Shape``/``Gather``/``Concat`` chains feeding
``Reshape`` and ``ConstantOfShape``, ``Range`` for positions, and so on.

* TorchScript exporter: ``torch.onnx.export(..., dynamo=False, opset_version=17,
  dynamic_axes={"x": {0: "batch"}})``;
* dynamo exporter: ``torch.onnx.export(..., dynamo=True, dynamic_shapes={"x": {0: Dim("batch")}})``
  at its default opset; when a named ``Dim`` is refused, ``Dim.DYNAMIC`` is tried (its
  ``dim_param`` name is whatever the exporter writes).

Models (weights random with ``torch.manual_seed(0)``, ``eval()`` mode):

* ``lstm_cell_loop`` / ``gru_cell_loop``: one ``nn.LSTMCell`` / ``nn.GRUCell`` unrolled by a Python loop;
  ``lstm_cell_steps`` / ``gru_cell_steps``: the same over a steps-first input ``[steps, batch, hidden]``;
* ``resnet_tiny``: conv-bn-relu stem, max pool, two basic blocks with residual adds, pooling, linear;
* ``mobilenet_tiny``: MobileNet-v2 inverted residual blocks (expand, depthwise, ReLU6, project);
* ``transformer_decoder``: PyTorch's ``nn.TransformerDecoder`` (layers deep-copied from one, a
  fixed causal target mask), ``tgt`` and ``memory`` with a symbolic batch;
* ``written_out_norms``: two products, each followed by a normalization as transformers' code writes it (BERT-era
  layer norm at epsilon 1e-12, Llama's RMS norm at 1e-6), which the exporters leave decomposed;
* ``transformers_rms_norms``: the same with transformers' own ``LlamaRMSNorm`` and ``T5LayerNorm`` classes;
* ``bert_tiny``: token + position embeddings, post-norm encoder layers with hand-written attention
  reshaped by ``x.view(batch, seq, heads, -1)``; input ids ``[batch, seq]`` int64;

Benchmark-size models (not exported with ``--small``), written out in plain ``torch.nn`` (no torchvision):

* ``resnet50``: ResNet-50 (bottleneck blocks [3, 4, 6, 3], stride in the 3x3 conv, 1000 classes) on
  ``[batch, 3, 224, 224]``, convolutions initialised as torchvision does (Kaiming normal, fan out);
* ``mobilenet_v2``: MobileNetV2 at width 1.0 (the paper's inverted residual settings, 1280-channel
  head, 1000 classes) on ``[batch, 3, 224, 224]``, initialised as torchvision does except that a
  depthwise conv's fan out is counted per group (torchvision's init makes a random one's output ~1e-9);
* ``bert_base``: ``transformers.BertModel(BertConfig())`` (hidden 768, 12 layers, 12 heads, built from
  the config: nothing downloaded); inputs ``input_ids`` and ``attention_mask``, both ``[batch, seq]``
  int64 with both dims symbolic (the example and the checks pad some rows: see ``padding_mask``);
  output ``last_hidden_state`` (the pooler's output is not returned).

Each file is written as ``{model}.{exporter}.onnx``; one line is printed per file: its size, its
graph inputs and outputs with their dims, and whether ONNX Runtime runs it at batch 1, 3 and 7
(and seq 5 and 9 for ``bert_tiny``, 64, 128 and 256 for ``bert_base``) with outputs matching
PyTorch's (rtol 1e-3, atol 1e-4 times the largest output magnitude when that exceeds 1). A model an
exporter cannot export is reported on one line and skipped.

Run: python -m taso.models.symbolic_exports OUT_DIR [--small] [--only NAME ...]
         [--exporter dynamo|torchscript|both] [--ops]
The benchmark's big models: python -m taso.models.symbolic_exports OUT_DIR --only resnet50 mobilenet_v2 bert_base
The committed test files come from: python -m taso.models.symbolic_exports tests/data/symbolic --small
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import itertools
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from .norm_modules import TransformersRmsNorms, WrittenOutNorms

SEED = 0
TORCHSCRIPT_OPSET = 17
BATCHES = (1, 3, 7)  # batch sizes the exported file must run at
SEQS = (5, 9)  # sequence lengths, for models with a symbolic sequence
BERT_BASE_SEQS = (64, 128, 256)
EXAMPLE_BATCH = 2  # not 1: an example dim of 1 is specialised (broadcast) by the tracers
EXAMPLE_SEQ = 6
STATIC_SEQ = 128  # taso's default measurement size of a symbol off axis 0
MAX_DIM = 1024
EXPORTERS = ("torchscript", "dynamo")


MakeInput = Callable[[int, int], torch.Tensor]  # (batch, seq) -> a tensor; seq ignored when not symbolic


@dataclass
class Spec:
    """One model ready to export: the module, its inputs (in ``forward``'s order), and which of their dims are symbolic."""

    module: nn.Module
    inputs: dict[str, MakeInput]  # graph input name -> how to make it
    symbolic: dict[int, str]  # axis -> dim name ("batch", "seq"), the same for every input
    seqs: tuple[int, ...] = (EXAMPLE_SEQ,)  # the seq values to check at; one value when seq is not symbolic
    outputs: tuple[str, ...] = ("output",)  # graph output names, one per tensor ``forward`` returns
    max_dims: dict[str, int] = field(default_factory=dict)  # dim name -> the largest size the dynamo export allows (MAX_DIM if absent)

    def make(self, batch: int, seq: int) -> tuple[torch.Tensor, ...]:
        return tuple(make(batch, seq) for make in self.inputs.values())

    def example(self) -> tuple[torch.Tensor, ...]:
        return self.make(EXAMPLE_BATCH, EXAMPLE_SEQ)


@dataclass
class Result:
    """What one export gave: the file and its check, or why there is no file."""

    name: str
    path: Path | None = None
    note: str = ""  # e.g. the fallback a dynamo export needed
    error: str = ""
    checks: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- models


class CellLoop(nn.Module):
    """One recurrent cell unrolled over ``steps`` by a Python loop; returns the last hidden state."""

    def __init__(self, cell: nn.Module, hidden: int, steps: int, lstm: bool, steps_first: bool = False):
        super().__init__()
        self.cell, self.hidden, self.steps, self.lstm, self.steps_first = cell, hidden, steps, lstm, steps_first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = x.shape[1] if self.steps_first else x.shape[0]
        h = x.new_zeros(batch, self.hidden)  # from x's shape, so batch stays symbolic
        c = x.new_zeros(batch, self.hidden)
        for t in range(self.steps):
            step = x[t] if self.steps_first else x[:, t]
            if self.lstm:
                h, c = self.cell(step, (h, c))
            else:
                h = self.cell(step, h)
        return h


def _sequence_spec(module: nn.Module, hidden: int, steps: int) -> Spec:
    return Spec(module, {"x": lambda b, s: torch.randn(b, steps, hidden)}, {0: "batch"})


def lstm_cell_loop(hidden: int = 512, steps: int = 32) -> Spec:
    """``nn.LSTMCell(hidden, hidden)`` unrolled over ``steps``; input ``[batch, steps, hidden]``."""
    return _sequence_spec(CellLoop(nn.LSTMCell(hidden, hidden), hidden, steps, lstm=True), hidden, steps)


def gru_cell_loop(hidden: int = 384, steps: int = 24) -> Spec:
    """``nn.GRUCell(hidden, hidden)`` unrolled over ``steps``; input ``[batch, steps, hidden]``."""
    return _sequence_spec(CellLoop(nn.GRUCell(hidden, hidden), hidden, steps, lstm=False), hidden, steps)


def _steps_first_spec(module: nn.Module, hidden: int, steps: int) -> Spec:
    return Spec(module, {"x": lambda b, s: torch.randn(steps, b, hidden)}, {1: "batch"})


def lstm_cell_steps(hidden: int = 256, steps: int = 24) -> Spec:
    """``nn.LSTMCell`` unrolled over ``steps`` of a steps-first input ``[steps, batch, hidden]`` (batch at axis 1)."""
    return _steps_first_spec(CellLoop(nn.LSTMCell(hidden, hidden), hidden, steps, lstm=True, steps_first=True), hidden, steps)


def gru_cell_steps(hidden: int = 256, steps: int = 24) -> Spec:
    """``nn.GRUCell`` unrolled over ``steps`` of a steps-first input ``[steps, batch, hidden]`` (batch at axis 1)."""
    return _steps_first_spec(CellLoop(nn.GRUCell(hidden, hidden), hidden, steps, lstm=False, steps_first=True), hidden, steps)


def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    """Conv (no bias) + BatchNorm + optional activation, padding ``k // 2``."""
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 conv-bn, a residual add (1x1 projection when the shape changes), ReLU."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, act=None))
        self.down = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.down(x))


def _image_spec(module: nn.Module, size: int = 32) -> Spec:
    return Spec(module, {"x": lambda b, s: torch.randn(b, 3, size, size)}, {0: "batch"})


def resnet_tiny(width: int = 64, classes: int = 100) -> Spec:
    """A small ResNet on ``[batch, 3, 32, 32]``: stem, max pool, two basic blocks, avg pool, linear."""
    net = nn.Sequential(conv_bn(3, width, 3), nn.MaxPool2d(3, 2, 1), BasicBlock(width, width, 1), BasicBlock(width, 2 * width, 2),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, classes))
    return _image_spec(net)


class InvertedResidual(nn.Module):
    """MobileNet-v2's block: 1x1 expand (none when ``expand`` is 1), 3x3 depthwise (groups = channels), ReLU6, 1x1 project,
    residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        mid = cin * expand
        expansion = [conv_bn(cin, mid, 1, act=nn.ReLU6)] if expand != 1 else []
        self.body = nn.Sequential(*expansion, conv_bn(mid, mid, 3, stride, groups=mid, act=nn.ReLU6), conv_bn(mid, cout, 1, act=None))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_tiny(width: int = 32, expand: int = 6, classes: int = 100) -> Spec:
    """A few inverted residual blocks on ``[batch, 3, 32, 32]``, then avg pool, flatten, linear."""
    blocks = [InvertedResidual(width, width, 1, expand), InvertedResidual(width, 2 * width, 2, expand),
              InvertedResidual(2 * width, 2 * width, 1, expand)]
    net = nn.Sequential(conv_bn(3, width, 3, 2, act=nn.ReLU6), *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, classes))
    return _image_spec(net)


class SelfAttention(nn.Module):
    """Multi-head self-attention written out as BERT implementations do, heads split by ``view``."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(d_model, d_model) for _ in range(4))
        self.heads, self.scale = heads, (d_model // heads) ** -0.5

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.heads, -1).transpose(1, 2)  # [batch, heads, seq, head_dim]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)
        y = torch.matmul(weights, v).transpose(1, 2)
        return self.out(y.reshape(x.shape[0], x.shape[1], -1))


class EncoderLayer(nn.Module):
    """A post-norm transformer encoder layer (BERT's): attention, add & norm, GELU feed-forward, add & norm."""

    def __init__(self, d_model: int, heads: int, ff: int):
        super().__init__()
        self.attn = SelfAttention(d_model, heads)
        self.ff = nn.Sequential(nn.Linear(d_model, ff), nn.GELU(), nn.Linear(ff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.ff(x))


class TinyBert(nn.Module):
    """Token + position embeddings (positions from ``arange(seq)``), LayerNorm, encoder layers; returns ``[batch, seq, d_model]``."""

    def __init__(self, vocab: int, max_positions: int, d_model: int, heads: int, ff: int, layers: int):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d_model), nn.Embedding(max_positions, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.layers = nn.ModuleList(EncoderLayer(d_model, heads, ff) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.norm(self.tokens(input_ids) + self.positions(positions))
        for layer in self.layers:
            x = layer(x)
        return x


def written_out_norms(d_model: int = 256, seq: int = 32) -> Spec:
    """:class:`WrittenOutNorms` on ``x`` ``[batch, seq, d_model]``, batch symbolic."""
    return Spec(WrittenOutNorms(d_model), {"x": lambda b, s: torch.randn(b, seq, d_model)}, {0: "batch"})


def transformers_rms_norms(d_model: int = 256, seq: int = 32) -> Spec:
    """:class:`TransformersRmsNorms` on ``x`` ``[batch, seq, d_model]``, batch symbolic."""
    return Spec(TransformersRmsNorms(d_model), {"x": lambda b, s: torch.randn(b, seq, d_model)}, {0: "batch"})


def bert_tiny(d_model: int = 64, heads: int = 4, ff: int = 128, layers: int = 2, vocab: int = 1000, max_positions: int = 128) -> Spec:
    """A small BERT-like encoder; input ids ``[batch, seq]`` int64 with both dims symbolic."""
    net = TinyBert(vocab, max_positions, d_model, heads, ff, layers)
    return Spec(net, {"input_ids": lambda b, s: torch.randint(0, vocab, (b, s))}, {0: "batch", 1: "seq"}, seqs=SEQS)


def _init_like_torchvision(net: nn.Module, linear_std: float | None = None) -> nn.Module:
    """torchvision's initialisation: convs Kaiming normal (fan out), norms weight 1 bias 0, linears N(0, ``linear_std``) if given.

    PyTorch's default (Kaiming uniform, a=sqrt(5)) shrinks activations layer after layer, so a deep
    random network's output would be all but zero and any output check would pass trivially. For the
    same reason a conv's fan out is counted per group: ``kaiming_normal_`` (so torchvision) counts a
    depthwise conv's over all its channels, and a random MobileNetV2's output then shrinks to ~1e-9.
    """
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            fan_out = m.out_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
            nn.init.normal_(m.weight, 0.0, (2.0 / fan_out) ** 0.5)  # = kaiming_normal_(fan_out, relu) when groups == 1
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and linear_std is not None:
            nn.init.normal_(m.weight, 0, linear_std)
            nn.init.zeros_(m.bias)
    return net


class Bottleneck(nn.Module):
    """ResNet-50's block: 1x1 reduce, 3x3 (carrying the stride), 1x1 expand x4, residual add (projected when the shape changes), ReLU."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int):
        super().__init__()
        cout = planes * self.expansion
        self.body = nn.Sequential(conv_bn(cin, planes, 1), conv_bn(planes, planes, 3, stride), conv_bn(planes, cout, 1, act=None))
        self.down = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.down(x))


def resnet50(layers: tuple[int, ...] = (3, 4, 6, 3), classes: int = 1000) -> Spec:
    """ResNet-50 on ``[batch, 3, 224, 224]``: 7x7/2 stem, 3x3/2 max pool, four stages of bottlenecks, avg pool, linear."""
    blocks: list[nn.Module] = []
    cin = 64
    for stage, count in enumerate(layers):
        planes = 64 * 2 ** stage
        for i in range(count):
            blocks.append(Bottleneck(cin, planes, 2 if i == 0 and stage > 0 else 1))
            cin = planes * Bottleneck.expansion
    net = nn.Sequential(conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1), *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))
    return _image_spec(_init_like_torchvision(net), 224)


# MobileNetV2's inverted residual settings (the paper's Table 2): expansion t, channels c, repeats n, first stride s
MOBILENET_V2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(classes: int = 1000) -> Spec:
    """MobileNetV2 (width 1.0) on ``[batch, 3, 224, 224]``: 3x3/2 stem, 17 inverted residual blocks, 1x1 to 1280, avg pool, linear."""
    layers: list[nn.Module] = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)]
    cin = 32
    for t, c, n, s in MOBILENET_V2_SETTINGS:
        for i in range(n):
            layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
            cin = c
    net = nn.Sequential(*layers, conv_bn(cin, 1280, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                        nn.Linear(1280, classes))
    return _image_spec(_init_like_torchvision(net, linear_std=0.01), 224)


class BertLastHidden(nn.Module):
    """A ``transformers.BertModel`` called with ids and mask, returning ``last_hidden_state`` only."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def padding_mask(batch: int, seq: int) -> torch.Tensor:
    """An int64 attention mask: row ``i`` keeps its first ``seq - (i % 3) * (seq // 4)`` tokens (never none), the rest is padding.

    Not all ones, so a tracer cannot drop the mask as a no-op, and the check sees padding honoured.
    """
    lengths = seq - (torch.arange(batch) % 3) * (seq // 4)
    return (torch.arange(seq) < lengths[:, None]).long()


def bert_base() -> Spec:
    """``transformers.BertModel(BertConfig())``: BERT-base, random weights; ``input_ids`` and ``attention_mask`` ``[batch, seq]``."""
    from transformers import BertConfig, BertModel

    config = BertConfig()
    net = BertLastHidden(BertModel(config))
    inputs = {"input_ids": lambda b, s: torch.randint(0, config.vocab_size, (b, s)), "attention_mask": padding_mask}
    return Spec(net, inputs, {0: "batch", 1: "seq"}, seqs=BERT_BASE_SEQS, outputs=("last_hidden_state",),
                max_dims={"seq": config.max_position_embeddings})


def bert_hf_tiny() -> Spec:
    """``transformers.BertModel`` of a tiny config: the same export paths as BERT-base (the token-type buffer
    sliced to ``seq`` and expanded to ``batch``, the extended attention mask), small enough for a test fixture."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64)
    net = BertLastHidden(BertModel(config))
    inputs = {"input_ids": lambda b, s: torch.randint(0, config.vocab_size, (b, s)), "attention_mask": padding_mask}
    return Spec(net, inputs, {0: "batch", 1: "seq"}, seqs=(5, 9, 16), outputs=("last_hidden_state",),
                max_dims={"seq": config.max_position_embeddings})


def gpt2_small() -> Spec:
    """``transformers.GPT2Model(GPT2Config())``: GPT-2 small (124M parameters), random weights; ``input_ids`` ``[batch, seq]``
    checked at seq 64 (issue 23's end-to-end budget is stated there)."""
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config()
    net = BertLastHidden(GPT2Model(config))
    inputs = {"input_ids": lambda b, s: torch.randint(0, config.vocab_size, (b, s)), "attention_mask": padding_mask}
    return Spec(net, inputs, {0: "batch", 1: "seq"}, seqs=(32, 64, 128), outputs=("last_hidden_state",), max_dims={"seq": config.n_positions})


def albert_xxlarge() -> Spec:
    """``transformers.AlbertModel`` in ALBERT-xxlarge's configuration (hidden 4096, 64 heads, 12 layers sharing one
    set of weights, 223M parameters, about 0.9 GB), random weights; ``input_ids`` and ``attention_mask`` ``[batch, seq]``."""
    from transformers import AlbertConfig, AlbertModel

    config = AlbertConfig(hidden_size=4096, num_attention_heads=64, intermediate_size=16384, num_hidden_layers=12, embedding_size=128)
    net = BertLastHidden(AlbertModel(config))
    inputs = {"input_ids": lambda b, s: torch.randint(0, config.vocab_size, (b, s)), "attention_mask": padding_mask}
    return Spec(net, inputs, {0: "batch", 1: "seq"}, seqs=(64, 128), outputs=("last_hidden_state",),
                max_dims={"seq": config.max_position_embeddings})


class CausalDecoder(nn.Module):
    """``nn.TransformerDecoder`` (batch first) with a fixed causal target mask, as a language model calls it. Its layers
    are deep copies of one layer: equal weights, so each layer projects the same ``memory`` by the same matrices."""

    def __init__(self, d_model: int, heads: int, ff: int, layers: int, tgt_len: int):
        super().__init__()
        layer = nn.TransformerDecoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, num_layers=layers)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(tgt_len))

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return self.decoder(tgt, memory, tgt_mask=self.mask, tgt_is_causal=True)


def transformer_decoder(d_model: int = 256, heads: int = 4, ff: int = 1024, layers: int = 3, tgt_len: int = 32, memory_len: int = 64) -> Spec:
    """``nn.TransformerDecoder``; ``tgt`` ``[batch, tgt_len, d_model]`` and ``memory`` ``[batch, memory_len, d_model]``, batch symbolic."""
    torch.backends.mha.set_fastpath_enabled(False)  # the fused kernel has no ONNX export
    inputs = {"tgt": lambda b, s: torch.randn(b, tgt_len, d_model), "memory": lambda b, s: torch.randn(b, memory_len, d_model)}
    return Spec(CausalDecoder(d_model, heads, ff, layers, tgt_len), inputs, {0: "batch"})


BENCHMARK_ONLY = ("resnet50", "mobilenet_v2", "bert_base", "gpt2_small", "albert_xxlarge")  # not exported with --small
ON_REQUEST = ("gpt2_small", "albert_xxlarge")  # exported only when --only names them (bench_end_to_end.py's models)


def model_builders(small: bool) -> dict[str, Callable[[], Spec]]:
    """name -> builder, at the benchmark sizes or (``small``) at test-fixture sizes."""
    if small:
        return {"lstm_cell_loop": lambda: lstm_cell_loop(32, 4), "gru_cell_loop": lambda: gru_cell_loop(24, 3),
                "lstm_cell_steps": lambda: lstm_cell_steps(16, 4), "gru_cell_steps": lambda: gru_cell_steps(16, 3),
                "resnet_tiny": lambda: resnet_tiny(8, 10), "mobilenet_tiny": lambda: mobilenet_tiny(8, 4, 10),
                "bert_tiny": lambda: bert_tiny(32, 4, 64, 2, 100, 32), "bert_hf_tiny": bert_hf_tiny,
                "transformer_decoder": lambda: transformer_decoder(32, 2, 64, 2, 8, 12), "written_out_norms": lambda: written_out_norms(32, 8),
                "transformers_rms_norms": lambda: transformers_rms_norms(32, 8)}
    return {"lstm_cell_loop": lstm_cell_loop, "gru_cell_loop": gru_cell_loop, "lstm_cell_steps": lstm_cell_steps,
            "gru_cell_steps": gru_cell_steps, "resnet_tiny": resnet_tiny,
            "mobilenet_tiny": mobilenet_tiny, "bert_tiny": bert_tiny, "transformer_decoder": transformer_decoder, "written_out_norms": written_out_norms,
            "transformers_rms_norms": transformers_rms_norms,
            "resnet50": resnet50, "mobilenet_v2": mobilenet_v2, "bert_base": bert_base, "gpt2_small": gpt2_small,
            "albert_xxlarge": albert_xxlarge}


# --------------------------------------------------------------------------- export


@contextlib.contextmanager
def _quiet():
    """Silences the exporters' warnings, logging and progress chatter (errors still raise)."""
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def export_torchscript(spec: Spec, path: Path) -> str:
    """The TorchScript exporter at opset 17, symbolic axes named by ``dynamic_axes``."""
    torch.onnx.export(spec.module, spec.example(), str(path), dynamo=False, opset_version=TORCHSCRIPT_OPSET,
                      input_names=list(spec.inputs), output_names=list(spec.outputs),
                      dynamic_axes={name: dict(spec.symbolic) for name in spec.inputs})
    return ""


def _dynamo(spec: Spec, path: Path, dims: dict[int, object]) -> None:
    # dynamic_shapes by position: keyed by name it must match forward's parameter (nn.Sequential's is "input")
    torch.onnx.export(spec.module, spec.example(), str(path), dynamo=True, input_names=list(spec.inputs), output_names=list(spec.outputs),
                      dynamic_shapes=tuple(dims for _ in spec.inputs), external_data=False)


def export_dynamo(spec: Spec, path: Path) -> str:
    """The dynamo exporter at its default opset with named ``Dim``s; ``Dim.DYNAMIC`` when those are refused (returned as a note)."""
    Dim = torch.export.Dim
    named = {name: Dim(name, min=1, max=spec.max_dims.get(name, MAX_DIM)) for name in set(spec.symbolic.values())}  # one Dim per name
    try:
        _dynamo(spec, path, {axis: named[name] for axis, name in spec.symbolic.items()})
        return ""
    except Exception as named_error:  # noqa: BLE001 - retried below, reported if that fails too
        try:
            _dynamo(spec, path, {axis: Dim.DYNAMIC for axis in spec.symbolic})
        except Exception:  # noqa: BLE001
            raise named_error from None
        return f"named Dim refused ({_first_line(named_error)}), Dim.DYNAMIC used"


def _first_line(error: BaseException, limit: int = 200) -> str:
    """The error's type and first line; for the dynamo exporter's long reports, the line its "Exception summary" gives."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", str(error)).splitlines() if line.strip()]
    summary = next((i for i, line in enumerate(lines) if line.endswith("Exception summary")), None)
    text = lines[summary + 1] if summary is not None and summary + 1 < len(lines) else (lines or [""])[0]
    return f"{type(error).__name__}: {text[:limit]}"


def export_static(spec: Spec, exporter: str, path: Path) -> None:
    """The same model exported with every dim fixed at taso's default measurement sizes (batch 1, seq 128):
    what a user without dynamic axes gets, the baseline the symbolic export's speedup is compared with."""
    example = spec.make(1, STATIC_SEQ)
    if exporter == "dynamo":
        torch.onnx.export(spec.module, example, str(path), dynamo=True, input_names=list(spec.inputs), output_names=list(spec.outputs),
                          external_data=False)
    else:
        torch.onnx.export(spec.module, example, str(path), dynamo=False, opset_version=TORCHSCRIPT_OPSET,
                          input_names=list(spec.inputs), output_names=list(spec.outputs))


def export_one(name: str, build: Callable[[], Spec], exporter: str, out_dir: Path, static: bool = False) -> tuple[Result, Spec | None]:
    """Builds the model (seeded, eval mode) and exports it; an exporter's failure becomes the result's error."""
    result = Result(f"{name}.{exporter}.onnx")
    try:
        torch.manual_seed(SEED)
        spec = build()
        spec.module.eval()
    except ImportError as e:
        result.error = f"not built: {_first_line(e)}"
        return result, None
    path = out_dir / result.name
    tmp = path.with_suffix(".tmp.onnx")
    try:
        with torch.no_grad(), _quiet():
            result.note = (export_dynamo if exporter == "dynamo" else export_torchscript)(spec, tmp)
            if static:
                export_static(spec, exporter, out_dir / f"{name}.{exporter}.static.onnx")
        os.replace(tmp, path)
        result.path = path
    except Exception as e:  # noqa: BLE001 - an exporter's refusal is a fact to report, not a crash
        result.error = f"export failed: {_first_line(e, 300)}"
    finally:
        tmp.unlink(missing_ok=True)
    return result, spec


# --------------------------------------------------------------------------- checks and report


def _dims(value: onnx.ValueInfoProto) -> str:
    """``name[d0,d1,...]`` with each dim's dim_param name or value (``?`` when neither)."""
    shape = value.type.tensor_type.shape.dim
    dims = [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?") for d in shape]
    return f"{value.name}[{','.join(dims)}]"


def io_dims(model: onnx.ModelProto) -> str:
    """The graph's inputs (initializers excluded) and outputs with their dims."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = " ".join(_dims(v) for v in model.graph.input if v.name not in initializers)
    outputs = " ".join(_dims(v) for v in model.graph.output)
    return f"{inputs} -> {outputs}"


def op_histogram(model: onnx.ModelProto) -> dict[str, int]:
    """op_type -> count over the main graph (and any subgraphs), most frequent first."""
    counts: collections.Counter[str] = collections.Counter()

    def walk(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            counts[node.op_type] += 1
            for attr in node.attribute:
                for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                    walk(sub)

    walk(model.graph)
    return dict(counts.most_common())


def run_checks(spec: Spec, path: Path) -> list[str]:
    """Runs the file on ONNX Runtime at every batch (and seq) size; "b3 OK", or "b3s9 <error>" per size."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4  # failures are reported by the check, not logged
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    symbolic_seq = 1 in spec.symbolic and len(spec.seqs) > 1
    checks = []
    for batch, seq in itertools.product(BATCHES, spec.seqs):
        label = f"b{batch}s{seq}" if symbolic_seq else f"b{batch}"
        checks.append(f"{label} {_check_one(spec, session, batch, seq)}")
    return checks


def _check_one(spec: Spec, session, batch: int, seq: int) -> str:
    """OK when ONNX Runtime's outputs match PyTorch's at this size, else the error or the first mismatch."""
    xs = spec.make(batch, seq)
    try:
        gots = session.run(None, {name: x.numpy() for name, x in zip(spec.inputs, xs)})
    except Exception as e:  # noqa: BLE001 - the point of the check
        return _ort_error(e)
    with torch.no_grad():
        wants = spec.module(*xs)
    wants = [w.numpy() for w in (wants if isinstance(wants, (tuple, list)) else (wants,))]
    if len(gots) != len(wants):
        return f"{len(gots)} outputs != torch {len(wants)}"
    for got, want in zip(gots, wants):
        if got.shape != want.shape:
            return f"shape {list(got.shape)} != torch {list(want.shape)}"
        # atol 1e-4, scaled up for deep random networks whose outputs run into the hundreds
        if not np.allclose(got, want, rtol=1e-3, atol=1e-4 * max(1.0, float(np.max(np.abs(want), initial=0.0)))):
            return f"mismatch max|d|={float(np.max(np.abs(got - want))):.2e} max|torch|={float(np.max(np.abs(want))):.2e}"
    return "OK"


def lost_dims(spec: Spec, model: onnx.ModelProto) -> list[str]:
    """The symbolic axes the exporter wrote as fixed values (it specialised them), as "x.0=2"; a missing input as "x missing"."""
    values = {v.name: v for v in model.graph.input}
    lost = []
    for name in spec.inputs:
        if name not in values:
            lost.append(f"{name} missing")
            continue
        dims = values[name].type.tensor_type.shape.dim
        lost += [f"{name}.{axis}={dims[axis].dim_value}" for axis in spec.symbolic if axis < len(dims) and not dims[axis].dim_param]
    return lost


def _ort_error(error: BaseException) -> str:
    """ONNX Runtime's message without its boilerplate (status prefix, source path)."""
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : |Non-zero status code returned while running |/onnxruntime_src/\S+ ", "", str(error))
    return " ".join(text.split())[:200]


def report(result: Result, spec: Spec | None, show_ops: bool) -> None:
    """One line per file: name, size, inputs/outputs with dims, runs; a failed export is one line too."""
    if result.path is None:
        print(f"{result.name}: SKIPPED {result.error}", flush=True)
        return
    model = onnx.load(str(result.path))
    checks = run_checks(spec, result.path)
    failures = [c for c in checks if not c.endswith(" OK")]
    lost = lost_dims(spec, model)
    problems = ([f"NOT SYMBOLIC {', '.join(lost)}"] if lost else []) + failures
    verdict = "FAIL " + "; ".join(problems) if problems else "OK"
    note = f" ({result.note})" if result.note else ""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), "?")
    print(f"{result.name}: {result.path.stat().st_size} B opset {opset} {io_dims(model)} runs {','.join(c.split()[0] for c in checks)}: "
          f"{verdict}{note}", flush=True)
    if show_ops:
        print("    ops: " + ", ".join(f"{op}: {n}" for op, n in op_histogram(model).items()), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path, help="where the .onnx files go (created)")
    parser.add_argument("--small", action="store_true", help="test-fixture sizes (each file well under 300 KB)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="export only these models")
    parser.add_argument("--exporter", choices=(*EXPORTERS, "both"), default="both")
    parser.add_argument("--ops", action="store_true", help="also print each file's op_type histogram")
    parser.add_argument("--static-too", action="store_true",
                        help="also export each model with fixed sizes (batch 1, seq 128) as NAME.EXPORTER.static.onnx (bench_symbolic's baseline)")
    args = parser.parse_args(argv)

    builders = model_builders(args.small)
    unknown = sorted(set(args.only or ()) - set(builders))
    if unknown:
        big = " (benchmark-only: not with --small)" if set(unknown) <= set(BENCHMARK_ONLY) else ""
        parser.error(f"unknown model(s) {unknown}{big}; known: {sorted(builders)}")
    exporters = EXPORTERS if args.exporter == "both" else (args.exporter,)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    for name in args.only or [n for n in builders if n not in ON_REQUEST]:
        for exporter in exporters:
            report(*export_one(name, builders[name], exporter, args.out_dir, args.static_too), show_ops=args.ops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
