"""Convolution and pooling: conv2d (groups, bias, fused activation), enlarge, max/avg/global pools.

Axioms: convolution is linear in each argument (add, scalar_mul); a fused activation is the
activation of the plain convolution, and a bias is an added per-channel constant;
convolution distributes over concatenation along the batch, the output channels (kernels
stacked) and the input channels (a sum of two convolutions); enlarging a kernel with zeros
keeps the result when the padding grows by the same margin; pools work channel by channel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso.ops import ACTIVATIONS

from .base import Axiom, OpSpec, Slot, Unsupported, all_of, idiv
from .sampling import Sampler, conv_case
from .terms import dim, eq, ge, ints, le, lt, ok, op, rank, same_shape, tensors

__all__ = ["specs", "axioms"]

# ---- specifications ------------------------------------------------------------------------------------


def _window(size, kernel, stride, pad_begin, pad_end, dilation):
    """Output length of a sliding window, and the requirement that one window fits."""
    room = size + pad_begin + pad_end - (kernel - 1) * dilation - 1
    return idiv(room, stride) + 1, room >= 0


def _spatial(x, kernel, p) -> tuple[list, list]:
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = p["strides"], p["pads"], p["dilations"]
    oh, fits_h = _window(x[2], kernel[0], sh, pt, pb, dh)
    ow, fits_w = _window(x[3], kernel[1], sw, pl, pr, dw)
    return [oh, ow], [fits_h, fits_w]


def _conv_rule(dims, p):
    x, w, groups = dims[0], dims[1], p["groups"]
    spatial, fits = _spatial(x, w[2:], p)
    bias = [dims[2][0] == w[0]] if len(dims) == 3 else []
    # NOTE: with symbolic groups and kernel channels the channel equation is nonlinear; it is left out then.
    channels = [x[1] == w[1] * groups] if isinstance(groups, int) or isinstance(w[1], int) else []
    return [[x[0], w[0], *spatial]], all_of([*channels, *fits, *bias])


def _pool_rule(dims, p):
    if p["ceil_mode"]:
        raise Unsupported("pooling with ceil_mode=1 has no symbolic shape rule")
    x = dims[0]
    spatial, fits = _spatial(x, p["kernel"], p)
    return [[x[0], x[1], *spatial]], all_of(fits)


def _enlarge_rule(dims, p):
    w, (kh, kw) = dims[0], p["kernel"]
    return [[w[0], w[1], kh, kw]], all_of([kh >= w[2], kw >= w[3], (kh - w[2]) % 2 == 0, (kw - w[3]) % 2 == 0])


def _global_pool_rule(dims, p):
    x = dims[0]
    return [[x[0], x[1]] + [1] * (len(x) - 2)], []


_SPATIAL_SLOTS = (Slot("strides", "ints"), Slot("pads", "ints"), Slot("dilations", "ints"))
_POOL_SLOTS = (Slot("kernel", "ints"), *_SPATIAL_SLOTS, Slot("ceil_mode", "int"))

specs = [
    OpSpec("conv2d", (*_SPATIAL_SLOTS, Slot("groups", "int"), Slot("activation", "enum", ACTIVATIONS)), _conv_rule,
           doc="2-D convolution (optional bias), then an activation"),
    OpSpec("enlarge", (Slot("kernel", "ints"),), _enlarge_rule, doc="zero-pads a kernel to a larger centred size"),
    OpSpec("max_pool2d", _POOL_SLOTS, _pool_rule, doc="window maximum"),
    OpSpec("avg_pool2d", (*_POOL_SLOTS, Slot("count_include_pad", "int")), _pool_rule, doc="window mean"),
    OpSpec("global_avg_pool", (), _global_pool_rule, doc="mean over all spatial positions"),
]

# ---- axioms ---------------------------------------------------------------------------------------------

conv2d, enlarge, max_pool2d, avg_pool2d, global_avg_pool = op("conv2d"), op("enlarge"), op("max_pool2d"), op("avg_pool2d"), op("global_avg_pool")
add, scalar_mul, concat, reshape = op("add"), op("scalar_mul"), op("concat"), op("reshape")
x, y, w, v, b, s = tensors("x y w v b s")
sh, sw, pt, pl, pb, pr, a, g, kh, kw, ax, cip = ints("sh sw pt pl pb pr a g kh kw ax cip")

# The spatial parameters every conv axiom quantifies over (dilations keep their default 1).
WINDOW = {"strides": (sh, sw), "pads": (pt, pl, pb, pr)}
CONV = {**WINDOW, "groups": g}


def _convs(*names: str, groups: Sequence[int] = (1, 2)) -> Sampler:
    """A convolution's tensors: x, y (N, C, H, W); w, v (M, C/g, KH, KW); b (M,); s a scale."""

    def sample(rng: np.random.Generator):
        size, valuation = conv_case(rng, int(rng.choice(groups)))
        shapes = {"x": (size["N"], size["C"], size["H"], size["W"]), "w": (size["M"], size["C"] // valuation["g"], size["KH"], size["KW"]),
                  "b": (size["M"],), "s": (1,) * int(rng.integers(0, 3))}
        shapes.update(y=shapes["x"], v=shapes["w"])
        valuation.update({n: shapes[n] for n in names})
        return valuation

    return sample


def _split_along(axis: int, names: str = "x y", base: str = "x") -> Sampler:
    """Two convolution inputs (or kernels) that differ only along ``axis``."""

    def sample(rng: np.random.Generator):
        valuation = _convs("x", "w", "b", groups=(1,))(rng)
        first, second = names.split()
        shape_ = list(valuation[base])
        shape_[axis] = int(rng.integers(1, 3))
        valuation[first], valuation[second] = valuation[base], tuple(shape_)
        return valuation

    return sample


def _channels(rng: np.random.Generator):
    """conv(x, w) + conv(y, v) with x, y of different channel counts."""
    valuation = _convs("x", "w", groups=(1,))(rng)
    n, _, h, w_ = valuation["x"]
    m, _, k1, k2 = valuation["w"]
    c2 = int(rng.integers(1, 3))
    valuation.update(y=(n, c2, h, w_), v=(m, c2, k1, k2))
    return valuation


def _enlarged(rng: np.random.Generator):
    """A kernel of 1 or 3 rows/columns grown by 0 or 2, with padding at least the margin."""
    size, valuation = conv_case(rng, 1, kernels=(1, 3))
    valuation.update(kh=size["KH"] + 2 * int(rng.integers(0, 2)), kw=size["KW"] + 2 * int(rng.integers(0, 2)))
    valuation.update(pt=(valuation["kh"] - size["KH"]) // 2 + int(rng.integers(0, 2)), pb=(valuation["kh"] - size["KH"]) // 2 + int(rng.integers(0, 2)),
                     pl=(valuation["kw"] - size["KW"]) // 2 + int(rng.integers(0, 2)), pr=(valuation["kw"] - size["KW"]) // 2 + int(rng.integers(0, 2)))
    valuation.update(x=(size["N"], size["C"], size["H"] + 2, size["W"] + 2), w=(size["M"], size["C"], size["KH"], size["KW"]),
                     v=(int(rng.integers(1, 3)), size["C"], size["KH"], size["KW"]), s=(1,) * int(rng.integers(0, 3)))
    return valuation


def _pooled(rng: np.random.Generator):
    """An image x and a second image y that differs from it along axis ``ax`` (0 or 1), and a pool window."""
    size, valuation = conv_case(rng, 1)
    valuation.update(kh=size["KH"], kw=size["KW"], ax=int(rng.integers(0, 2)), cip=int(rng.integers(0, 2)))
    valuation["x"] = (size["N"], size["C"], size["H"], size["W"])
    other = list(valuation["x"])
    other[valuation["ax"]] = int(rng.integers(1, 3))
    valuation["y"] = tuple(other)
    return valuation


def _two_images(rng: np.random.Generator):
    valuation = _pooled(rng)
    valuation["y"] = valuation["x"]
    return valuation


def _scaled_pool(rng: np.random.Generator):
    valuation = _pooled(rng)
    valuation["s"] = (1,) * int(rng.integers(0, 3))
    return valuation


# Where the margins of an enlarged kernel go: half of the growth on each side.
MARGIN_H, MARGIN_W = (kh - dim(w, 2)) // 2, (kw - dim(w, 3)) // 2
POOL = {"kernel": (kh, kw), **WINDOW}
# Pools of x and y concatenate like x and y when the images have one size.
SAME_IMAGE = (ge(ax, 0), le(ax, 1), eq(rank(x), 4), eq(dim(x, 2), dim(y, 2)), eq(dim(x, 3), dim(y, 3)))

axioms = [
    # a fused activation is the activation of the plain convolution (with or without bias)
    *[Axiom(f"conv2d-{act}", conv2d(x, w, **CONV, activation=act), op(act)(conv2d(x, w, **CONV)), _convs("x", "w"), unfold=True)
      for act in ACTIVATIONS[1:]],
    *[Axiom(f"conv2d-bias-{act}", conv2d(x, w, b, **CONV, activation=act), op(act)(conv2d(x, w, b, **CONV)), _convs("x", "w", "b"), unfold=True)
      for act in ACTIVATIONS[1:]],
    # a bias adds one constant per output channel
    Axiom("conv2d-bias", conv2d(x, w, b, **CONV), add(conv2d(x, w, **CONV), reshape(b, shape=(1, dim(b, 0), 1, 1))), _convs("x", "w", "b"),
          when=(eq(rank(b), 1), eq(dim(b, 0), dim(w, 0))), unfold=True),
    # convolution is linear in its kernel and in its input
    Axiom("conv2d-add-kernels", conv2d(x, add(w, v), **CONV), add(conv2d(x, w, **CONV), conv2d(x, v, **CONV)), _convs("x", "w", "v"),
          when=same_shape(w, v, 4)),
    Axiom("conv2d-add-inputs", conv2d(add(x, y), w, **CONV), add(conv2d(x, w, **CONV), conv2d(y, w, **CONV)), _convs("x", "y", "w"),
          when=same_shape(x, y, 4)),
    Axiom("conv2d-smul", conv2d(scalar_mul(x, s), w, **CONV, activation=a), conv2d(x, scalar_mul(w, s), **CONV, activation=a), _convs("x", "w", "s")),
    Axiom("smul-conv2d", scalar_mul(conv2d(x, w, **CONV), s), conv2d(scalar_mul(x, s), w, **CONV), _convs("x", "w", "s")),
    # convolution distributes over concatenation: of batches, of kernels (output channels), of input channels
    Axiom("conv2d-concat-batch", conv2d(concat(x, y, axis=0), w, **CONV, activation=a),
          concat(conv2d(x, w, **CONV, activation=a), conv2d(y, w, **CONV, activation=a), axis=0), _split_along(0),
          when=(eq(dim(x, 2), dim(y, 2)), eq(dim(x, 3), dim(y, 3)))),
    Axiom("conv2d-concat-kernels", conv2d(x, concat(w, v, axis=0), **WINDOW, activation=a),
          concat(conv2d(x, w, **WINDOW, activation=a), conv2d(x, v, **WINDOW, activation=a), axis=1), _split_along(0, "w v", "w"),
          when=(eq(dim(w, 2), dim(v, 2)), eq(dim(w, 3), dim(v, 3)))),
    Axiom("conv2d-concat-channels", add(conv2d(x, w, **WINDOW), conv2d(y, v, **WINDOW)), conv2d(concat(x, y, axis=1), concat(w, v, axis=1), **WINDOW),
          _channels, when=(eq(dim(x, 0), dim(y, 0)), eq(dim(x, 2), dim(y, 2)), eq(dim(x, 3), dim(y, 3)),
                           eq(dim(w, 0), dim(v, 0)), eq(dim(w, 2), dim(v, 2)), eq(dim(w, 3), dim(v, 3)), eq(dim(x, 1), dim(w, 1)))),
    # two convolutions side by side are one grouped convolution over the stacked inputs and kernels
    Axiom("conv2d-concat-groups", conv2d(concat(x, y, axis=1), concat(w, v, axis=0), **WINDOW, groups=2, activation=a),
          concat(conv2d(x, w, **WINDOW, activation=a), conv2d(y, v, **WINDOW, activation=a), axis=1), _convs("x", "y", "w", "v", groups=(1,)),
          when=same_shape(x, y, 4) + same_shape(w, v, 4)),
    # an enlarged kernel with padding grown by the margin computes the same convolution
    Axiom("conv2d-enlarge", conv2d(x, enlarge(w, kernel=(kh, kw)), **CONV, activation=a),
          conv2d(x, w, strides=(sh, sw), pads=(pt - MARGIN_H, pl - MARGIN_W, pb - MARGIN_H, pr - MARGIN_W), groups=g, activation=a), _enlarged,
          when=(ok(enlarge(w, kernel=(kh, kw))), ge(pt, MARGIN_H), ge(pl, MARGIN_W), ge(pb, MARGIN_H), ge(pr, MARGIN_W))),
    Axiom("enlarge-concat", enlarge(concat(w, v, axis=0), kernel=(kh, kw)), concat(enlarge(w, kernel=(kh, kw)), enlarge(v, kernel=(kh, kw)), axis=0),
          _enlarged, when=(eq(dim(w, 2), dim(v, 2)), eq(dim(w, 3), dim(v, 3)))),
    Axiom("enlarge-smul", enlarge(scalar_mul(w, s), kernel=(kh, kw)), scalar_mul(enlarge(w, kernel=(kh, kw)), s), _enlarged),
    # pools work per image and per channel, so they distribute over concatenation along those axes
    Axiom("max_pool2d-concat", max_pool2d(concat(x, y, axis=ax), **POOL), concat(max_pool2d(x, **POOL), max_pool2d(y, **POOL), axis=ax), _pooled,
          when=SAME_IMAGE),
    Axiom("avg_pool2d-concat", avg_pool2d(concat(x, y, axis=ax), **POOL, count_include_pad=cip),
          concat(avg_pool2d(x, **POOL, count_include_pad=cip), avg_pool2d(y, **POOL, count_include_pad=cip), axis=ax), _pooled,
          when=SAME_IMAGE),
    Axiom("global_avg_pool-concat", global_avg_pool(concat(x, y, axis=ax)), concat(global_avg_pool(x), global_avg_pool(y), axis=ax), _pooled,
          when=SAME_IMAGE),
    # average pools are linear: they distribute over add and commute with scaling
    Axiom("avg_pool2d-add", avg_pool2d(add(x, y), **POOL, count_include_pad=cip), add(avg_pool2d(x, **POOL, count_include_pad=cip), avg_pool2d(y, **POOL, count_include_pad=cip)),
          _two_images, when=same_shape(x, y, 4)),
    Axiom("smul-avg_pool2d", scalar_mul(avg_pool2d(x, **POOL, count_include_pad=cip), s), avg_pool2d(scalar_mul(x, s), **POOL, count_include_pad=cip),
          _scaled_pool),
    Axiom("smul-global_avg_pool", scalar_mul(global_avg_pool(x), s), global_avg_pool(scalar_mul(x, s)), _scaled_pool),
    # without padding, counting the padding in the divisor changes nothing
    Axiom("avg_pool2d-unpadded", avg_pool2d(x, kernel=(kh, kw), strides=(sh, sw), count_include_pad=0),
          avg_pool2d(x, kernel=(kh, kw), strides=(sh, sw), count_include_pad=1), _pooled),
    # relu is monotone, so it commutes with a maximum (over windows that each hold an element, not only padding)
    Axiom("relu-max_pool2d", op("relu")(max_pool2d(x, **POOL)), max_pool2d(op("relu")(x), **POOL), _pooled,
          when=(lt(pt, kh), lt(pb, kh), lt(pl, kw), lt(pr, kw))),
]
