"""Adversarial validation of the axioms: valuations drawn independently of each axiom's sampler.

:func:`taso.verifier.axiom_check.validate_axiom` samples with an axiom's own sampler, so it
only checks the shapes its author thought of: `matmul-assoc` with a vector left factor and a
batched middle one, or a concatenation seam whose broadcast operand has the higher rank,
slipped through. Here every tensor variable gets an arbitrary rank (0 to 4) and sizes from
{1, 2, 3} (1 broadcasts and degenerates), or a sampler valuation with every tensor's rank
and sizes scrambled at once, and every integer variable any small value (negative axes
included). Wherever the guards hold, both sides must be ill typed together or equal.

Compositions check the guards under terms that are not variables: an axiom whose tensor
variable is replaced by the left side of another axiom must still hold.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from taso.specs import AXIOMS, Axiom
from taso.specs.terms import App, IntVar, TensorVar, Term, evaluate, holds

from .axiom_check import compare_sides, stable_seed

__all__ = ["FuzzReport", "adversarial_valuations", "fuzz_axiom", "compose", "fuzz_compositions", "main"]

SIZES = (1, 2, 3)
MAX_RANK = 4


@dataclass
class FuzzReport:
    """What fuzzing one axiom (or composition) found: valuations tried, guarded, well typed, failures."""

    name: str
    tried: int = 0
    guarded: int = 0
    defined: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def _random_shape(rng: np.random.Generator) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.choice(SIZES, size=int(rng.integers(0, MAX_RANK + 1))))


def _scramble(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[int, ...]:
    """A shape near ``shape``: leading dims dropped or added, some sizes set to 1."""
    out = list(shape)
    move = int(rng.integers(0, 4))
    if move == 1 and out:
        out = out[int(rng.integers(1, len(out) + 1)):]
    elif move == 2:
        out = [int(rng.choice(SIZES)) for _ in range(int(rng.integers(1, 3)))] + out
    out = [1 if rng.random() < 0.2 else d for d in out]
    return tuple(out[-MAX_RANK:]) if len(out) > MAX_RANK else tuple(out)


def _random_int(sampled: int | None, rng: np.random.Generator) -> int:
    if sampled is not None and rng.random() < 0.5:
        return sampled + int(rng.integers(-1, 2)) if rng.random() < 0.3 else sampled
    return int(rng.integers(0, 3)) if rng.random() < 0.6 else int(rng.integers(-MAX_RANK, MAX_RANK + 1))


def _uniform_shape(size: int, low_rank: int, rng: np.random.Generator) -> tuple[int, ...]:
    """A shape of rank ``low_rank`` or one more whose sizes are all ``size`` but for some 1s:
    every axis lines up with every other, so what gets tested is ranks that differ by one."""
    return tuple(1 if rng.random() < 0.15 else size for _ in range(low_rank + int(rng.integers(0, 2))))


def adversarial_valuations(axiom: Axiom, rng: np.random.Generator, count: int) -> Iterator[dict[str, Any]]:
    """``count`` valuations of the axiom's variables, in three kinds taken in turn.

    Free shapes (any rank, sizes 1-3); shapes of one size (any rank: here every pair of
    axes is compatible, so rank mismatches are what gets tested); and the axiom's own
    sampler with every tensor scrambled (leading dims dropped or added, sizes set to 1).
    """
    for i in range(count):
        kind = i % 3
        sampled = axiom.sample(rng) if kind == 2 else {}
        size, low_rank = int(rng.choice(SIZES[1:])), int(rng.integers(0, MAX_RANK))
        valuation: dict[str, Any] = {}
        for var in axiom.variables:
            base = sampled.get(var.name)
            if isinstance(var, IntVar):
                valuation[var.name] = _random_int(base, rng)
            elif kind == 0:
                valuation[var.name] = _random_shape(rng)
            elif kind == 1 or base is None:
                valuation[var.name] = _uniform_shape(size, low_rank, rng)
            else:
                valuation[var.name] = _scramble(tuple(base), rng)
        yield valuation


def _environment(variables: Sequence[TensorVar | IntVar], valuation: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    return {v.name: (rng.standard_normal(valuation[v.name]) if isinstance(v, TensorVar) else int(valuation[v.name])) for v in variables}


def _as_sampled(axiom: Axiom, rng: np.random.Generator, perturb: bool = True) -> dict[str, Any]:
    """The axiom's own sampler's shapes as they are, with its integers perturbed (``perturb``) or as sampled.

    Scrambling every tensor at once almost never types an axiom over many tensors (a batch
    norm has six), so a mutant swapping two of them would go unnoticed without these; and a
    perturbed permutation is seldom one, so every fourth keeps the sampler's integers too.
    """
    sampled = axiom.sample(rng)
    return {v.name: (_random_int(sampled.get(v.name), rng) if perturb else int(sampled[v.name])) if isinstance(v, IntVar) else tuple(sampled[v.name])
            for v in axiom.variables}


def _rank_shifted(axiom: Axiom, rng: np.random.Generator) -> dict[str, Any]:
    """The axiom's own sampler's valuation with one tensor's last axis dropped or one appended: the leading axes keep
    their sizes, so guards on them still hold while the rank changes (conv2d-identity's ``dim(x, 1) == c`` with a 3-D
    x, which scrambling every tensor at once almost never reached)."""
    valuation = _as_sampled(axiom, rng, perturb=False)
    tensors = [v.name for v in axiom.variables if isinstance(v, TensorVar)]
    if tensors:
        name = tensors[int(rng.integers(0, len(tensors)))]
        shape = valuation[name]
        valuation[name] = shape[:-1] if shape and (len(shape) >= MAX_RANK or rng.random() < 0.5) else (*shape, int(rng.choice(SIZES)))
    return valuation


def _check(axiom: Axiom, valuation: Mapping[str, Any], rng: np.random.Generator, report: FuzzReport) -> bool:
    """Checks one valuation; True when it satisfied the guards."""
    env = _environment(axiom.variables, valuation, rng)
    report.tried += 1
    if not all(holds(c, env, "float64") for c in axiom.when):
        return False
    report.guarded += 1
    problem = compare_sides(axiom, env, "float64", axiom.rtol)
    if problem is not None:
        report.failures.append(f"{problem} at {dict(valuation)}")
    else:
        report.defined += evaluate(axiom.lhs, env, "float64") is not None
    return True


def fuzz_axiom(axiom: Axiom, count: int = 600, seed: int = 0, patience: int = 25, first_failure: bool = False,
               min_defined: int = 10) -> FuzzReport:
    """Checks one axiom on adversarial valuations until ``count`` of them satisfy its guards and ``min_defined``
    valuations typed both sides (or ``patience * count`` were drawn), in float64 with the axiom's tolerance; with
    ``first_failure``, stops at the first valuation where it fails (enough to kill a mutant).

    A valuation that types neither side counts as agreement (both are BOTTOM), so an axiom whose valuations were all
    ill typed would pass untested: ``report.defined`` says how many compared values."""
    rng = np.random.default_rng(stable_seed(axiom.name, seed + 7))
    # NOTE: the sampled valuations draw from their own stream and do not count towards
    # ``count``: the adversarial ones stay exactly what they were without them.
    sampled_rng = np.random.default_rng(stable_seed(axiom.name, seed + 8))
    shifted_rng = np.random.default_rng(stable_seed(axiom.name, seed + 9))  # its own stream too
    report = FuzzReport(axiom.name)
    adversarial_guarded = 0
    with np.errstate(all="ignore"):
        for i, valuation in enumerate(adversarial_valuations(axiom, rng, patience * count)):
            adversarial_guarded += _check(axiom, valuation, rng, report)
            if i % 3 == 2 and not (first_failure and report.failures):
                _check(axiom, _as_sampled(axiom, sampled_rng, perturb=i % 12 != 11), sampled_rng, report)
            if i % 6 == 4 and not (first_failure and report.failures):
                _check(axiom, _rank_shifted(axiom, shifted_rng), shifted_rng, report)
            if (adversarial_guarded >= count and report.defined >= min_defined) or first_failure and report.failures:
                break
    return report


# ---- compositions: one axiom's left side in place of another's variable -------------------------------


def _rename(node: Any, suffix: str) -> Any:
    """The term (or guard) with every variable renamed ``name`` -> ``name + suffix``."""
    if isinstance(node, (TensorVar, IntVar)):
        return replace(node, name=node.name + suffix)
    if isinstance(node, tuple):
        return tuple(_rename(v, suffix) for v in node)
    if hasattr(node, "__dataclass_fields__"):
        return replace(node, **{f: _rename(getattr(node, f), suffix) for f in node.__dataclass_fields__})
    return node


def _substitute(node: Any, name: str, term: Term) -> Any:
    if isinstance(node, TensorVar):
        return term if node.name == name else node
    if isinstance(node, App):
        return replace(node, args=tuple(_substitute(a, name, term) for a in node.args), params=tuple((k, _substitute(v, name, term)) for k, v in node.params))
    if isinstance(node, tuple):
        return tuple(_substitute(v, name, term) for v in node)
    if hasattr(node, "__dataclass_fields__") and not isinstance(node, IntVar):
        return replace(node, **{f: _substitute(getattr(node, f), name, term) for f in node.__dataclass_fields__})
    return node


def compose(outer: Axiom, variable: str, inner: Axiom) -> Axiom:
    """``outer`` with tensor variable ``variable`` replaced by ``inner``'s left side (inner's variables renamed).

    A sound ``outer`` stays sound under any substitution: Z3 instantiates axioms on terms,
    never only on variables, so the guards must mean the same on a term as on a variable.
    """
    lhs = _rename(inner.lhs, "_i")
    inner_names = {v.name for v in inner.variables}

    def sample(rng: np.random.Generator) -> dict[str, Any]:
        a, b = outer.sample(rng), inner.sample(rng)
        out = {k: v for k, v in a.items() if k != variable}
        out.update({k + "_i": v for k, v in b.items() if k in inner_names})
        return out

    return Axiom(f"{outer.name}[{variable}:={inner.name}]", _substitute(outer.lhs, variable, lhs), _substitute(outer.rhs, variable, lhs), sample,
                 when=tuple(_substitute(c, variable, lhs) for c in outer.when), rtol=max(outer.rtol, inner.rtol))


def fuzz_compositions(count: int = 40, per_pair: int = 40, seed: int = 0, axioms: Sequence[Axiom] = AXIOMS) -> list[FuzzReport]:
    """Fuzzes ``count`` random compositions of two axioms, ``per_pair`` valuations each."""
    rng = np.random.default_rng(seed)
    reports = []
    while len(reports) < count:
        outer, inner = (axioms[int(i)] for i in rng.integers(0, len(axioms), 2))
        tensors = [v.name for v in outer.variables if isinstance(v, TensorVar)]
        if not tensors:
            continue
        reports.append(fuzz_axiom(compose(outer, tensors[int(rng.integers(0, len(tensors)))], inner), per_pair, seed))
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m taso.verifier.axiom_fuzz [--per-axiom N]``: prints totals and every failing axiom."""
    parser = argparse.ArgumentParser(prog="python -m taso.verifier.axiom_fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--per-axiom", type=int, default=700, help="adversarial valuations per axiom (default 700)")
    parser.add_argument("--compositions", type=int, default=200, help="random compositions of two axioms (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    reports = [fuzz_axiom(a, args.per_axiom, args.seed) for a in AXIOMS]
    reports += fuzz_compositions(args.compositions, 50, args.seed)
    tried, guarded, defined = (sum(getattr(r, k) for r in reports) for k in ("tried", "guarded", "defined"))
    failing = [r for r in reports if not r.ok]
    for r in failing:
        print(f"FAIL {r.name}: {len(r.failures)} failing valuation(s), e.g. {r.failures[0]}")
    print(f"{len(AXIOMS)} axioms + {args.compositions} compositions: {tried} valuations, {guarded} with the guards true, "
          f"{defined} well typed; {len(failing)} failing; {time.perf_counter() - start:.0f} s")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
