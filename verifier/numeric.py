"""The cheap check first: run both sides of a rule on random inputs with the NumPy semantics.

A rule whose sides differ on random inputs is false, whatever Z3 would say; this finds
most wrong candidates in milliseconds and gives a concrete counterexample to report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from taso.errors import TasoError
from taso.ir import Graph
from taso.rules import Rule

__all__ = ["counterexample", "random_shapes", "close"]

DIM_CHOICES = (1, 2, 3, 4, 5, 6)


def _feeds(rule: Rule, rng: np.random.Generator, shapes: Mapping[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    return {i.name: rng.standard_normal((shapes or {}).get(i.name, i.type.shape)).astype(i.type.dtype) for i in rule.inputs}


def _run(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of a (tiny) rule side, node by node with the reference semantics."""
    env = dict(feeds)
    for node in graph.topological_order():
        env.update(zip(node.outputs, node.op.evaluate([env[v] for v in node.inputs], node.params)))
    return env


def close(a: np.ndarray, b: np.ndarray, rtol: float) -> bool:
    """``a`` equals ``b`` up to ``rtol`` of b's largest finite magnitude; equal infinities and NaNs agree.

    An infinity must not widen the tolerance (it would make every value close), and one
    side's NaN or infinity where the other is finite is a difference.
    """
    if a.shape != b.shape:
        return False
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    same_special = (a == b) | (np.isnan(a) & np.isnan(b))
    finite_b = b[np.isfinite(b)]
    scale = max(float(np.max(np.abs(finite_b))) if finite_b.size else 0.0, 1.0)
    with np.errstate(invalid="ignore"):
        near = np.abs(a - b) <= rtol * scale + rtol * np.abs(np.nan_to_num(b, posinf=0.0, neginf=0.0))
    return bool(np.all(same_special | near))


def _renamed_shapes(rule: Rule, rng: np.random.Generator) -> dict[str, tuple[int, ...]]:
    """Distinct example sizes above 1 mapped to new random sizes (each with probability 0.6), the same everywhere they occur.

    Equal example sizes stay equal and 1s stay 1 (they may be what broadcasts): a rule that
    holds at its example shapes and is true in general holds here too, whatever
    equalities its proof will need.
    """
    sizes = sorted({d for i in rule.inputs for d in i.type.shape if d != 1})
    new = {d: int(rng.choice(DIM_CHOICES[1:])) if rng.random() < 0.6 else d for d in sizes}  # some kept: a kernel size may be literal
    new[1] = 1
    return {i.name: tuple(new[d] for d in i.type.shape) for i in rule.inputs}


def _perturbed_shapes(rule: Rule, rng: np.random.Generator) -> dict[str, tuple[int, ...]]:
    """Some sizes changed independently (sizes of 1 included, which broadcast)."""
    return {i.name: tuple(int(rng.choice(DIM_CHOICES)) if rng.random() < 0.3 else d for d in i.type.shape) for i in rule.inputs}


def _fits(rule: Rule, shapes: Mapping[str, tuple[int, ...]]) -> bool:
    """Both sides type-check, the constraints hold and mapped outputs agree in type at these shapes."""
    try:
        if not rule.constraints_hold(shapes):
            return False
        source, target = rule.side_graph("source", shapes), rule.side_graph("target", shapes)
    except TasoError:
        return False
    return all(source.type(s) == target.type(t) for s, t in rule.outputs)


def random_shapes(rule: Rule, rng: np.random.Generator, count: int, tries: int = 60, independent: bool = True) -> list[dict[str, tuple[int, ...]]]:
    """Up to ``count`` distinct input shapes (of the example ranks) at which the rule is well formed.

    Half are consistent renamings of the example sizes; with ``independent``, the other half
    change sizes one by one (breaking equalities the rule's constraints do not state).
    """
    found: list[dict[str, tuple[int, ...]]] = []
    for attempt in range(tries):
        shapes = (_perturbed_shapes if independent and attempt % 2 else _renamed_shapes)(rule, rng)
        if shapes not in found and _fits(rule, shapes):
            found.append(shapes)
            if len(found) == count:
                break
    return found


def counterexample(rule: Rule, trials: int = 2, seed: int = 0, rtol: float = 1e-3, shapes: int = 4, independent: bool = False) -> dict[str, Any] | None:
    """Evidence that the rule is false, or None when every trial agrees.

    The rule runs at its example shapes and at up to ``shapes`` other shapes where it is
    well formed (sizes renamed consistently; with ``independent`` also changed one by one,
    for a rule whose constraints are final), ``trials`` random input sets each: a rule true
    only at the sizes it was found at is caught here.

    Args:
        rule: a rule whose sides type-check.
        trials: how many random input sets per shape.
        seed: the seed of the first trial (recorded in the counterexample, to reproduce it).
        rtol: tolerance relative to the largest finite magnitude of the target's output.
        shapes: how many shapes besides the example ones.

    Returns:
        ``{"seed", "shapes", "source", "target", "max_abs_diff"}`` for the first mapped output that differs.
    """
    rng = np.random.default_rng(seed)
    for at in [None, *random_shapes(rule, rng, shapes, independent=independent)]:
        source, target = rule.side_graph("source", at), rule.side_graph("target", at)
        for trial in range(trials):
            feeds = _feeds(rule, np.random.default_rng(seed + trial), at)
            with np.errstate(all="ignore"):
                got, want = _run(source, feeds), _run(target, feeds)
            for s, t in rule.outputs:
                a, b = np.asarray(got[s], np.float64), np.asarray(want[t], np.float64)
                if not close(a, b, rtol):
                    diff = float(np.nanmax(np.abs(a - b))) if a.shape == b.shape and a.size else float("inf")
                    return {"seed": seed + trial, "shapes": {k: list(v) for k, v in (at or {}).items()}, "source": s, "target": t, "max_abs_diff": diff}
    return None
