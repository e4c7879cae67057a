"""The NumPy reference executor: runs a graph with every op's reference semantics."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .errors import TasoError
from .ir import Graph, TensorType

__all__ = ["run", "run_values"]


def _check_inputs(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    missing = [n for n in graph.inputs if n not in inputs]
    if missing:
        raise TasoError(f"missing graph input(s) {missing}; the graph takes {[f'{n}: {t}' for n, t in graph.inputs.items()]}")
    arrays = {}
    for name, expected in graph.inputs.items():
        array = np.asarray(inputs[name])
        if TensorType.of(array) != expected:
            raise TasoError(f"input {name!r} is {TensorType.of(array)}, the graph expects {expected}")
        arrays[name] = array
    return arrays


def run_values(graph: Graph, inputs: Mapping[str, np.ndarray], keep: set[str] | None = None) -> dict[str, np.ndarray]:
    """Evaluates the graph; returns the values named in ``keep`` (default: the outputs).

    Intermediate values are freed after their last use, so large models fit in memory.
    """
    env: dict[str, np.ndarray] = dict(_check_inputs(graph, inputs))
    env.update(graph.weights)
    keep = set(graph.outputs) if keep is None else set(keep)
    order = graph.topological_order()
    last_use: dict[str, int] = {}
    for i, node in enumerate(order):
        for v in node.inputs:
            last_use[v] = i
    for i, node in enumerate(order):
        results = node.op.evaluate([env[v] for v in node.inputs], node.params)
        for name, value, t in zip(node.outputs, results, (graph.type(o) for o in node.outputs)):
            if value.shape != t.shape:
                raise TasoError(f"{node.op.name} node {node.name!r} produced shape {value.shape}, its type says {t}")
            env[name] = value if value.dtype.name == t.dtype else value.astype(t.dtype)
        for v in node.inputs:
            if last_use.get(v) == i and v not in keep and v not in graph.weights and v not in graph.inputs:
                del env[v]
    return {k: env[k] for k in keep}


def run(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs the graph; returns ``{output export name: array}`` in output order."""
    values = run_values(graph, inputs)
    names = graph.meta.output_names or graph.outputs
    return {name: values[value] for name, value in zip(names, graph.outputs)}
