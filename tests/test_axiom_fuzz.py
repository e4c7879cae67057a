"""Adversarial axiom validation: shapes, ranks and integers drawn independently of each axiom's sampler."""

from __future__ import annotations

import numpy as np
import pytest
from taso.specs import AXIOMS, axiom
from taso.specs.terms import ge, rank
from taso.verifier.axiom_check import compare_sides
from taso.verifier.axiom_fuzz import compose, fuzz_axiom, fuzz_compositions


@pytest.mark.parametrize("ax", AXIOMS, ids=lambda a: a.name)
def test_axiom_survives_adversarial_valuations(ax):
    report = fuzz_axiom(ax, count=80, seed=3)
    assert report.ok, f"{ax.name} is false: {report.failures[:3]}"
    # both sides ill typed counts as agreement: the axiom must have been compared on values, not only on BOTTOM
    assert report.defined >= 10, f"{ax.name}: only {report.defined} of {report.tried} valuations typed its sides"


def test_random_compositions_of_two_axioms_hold():
    failing = [r for r in fuzz_compositions(count=60, per_pair=30, seed=5) if not r.ok]
    assert not failing, [(r.name, r.failures[:1]) for r in failing]


# The three axioms an audit found false, each at the valuation it reported: the guard now excludes it,
# and the same equation without the new guard is caught by the fuzzer.
COUNTEREXAMPLES = [
    ("matmul-assoc", {"x": (1,), "y": (1, 1, 3), "z": (1, 3, 3)}),
    ("transpose-matmul", {"x": (3,), "y": (3, 3, 2)}),
    ("add-concat-seams", {"x": (2,), "z": (2,), "y": (2, 2), "w": (2, 2), "ax": 0, "bx": 1}),
    ("mul-concat-seams", {"x": (2,), "z": (2,), "y": (2, 2), "w": (2, 2), "ax": 0, "bx": 1}),
]


def _env(valuation):
    rng = np.random.default_rng(0)
    return {k: (rng.standard_normal(v) if isinstance(v, tuple) else v) for k, v in valuation.items()}


@pytest.mark.parametrize("name,valuation", COUNTEREXAMPLES, ids=[c[0] for c in COUNTEREXAMPLES])
def test_audited_counterexample_is_excluded_by_the_guard(name, valuation):
    assert compare_sides(axiom(name), _env(valuation), "float64", 1e-7) is None


@pytest.mark.parametrize("name,valuation", COUNTEREXAMPLES, ids=[c[0] for c in COUNTEREXAMPLES])
def test_the_old_guard_is_caught_by_the_fuzzer(name, valuation):
    ax = axiom(name)
    weakened = type(ax)(ax.name + "-old", ax.lhs, ax.rhs, ax.sample, when=tuple(c for c in ax.when if c not in _NEW_GUARDS[name]), rtol=ax.rtol)
    assert compare_sides(weakened, _env(valuation), "float64", 1e-7) is not None  # the counterexample is real
    assert not fuzz_axiom(weakened, count=600, seed=0).ok


def _new_guards():
    from taso.specs.terms import eq, tensors

    x, y, z = tensors("x y z")
    return {
        "matmul-assoc": {ge(rank(x), 2), ge(rank(z), 2)},
        "transpose-matmul": {eq(rank(x), 2), eq(rank(y), 2)},
        "add-concat-seams": {ge(rank(x), rank(y))},
        "mul-concat-seams": {ge(rank(x), rank(y))},
    }


_NEW_GUARDS = _new_guards()


def test_composition_substitutes_a_term_for_a_variable():
    outer, inner = axiom("matmul-assoc"), axiom("add-comm") if any(a.name == "add-comm" for a in AXIOMS) else AXIOMS[0]
    composed = compose(outer, "x", inner)
    assert "x_i" in str(composed.lhs) or "y_i" in str(composed.lhs)
    assert "x" not in {v.name for v in composed.variables}


# ---- the validation has teeth: mutants of the axioms are caught ---------------------------------------------

from taso.verifier.axiom_mutants import EQUIVALENT, mutants  # noqa: E402

# Mutants that a 300-valuation round misses and a 1,500-valuation round catches (rare guarded shapes).
NEEDS_STRONG = {("matmul-assoc", "drop guard rank(x) >= 2"), ("mul-concat-seams", "drop guard rank(x) >= rank(y)"),
                ("transpose-concat-3d", "drop guard ax >= 0"), ("transpose-concat-3d", "drop guard ax < 3"),
                ("add-broadcast-ones-4d", "drop guard rank(y) == 4"), ("conv2d-add-inputs", "drop guard dim(x, 1) == dim(y, 1)")}
MUTATED = [axiom(n) for n in ("matmul-assoc", "transpose-matmul", "add-concat-seams", "mul-concat-seams")] + list(AXIOMS[::12])


@pytest.mark.parametrize("ax", MUTATED, ids=lambda a: a.name)
def test_every_mutant_of_the_axiom_is_caught_or_reviewed_as_equivalent(ax):
    missed = []
    for text, mutant in mutants(ax):
        if (ax.name, text) in EQUIVALENT:
            continue
        strong = (ax.name, text) in NEEDS_STRONG
        report = fuzz_axiom(mutant, count=1500 if strong else 300, seed=2 if strong else 1, patience=20 if strong else 10, first_failure=True)
        if report.ok:
            missed.append(text)
    assert not missed, f"mutants of {ax.name} the adversarial validation does not catch: {missed}"
