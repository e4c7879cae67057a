"""The registry of benchmark models and the functions that build and describe them.

A model is a function ``fn(builder, *, option=default, ...)`` that writes its graph
into a :class:`~._builder.GraphBuilder`. Its keyword-only parameters are the model's
options and their defaults are the full-size configuration, so the signature is the
single source of truth for what :func:`build` accepts.
"""

from __future__ import annotations

import copy
import functools
import inspect
import numbers
from collections.abc import Callable
from dataclasses import dataclass

import onnx

from . import bert, inception, nasnet, nasrnn, resnet, squeezenet, vgg
from ._builder import GraphBuilder

ModelFn = Callable[..., None]

_REGISTRY: dict[str, tuple[ModelFn, str]] = {
    "resnet50": (resnet.resnet50, "ResNet-50 v1.5, 224x224, bottleneck blocks [3, 4, 6, 3]"),
    "resnext50": (resnet.resnext50, "ResNeXt-50 32x4d, 224x224, grouped 3x3 convolutions"),
    "inception_v3": (inception.inception_v3, "Inception-v3, 299x299, Mixed_5b..7c, no aux head"),
    "squeezenet": (squeezenet.squeezenet, "SqueezeNet 1.1, 224x224, eight Fire modules"),
    "vgg19": (vgg.vgg19, "VGG-19, 224x224, 16 conv3x3 + 3 fully connected layers"),
    "nasnet_a": (nasnet.nasnet_a, "NASNet-A mobile (4 @ 1056), 224x224, searched cells"),
    "nasrnn": (nasrnn.nasrnn, "NasRNN cell unrolled over 5 steps, hidden 512, shared weights"),
    "bert": (bert.bert, "BERT encoder as in TASO: 8 layers, hidden 1024, 16 heads, seq 64"),
    "bert_base": (bert.bert_base, "BERT-base encoder: 12 layers, hidden 768, 12 heads, seq 128"),
}

_BUILD_OPTIONS = {"seed": 0}
"""Options of :func:`build` itself rather than of a model."""


@dataclass(frozen=True)
class ModelInfo:
    """What one benchmark model is and what it costs.

    Attributes:
        name: The registry name.
        description: One line for people.
        parameters: Weight elements stored in the initializers, BatchNormalization
            running statistics included (so ResNet-50 has 25.61M, not torchvision's 25.56M).
        nodes: Nodes in the graph.
        flops: 2 x the multiply-adds of every Conv, MatMul and Gemm for one inference.
        inputs: Each graph input's name and static shape.
        ops: Node count per ONNX operator.
        options: The model options it was described with, defaults filled in.
    """

    name: str
    description: str
    parameters: int
    nodes: int
    flops: int
    inputs: dict[str, tuple[int, ...]]
    ops: dict[str, int]
    options: dict[str, object]

    @property
    def gflops(self) -> float:
        """:attr:`flops` in units of 10^9."""
        return self.flops / 1e9


def names() -> list[str]:
    """Returns the registry names of all models, in a stable order."""
    return list(_REGISTRY)


def default_options(name: str) -> dict[str, object]:
    """Returns the options ``name`` accepts and their full-size defaults (``seed`` included).

    Raises:
        ValueError: If ``name`` is not a registered model.
    """
    fn = _entry(name)[0]
    defaults = {
        param.name: param.default
        for param in inspect.signature(fn).parameters.values()
        if param.kind is inspect.Parameter.KEYWORD_ONLY
    }
    return {**defaults, **_BUILD_OPTIONS}


def build(name: str, **options: object) -> onnx.ModelProto:
    """Builds a benchmark model as an ONNX ``ModelProto`` with seeded random weights.

    With no options the model is full size; options such as ``layers=2`` or
    ``image_size=64`` shrink it (see :func:`default_options`). ``seed`` (default 0)
    seeds the weights: the same name, options and seed give byte-identical models.

    Raises:
        ValueError: If the name or an option is unknown or an option value is invalid,
            including an image too small for the network (the message names the node).
    """
    fn, description = _entry(name)
    options = _checked(name, options)
    builder = GraphBuilder(name, options.pop("seed"))
    fn(builder, **options)
    return builder.to_model(doc_string=description)


def describe(name: str, **options: object) -> ModelInfo:
    """Counts a model's parameters, nodes and FLOPs without drawing its weights.

    Raises:
        ValueError: If the name or an option is unknown or an option value is invalid.
    """
    checked = _checked(name, options)
    model_options = {k: v for k, v in checked.items() if k not in _BUILD_OPTIONS}
    # A copy, so that a caller editing the dicts cannot corrupt the cache.
    return copy.deepcopy(_describe(name, tuple(model_options.items())))


@functools.lru_cache(maxsize=64)
def _describe(name: str, options: tuple[tuple[str, object], ...]) -> ModelInfo:
    fn, description = _entry(name)
    builder = GraphBuilder(name, materialize=False)
    fn(builder, **dict(options))
    return ModelInfo(
        name=name,
        description=description,
        parameters=builder.parameters,
        nodes=builder.nodes,
        flops=builder.flops,
        inputs=builder.inputs,
        ops=dict(builder.op_counts),
        options=dict(options),
    )


def _entry(name: str) -> tuple[ModelFn, str]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; valid names: {', '.join(_REGISTRY)}"
        ) from None


def _checked(name: str, options: dict[str, object]) -> dict[str, object]:
    """Returns ``options`` over the defaults after checking names, types and signs."""
    defaults = default_options(name)
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)} for model {name!r}; "
            f"valid options: {', '.join(defaults)}"
        )
    checked = dict(defaults)
    for key, value in options.items():
        # NOTE: every option is an int; bool is an Integral but never a valid size.
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise ValueError(f"option {key} of model {name!r} must be int, got {value!r}")
        minimum = 0 if key == "seed" else 1
        if value < minimum:
            raise ValueError(f"option {key} of model {name!r} must be >= {minimum}, got {value}")
        checked[key] = int(value)
    return checked
