"""Matrix products: batched matmul with a fused activation.

Axioms: matmul is associative and linear in each argument (add, scalar_mul); a fused
activation is the activation of the plain product; products distribute over concatenation
of rows or columns (which is what merges two matmuls sharing an input); the transpose of a
product is the product of transposes in reverse order.
"""

from __future__ import annotations

import numpy as np

from taso.ops import ACTIVATIONS

from .base import Axiom, OpSpec, Slot, all_of, any_of, if_
from .sampling import chain, shape
from .terms import dim, eq, ge, le, op, rank, same_shape, tensors

__all__ = ["specs", "axioms"]


def _matmul_rule(dims, params):
    a, b = list(dims[0]), list(dims[1])
    a2 = [1] + a if len(a) == 1 else a
    b2 = b + [1] if len(b) == 1 else b
    lead = max(len(a2), len(b2)) - 2
    pa = [1] * (lead - len(a2) + 2) + a2[:-2]
    pb = [1] * (lead - len(b2) + 2) + b2[:-2]
    out = [if_(p == 1, q, p) for p, q in zip(pa, pb)] + [a2[-2], b2[-1]]
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [out], all_of([a2[-1] == b2[-2]] + [any_of(p == 1, q == 1, p == q) for p, q in zip(pa, pb)])


specs = [OpSpec("matmul", (Slot("activation", "enum", ACTIVATIONS),), _matmul_rule, doc="batched matmul, then an activation")]

matmul, add, mul, scalar_mul, concat, transpose = op("matmul"), op("add"), op("mul"), op("scalar_mul"), op("concat"), op("transpose")
x, y, z, w, v, s = tensors("x y z w v s")


def _with_scale(rng: np.random.Generator):
    valuation = chain("x y")(rng)
    valuation["s"] = (1,) * int(rng.integers(0, 3))
    return valuation


def _columns(rng: np.random.Generator):
    """x (n, k) times y (k, m1) and z (k, m2)."""
    n, k, m1, m2 = shape(rng, 4)
    return {"x": (n, k), "y": (k, m1), "z": (k, m2)}


def _rows(rng: np.random.Generator):
    """x (n1, k) and y (n2, k) times z (k, m)."""
    n1, n2, k, m = shape(rng, 4)
    return {"x": (n1, k), "y": (n2, k), "z": (k, m)}


def _blocks(rng: np.random.Generator):
    """x (n, k1) y (k1, m) + z (n, k2) w (k2, m)."""
    n, k1, k2, m = shape(rng, 4)
    return {"x": (n, k1), "y": (k1, m), "z": (n, k2), "w": (k2, m)}


def _column_scale(rng: np.random.Generator):
    """x (n, k) times y (k, m) scaled by a vector v of m (or 1) entries."""
    n, k, m = shape(rng, 3)
    return {"x": (n, k), "y": (k, m), "v": (int(rng.choice([1, m])),)}


def _inner_scale(rng: np.random.Generator):
    """x (n, k) times y^T for y (m, k), and a vector v of k (or 1) entries."""
    n, k, m = shape(rng, 3)
    return {"x": (n, k), "y": (m, k), "v": (int(rng.choice([1, k])),)}


def _right_summands(rng: np.random.Generator):
    """x (n, k) times y, z of one shape (k, m)."""
    n, k, m = shape(rng, 3)
    return {"x": (n, k), "y": (k, m), "z": (k, m)}


def _left_summands(rng: np.random.Generator):
    """x, y of one shape (n, k) times z (k, m)."""
    n, k, m = shape(rng, 3)
    return {"x": (n, k), "y": (n, k), "z": (k, m)}


def _batched_columns(rng: np.random.Generator):
    """x (b, n, k) times y (k, m1) and z (k, m2)."""
    b, n, k, m1, m2 = shape(rng, 5)
    return {"x": (b, n, k), "y": (k, m1), "z": (k, m2)}


def _batched_rows(rng: np.random.Generator):
    """x (b, n1, k) and y (b, n2, k) times z (k, m)."""
    b, n1, n2, k, m = shape(rng, 5)
    return {"x": (b, n1, k), "y": (b, n2, k), "z": (k, m)}


def _batched_blocks(rng: np.random.Generator):
    """x (b, n, k1) y (k1, m) + z (b, n, k2) w (k2, m)."""
    b, n, k1, k2, m = shape(rng, 5)
    return {"x": (b, n, k1), "y": (k1, m), "z": (b, n, k2), "w": (k2, m)}


def _batched_summands(rng: np.random.Generator):
    """x, y of one shape (b, n, k) times z (k, m), or a batch of them."""
    b, n, k, m = shape(rng, 4)
    return {"x": (b, n, k), "y": (b, n, k), "z": (k, m) if rng.random() < 0.5 else (int(rng.choice([1, b])), k, m)}


def _batched_chain(rng: np.random.Generator):
    """x (b, n, k) times y (k, m)."""
    b, n, k, m = shape(rng, 4)
    return {"x": (b, n, k), "y": (k, m)}


def _batch(rng: np.random.Generator, b: int) -> int:
    """A batch size that broadcasts with b: b itself, or 1."""
    return b if rng.random() < 0.7 else 1


def _chain_ranks(x_rank: int, y_rank: int):
    """x (.., n, k) times y (.., k, m) at these ranks (3 gives a batch, which may broadcast)."""

    def sample(rng: np.random.Generator):
        b, n, k, m = shape(rng, 4)
        return {"x": ((_batch(rng, b),) if x_rank == 3 else ()) + (n, k), "y": ((_batch(rng, b),) if y_rank == 3 else ()) + (k, m)}

    return sample


def _inner_scale_ranks(x_rank: int, y_rank: int):
    """x (.., n, k) times y^T for y (.., m, k), and a vector v of k (or 1) entries."""

    def sample(rng: np.random.Generator):
        b, n, k, m = shape(rng, 4)
        return {"x": ((_batch(rng, b),) if x_rank == 3 else ()) + (n, k), "y": ((_batch(rng, b),) if y_rank == 3 else ()) + (m, k),
                "v": (int(rng.choice([1, k])),)}

    return sample


def _batched_blocks_both(rng: np.random.Generator):
    """x (b, n, k1) y (b, k1, m) + z (b, n, k2) w (b, k2, m)."""
    b, n, k1, k2, m = shape(rng, 5)
    return {"x": (b, n, k1), "y": (b, k1, m), "z": (b, n, k2), "w": (b, k2, m)}


def _t(term, rank_: int):
    """The transpose of the last two axes of a rank-2 or rank-3 term."""
    return transpose(term, perm=(1, 0) if rank_ == 2 else (0, 2, 1))


axioms = [
    # matmul is associative for matrices (batched or not). A vector factor changes which dims contract
    # and where batch dims land: x (1,), y (1,1,3), z (1,3,3) gives (1,1,3) on the left and (1,3) on the right.
    Axiom("matmul-assoc", matmul(matmul(x, y), z), matmul(x, matmul(y, z)), chain("x y z", batch=True),
          when=(ge(rank(x), 2), ge(rank(y), 2), ge(rank(z), 2))),
    # matmul is linear in each argument
    Axiom("matmul-add-right", matmul(x, add(y, z)), add(matmul(x, y), matmul(x, z)), _right_summands, when=same_shape(y, z, 2)),
    Axiom("matmul-add-left", matmul(add(x, y), z), add(matmul(x, z), matmul(y, z)), _left_summands, when=same_shape(x, y, 2)),
    Axiom("smul-matmul-right", scalar_mul(matmul(x, y), s), matmul(x, scalar_mul(y, s)), _with_scale,
          when=(le(rank(s), rank(x)), le(rank(s), rank(y)), ge(rank(y), 2))),
    Axiom("smul-matmul-left", scalar_mul(matmul(x, y), s), matmul(scalar_mul(x, s), y), _with_scale,
          when=(le(rank(s), rank(x)), le(rank(s), rank(y)), ge(rank(x), 2))),
    # scaling the columns of the right factor (a row vector broadcast over it) scales the product's columns
    Axiom("matmul-mul-columns", matmul(x, mul(y, v)), mul(matmul(x, y), v), _column_scale, when=(eq(rank(v), 1), eq(rank(y), 2))),
    # a vector scaling the contracted dimension can move from one factor to the other
    Axiom("matmul-scaled-inner", matmul(mul(x, v), transpose(y, perm=(1, 0))), matmul(x, transpose(mul(y, v), perm=(1, 0))), _inner_scale,
          when=(eq(rank(v), 1), eq(rank(x), 2), eq(rank(y), 2), eq(dim(x, 1), dim(y, 1)))),
    # a fused activation is the activation of the plain product
    *[Axiom(f"matmul-{act}", matmul(x, y, activation=act), op(act)(matmul(x, y)), chain("x y", batch=True), unfold=True) for act in ACTIVATIONS[1:]],
    # products distribute over concatenated columns of the right factor and rows of the left one
    Axiom("matmul-concat-columns", matmul(x, concat(y, z, axis=1)), concat(matmul(x, y), matmul(x, z), axis=1), _columns,
          when=(eq(rank(x), 2), eq(rank(y), 2))),
    Axiom("matmul-concat-rows", matmul(concat(x, y, axis=0), z), concat(matmul(x, z), matmul(y, z), axis=0), _rows,
          when=(eq(rank(x), 2), eq(rank(z), 2))),
    # a sum of two products is one product of concatenated factors
    Axiom("matmul-concat-inner", add(matmul(x, y), matmul(z, w)), matmul(concat(x, z, axis=1), concat(y, w, axis=0)), _blocks,
          when=(eq(rank(x), 2), eq(rank(z), 2), eq(rank(y), 2), eq(rank(w), 2), eq(dim(x, 0), dim(z, 0)), eq(dim(y, 1), dim(w, 1)),
                eq(dim(x, 1), dim(y, 0)))),
    # (x y)^T = y^T x^T for matrices (with x (3,) and y (3,3,2) only the left side is well typed)
    Axiom("transpose-matmul", transpose(matmul(x, y), perm=(1, 0)), matmul(transpose(y, perm=(1, 0)), transpose(x, perm=(1, 0))), chain("x y"),
          when=(eq(rank(x), 2), eq(rank(y), 2))),
]

# The same laws for a batch of activations times unbatched weights (x (b, n, k), the weights (k, m)):
# the batched projections of a transformer export, and what rank-lifted rules (verifier/lift.py) need.
# Kept apart and appended after every family's axioms (specs/__init__.py), so the order of the
# others, and the samples tests take of it, stay as they were.
batched_axioms = [
    Axiom("matmul-concat-columns-3d", matmul(x, concat(y, z, axis=1)), concat(matmul(x, y), matmul(x, z), axis=2), _batched_columns,
          when=(eq(rank(x), 3), eq(rank(y), 2), eq(rank(z), 2))),
    Axiom("matmul-concat-rows-3d", matmul(concat(x, y, axis=1), z), concat(matmul(x, z), matmul(y, z), axis=1), _batched_rows,
          when=(eq(rank(x), 3), eq(rank(y), 3), eq(rank(z), 2))),
    Axiom("matmul-concat-inner-3d", add(matmul(x, y), matmul(z, w)), matmul(concat(x, z, axis=2), concat(y, w, axis=0)), _batched_blocks,
          when=(eq(rank(x), 3), eq(rank(z), 3), eq(rank(y), 2), eq(rank(w), 2), eq(dim(x, 0), dim(z, 0)), eq(dim(x, 1), dim(z, 1)),
                eq(dim(y, 1), dim(w, 1)), eq(dim(x, 2), dim(y, 0)))),
    Axiom("matmul-add-left-3d", matmul(add(x, y), z), add(matmul(x, z), matmul(y, z)), _batched_summands, when=same_shape(x, y, 3)),
    Axiom("transpose-matmul-3d", transpose(matmul(x, y), perm=(0, 2, 1)), matmul(transpose(y, perm=(1, 0)), transpose(x, perm=(0, 2, 1))),
          _batched_chain, when=(eq(rank(x), 3), eq(rank(y), 2))),
    # the same with the batch on the right, or on both sides (a batch of 1 broadcasts)
    *[Axiom(f"transpose-matmul-{rx}d-{ry}d", transpose(matmul(x, y), perm=(0, 2, 1)), matmul(_t(y, ry), _t(x, rx)), _chain_ranks(rx, ry),
            when=(eq(rank(x), rx),) if rx == 2 else (eq(rank(x), rx), eq(rank(y), ry))) for rx, ry in ((2, 3), (3, 3))],
    # a scale of the inner axis moves between the factors of x y^T (x or y batched)
    *[Axiom(f"matmul-scaled-inner-{rx}d-{ry}d", matmul(mul(x, v), _t(y, ry)), matmul(x, _t(mul(y, v), ry)), _inner_scale_ranks(rx, ry),
            when=(eq(rank(v), 1), eq(rank(x), rx), eq(dim(x, rx - 1), dim(y, ry - 1)))) for rx, ry in ((3, 2), (2, 3), (3, 3))],
    # a sum of batched products is one product of the concatenated factors (both batched)
    Axiom("matmul-concat-inner-3d-3d", add(matmul(x, y), matmul(z, w)), matmul(concat(x, z, axis=2), concat(y, w, axis=1)), _batched_blocks_both,
          when=(eq(rank(x), 3), eq(rank(z), 3), eq(rank(y), 3), eq(rank(w), 3), eq(dim(x, 0), dim(z, 0)), eq(dim(x, 1), dim(z, 1)),
                eq(dim(y, 0), dim(w, 0)), eq(dim(y, 2), dim(w, 2)), eq(dim(x, 2), dim(y, 1)))),
]
