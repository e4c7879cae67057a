"""ONNX import and export: the only place where taso's IR meets onnx protobufs."""

from .exporter import FoldingPlan, export_onnx, folded_weights, folding_plan, save_onnx, weightless
from .importer import MAX_OPSET, MIN_OPSET, load_onnx, read_model

__all__ = ["load_onnx", "read_model", "export_onnx", "save_onnx", "folding_plan", "folded_weights", "FoldingPlan", "weightless", "MIN_OPSET", "MAX_OPSET"]
