"""Operator semantics: shape rules agree with the NumPy semantics (hypothesis), exact semantics agree with float."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from taso import ops
from taso.ir import TensorType
from taso.ops.base import FINGERPRINT_PRIME

dims = st.integers(1, 5)
shapes = st.lists(dims, min_size=1, max_size=4).map(tuple)


def _check(op_name: str, arrays, **params) -> None:
    """The shape rule's types equal the types of what the NumPy semantics returns."""
    op = ops.get(op_name)
    p = op.make_params(**params)
    inferred = op.infer([TensorType.of(a) for a in arrays], p)
    produced = [TensorType.of(o) for o in op.evaluate(arrays, p)]
    assert inferred == produced, f"{op_name}{[a.shape for a in arrays]} {params}: rule {inferred} vs numpy {produced}"


def _rand(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, name=st.sampled_from(sorted(ops.ELEMENTWISE - {"cast"})))
def test_elementwise_unary_shape_rule(shape, name):
    if ops.get(name).arity == (1, 1):
        _check(name, [_rand(shape)])


@settings(max_examples=40, deadline=None)
@given(shape=shapes, data=st.data(), name=st.sampled_from(["add", "sub", "mul", "div", "pow", "max", "min"]))
def test_binary_broadcast_shape_rule(shape, data, name):
    # A broadcast partner: drop leading axes and set some axes to 1.
    k = data.draw(st.integers(0, len(shape)))
    other = tuple(1 if data.draw(st.booleans()) else d for d in shape[k:])
    _check(name, [np.abs(_rand(shape)) + 0.5, _rand(other, 1)])


@settings(max_examples=40, deadline=None)
@given(batch=st.lists(dims, max_size=2).map(tuple), m=dims, k=dims, n=dims, act=st.sampled_from(ops.ACTIVATIONS))
def test_matmul_shape_rule(batch, m, k, n, act):
    _check("matmul", [_rand(batch + (m, k)), _rand((k, n))], activation=act)
    _check("matmul", [_rand((k,)), _rand(batch + (k, n))])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2), groups=st.integers(1, 3), cg=st.integers(1, 2), mg=st.integers(1, 2), h=st.integers(3, 7), w=st.integers(3, 7),
       kh=st.integers(1, 3), kw=st.integers(1, 3), stride=st.integers(1, 2), pad=st.integers(0, 2), dil=st.integers(1, 2), bias=st.booleans())
def test_conv2d_shape_rule(n, groups, cg, mg, h, w, kh, kw, stride, pad, dil, bias):
    if (kh - 1) * dil + 1 > h + 2 * pad or (kw - 1) * dil + 1 > w + 2 * pad:
        return
    arrays = [_rand((n, groups * cg, h, w)), _rand((groups * mg, cg, kh, kw))] + ([_rand((groups * mg,))] if bias else [])
    _check("conv2d", arrays, strides=(stride, stride), pads=(pad, pad, pad, pad), dilations=(dil, dil), groups=groups, activation="relu")


@settings(max_examples=40, deadline=None)
@given(h=st.integers(2, 8), w=st.integers(2, 8), k=st.integers(1, 3), stride=st.integers(1, 3), pad=st.integers(0, 1), ceil=st.integers(0, 1),
       name=st.sampled_from(["max_pool2d", "avg_pool2d"]))
def test_pool_shape_rule(h, w, k, stride, pad, ceil, name):
    if k > min(h, w) + 2 * pad or pad >= k:
        return
    _check(name, [_rand((1, 2, h, w))], kernel=(k, k), strides=(stride, stride), pads=(pad, pad, pad, pad), ceil_mode=ceil)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, data=st.data())
def test_data_movement_shape_rules(shape, data):
    x = _rand(shape)
    rank = len(shape)
    perm = tuple(data.draw(st.permutations(range(rank))))
    _check("transpose", [x], perm=perm)
    _check("reshape", [x], shape=(int(np.prod(shape)),))
    axis = data.draw(st.integers(0, rank - 1))
    _check("concat", [x, x], axis=axis)
    cut = data.draw(st.integers(0, shape[axis]))
    _check("split", [x], axis=axis, sizes=(cut, shape[axis] - cut))
    start = data.draw(st.integers(0, shape[axis]))
    _check("slice", [x], starts=(start,), ends=(shape[axis],), axes=(axis,), steps=(1,))
    _check("reduce_mean", [x], axes=(axis,), keepdims=data.draw(st.integers(0, 1)))
    _check("softmax", [x], axis=axis)
    _check("pad", [x], pads=tuple(data.draw(st.integers(0, 2)) for _ in range(2 * rank)))
    _check("gather", [x, np.array([0, -1], np.int64)], axis=axis)


def test_exact_semantics_match_float_semantics_for_linear_ops():
    """For ops whose NumPy semantics is a polynomial, integers mod p compute the same as floats on small integers."""
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (2, 4, 5, 5))
    w = rng.integers(-3, 4, (4, 4, 3, 3))
    conv = ops.get("conv2d")
    p = conv.make_params(pads=(1, 1, 1, 1))
    exact = conv.evaluate_exact([x % FINGERPRINT_PRIME, w % FINGERPRINT_PRIME], p)[0]
    real = conv.evaluate([x.astype(np.float64), w.astype(np.float64)], p)[0]
    assert (exact == np.mod(np.rint(real).astype(np.int64), FINGERPRINT_PRIME)).all()


def test_exact_avg_pool_equals_depthwise_conv_with_the_pool_kernel():
    rng = np.random.default_rng(1)
    x = rng.integers(0, FINGERPRINT_PRIME, (2, 4, 5, 5))
    kernel = ops.get("pool_kernel")
    k = kernel.evaluate_exact([], kernel.make_params(channels=4, kernel=(3, 3)))[0]
    conv, pool = ops.get("conv2d"), ops.get("avg_pool2d")
    a = pool.evaluate_exact([x], pool.make_params(kernel=(3, 3), pads=(1, 1, 1, 1), count_include_pad=1))[0]
    b = conv.evaluate_exact([x, k], conv.make_params(pads=(1, 1, 1, 1), groups=4))[0]
    assert (a == b).all()


def test_activation_stand_ins_differ_from_each_other_and_from_identity():
    x = np.arange(2, 40, dtype=np.int64)
    outs = {name: ops.get(name).evaluate_exact([x], ops.get(name).make_params())[0].tobytes() for name in ("relu", "sigmoid", "tanh")}
    assert len(set(outs.values()) | {x.tobytes()}) == 4


def test_fused_activation_equals_separate_activation_exactly_and_in_float():
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, FINGERPRINT_PRIME, (3, 4)), rng.integers(0, FINGERPRINT_PRIME, (4, 5))
    mm, relu = ops.get("matmul"), ops.get("relu")
    fused = mm.evaluate_exact([a, b], mm.make_params(activation="relu"))[0]
    separate = relu.evaluate_exact(mm.evaluate_exact([a, b], mm.make_params()), relu.make_params())[0]
    assert (fused == separate).all()
    fa, fb = _rand((3, 4)), _rand((4, 5), 1)
    np.testing.assert_allclose(mm.evaluate([fa, fb], mm.make_params(activation="relu"))[0], np.maximum(fa @ fb, 0), rtol=1e-6)
