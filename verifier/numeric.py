"""The cheap check first: run both sides of a rule on random inputs with the NumPy semantics.

A rule whose sides differ on random inputs is false, whatever Z3 would say; this finds
most wrong candidates in milliseconds and gives a concrete counterexample to report.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from taso.ir import Graph
from taso.rules import Rule

__all__ = ["counterexample"]


def _feeds(rule: Rule, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {i.name: rng.standard_normal(i.type.shape).astype(i.type.dtype) for i in rule.inputs}


def _run(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of a (tiny) rule side, node by node with the reference semantics."""
    env = dict(feeds)
    for node in graph.topological_order():
        env.update(zip(node.outputs, node.op.evaluate([env[v] for v in node.inputs], node.params)))
    return env


def _close(a: np.ndarray, b: np.ndarray, rtol: float) -> bool:
    if a.shape != b.shape:
        return False
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1.0)
    return bool(np.allclose(a, b, rtol=rtol, atol=rtol * scale, equal_nan=True))


def counterexample(rule: Rule, trials: int = 2, seed: int = 0, rtol: float = 1e-3) -> dict[str, Any] | None:
    """Evidence that the rule is false on its example shapes, or None when every trial agrees.

    Args:
        rule: a rule whose sides type-check.
        trials: how many random input sets to try.
        seed: the seed of the first trial (recorded in the counterexample, to reproduce it).
        rtol: tolerance relative to the largest magnitude of the target's output.

    Returns:
        ``{"seed", "source", "target", "max_abs_diff"}`` for the first mapped output that differs.
    """
    source, target = rule.side_graph("source"), rule.side_graph("target")
    for trial in range(trials):
        feeds = _feeds(rule, np.random.default_rng(seed + trial))
        got, want = _run(source, feeds), _run(target, feeds)
        for s, t in rule.outputs:
            a, b = np.asarray(got[s], np.float64), np.asarray(want[t], np.float64)
            if not _close(a, b, rtol):
                diff = float(np.nanmax(np.abs(a - b))) if a.shape == b.shape else float("inf")
                return {"seed": seed + trial, "source": s, "target": t, "max_abs_diff": diff}
    return None
