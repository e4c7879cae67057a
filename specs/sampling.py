"""Valuation generators for axiom validation: random shapes and parameters that fit an axiom.

A sampler is ``rng -> {variable name: shape tuple or int}``. Samplers aim at well-typed
valuations; the validation test perturbs them to reach the ill-typed ones too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .base import Valuation

__all__ = ["Sampler", "shape", "same", "broadcasting", "merge", "pick", "conv_case", "chain"]

Sampler = Callable[[np.random.Generator], Valuation]


def shape(rng: np.random.Generator, rank: int, lo: int = 1, hi: int = 4) -> tuple[int, ...]:
    """A random shape of the given rank with dimensions in [lo, hi]."""
    return tuple(int(d) for d in rng.integers(lo, hi + 1, size=rank))


def same(names: str, ranks: Sequence[int] = (1, 2, 3, 4)) -> Sampler:
    """Every named tensor gets the same random shape."""

    def sample(rng: np.random.Generator) -> Valuation:
        s = shape(rng, int(rng.choice(ranks)))
        return {n: s for n in names.split()}

    return sample


def broadcasting(names: str, ranks: Sequence[int] = (1, 2, 3, 4)) -> Sampler:
    """Shapes that broadcast together: a common shape with some dims set to 1 or dropped."""

    def sample(rng: np.random.Generator) -> Valuation:
        base = shape(rng, int(rng.choice(ranks)), 2, 3)
        out = {}
        for n in names.split():
            s = tuple(1 if rng.random() < 0.25 else d for d in base)
            out[n] = s[int(rng.integers(0, 2)) if len(s) > 1 and rng.random() < 0.3 else 0:]
        return out

    return sample


def merge(*samplers: Sampler) -> Sampler:
    """The union of several samplers' valuations (later ones win)."""

    def sample(rng: np.random.Generator) -> Valuation:
        out: Valuation = {}
        for s in samplers:
            out.update(s(rng))
        return out

    return sample


def pick(name: str, values: Sequence[int]) -> Sampler:
    """An integer variable drawn from ``values``."""
    return lambda rng: {name: int(rng.choice(values))}


def chain(names: str, batch: bool = False) -> Sampler:
    """Matrices x (n0,n1), y (n1,n2), z (n2,n3), ... that multiply in a chain (optionally batched)."""

    def sample(rng: np.random.Generator) -> Valuation:
        tensors = names.split()
        dims = shape(rng, len(tensors) + 1)
        lead = shape(rng, 1) if batch and rng.random() < 0.5 else ()
        return {n: lead + (dims[i], dims[i + 1]) for i, n in enumerate(tensors)}

    return sample


def conv_case(rng: np.random.Generator, groups: int = 1, kernels: Sequence[int] = (1, 2, 3)) -> tuple[dict[str, int], Valuation]:
    """A random convolution: sizes (N, C, M output channels, H, W, KH, KW) and the integer
    variables of the conv axioms (strides sh sw, pads pt pl pb pr, activation a, groups g)."""
    kh, kw = int(rng.choice(kernels)), int(rng.choice(kernels))
    sizes = {"N": int(rng.integers(1, 3)), "C": groups * int(rng.integers(1, 3)), "M": groups * int(rng.integers(1, 3)),
             "H": int(rng.integers(kh, kh + 4)), "W": int(rng.integers(kw, kw + 4)), "KH": kh, "KW": kw}
    ints = {"sh": int(rng.integers(1, 3)), "sw": int(rng.integers(1, 3)), "a": int(rng.integers(0, 4)), "g": groups}
    ints.update({p: int(rng.integers(0, 2)) for p in ("pt", "pl", "pb", "pr")})
    return sizes, ints
