"""Data movement: transpose, reshape, concat, split.

Axioms: transposes compose and the identity permutation does nothing; splitting a
concatenation at its seam gives the parts back, and concatenating the parts of a split
gives the whole; concatenation is associative and its blocks can be regrouped; transpose,
reshape, concat and split commute with element-wise operations.
"""

from __future__ import annotations

import itertools

import numpy as np

from .base import Axiom, OpSpec, Slot, Unsupported, all_of
from .elementwise import UNARY
from .sampling import Sampler, broadcasting, same, shape
from .terms import dim, eq, ge, index_of, ints, le, lt, ne, ok, op, rank, same_shape, select, tensors

__all__ = ["specs", "axioms"]

# ---- specifications ------------------------------------------------------------------------------------


def _transpose_rule(dims, p):
    perm = p["perm"]
    if not all(isinstance(i, int) for i in perm):
        raise Unsupported("transpose with a symbolic permutation")
    return [[dims[0][i] for i in perm]], []


def _reshape_rule(dims, p):
    # NOTE: the element count equality is nonlinear in symbolic dims; leaving it out is safe.
    return [list(p["shape"])], []


def _concat_rule(dims, p):
    axis = p["axis"]
    first = dims[0]
    out = list(first)
    out[axis] = sum(d[axis] for d in dims)
    return [out], all_of([d[k] == first[k] for d in dims[1:] for k in range(len(first)) if k != axis])


def _split_rule(dims, p):
    axis, sizes = p["axis"], p["sizes"]
    x = dims[0]
    outs = [[size if k == axis else d for k, d in enumerate(x)] for size in sizes]
    return outs, all_of([sum(sizes) == x[axis]])


def _normalize_axis(params, ranks):
    return {**params, "axis": params["axis"] % ranks[0]}


specs = [
    OpSpec("transpose", (Slot("perm", "ints"),), _transpose_rule, doc="permutes axes"),
    OpSpec("reshape", (Slot("shape", "ints"),), _reshape_rule, doc="new static shape, row-major"),
    OpSpec("concat", (Slot("axis", "int"),), _concat_rule, normalize=_normalize_axis, doc="joins tensors along an axis"),
    OpSpec("split", (Slot("axis", "int"), Slot("sizes", "ints")), _split_rule, normalize=_normalize_axis, doc="cuts a tensor along an axis"),
]

# ---- axioms ---------------------------------------------------------------------------------------------

transpose, reshape, concat, split = op("transpose"), op("reshape"), op("concat"), op("split")
add, mul, scalar_mul = op("add"), op("mul"), op("scalar_mul")
x, y, z, w, s = tensors("x y z w s")
ax, bx, s0, s1 = ints("ax bx s0 s1")
RANKS = (2, 3, 4)


def _perm_vars(name: str, rank_: int):
    return ints(" ".join(f"{name}{i}" for i in range(rank_)))


def _permuted(names: str, rank_: int, perms: str = "p", extra: Sampler | None = None) -> Sampler:
    """Tensors of one shape of rank ``rank_`` and a random permutation for each perm prefix."""

    def sample(rng: np.random.Generator):
        valuation = same(names, (rank_,))(rng)
        for prefix in perms.split():
            valuation.update({f"{prefix}{i}": int(j) for i, j in enumerate(rng.permutation(rank_))})
        if extra is not None:
            valuation.update(extra(rng))
        return valuation

    return sample


def _concatenable(names: str = "x y", ranks=(1, 2, 3, 4)) -> Sampler:
    """Tensors that differ only along a random axis ``ax``, with the split sizes ``s0, s1`` of that seam."""

    def sample(rng: np.random.Generator):
        base = shape(rng, int(rng.choice(ranks)))
        axis = int(rng.integers(0, len(base)))
        valuation = {"ax": axis}
        for n in names.split():
            valuation[n] = base[:axis] + (int(rng.integers(1, 4)),) + base[axis + 1 :]
        first, second = names.split()[:2]
        valuation.update(s0=valuation[first][axis], s1=valuation[second][axis])
        return valuation

    return sample


def _blocks(rng: np.random.Generator):
    """Four blocks x y / z w of a matrix-like tensor, joined along axes ax and bx."""
    base = list(shape(rng, int(rng.choice(RANKS))))
    a_axis, b_axis = (int(i) for i in rng.choice(len(base), 2, replace=False))
    rows, cols = shape(rng, 2), shape(rng, 2)
    blocks = {}
    for name, (i, j) in zip("xyzw", itertools.product(range(2), range(2))):
        block = list(base)
        block[a_axis], block[b_axis] = cols[j], rows[i]
        blocks[name] = tuple(block)
    return {**blocks, "ax": a_axis, "bx": b_axis}


def _full_rank(valuation, rank_):
    """Pads broadcast shapes with leading 1s to the full rank."""
    return {k: (1,) * (rank_ - len(v)) + tuple(v) for k, v in valuation.items()}


def _broadcast_blocks(rng: np.random.Generator):
    """x | z along ax and y | w along bx, y and w broadcasting against x and z (maybe of lower rank)."""
    valuation = _concatenable("x z")(rng)
    axis = valuation["ax"]
    drop = int(rng.integers(0, axis + 1))
    keep = [k == axis or rng.random() < 0.6 for k in range(len(valuation["x"]))]
    for big, small in (("x", "y"), ("z", "w")):
        valuation[small] = tuple(d if kept else 1 for d, kept in zip(valuation[big], keep))[drop:]
    valuation["bx"] = axis - drop
    return valuation


def _trailing_operand(rng: np.random.Generator):
    """x | z concatenated along ax and y broadcast against their trailing dims (behind the axis)."""
    valuation = _concatenable("x z", ranks=(2, 3, 4))(rng)
    full = valuation["x"]
    valuation["ax"] = axis = int(rng.integers(0, len(full) - 1))
    valuation["z"] = full[:axis] + (int(rng.integers(1, 4)),) + full[axis + 1 :]
    valuation.update(s0=full[axis], s1=valuation["z"][axis], y=full[int(rng.integers(axis + 1, len(full))):])
    return valuation


def _unit_axis_operand(rng: np.random.Generator):
    """x | z concatenated along ax and y of their rank with size 1 along ax."""
    valuation = _concatenable("x z")(rng)
    valuation["y"] = tuple(1 if k == valuation["ax"] else d for k, d in enumerate(valuation["x"]))
    return valuation


def _transpose_axioms(rank_: int) -> list[Axiom]:
    p, q = _perm_vars("p", rank_), _perm_vars("q", rank_)
    identity = tuple(range(rank_))
    composed = tuple(select(p, qi) for qi in q)
    with_scale = _permuted("x", rank_, extra=lambda rng: {"s": (1,) * int(rng.integers(0, 2))})
    return [
        # transposing twice is transposing once by the composed permutation
        Axiom(f"transpose-transpose-{rank_}d", transpose(transpose(x, perm=p), perm=q), transpose(x, perm=composed), _permuted("x", rank_, "p q")),
        # the identity permutation does nothing
        Axiom(f"transpose-identity-{rank_}d", transpose(x, perm=identity), x, same("x", (rank_,)), when=(eq(rank(x), rank_),)),
        # element-wise operations commute with transpose
        *[Axiom(f"{name}-transpose-{rank_}d", op(name)(transpose(x, perm=p)), transpose(op(name)(x), perm=p), _permuted("x", rank_)) for name in UNARY],
        *[Axiom(f"{name}-transpose-{rank_}d", transpose(op(name)(x, y), perm=p), op(name)(transpose(x, perm=p), transpose(y, perm=p)),
                lambda rng, r=rank_: _full_rank(broadcasting("x y", (r,))(rng), r) | {f"p{i}": int(j) for i, j in enumerate(rng.permutation(r))},
                when=(eq(rank(x), rank_), eq(rank(y), rank_))) for name in ("add", "mul")],
        Axiom(f"smul-transpose-{rank_}d", scalar_mul(transpose(x, perm=p), s), transpose(scalar_mul(x, s), perm=p), with_scale),
        # transposing a concatenation concatenates the transposes along the axis's new position
        Axiom(f"transpose-concat-{rank_}d", transpose(concat(x, y, axis=ax), perm=p), concat(transpose(x, perm=p), transpose(y, perm=p), axis=index_of(p, ax)),
              lambda rng, r=rank_: _concatenable(ranks=(r,))(rng) | {f"p{i}": int(j) for i, j in enumerate(rng.permutation(r))}, when=(ge(ax, 0), lt(ax, rank_))),
    ]


def _factors(rng: np.random.Generator, size: int, count: int) -> tuple[int, ...]:
    """A random shape of ``count`` dimensions holding ``size`` elements."""
    dims = [1] * count
    for prime in _prime_factors(size):
        dims[int(rng.integers(0, count))] *= prime
    return tuple(dims)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def _reshape_axioms() -> list[Axiom]:
    d, e = ints("d0 d1 d2 d3"), ints("e0 e1 e2 e3")

    def refactored(m: int, n: int) -> Sampler:
        def sample(rng: np.random.Generator):
            x_shape = shape(rng, int(rng.integers(1, 5)))
            size = int(np.prod(x_shape))
            return {"x": x_shape, **dict(zip(("e0", "e1", "e2", "e3"), _factors(rng, size, m))), **dict(zip(("d0", "d1", "d2", "d3"), _factors(rng, size, n)))}

        return sample

    def as_vectors(n: int) -> Sampler:
        """Vectors x, y of one length (sometimes not), a scale s, and a shape d of n dims holding that length; one in ten
        a near miss: x of n + 1 dims holding that length and a scale of as many (where a guard on the scale's rank bites)."""

        def sample(rng: np.random.Generator):
            length = int(rng.integers(1, 7))
            x, s = (length,), (1,) * int(rng.integers(0, 2))
            if rng.random() < 0.1:
                x = tuple(_factors(rng, length, n + 1))
                s = (1,) * (n + 1)
            return {"x": x, "y": (length,) if rng.random() < 0.8 else (1,), "s": s,
                    **dict(zip(("d0", "d1", "d2", "d3"), _factors(rng, length, n)))}

        return sample

    def channel_vectors(rng: np.random.Generator):
        a, b = shape(rng, 2)
        return {"x": (a,), "y": (b,), "d0": a + b}

    def own_shape(rank_: int) -> Sampler:
        return lambda rng: (lambda x_shape: {"x": x_shape, **{f"d{i}": v for i, v in enumerate(x_shape)}})(shape(rng, rank_))

    return [
        # reshaping to the tensor's own shape does nothing
        *[Axiom(f"reshape-identity-{r}d", reshape(x, shape=d[:r]), x, own_shape(r), when=(eq(rank(x), r), *[eq(dim(x, i), d[i]) for i in range(r)]))
          for r in (1, 2, 3, 4)],
        # two reshapes are one (the first must be well typed: it checks the element count)
        *[Axiom(f"reshape-reshape-{m}d-{n}d", reshape(reshape(x, shape=e[:m]), shape=d[:n]), reshape(x, shape=d[:n]), refactored(m, n), when=(ok(reshape(x, shape=e[:m])),))
          for m in (1, 2, 3, 4) for n in (1, 2, 3, 4)],
        # reshape is linear: it commutes with adding vectors of one length and with scaling
        *[Axiom(f"reshape-{name}-vectors-{n}d", reshape(op(name)(x, y), shape=d[:n]), op(name)(reshape(x, shape=d[:n]), reshape(y, shape=d[:n])),
                as_vectors(n), when=same_shape(x, y, 1)) for name in ("add", "mul") for n in (1, 2, 3, 4)],
        *[Axiom(f"smul-reshape-{n}d", scalar_mul(reshape(x, shape=d[:n]), s), reshape(scalar_mul(x, s), shape=d[:n]), as_vectors(n),
                when=(le(rank(s), rank(x)), le(rank(s), n))) for n in (1, 2, 3, 4)],
        # a concatenation of vectors reshaped to one channel axis is the concatenation of the reshaped vectors (biases)
        Axiom("reshape-concat-vectors", reshape(concat(x, y, axis=0), shape=(1, d[0], 1, 1)),
              concat(reshape(x, shape=(1, dim(x, 0), 1, 1)), reshape(y, shape=(1, dim(y, 0), 1, 1)), axis=1), channel_vectors,
              when=(eq(rank(x), 1), eq(rank(y), 1), eq(d[0], dim(x, 0) + dim(y, 0)))),
    ]


def _concat_axioms() -> list[Axiom]:
    parts = (split(x, axis=ax, sizes=(s0, s1))[0], split(x, axis=ax, sizes=(s0, s1))[1])

    def whole(rng: np.random.Generator):
        valuation = _concatenable()(rng)
        valuation["x"] = tuple(d if k != valuation["ax"] else valuation["s0"] + valuation["s1"] for k, d in enumerate(valuation["x"]))
        return valuation

    seam = (ok(concat(x, y, axis=ax)), ge(ax, 0), eq(dim(x, ax), s0), eq(dim(y, ax), s1))
    return [
        # splitting a concatenation at its seam gives the parts back
        Axiom("split-concat-0", split(concat(x, y, axis=ax), axis=ax, sizes=(s0, s1))[0], x, _concatenable(), when=seam),
        Axiom("split-concat-1", split(concat(x, y, axis=ax), axis=ax, sizes=(s0, s1))[1], y, _concatenable(), when=seam),
        # concatenating the parts of a split gives the whole
        Axiom("concat-split", concat(*parts, axis=ax), x, whole, when=(ok(parts[0]), ok(parts[1]))),
        # concatenation is associative, and a 3-way concat is two 2-way ones
        Axiom("concat-assoc", concat(concat(x, y, axis=ax), z, axis=ax), concat(x, concat(y, z, axis=ax), axis=ax), _concatenable("x y z"), trigger="lhs"),
        Axiom("concat-3", concat(x, y, z, axis=ax), concat(concat(x, y, axis=ax), z, axis=ax), _concatenable("x y z")),
        # four blocks: rows of columns = columns of rows
        Axiom("concat-blocks", concat(concat(x, y, axis=ax), concat(z, w, axis=ax), axis=bx), concat(concat(x, z, axis=bx), concat(y, w, axis=bx), axis=ax),
              _blocks, when=(ge(ax, 0), ge(bx, 0), ne(ax, bx), eq(dim(x, ax), dim(z, ax)), eq(dim(x, bx), dim(y, bx)))),
        # element-wise operations commute with concat and split
        *[Axiom(f"{name}-concat", op(name)(concat(x, y, axis=ax)), concat(op(name)(x), op(name)(y), axis=ax), _concatenable()) for name in UNARY],
        *[Axiom(f"{name}-split-{i}", op(name)(split(x, axis=ax, sizes=(s0, s1))[i]), split(op(name)(x), axis=ax, sizes=(s0, s1))[i], whole)
          for name in UNARY for i in (0, 1)],
        Axiom("smul-concat", scalar_mul(concat(x, y, axis=ax), s), concat(scalar_mul(x, s), scalar_mul(y, s), axis=ax),
              lambda rng: _concatenable()(rng) | {"s": (1,) * int(rng.integers(0, 2))}),
        *[Axiom(f"smul-split-{i}", scalar_mul(split(x, axis=ax, sizes=(s0, s1))[i], s), split(scalar_mul(x, s), axis=ax, sizes=(s0, s1))[i],
                lambda rng: whole(rng) | {"s": (1,) * int(rng.integers(0, 2))}) for i in (0, 1)],
        *[Axiom(f"{name}-concat-{r}d", concat(op(name)(x, y), op(name)(z, w), axis=ax), op(name)(concat(x, z, axis=ax), concat(y, w, axis=ax)),
                lambda rng, r=r: (lambda v: v | {"y": v["x"], "w": v["z"]})(_concatenable("x z", (r,))(rng)),
                when=same_shape(x, y, r) + same_shape(z, w, r)) for name in ("add", "mul") for r in (1, 2, 3, 4)],
        # ... and with broadcasting, when the two concatenations have the same seam (on aligned axes); the
        # result's axis is the higher-rank operand's, so that one comes first (commutativity covers the mirror)
        *[Axiom(f"{name}-concat-seams", op(name)(concat(x, z, axis=ax), concat(y, w, axis=bx)), concat(op(name)(x, y), op(name)(z, w), axis=ax),
                _broadcast_blocks, when=(ok(concat(x, z, axis=ax)), ok(concat(y, w, axis=bx)), ge(ax, 0), ge(bx, 0), eq(rank(x) - ax, rank(y) - bx),
                                         ge(rank(x), rank(y)),
                                         eq(dim(x, ax), dim(y, bx)), eq(dim(z, ax), dim(w, bx)))) for name in ("add", "mul")],
        # a broadcast operand that does not extend along the concat axis applies to each part
        *[Axiom(f"{name}-concat-broadcast", op(name)(concat(x, z, axis=ax), y), concat(op(name)(x, y), op(name)(z, y), axis=ax), _trailing_operand,
                when=(ok(concat(x, z, axis=ax)), ge(ax, 0), lt(ax, rank(x) - rank(y)))) for name in ("add", "mul")],
        *[Axiom(f"{name}-concat-broadcast-1", op(name)(concat(x, z, axis=ax), y), concat(op(name)(x, y), op(name)(z, y), axis=ax), _unit_axis_operand,
                when=(ok(concat(x, z, axis=ax)), ge(ax, 0), eq(rank(y), rank(x)), eq(dim(y, ax), 1))) for name in ("add", "mul")],
    ]


axioms = [a for r in RANKS for a in _transpose_axioms(r)] + _reshape_axioms() + _concat_axioms()
