"""Element-wise operators: activations, negation, broadcasting add/sub/mul/div/pow (and sum, add as ONNX writes Sum),
scalar multiplication, GELU.

Axioms: add and mul form a commutative semiring under NumPy broadcasting; sub is add of a
negation; scalar_mul (a one-element scale) commutes with scaling and distributes over the
element-wise ops. GELU is defined by its decomposition, with the constants an exporter writes
(float32 values), one definition per approximation.
"""

from __future__ import annotations

import math

import numpy as np

from .base import Axiom, OpSpec, Slot, all_of, any_of, if_
from .sampling import Sampler, broadcasting, same
from .terms import le, op, rank, tensors

__all__ = ["specs", "axioms", "UNARY", "same_shape_rule"]

UNARY = ("relu", "sigmoid", "tanh", "neg", "erf")


def same_shape_rule(dims, params):
    """Shape rule of ops whose output has the shape of their first input."""
    return [list(dims[0])], []


def _broadcast_rule(dims, params):
    rank_ = max(len(d) for d in dims)
    a, b = ([1] * (rank_ - len(d)) + list(d) for d in dims)
    out = [if_(p == 1, q, p) for p, q in zip(a, b)]
    return [out], all_of([any_of(p == 1, q == 1, p == q) for p, q in zip(a, b)])


def _broadcast_rule_3(dims, params):
    """Three operands broadcast as the first two, then that with the third."""
    (ab,), fits_ab = _broadcast_rule(dims[:2], params)
    (out,), fits = _broadcast_rule([ab, dims[2]], params)
    return [out], fits_ab + fits


def _scalar_mul_rule(dims, params):
    return [list(dims[0])], all_of([d == 1 for d in dims[1]])


specs = [OpSpec(name, (), same_shape_rule, doc=f"element-wise {name}") for name in UNARY]
# (outside UNARY: the normalizations' definitions use them, with no laws of their own beside reciprocal's definition)
specs += [OpSpec(name, (), same_shape_rule, doc=f"element-wise {name}") for name in ("sqrt", "reciprocal")]
specs += [OpSpec(name, (), _broadcast_rule, doc=f"broadcasting {name}") for name in ("add", "sub", "mul", "div", "pow")]
specs += [OpSpec("sum", (), _broadcast_rule, doc="ONNX's Sum of two tensors, defined as add")]
specs += [OpSpec("scalar_mul", (), _scalar_mul_rule, doc="x times a one-element tensor")]
specs += [OpSpec("is_nan", (), same_shape_rule, doc="whether each element is NaN (uninterpreted: nothing is assumed of it)")]
specs += [OpSpec("where", (), _broadcast_rule_3, doc="condition ? x : y, broadcasting")]
specs += [OpSpec("gelu", (Slot("approximate", "enum", ("none", "tanh")),), same_shape_rule,
                 doc="ONNX's Gelu (opset 20), defined by its decomposition (gelu-erf, gelu-tanh)")]
specs += [OpSpec("fast_gelu", (), same_shape_rule, doc="ONNX Runtime's FastGelu, defined as the tanh GELU")]

add, sub, mul, neg, scalar_mul = op("add"), op("sub"), op("mul"), op("neg"), op("scalar_mul")
div, pow_, erf, tanh, fill, gelu = op("div"), op("pow"), op("erf"), op("tanh"), op("fill"), op("gelu")
x, y, z, s, t = tensors("x y z s t")


def constant(value: float):
    """A float32 scalar as a file holds it (what a rule's source constant matches: ``taso.search.rewrite``)."""
    return fill(shape=(), value=float(np.float32(value)))


# GELU, x * Phi(x), as exporters write it (TorchScript at opsets below 20, torchlib, transformers' gelu_new), with their
# float32 constants; checked against ONNX Runtime's Gelu kernel in tests/test_gelu_forms.py.
GELU_ERF = mul(x, scalar_mul(add(erf(div(x, constant(math.sqrt(2)))), constant(1)), constant(0.5)))
GELU_TANH = mul(scalar_mul(x, constant(0.5)),
                add(tanh(scalar_mul(add(x, scalar_mul(pow_(x, constant(3)), constant(0.044715))), constant(math.sqrt(2 / math.pi)))),
                    constant(1)))


def _with_scales(base: Sampler, names: str) -> Sampler:
    """``base``'s valuation plus one-element scales whose rank never exceeds any tensor's."""

    def sample(rng: np.random.Generator):
        valuation = base(rng)
        low = min(len(v) for v in valuation.values())
        valuation.update({n: (1,) * int(rng.integers(0, low + 1)) for n in names.split()})
        return valuation

    return sample


axioms = [
    # add and mul are commutative and associative, and mul distributes over add
    # NOTE: associativity only rewrites left to right (to right-nested sums); with
    # commutativity that still equates any two groupings, without an explosion of terms.
    Axiom("add-comm", add(x, y), add(y, x), broadcasting("x y")),
    Axiom("add-assoc", add(add(x, y), z), add(x, add(y, z)), broadcasting("x y z"), trigger="lhs"),
    Axiom("mul-comm", mul(x, y), mul(y, x), broadcasting("x y")),
    Axiom("mul-assoc", mul(mul(x, y), z), mul(x, mul(y, z)), broadcasting("x y z"), trigger="lhs"),
    Axiom("mul-add-distrib", mul(add(x, y), z), add(mul(x, z), mul(y, z)), broadcasting("x y z")),
    # x - y = x + (-y), and negation is an involution
    Axiom("sub-add-neg", sub(x, y), add(x, neg(y)), broadcasting("x y")),
    Axiom("neg-neg", neg(neg(x)), x, same("x")),
    # relu is idempotent
    Axiom("relu-relu", op("relu")(op("relu")(x)), op("relu")(x), same("x"), trigger="lhs"),
    # scalar_mul: scales commute, combine, and distribute over add and mul
    Axiom("smul-comm", scalar_mul(scalar_mul(x, s), t), scalar_mul(scalar_mul(x, t), s), _with_scales(same("x"), "s t")),
    Axiom("smul-assoc", scalar_mul(scalar_mul(x, s), t), scalar_mul(x, scalar_mul(s, t)), _with_scales(same("x"), "s t"),
          when=(le(rank(t), rank(s)),)),
    Axiom("smul-add", scalar_mul(add(x, y), s), add(scalar_mul(x, s), scalar_mul(y, s)), _with_scales(broadcasting("x y"), "s"),
          when=(le(rank(s), rank(x)), le(rank(s), rank(y)))),
    Axiom("smul-mul", scalar_mul(mul(x, y), s), mul(x, scalar_mul(y, s)), _with_scales(broadcasting("x y"), "s"),
          when=(le(rank(s), rank(y)),)),
    Axiom("smul-neg", neg(scalar_mul(x, s)), scalar_mul(neg(x), s), _with_scales(same("x"), "s")),
    # sum is add written as ONNX's Sum (taso.ops.elementwise: no load-time fusion of ONNX Runtime takes it in)
    Axiom("sum-is-add", op("sum")(x, y), add(x, y), broadcasting("x y"), unfold=True),
    # GELU's definitions
    Axiom("gelu-erf", gelu(x, approximate="none"), GELU_ERF, same("x"), unfold=True),
    Axiom("gelu-tanh", gelu(x, approximate="tanh"), GELU_TANH, same("x"), unfold=True),
    Axiom("fast_gelu-is-gelu-tanh", op("fast_gelu")(x), gelu(x, approximate="tanh"), same("x"), unfold=True),
]
