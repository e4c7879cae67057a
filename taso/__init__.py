"""taso: a tensor-graph superoptimizer (after TASO, SOSP 2019).

Public API::

    graph = taso.load_onnx("model.onnx", input_shapes={"x": (1, 3, 224, 224)})
    outputs = graph.run({"x": x})          # NumPy reference executor
    faster = taso.optimize(graph)          # search, output check and end-to-end timing on ONNX Runtime
    taso.save_onnx(faster, "out.onnx")     # checks an optimized graph against its original first
"""

from .errors import TasoError, Unsupported
from .ir import Graph, Node, Params, TensorType, check
from .onnx import load_onnx
from .pipeline import OutputMismatchError, export_onnx, optimize, save_onnx

__version__ = "0.1.0"

__all__ = ["Graph", "Node", "Params", "TensorType", "check", "load_onnx", "export_onnx", "save_onnx", "optimize",
           "OutputMismatchError", "TasoError", "Unsupported", "__version__"]
