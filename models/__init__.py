"""The benchmark model zoo: the networks of the TASO evaluation, built as ONNX.

Every model is generated from code, with no download and no PyTorch: static shapes,
float32, seeded random weights, opset 17, IR version 8. Random weights are scaled so
activations stay O(1) through the deepest networks, which keeps comparisons between
ONNX Runtime and the NumPy executor meaningful.

Example:
    >>> import taso.models as zoo
    >>> model = zoo.build("bert", layers=2, seq=16)   # a reduced BERT
    >>> zoo.describe("resnet50").nodes
    175

``build(name)`` with no options returns the full-size model; :func:`default_options`
lists what each model accepts.
"""

from ._zoo import ModelInfo, build, default_options, describe, names

__all__ = ["ModelInfo", "build", "default_options", "describe", "names"]
