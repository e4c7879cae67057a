"""Validation of axioms against the NumPy semantics: a specification cannot silently lie.

Each axiom is evaluated in the NumPy model of :mod:`taso.specs.terms` on valuations from
its own sampler and on perturbations of them (a dimension or an integer changed, a rank
changed, a tensor made ill-typed). Wherever the guards hold, both sides must be ill-typed
together or equal arrays. This is exactly the property that makes Z3 proofs from the
axioms sound, so an axiom that fails anywhere is a bug in the spec.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from taso.specs import Axiom, spec_of
from taso.specs.terms import App, TensorVar, apps, concrete_params, evaluate, holds

__all__ = ["AxiomReport", "validate_axiom", "perturbations", "check_shape_rules", "compare_sides", "stable_seed"]


@dataclass
class AxiomReport:
    """What validating one axiom found.

    Attributes:
        name: the axiom.
        checked: valuations where the guards held and both sides were compared.
        defined: of those, valuations where both sides were well typed (real arrays).
        sampled_defined: well-typed comparisons among the sampler's own valuations.
        failures: one line per valuation where the axiom does not hold.
    """

    name: str
    checked: int = 0
    defined: int = 0
    sampled_defined: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def stable_seed(name: str, seed: int) -> int:
    return seed * 1_000_003 + sum((i + 1) * ord(ch) for i, ch in enumerate(name))


def perturbations(valuation: Mapping[str, Any], rng: np.random.Generator, count: int) -> Iterator[dict[str, Any]]:
    """Valuations near ``valuation``, each one change away.

    The changes: a tensor made ill-typed (None), a dimension nudged, a leading dimension
    dropped or added, two dimensions of one tensor swapped, the shapes of two tensors (or
    the values of two integers) exchanged, an integer nudged. Exchanges reach the
    ill-typed valuations whose sizes still add up (``concat(z, x)`` against ``concat(y, w)``).
    """
    names = sorted(valuation)
    for _ in range(count):
        name = names[int(rng.integers(0, len(names)))]
        value = valuation[name]
        changed = dict(valuation)
        kind = int(rng.integers(0, 6))
        same_kind = [n for n in names if n != name and isinstance(valuation[n], tuple) == isinstance(value, tuple)]
        if kind == 5 and same_kind:
            other = same_kind[int(rng.integers(0, len(same_kind)))]
            changed[name], changed[other] = valuation[other], value
        elif not isinstance(value, tuple):
            changed[name] = value + int(rng.choice((-2, -1, 1, 2)))
        elif kind == 0:
            changed[name] = None
        elif kind == 1 and value:
            k = int(rng.integers(0, len(value)))
            changed[name] = value[:k] + (max(1, value[k] + int(rng.choice((-1, 1)))),) + value[k + 1 :]
        elif kind == 2 and value:
            changed[name] = value[1:]
        elif kind == 4 and len(value) > 1:
            i, j = (int(v) for v in rng.choice(len(value), 2, replace=False))
            swapped = list(value)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            changed[name] = tuple(swapped)
        else:
            changed[name] = (int(rng.integers(1, 3)),) + value
        yield changed


def _environment(axiom: Axiom, valuation: Mapping[str, Any], rng: np.random.Generator, dtype: str) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for var in axiom.variables:
        value = valuation[var.name]
        if isinstance(var, TensorVar):
            env[var.name] = None if value is None else rng.standard_normal(value).astype(dtype)
        else:
            env[var.name] = int(value)
    return env


def compare_sides(axiom: Axiom, env: Mapping[str, Any], dtype: str, rtol: float) -> str | None:
    """None when the axiom holds on ``env`` (guards false included); otherwise what went wrong."""
    if not all(holds(c, env, dtype) for c in axiom.when):
        return None
    lhs, rhs = evaluate(axiom.lhs, env, dtype), evaluate(axiom.rhs, env, dtype)
    if lhs is None and rhs is None:
        return None
    if lhs is None or rhs is None:
        return f"only the {'left' if lhs is None else 'right'} side is ill-typed"
    if lhs.shape != rhs.shape:
        return f"shapes differ: {lhs.shape} vs {rhs.shape}"
    # NOTE: the axioms speak of the extended reals. A NaN is no value there (inf * 0 in x @ eye,
    # for an all-padding max-pool window's -inf), so a position where either side is NaN says
    # nothing; an infinity is a value (relu(-inf) = 0 against -inf differs), compared exactly.
    defined = ~(np.isnan(lhs) | np.isnan(rhs))
    lhs, rhs = lhs[defined], rhs[defined]
    if not np.array_equal(np.where(np.isinf(lhs), lhs, 0.0), np.where(np.isinf(rhs), rhs, 0.0)):
        return "an infinity on one side only (or of the other sign)"
    finite = np.isfinite(rhs)
    lhs, rhs = lhs[finite], rhs[finite]
    with np.errstate(all="ignore"):
        scale = max(float(np.max(np.abs(rhs))) if rhs.size else 0.0, 1.0)
        if not np.allclose(lhs, rhs, rtol=rtol, atol=rtol * scale):
            return f"values differ (max difference {float(np.max(np.abs(lhs - rhs))):.3g})"
    return None


def validate_axiom(axiom: Axiom, trials: int = 30, perturbed: int = 4, seed: int = 0, dtype: str = "float64") -> AxiomReport:
    """Checks one axiom on ``trials`` sampled valuations and ``perturbed`` perturbations of each.

    Values are compared with the axiom's tolerance in float64, and with 1e-4 in float32.

    Returns:
        The report; ``report.ok`` is False when the axiom fails anywhere.
    """
    rng = np.random.default_rng(stable_seed(axiom.name, seed))
    report = AxiomReport(axiom.name)
    for _ in range(trials):
        sampled = axiom.sample(rng)
        for index, valuation in enumerate([sampled, *perturbations(sampled, rng, perturbed)]):
            env = _environment(axiom, valuation, rng, dtype)
            problem = compare_sides(axiom, env, dtype, axiom.rtol if dtype == "float64" else 1e-4)
            if problem is not None:
                shown = {k: valuation[k] for k in sorted(env)}
                report.failures.append(f"{problem} at {shown}")
                continue
            if all(holds(c, env, dtype) for c in axiom.when):
                report.checked += 1
                if evaluate(axiom.lhs, env, dtype) is not None:
                    report.defined += 1
                    report.sampled_defined += index == 0
    return report


def _shape_rule_problem(app: App, env: Mapping[str, Any], dtype: str) -> str | None:
    """None when the op's symbolic shape rule agrees with the registry on this well-typed application."""
    args = [evaluate(a, env, dtype) for a in app.args]
    value = evaluate(app, env, dtype)
    if value is None or any(a is None for a in args):
        return None
    spec = spec_of(app.op)
    params = dict(spec.registry_params(concrete_params(app, env, dtype), dtype))
    ranks = [a.ndim for a in args]
    if spec.normalize is not None:
        params = spec.normalize(params, ranks)
    outs, requirements = spec.shape([list(a.shape) for a in args], params)
    if [int(d) for d in outs[app.index]] != list(value.shape):
        return f"{app.op}: symbolic shape {outs[app.index]} but the registry computes {value.shape}"
    if not all(bool(r) for r in requirements):
        return f"{app.op}: a typing requirement is false on a well-typed application"
    return None


def check_shape_rules(axiom: Axiom, trials: int = 10, seed: int = 0, dtype: str = "float64") -> list[str]:
    """Checks the symbolic shape rule of every op application in an axiom against the registry.

    On valuations from the axiom's sampler (and perturbations), every well-typed application
    must have the dimensions its spec computes, and every requirement of the spec must hold:
    these become the verifier's ground facts, and a false fact would prove anything.
    """
    rng = np.random.default_rng(stable_seed(axiom.name, seed + 1))
    problems: list[str] = []
    for _ in range(trials):
        sampled = axiom.sample(rng)
        for valuation in [sampled, *perturbations(sampled, rng, 2)]:
            env = _environment(axiom, valuation, rng, dtype)
            for app in apps(axiom.lhs, axiom.rhs, *axiom.when):
                problem = _shape_rule_problem(app, env, dtype)
                if problem is not None:
                    problems.append(f"{problem} at {valuation}")
    return problems
