"""Constant tensors: fill (zeros, ones), eye, the identity convolution kernel, the pooling kernel.

Axioms are the identities that make these constants useful in rewrites: x times the
identity matrix is x, x convolved with the identity kernel under SAME padding is x, the
depthwise convolution with the pooling kernel is average pooling (padding counted), and
adding zeros or multiplying by ones of x's shape, or of its trailing dims, does nothing.
"""

from __future__ import annotations

import numpy as np

from .base import Axiom, OpSpec, Slot
from .sampling import Sampler, conv_case, shape
from .terms import dim, eq, ge, ints, op, rank, tensors

__all__ = ["specs", "axioms"]

specs = [
    OpSpec("fill", (Slot("shape", "ints"), Slot("value", "real")), lambda dims, p: ([list(p["shape"])], []), context=("dtype",),
           doc="a tensor of one repeated value"),
    OpSpec("eye", (Slot("n", "int"),), lambda dims, p: ([[p["n"], p["n"]]], []), context=("dtype",), doc="the identity matrix"),
    OpSpec("conv_identity", (Slot("channels", "int"), Slot("kernel", "ints")),
           lambda dims, p: ([[p["channels"], p["channels"], *p["kernel"]]], []), context=("dtype",), doc="the identity convolution kernel"),
    OpSpec("pool_kernel", (Slot("channels", "int"), Slot("kernel", "ints")),
           lambda dims, p: ([[p["channels"], 1, *p["kernel"]]], []), context=("dtype",), doc="the depthwise average-pooling kernel"),
]

matmul, conv2d, avg_pool2d, transpose, add, mul = op("matmul"), op("conv2d"), op("avg_pool2d"), op("transpose"), op("add"), op("mul")
eye, conv_identity, pool_kernel, fill = op("eye"), op("conv_identity"), op("pool_kernel"), op("fill")
x, v, y = tensors("x v y")
n, c, g, kh, kw, sh, sw, pt, pl, pb, pr = ints("n c g kh kw sh sw pt pl pb pr")
d = ints("d0 d1 d2 d3")


def _matrix(side: int) -> Sampler:
    """A (batched) matrix x and n, the size of its dimension ``-side``."""

    def sample(rng: np.random.Generator):
        x_shape = shape(rng, int(rng.integers(2, 5)))
        return {"x": x_shape, "n": x_shape[-side]}

    return sample


def _diagonal(rng: np.random.Generator):
    """A matrix x (n, m) and a vector v of n entries."""
    n_, m = shape(rng, 2)
    return {"x": (n_, m), "n": n_, "v": (n_,)}


def _vector_or_matrix(rng: np.random.Generator):
    x_shape = shape(rng, int(rng.integers(1, 4)))
    return {"x": x_shape, "n": x_shape[-1]}


def _identity_conv(rng: np.random.Generator):
    size, valuation = conv_case(rng, 1, kernels=(1, 3, 5))
    valuation.update(x=(size["N"], size["C"], size["H"], size["W"]), c=size["C"], kh=size["KH"], kw=size["KW"])
    valuation.update(pt=size["KH"] // 2, pb=size["KH"] // 2, pl=size["KW"] // 2, pr=size["KW"] // 2)
    return valuation


def _pool_conv(rng: np.random.Generator):
    size, valuation = conv_case(rng, 1, kernels=(1, 3))
    valuation.update(x=(size["N"], size["C"], size["H"], size["W"]), c=size["C"], g=size["C"], kh=size["KH"], kw=size["KW"])
    return valuation


def _own_shape(rank_: int) -> Sampler:
    return lambda rng: (lambda s: {"x": s, **{f"d{i}": v for i, v in enumerate(s)}})(shape(rng, rank_))


def _trailing_shape(rank_: int, k: int) -> Sampler:
    """x of the rank, d its last k dims; one in five a near miss: x with one more dim after them."""

    def sample(rng: np.random.Generator):
        s = shape(rng, rank_)
        x = s + (int(rng.integers(2, 4)),) if rng.random() < 0.2 else s
        return {"x": x, **{f"d{i}": v for i, v in enumerate(s[rank_ - k:])}}

    return sample


def _broadcast_into(rank_: int) -> Sampler:
    """y of a random shape (and d its dims), x that broadcasts into it: trailing dims of y, some set to 1."""

    def sample(rng: np.random.Generator):
        y = shape(rng, rank_)
        x = tuple(1 if rng.random() < 0.4 else d for d in y[int(rng.integers(0, rank_ + 1)):])
        return {"x": x, "y": y, **{f"d{i}": v for i, v in enumerate(y)}}

    return sample


SAME_PADDING = (eq(pt, kh // 2), eq(pb, kh // 2), eq(pl, kw // 2), eq(pr, kw // 2))
ODD_KERNEL = (eq(kh % 2, 1), eq(kw % 2, 1))

axioms = [
    # the identity matrix is neutral on either side of a product
    Axiom("matmul-eye-right", matmul(x, eye(n=n)), x, _vector_or_matrix, when=(ge(rank(x), 1), eq(dim(x, rank(x) - 1), n))),
    Axiom("matmul-eye-left", matmul(eye(n=n), x), x, _matrix(2), when=(ge(rank(x), 2), eq(dim(x, rank(x) - 2), n))),
    Axiom("transpose-eye", transpose(eye(n=n), perm=(1, 0)), eye(n=n), _matrix(1)),
    # a vector times the identity is a diagonal matrix, and a product with it scales the rows
    Axiom("matmul-diagonal", matmul(mul(v, eye(n=n)), x), transpose(mul(transpose(x, perm=(1, 0)), v), perm=(1, 0)), _diagonal,
          when=(eq(rank(v), 1), eq(rank(x), 2), eq(dim(x, 0), n), eq(dim(v, 0), n))),
    # the identity kernel under SAME padding and unit strides is neutral
    Axiom("conv2d-identity", conv2d(x, conv_identity(channels=c, kernel=(kh, kw)), strides=(1, 1), pads=(pt, pl, pb, pr)), x, _identity_conv,
          when=(eq(rank(x), 4), eq(dim(x, 1), c), *ODD_KERNEL, *SAME_PADDING)),
    # the depthwise convolution with the pooling kernel is average pooling that counts the padding
    Axiom("conv2d-pool_kernel", conv2d(x, pool_kernel(channels=c, kernel=(kh, kw)), strides=(sh, sw), pads=(pt, pl, pb, pr), groups=g),
          avg_pool2d(x, kernel=(kh, kw), strides=(sh, sw), pads=(pt, pl, pb, pr), count_include_pad=1), _pool_conv,
          when=(eq(rank(x), 4), eq(dim(x, 1), c), eq(g, c), *ODD_KERNEL)),
    # ones of x's shape are neutral for mul, zeros for add
    *[Axiom(f"mul-ones-{r}d", mul(x, fill(shape=d[:r], value=1.0)), x, _own_shape(r), when=(eq(rank(x), r), *[eq(dim(x, i), d[i]) for i in range(r)]))
      for r in (1, 2, 3, 4)],
    *[Axiom(f"add-zeros-{r}d", add(x, fill(shape=d[:r], value=0.0)), x, _own_shape(r), when=(eq(rank(x), r), *[eq(dim(x, i), d[i]) for i in range(r)]))
      for r in (1, 2, 3, 4)],
    # ... and so are zeros (ones) of x's trailing dims, broadcast over the leading ones (a zero bias, a unit scale)
    *[Axiom(f"{name}-trailing-{r}d-{k}", op(name)(x, fill(shape=d[:k], value=value)), x, _trailing_shape(r, k),
            when=(eq(rank(x), r), *[eq(dim(x, r - k + i), d[i]) for i in range(k)]))
      for name, value in (("add", 0.0), ("mul", 1.0)) for r in (2, 3, 4) for k in range(1, r)],
    # ones of y's shape only broadcast x to it, which adding y does anyway (a channel bias times ones, plus an image)
    *[Axiom(f"add-broadcast-ones-{r}d", add(mul(x, fill(shape=d[:r], value=1.0)), y), add(x, y), _broadcast_into(r),
            when=(eq(rank(y), r), *[eq(dim(y, i), d[i]) for i in range(r)])) for r in (1, 2, 3, 4)],
]
