"""Inference batch norm, the two weight ops that fold it into a convolution, and per-channel laws.

Batch norm with constant statistics is a per-channel affine map, ``x * gain + shift`` with
``gain = scale / sqrt(|var| + eps)`` and ``shift = bias - mean * gain``; a convolution's
output channel ``m`` is linear in kernel ``m``. Hence the fold: batch_norm(conv2d(x, w)) =
conv2d(x, bn_kernel(w), bn_shift(...)), with ``bn_kernel`` scaling each output channel of
the kernel by the gain. ``bn_kernel`` is linear in its kernel and works per output channel,
so it commutes with what the generator does to kernels (add, mul, scaling, stacking input
channels, enlarging). Two laws on channel vectors ``c`` of shape (C, 1, 1) ride along:
scaling a channel commutes with per-channel linear ops (average pools, depthwise
convolutions) and shifting one commutes with a maximum pool; a 1x1 convolution mixes
channels pixel by pixel, so it commutes with an average pool.

Epsilon is a real parameter; the axioms are stated at the epsilons exporters write (PyTorch
1e-5, Keras 1e-3), so a rule at another epsilon stays unproved rather than assumed.
"""

from __future__ import annotations

import numpy as np

from .base import Axiom, OpSpec, Slot, Unsupported, all_of
from .conv import CONV, POOL
from .elementwise import constant
from .sampling import Sampler, conv_case, same
from .terms import dim, eq, ints, le, op, rank, tensors

__all__ = ["specs", "axioms", "definitions", "EPSILONS", "LAYER_NORM_EPSILONS", "RMS_NORM_EPSILONS"]

EPSILONS = (1e-5, 1e-3)
LAYER_NORM_EPSILONS = (1e-5, 1e-6, 1e-12)  # PyTorch's and transformers' defaults (BERT and DistilBERT write 1e-12)


def _batch_norm_rule(dims, p):
    x = dims[0]
    return [list(x)], all_of([len(x) >= 2, *[d[0] == x[1] for d in dims[1:]]])


def _bn_kernel_rule(dims, p):
    w = dims[0]
    return [list(w)], all_of([len(w) == 4, *[d[0] == w[0] for d in dims[1:]]])


def _bn_shift_rule(dims, p):
    return [list(dims[0])], all_of([d[0] == dims[0][0] for d in dims[1:]])


def _layer_norm_rule(dims, p):
    if p["stats"]:
        raise Unsupported("layer_norm with its statistics outputs")
    return [list(dims[0])], []  # its requirements on gamma and beta are left out: always safe


def _skip_layer_norm_rule(dims, p):
    x = list(dims[0])
    if len(x) not in (2, 3):
        raise Unsupported(f"skip_layer_norm of rank {len(x)}")
    return [x, x] if p["sum"] else [x], all_of([len(dims[1]) == len(x), *[a == b for a, b in zip(dims[1], x)],
                        *[d for t in dims[2:] for d in (len(t) == 1, t[0] == x[-1])]])


def _reduce_rule(dims, p):
    x, axes = list(dims[0]), p["axes"]
    if not all(isinstance(a, int) for a in axes):
        raise Unsupported("a reduction over symbolic axes")
    kept = [1 if k in axes else d for k, d in enumerate(x)] if p["keepdims"] else [d for k, d in enumerate(x) if k not in axes]
    return [kept], all_of([0 <= a < len(x) for a in axes])


_EPSILON = (Slot("epsilon", "real"),)
specs = [
    OpSpec("reduce_mean", (Slot("axes", "ints"), Slot("keepdims", "int")), _reduce_rule, doc="the mean over the given axes"),
    OpSpec("rms_norm", (Slot("axis", "int"), *_EPSILON), lambda dims, p: ([list(dims[0])], []),
           doc="ONNX's RMSNormalization (23), defined by its decomposition"),
    OpSpec("batch_norm", _EPSILON, _batch_norm_rule, doc="inference batch norm: (x - mean) * scale / sqrt(|var| + eps) + bias per channel"),
    OpSpec("bn_kernel", _EPSILON, _bn_kernel_rule, doc="a kernel's output channels scaled by batch norm's gain"),
    OpSpec("bn_shift", _EPSILON, _bn_shift_rule, doc="batch norm's per-channel shift, bias - mean * gain"),
    OpSpec("layer_norm", (Slot("axis", "int"), *_EPSILON, Slot("stats", "int")), _layer_norm_rule,
           doc="normalises over the axes from `axis` on, then scales and shifts"),
    OpSpec("skip_layer_norm", (*_EPSILON, Slot("sum", "int")), _skip_layer_norm_rule, doc="ONNX Runtime's SkipLayerNormalization, defined by its decomposition"),
    OpSpec("softmax", (Slot("axis", "int"),), lambda dims, p: ([list(dims[0])], all_of([0 <= p["axis"] < max(len(dims[0]), 1)])),
           doc="exp(x) / sum(exp(x)) along an axis; uninterpreted (attention's definition applies it on both sides)"),
]

batch_norm, bn_kernel, bn_shift = op("batch_norm"), op("bn_kernel"), op("bn_shift")
layer_norm, skip_layer_norm, rms_norm, reduce_mean = op("layer_norm"), op("skip_layer_norm"), op("rms_norm"), op("reduce_mean")
sub, div, pow_, sqrt = op("sub"), op("div"), op("pow"), op("sqrt")
conv2d, concat, add, mul, scalar_mul, enlarge = op("conv2d"), op("concat"), op("add"), op("mul"), op("scalar_mul"), op("enlarge")
avg_pool2d, max_pool2d = op("avg_pool2d"), op("max_pool2d")
x, y, w, v, c, s, sc, bi, mu, va = tensors("x y w v c s sc bi mu va")
kh, kw, g, cip = ints("kh kw g cip")
STATS = (sc, bi, mu, va)


def _per_channel(names: str, count: int, valuation: dict) -> dict:
    valuation.update({n: (count,) for n in names.split()})
    return valuation


def _conv_bn(rng: np.random.Generator):
    """A convolution x (N, C, H, W) * w (M, C/g, KH, KW) and batch norm statistics of length M."""
    groups = int(rng.choice((1, 2)))
    size, valuation = conv_case(rng, groups)
    valuation.update(x=(size["N"], size["C"], size["H"], size["W"]), w=(size["M"], size["C"] // groups, size["KH"], size["KW"]))
    return _per_channel("sc bi mu va", size["M"], valuation)


def _image_pair_bn(rng: np.random.Generator):
    """Two images that concatenate along the batch, and statistics for their channels."""
    n1, n2, ch, h, w_ = (int(d) for d in rng.integers(1, 4, size=5))
    return _per_channel("sc bi mu va", ch, {"x": (n1, ch, h, w_), "y": (n2, ch, h, w_)})


def _kernels(other_axis: int | None = None) -> Sampler:
    """Kernels w, v of one shape (or differing along ``other_axis``), gains for their output channels, a scale s."""

    def sample(rng: np.random.Generator):
        w_shape = tuple(int(d) for d in rng.integers(1, 4, size=4))
        v_shape = list(w_shape)
        if other_axis is not None:
            v_shape[other_axis] = int(rng.integers(1, 4))
        valuation = {"w": w_shape, "v": tuple(v_shape), "s": (1,) * int(rng.integers(0, 3))}
        _, window = conv_case(rng, 1, kernels=(1, 3))
        valuation.update(window, kh=w_shape[2] + 2 * int(rng.integers(0, 2)), kw=w_shape[3] + 2 * int(rng.integers(0, 2)))
        return _per_channel("sc va", w_shape[0], valuation)

    return sample


def _channel_vector(depthwise: bool = False) -> Sampler:
    """An image x, a channel vector c (C, 1, 1), a pool window, and a kernel w (1x1, or depthwise).

    Two in five valuations are near misses (a vector that varies along space or has another
    length, a kernel that is not 1x1 or not depthwise), so that every guard is exercised.
    """

    def sample(rng: np.random.Generator):
        size, valuation = conv_case(rng, 1)
        channels = int(rng.integers(1, 4))
        near_miss = rng.random() < 0.4
        c_shape = (channels, 1, 1)
        if near_miss:
            c_shape = [(1, channels, 1, 1), (channels,), (channels, 1, size["W"]), (channels, size["H"], 1), (1, 1, 1), (channels + 1, 1, 1)][int(rng.integers(0, 6))]
        valuation.update(x=(size["N"], channels, size["H"], size["W"]), c=c_shape, kh=size["KH"], kw=size["KW"], cip=int(rng.integers(0, 2)))
        if depthwise:
            groups = 1 if near_miss and rng.random() < 0.5 else channels
            multiplier = 2 if near_miss and rng.random() < 0.5 else 1
            valuation.update(w=(channels * multiplier, channels // groups, size["KH"], size["KW"]), g=groups)
        else:
            kernel = (size["KH"], size["KW"]) if near_miss and rng.random() < 0.5 else (1, 1)
            valuation.update(w=(size["M"], channels, *kernel), g=1)
        return valuation

    return sample


def _conv_then_depthwise(rng: np.random.Generator):
    """A convolution x * w with M outputs, then a depthwise kernel v (M, 1, KH', KW') over them."""
    valuation = _conv_bn(rng)
    m = valuation["w"][0]
    size, second = conv_case(rng, 1)
    valuation.update({f"{k}2": v for k, v in second.items() if k in ("sh", "sw", "pt", "pl", "pb", "pr")}, g2=m)
    # near misses: two kernels per channel (a multiplier), or a kernel reading two channels
    valuation["v"] = [(m, 1), (m, 1), (m, 1), (2 * m, 1), (m, 2)][int(rng.integers(0, 5))] + (size["KH"], size["KW"])
    return valuation


sh2, sw2, pt2, pl2, pb2, pr2, g2 = ints("sh2 sw2 pt2 pl2 pb2 pr2 g2")
DEPTHWISE = {"strides": (sh2, sw2), "pads": (pt2, pl2, pb2, pr2), "groups": g2}

# A vector constant along space, (C, 1, 1) or (1, 1, 1); a per-channel op leaves both sides ill typed at any other length.
CHANNEL_VECTOR = (eq(rank(c), 3), eq(dim(c, 1), 1), eq(dim(c, 2), 1))
ONE_BY_ONE = {"strides": (1, 1), "pads": (0, 0, 0, 0)}


def _epsilon_axioms(eps: float) -> list[Axiom]:
    tag = f"{eps:g}"
    stats = dict(epsilon=eps)
    return [
        # batch norm after a convolution is the convolution with scaled kernels and a bias
        Axiom(f"batch_norm-conv2d[{tag}]", batch_norm(conv2d(x, w, **CONV), *STATS, **stats),
              conv2d(x, bn_kernel(w, sc, va, **stats), bn_shift(*STATS, **stats), **CONV), _conv_bn),
        # batch norm works image by image
        Axiom(f"batch_norm-concat-batch[{tag}]", batch_norm(concat(x, y, axis=0), *STATS, **stats),
              concat(batch_norm(x, *STATS, **stats), batch_norm(y, *STATS, **stats), axis=0), _image_pair_bn),
        # bn_kernel scales output channels: it is linear in the kernel and commutes with per-output-channel work
        Axiom(f"bn_kernel-add[{tag}]", bn_kernel(add(w, v), sc, va, **stats), add(bn_kernel(w, sc, va, **stats), bn_kernel(v, sc, va, **stats)),
              _kernels(), when=(eq(rank(w), 4), eq(rank(v), 4), eq(dim(w, 0), dim(v, 0)))),
        # (v may broadcast along the other axes: only the output channels are scaled)
        Axiom(f"bn_kernel-mul[{tag}]", bn_kernel(mul(w, v), sc, va, **stats), mul(bn_kernel(w, sc, va, **stats), v), _kernels(),
              when=(eq(rank(w), 4), eq(rank(v), 4), eq(dim(w, 0), dim(v, 0)))),
        Axiom(f"bn_kernel-smul[{tag}]", bn_kernel(scalar_mul(w, s), sc, va, **stats), scalar_mul(bn_kernel(w, sc, va, **stats), s), _kernels(),
              when=(le(rank(s), rank(w)),)),
        Axiom(f"bn_kernel-concat-inputs[{tag}]", bn_kernel(concat(w, v, axis=1), sc, va, **stats),
              concat(bn_kernel(w, sc, va, **stats), bn_kernel(v, sc, va, **stats), axis=1), _kernels(1)),
        Axiom(f"bn_kernel-enlarge[{tag}]", bn_kernel(enlarge(w, kernel=(kh, kw)), sc, va, **stats), enlarge(bn_kernel(w, sc, va, **stats), kernel=(kh, kw)),
              _kernels()),
        # scaling a depthwise kernel's channels is scaling the channels it reads: the kernel of the conv before
        Axiom(f"conv2d-depthwise-bn_kernel[{tag}]", conv2d(conv2d(x, w, **CONV), bn_kernel(v, sc, va, **stats), **DEPTHWISE),
              conv2d(conv2d(x, bn_kernel(w, sc, va, **stats), **CONV), v, **DEPTHWISE), _conv_then_depthwise,
              when=(eq(dim(v, 1), 1), eq(dim(v, 0), dim(w, 0)))),
    ]


def _residual_norm(rank_: int, affine: bool):
    """An input x and a skip s of one shape of ``rank_``, and gamma (and beta) as long as its last axis."""

    def sample(rng: np.random.Generator):
        x_shape = tuple(int(d) for d in rng.integers(1, 4, size=rank_))
        valuation = {"x": x_shape, "y": x_shape, "sc": x_shape[-1:], **({"bi": x_shape[-1:]} if affine else {})}
        # Near misses, one in five: a rank more (its last axis as long as the one before, so that layer norm from
        # that axis on still applies), or a gamma of rank 2.
        miss = int(rng.integers(0, 15))
        if miss < 2:
            valuation["xy"[miss]] = x_shape + x_shape[-1:]
        elif miss == 2:
            valuation["sc"] = x_shape[-1:] * 2
        return valuation

    return sample


def _skip_layer_norm_axioms(eps: float) -> list[Axiom]:
    """SkipLayerNormalization's definition, for each of its outputs (ONNX Runtime's contrib kernel, checked against it in tests/test_ort_target.py):
    layer norm over the last axis of the input plus the skip, where both have one shape and gamma, beta its last axis."""
    axioms_ = []
    for rank_ in (2, 3):
        for affine in (True, False):
            affine_inputs = (sc, bi) if affine else (sc,)
            guards = (eq(rank(x), rank_), eq(rank(y), rank_), *[eq(dim(y, k), dim(x, k)) for k in range(rank_)],
                      *[eq(dim(t, 0), dim(x, rank_ - 1)) for t in affine_inputs])  # (then any other rank fails both sides)
            tag = f"{rank_}d{'' if affine else '-no-beta'}[{eps:g}]"
            axioms_.append(Axiom(f"skip_layer_norm-{tag}", skip_layer_norm(x, y, *affine_inputs, epsilon=eps),
                                 layer_norm(add(x, y), *affine_inputs, axis=rank_ - 1, epsilon=eps),
                                 _residual_norm(rank_, affine), when=guards, unfold=True))
            # with sum=1, output 0 is the same and output 1 the input + skip sum
            with_sum = skip_layer_norm(x, y, *affine_inputs, epsilon=eps, sum=1)
            axioms_.append(Axiom(f"skip_layer_norm-sum-{tag}", with_sum, layer_norm(add(x, y), *affine_inputs, axis=rank_ - 1, epsilon=eps),
                                 _residual_norm(rank_, affine), when=guards, unfold=True))
            # (the sum does not read gamma and beta: that they are vectors is a guard of its own here)
            vectors = tuple(eq(rank(t), 1) for t in affine_inputs)
            axioms_.append(Axiom(f"skip_layer_norm-sum-{tag}-1", with_sum[1], add(x, y), _residual_norm(rank_, affine), when=guards + vectors,
                                 unfold=True))
    return axioms_


RMS_NORM_EPSILONS = (1e-5, 1e-6)  # Llama's and T5's


def _norm_of_vectors(rank_: int, names: str):
    """x of ``rank_``, and each of ``names`` a vector as long as its last axis. Near misses, one in ten: a vector one
    longer or of rank 2, or x a rank more (its new last axis as long as the one before, so that a norm from the axis
    before still applies and the vectors still broadcast)."""
    vectors = names.split()

    def sample(rng: np.random.Generator):
        x_shape = tuple(int(d) for d in rng.integers(1, 4, size=rank_))
        valuation = {"x": x_shape, **{n: x_shape[-1:] for n in vectors}}
        miss = int(rng.integers(0, 10))
        if miss == 0:
            valuation[vectors[int(rng.integers(0, len(vectors)))]] = (x_shape[-1] + 1,) if rng.integers(0, 2) else (1, x_shape[-1])
        elif miss == 1:
            valuation["x"] = x_shape + x_shape[-1:]
        return valuation

    return sample


def _norm_definitions(rank_: int) -> list[Axiom]:
    """LayerNormalization and RMSNormalization over the last axis of a tensor of ``rank_``, defined by their
    decompositions (the layer norm's as ONNX's LayerNormalization-17 function body, both as the TorchScript exporter
    writes them below the operators' opsets); gamma and beta vectors as long as that axis. At epsilon 0 the
    definition has no + eps (the form torch.onnx's dynamo exporter leaves where its optimizer dropped a 1e-12)."""
    last = rank_ - 1
    vectors = lambda *ts: tuple(c for t in ts for c in (eq(rank(t), 1), eq(dim(t, 0), dim(x, last))))

    def mean(t):
        return reduce_mean(t, axes=(last,), keepdims=1)

    def root(t, eps):
        variance = mean(pow_(t, constant(2)))
        return sqrt(add(variance, constant(eps)) if eps else variance)

    centred = sub(x, mean(x))
    out = []
    for eps in (*LAYER_NORM_EPSILONS, 0.0):
        normalized = div(centred, root(centred, eps))
        out.append(Axiom(f"layer_norm-definition-{rank_}d[{eps:g}]", layer_norm(x, sc, bi, axis=last, epsilon=eps),
                         add(mul(normalized, sc), bi), _norm_of_vectors(rank_, "sc bi"),
                         when=(eq(rank(x), rank_), *vectors(sc, bi)), unfold=True))
        out.append(Axiom(f"layer_norm-definition-{rank_}d-no-beta[{eps:g}]", layer_norm(x, sc, axis=last, epsilon=eps),
                         mul(normalized, sc), _norm_of_vectors(rank_, "sc"), when=(eq(rank(x), rank_), *vectors(sc)), unfold=True))
    for eps in RMS_NORM_EPSILONS:
        out.append(Axiom(f"rms_norm-definition-{rank_}d[{eps:g}]", rms_norm(x, sc, axis=last, epsilon=eps),
                         mul(mul(x, op("reciprocal")(root(x, eps))), sc), _norm_of_vectors(rank_, "sc"),
                         when=(eq(rank(x), rank_), *vectors(sc)), unfold=True))
    return out


# (after every other family's axioms in AXIOMS: specs/__init__.py)
definitions = [
    # 1 / x as the TorchScript exporter writes torch.rsqrt's reciprocal (torchlib writes Reciprocal)
    Axiom("reciprocal-is-div", op("reciprocal")(x), div(constant(1), x), same("x"), unfold=True),
    *[a for rank_ in (2, 3, 4) for a in _norm_definitions(rank_)],
]

axioms = [
    *[a for eps in EPSILONS for a in _epsilon_axioms(eps)],
    *[a for eps in LAYER_NORM_EPSILONS for a in _skip_layer_norm_axioms(eps)],
    # scaling a channel commutes with per-channel linear ops (zero padding stays zero)
    Axiom("avg_pool2d-channel-scale", avg_pool2d(mul(x, c), **POOL, count_include_pad=cip), mul(avg_pool2d(x, **POOL, count_include_pad=cip), c),
          _channel_vector(), when=CHANNEL_VECTOR),
    Axiom("conv2d-depthwise-channel-scale", conv2d(mul(x, c), w, **CONV), mul(conv2d(x, w, **CONV), c),
          _channel_vector(depthwise=True), when=(eq(dim(w, 0), dim(x, 1)), eq(dim(w, 1), 1), eq(dim(c, 0), dim(x, 1)), *CHANNEL_VECTOR)),
    # shifting a channel commutes with a maximum (a window of padding alone stays -inf either way)
    Axiom("max_pool2d-channel-shift", max_pool2d(add(x, c), **POOL), add(max_pool2d(x, **POOL), c), _channel_vector(), when=CHANNEL_VECTOR),
    # a 1x1 convolution mixes channels pixel by pixel; an average pool averages each channel over windows
    Axiom("conv2d-1x1-avg_pool2d", conv2d(avg_pool2d(x, **POOL, count_include_pad=cip), w, **ONE_BY_ONE),
          avg_pool2d(conv2d(x, w, **ONE_BY_ONE), **POOL, count_include_pad=cip), _channel_vector(),
          when=(eq(dim(w, 2), 1), eq(dim(w, 3), 1))),
]
