"""The reference executor: runs a graph with every op's semantics, on NumPy or on a device.

With ``device=None`` everything runs in NumPy on the host. With ``device=cupy`` (or any
module offering ``asarray``), inputs and weights are copied to the device once and every
op runs there through the same semantics (NumPy's dispatch protocols hand device arrays
to the device library); only opaque ONNX nodes and constant generators run on the host,
and their results are copied over. Outputs come back to the host at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TasoError
from .dims import concrete

if TYPE_CHECKING:  # the IR imports this module (Graph.run), never the other way round
    from .graph import Graph

__all__ = ["run", "run_values", "to_host"]


def _check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    missing = [n for n in graph.inputs if n not in inputs]
    if missing:
        raise TasoError(f"missing graph input(s) {missing}; the graph takes {[f'{n}: {t}' for n, t in graph.inputs.items()]}")
    arrays = {}
    for name, expected in graph.inputs.items():
        array = inputs[name]
        array = array if hasattr(array, "__cuda_array_interface__") else np.asarray(array)
        if tuple(array.shape) != concrete(expected.shape) or array.dtype.name != expected.dtype:
            at = f" (the reference executor runs a graph at its measurement sizes: {expected.concrete()})" if not expected.is_static else ""
            raise TasoError(f"input {name!r} is {array.dtype.name}{list(array.shape)}, the graph expects {expected}{at}")
        arrays[name] = array
    return arrays


def to_host(array) -> np.ndarray:
    """A host (NumPy) copy of a device array; host arrays pass through."""
    return array.get() if hasattr(array, "get") and hasattr(array, "__cuda_array_interface__") else np.asarray(array)


def run_values(graph: Graph, inputs: Mapping[str, np.ndarray], keep: set[str] | None = None,
               device: ModuleType | None = None, weights: Mapping[str, object] | None = None) -> dict[str, np.ndarray]:
    """Evaluates the graph; returns the values named in ``keep`` (default: the outputs).

    Args:
        graph: the graph.
        inputs: arrays by input name (host or device arrays).
        keep: values to return.
        device: an array module to run on (cupy), or None for the host.
        weights: the weights already on the device (to reuse across runs), by name.

    Intermediate values are freed after their last use, so large models fit in memory.
    """
    env: dict[str, object] = dict(_check_inputs(graph, inputs))
    if device is not None:
        env = {k: device.asarray(v) for k, v in env.items()}
        env.update(weights if weights is not None else {k: device.asarray(v) for k, v in graph.weights.items()})
    else:
        env.update(graph.weights)
    keep = set(graph.outputs) if keep is None else set(keep)
    order = graph.topological_order()
    last_use: dict[str, int] = {}
    for i, node in enumerate(order):
        for v in node.inputs:
            last_use[v] = i
    for i, node in enumerate(order):
        args = [env[v] for v in node.inputs]
        on_host = device is not None and (node.op.name == "opaque" or not node.inputs)
        if on_host:  # NOTE: the one host round trip: ops with no device semantics
            args = [to_host(a) for a in args]
        results = node.op.evaluate(args, node.params)
        for name, value, t in zip(node.outputs, results, (graph.type(o) for o in node.outputs)):
            if tuple(value.shape) != concrete(t.shape):
                raise TasoError(f"{node.op.name} node {node.name!r} produced shape {tuple(value.shape)}, its type says {t}")
            value = value if value.dtype.name == t.dtype else value.astype(t.dtype)
            env[name] = device.asarray(value) if on_host else value
        for v in dict.fromkeys(node.inputs):  # a node may read one value twice (add(p, p)): free it once
            if last_use.get(v) == i and v not in keep and v not in graph.weights and v not in graph.inputs:
                del env[v]
    return {k: env[k] for k in keep}


def run(graph: Graph, inputs: Mapping[str, np.ndarray], device: ModuleType | None = None) -> dict[str, np.ndarray]:
    """Runs the graph; returns ``{output export name: host array}`` in output order."""
    values = run_values(graph, inputs, device=device)
    names = graph.meta.output_names or graph.outputs
    return {name: to_host(values[value]) for name, value in zip(names, graph.outputs)}
