"""ONNX import and export: the only place where taso's IR meets onnx protobufs."""

from .exporter import FoldingPlan, folded_weights, folding_plan, to_onnx_model, weightless
from .importer import MAX_OPSET, MIN_OPSET, load_onnx, read_model

__all__ = ["load_onnx", "read_model", "to_onnx_model", "folding_plan", "folded_weights", "FoldingPlan", "weightless", "MIN_OPSET", "MAX_OPSET"]
