"""Normalizations as transformers' code writes them, for the exports of :mod:`taso.models.symbolic_exports`: the forms the
exporters leave decomposed (tests/test_norm_forms.py)."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["WrittenOutNorms", "TransformersRmsNorms"]


class WrittenOutNorms(nn.Module):
    """Two products, each followed by a normalization written out in Python as transformers' code writes it rather
    than by ``torch.nn``: BERT-era layer norm (``BertLayerNorm``, epsilon 1e-12) and Llama's RMS norm
    (``LlamaRMSNorm``, epsilon 1e-6). What the exporters leave decomposed."""

    def __init__(self, d_model: int):
        super().__init__()
        self.first, self.second = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.gamma, self.beta = nn.Parameter(1 + 0.1 * torch.randn(d_model)), nn.Parameter(0.1 * torch.randn(d_model))
        self.scale = nn.Parameter(1 + 0.1 * torch.randn(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        mean = h.mean(-1, keepdim=True)
        variance = (h - mean).pow(2).mean(-1, keepdim=True)
        h = self.gamma * ((h - mean) / torch.sqrt(variance + 1e-12)) + self.beta
        h = self.second(h)
        variance = h.pow(2).mean(-1, keepdim=True)
        return self.scale * (h * torch.rsqrt(variance + 1e-6))


class TransformersRmsNorms(nn.Module):
    """Two products, each followed by an RMS norm of transformers' own: ``LlamaRMSNorm`` and ``T5LayerNorm`` (epsilon
    1e-6), their code as the library ships it (the casts to float32 and back included)."""

    def __init__(self, d_model: int):
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaRMSNorm
        from transformers.models.t5.modeling_t5 import T5LayerNorm

        self.first, self.second = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.llama, self.t5 = LlamaRMSNorm(d_model, eps=1e-6), T5LayerNorm(d_model, eps=1e-6)
        for norm in (self.llama, self.t5):
            norm.weight.data = 1 + 0.1 * torch.randn(d_model)  # trained-looking scales, not the ones the clean-up folds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.t5(self.second(self.llama(self.first(x))))
