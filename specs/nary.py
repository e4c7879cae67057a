"""Laws of n-way concatenations and splits, made on demand for the arities a rule uses.

The fixed axioms speak of two-way seams. A group merge (k products that share a weight
become one product over their concatenated rows, :mod:`taso.search.groups`) needs the same laws
at arity k, and each arity is a Z3 function family of its own (``concat`` of k tensors,
``split`` into k sizes). So the laws are a schema: :func:`nary_axioms` gives them for one
arity, the verifier adds them for every arity above 2 that a rule mentions, and each one
is validated against NumPy like any axiom (``tests/test_groups.py`` validates arities 3-8
and 64).

For arity n, with parts ``x0 .. x{n-1}`` and sizes ``s0 .. s{n-1}``:

* ``split-concat-n-i``: splitting a concatenation at its seams gives part i back;
* ``matmul-concat-rows-n``: a product distributes over concatenated rows of its left factor;
* ``matmul-concat-columns-n``: and over concatenated columns of its right factor;
  ``matmul-concat-columns-batched-n``: so does a batch of products by one right factor (a transformer's Q, K and V
  projections of one sequence);
* ``add-split-broadcast-n-i`` / ``mul-``: an operand that does not extend along the split
  axis applies to the whole before the split as to part i after it.

NOTE: "concatenating all parts of a split gives the whole" is true but left out: its left
side is a pattern of n split applications, and E-matching it made Z3 take seconds at n = 48
where the laws above take milliseconds.
"""

from __future__ import annotations

import functools

import numpy as np

from .base import Axiom
from .sampling import shape
from .terms import dim, eq, ge, ints, lt, ok, op, rank, tensors

__all__ = ["nary_axioms", "NARY_OPS"]

NARY_OPS = frozenset({"concat", "split"})  # the ops whose arity the schema covers

concat, split, matmul = op("concat"), op("split"), op("matmul")
x, y, z = tensors("x y z")
(ax,) = ints("ax")


def _parts(n: int):
    return tensors(" ".join(f"x{i}" for i in range(n))), ints(" ".join(f"s{i}" for i in range(n)))


def _concatenable(n: int, ranks=(1, 2, 3, 4), axis_below_last: bool = False):
    """n tensors that differ only along a random axis ``ax``, their sizes there ``s_i``, and ``x`` their concatenation's shape."""

    def sample(rng: np.random.Generator):
        base = shape(rng, int(rng.choice(ranks)))
        axis = int(rng.integers(0, len(base) - 1 if axis_below_last else len(base)))
        valuation = {"ax": axis}
        for i in range(n):
            valuation[f"x{i}"] = base[:axis] + (int(rng.integers(1, 4)),) + base[axis + 1:]
            valuation[f"s{i}"] = valuation[f"x{i}"][axis]
        valuation["x"] = base[:axis] + (sum(valuation[f"s{i}"] for i in range(n)),) + base[axis + 1:]
        return valuation

    return sample


def _rows(n: int):
    def sample(rng: np.random.Generator):
        k, m = shape(rng, 2)
        return {**{f"x{i}": (int(rng.integers(1, 4)), k) for i in range(n)}, "z": (k, m)}

    return sample


def _columns(n: int, batched: bool = False):
    def sample(rng: np.random.Generator):
        m, k = shape(rng, 2)
        return {"z": ((int(rng.integers(1, 4)),) if batched else ()) + (m, k), **{f"x{i}": (k, int(rng.integers(1, 4))) for i in range(n)}}

    return sample


def _trailing_operand(n: int):
    """A tensor ``x`` split along ``ax`` into sizes ``s_i``, and ``y`` broadcast against its trailing dims (behind the axis)."""
    parts = _concatenable(n, ranks=(2, 3, 4), axis_below_last=True)

    def sample(rng: np.random.Generator):
        valuation = parts(rng)
        full = valuation["x"]
        valuation["y"] = full[int(rng.integers(valuation["ax"] + 1, len(full))):]
        return valuation

    return sample


@functools.lru_cache(maxsize=None)
def nary_axioms(n: int) -> tuple[Axiom, ...]:
    """The n-way laws (n >= 3; the two-way ones are fixed axioms of :mod:`.shape` and :mod:`.linalg`)."""
    if n < 3:
        raise ValueError(f"the n-way laws start at arity 3 (got {n}); two-way seams are fixed axioms")
    xs, ss = _parts(n)
    joined = concat(*xs, axis=ax)
    cut = split(x, axis=ax, sizes=ss)
    seams = (ok(joined), ge(ax, 0), *(eq(dim(p, ax), s) for p, s in zip(xs, ss)))
    whole = _concatenable(n)
    return (
        *(Axiom(f"split-concat-{n}-{i}", split(joined, axis=ax, sizes=ss)[i], xs[i], whole, when=seams) for i in range(n)),
        Axiom(f"matmul-concat-rows-{n}", matmul(concat(*xs, axis=0), z), concat(*(matmul(p, z) for p in xs), axis=0), _rows(n),
              when=(eq(rank(xs[0]), 2), eq(rank(z), 2))),
        Axiom(f"matmul-concat-columns-{n}", matmul(z, concat(*xs, axis=1)), concat(*(matmul(z, p) for p in xs), axis=1), _columns(n),
              when=(eq(rank(z), 2), eq(rank(xs[0]), 2))),
        Axiom(f"matmul-concat-columns-batched-{n}", matmul(z, concat(*xs, axis=1)), concat(*(matmul(z, p) for p in xs), axis=2),
              _columns(n, batched=True), when=(eq(rank(z), 3), *(eq(rank(p), 2) for p in xs))),  # (a batched part would broadcast)
        *(Axiom(f"{name}-split-broadcast-{n}-{i}", op(name)(cut[i], y), split(op(name)(x, y), axis=ax, sizes=ss)[i], _trailing_operand(n),
                when=(ok(cut[i]), ge(ax, 0), lt(ax, rank(x) - rank(y)))) for name in ("add", "mul") for i in range(n)),
    )
