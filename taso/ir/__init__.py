"""The graph IR: typed values, immutable nodes and graphs (:mod:`.graph`), size symbols (:mod:`.dims`), the lookups
matching and the search read a graph by (:mod:`.index`), and the reference executor (:mod:`.execute`).

The IR never imports onnx; conversion lives in :mod:`taso.onnx`.
"""

from .graph import Graph, GraphMeta, Node, OpaqueType, Params, TensorType, check, folds_when_constant, is_numeric

__all__ = ["TensorType", "OpaqueType", "is_numeric", "Params", "Node", "Graph", "GraphMeta", "check", "folds_when_constant"]
