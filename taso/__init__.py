"""taso: a tensor-graph superoptimizer (after TASO, SOSP 2019).

Public API::

    graph = taso.load_onnx("model.onnx", input_shapes={"x": (1, 3, 224, 224)})
    outputs = graph.run({"x": x})          # NumPy reference executor
    taso.save_onnx(graph, "out.onnx")      # or taso.export_onnx(graph) -> onnx.ModelProto
"""

from .errors import TasoError
from .ir import Graph, Node, Params, TensorType, check
from .onnx import export_onnx, load_onnx, save_onnx

__version__ = "0.1.0"

__all__ = ["Graph", "Node", "Params", "TensorType", "check", "load_onnx", "export_onnx", "save_onnx", "TasoError", "__version__"]
