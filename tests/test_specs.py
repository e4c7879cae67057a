"""The specifications: every axiom holds in the NumPy semantics, shape rules agree with the
registry, every enumerated op is specified, and the axioms prove nothing plainly false."""

from __future__ import annotations

import pytest
import z3
from taso.specs import AXIOMS, SPECS, Unsupported, axiom, spec_of
from taso.specs.z3model import render_axiom
from taso.verifier.axiom_check import check_shape_rules, validate_axiom
from taso.verifier.encode import encode_rule
from taso.verifier.prove import prove
from taso.verifier.verify import Settings, verify_rule

from taso.ir import TensorType
from taso.ops import get
from taso.rules import Rule, RuleInput, RuleNode

try:
    from taso.generator.opset import GENERATOR_OPS
except ImportError:  # the generator is built separately; TASO's op set stands in
    GENERATOR_OPS = ("matmul", "conv2d", "add", "mul", "scalar_mul", "transpose", "enlarge", "relu", "sigmoid", "tanh", "avg_pool2d",
                     "max_pool2d", "concat", "split", "conv_identity", "eye", "fill", "pool_kernel")


@pytest.mark.parametrize("ax", AXIOMS, ids=lambda a: a.name)
def test_axiom_holds_in_the_numpy_semantics_including_ill_typed_valuations(ax):
    report = validate_axiom(ax, trials=10, perturbed=3)
    assert report.ok, f"{ax}\n" + "\n".join(report.failures[:5])
    assert report.sampled_defined >= 5, f"{ax.name}: its sampler gives too few well-typed valuations ({report.sampled_defined}/10)"


@pytest.mark.slow
@pytest.mark.parametrize("ax", AXIOMS, ids=lambda a: a.name)
def test_axiom_holds_on_many_valuations(ax):
    # 100 valuations of each axiom's own sampler (with the adversarial ones of test_axiom_fuzz.py);
    # more: python -m taso.verifier.axiom_fuzz --per-axiom N
    report = validate_axiom(ax, trials=100, perturbed=5, seed=1)
    assert report.ok, f"{ax}\n" + "\n".join(report.failures[:5])
    assert report.sampled_defined >= 25, f"{ax.name}: its sampler gives too few well-typed valuations ({report.sampled_defined}/100)"


@pytest.mark.parametrize("ax", AXIOMS[::3], ids=lambda a: a.name)
def test_axiom_holds_in_float32_too(ax):
    report = validate_axiom(ax, trials=4, perturbed=0, dtype="float32")
    assert report.ok, report.failures[:3]


def test_validation_catches_a_wrong_axiom():
    from taso.specs.base import Axiom
    from taso.specs.sampling import same
    from taso.specs.terms import op, tensors

    x, y = tensors("x y")
    wrong = Axiom("matmul-comm", op("matmul")(x, y), op("matmul")(y, x), same("x y", (2,)))
    assert not validate_axiom(wrong, trials=5).ok


def test_validation_catches_an_axiom_whose_sides_differ_in_definedness():
    from taso.specs.base import Axiom
    from taso.specs.sampling import same
    from taso.specs.terms import ints, op, tensors

    x, y = tensors("x y")
    (s0, s1) = ints("s0 s1")
    split = op("split")(op("concat")(x, y, axis=0), axis=0, sizes=(s0, s1))[0]
    unguarded = Axiom("split-concat-unguarded", split, x, lambda rng: {**same("x y", (2,))(rng), "s0": 2, "s1": 2})
    assert not validate_axiom(unguarded, trials=10).ok


def test_validation_catches_concatenations_whose_sizes_add_up_but_not_their_parts():
    # NOTE: this axiom once lacked the guard dim(x, 1) == dim(y, 0); the mutation test caught
    # the prover using it, and exchanging two tensors' shapes is the perturbation that finds it.
    from dataclasses import replace

    inner = axiom("matmul-concat-inner")
    weakened = replace(inner, name="matmul-concat-inner-weak", when=inner.when[:-1])
    assert not validate_axiom(weakened, trials=60, perturbed=6).ok


@pytest.mark.parametrize("ax", AXIOMS, ids=lambda a: a.name)
def test_symbolic_shape_rules_agree_with_the_registry(ax):
    problems = check_shape_rules(ax, trials=4)
    assert not problems, "\n".join(problems[:5])


@pytest.mark.parametrize("name", GENERATOR_OPS)
def test_every_op_the_generator_enumerates_has_a_spec(name):
    spec = spec_of(name)
    params = {p.name for p in get(name).params}
    assert {s.param for s in spec.slots} <= params and set(spec.context) <= params


def test_unspecified_op_raises_unsupported():
    with pytest.raises(Unsupported, match="gather"):
        spec_of("gather")


def test_every_spec_is_a_registry_op():
    assert all(get(name) is spec.op for name, spec in SPECS.items())


def test_axioms_render_as_quantified_formulas_with_patterns():
    for ax in AXIOMS:
        formula = render_axiom(ax)
        assert z3.is_quantifier(formula) and formula.num_patterns() >= 1, ax.name


def test_axiom_text_reads_like_math():
    assert str(axiom("matmul-assoc")) == "matmul-assoc: matmul(matmul(x, y), z) = matmul(x, matmul(y, z))  if rank(x) >= 2 and rank(y) >= 2 and rank(z) >= 2"


# ---- consistency: the axioms do not prove plainly false statements --------------------------------------


def _rule(inputs: dict, source: list, target: list, outputs) -> Rule:
    return Rule(tuple(RuleInput(n, "c", TensorType(s)) for n, s in inputs.items()),
                tuple(RuleNode(op, params, tuple(i.split()), tuple(o.split())) for op, params, i, o in source),
                tuple(RuleNode(op, params, tuple(i.split()), tuple(o.split())) for op, params, i, o in target), tuple(outputs))


SQUARE = {"x": (3, 3), "y": (3, 3)}
IMAGE = {"x": (1, 3, 5, 5), "w": (3, 3, 3, 3)}
FALSE_RULES = {
    "x = y": _rule(SQUARE, [("relu", {}, "x", "s0")], [("relu", {}, "y", "t0")], [("s0", "t0")]),
    "matmul commutes": _rule(SQUARE, [("matmul", {}, "x y", "s0")], [("matmul", {}, "y x", "t0")], [("s0", "t0")]),
    "add = mul": _rule(SQUARE, [("add", {}, "x y", "s0")], [("mul", {}, "x y", "t0")], [("s0", "t0")]),
    "relu = identity": _rule(SQUARE, [("relu", {}, "x", "s0")], [], [("s0", "x")]),
    "transpose = identity": _rule(SQUARE, [("transpose", {"perm": (1, 0)}, "x", "s0")], [], [("s0", "x")]),
    "split returns the wrong part": _rule(SQUARE, [("concat", {"axis": 0}, "x y", "s0"), ("split", {"axis": 0, "sizes": (3, 3)}, "s0", "s1 s2")], [],
                                          [("s1", "y")]),
    "conv relu = conv": _rule(IMAGE, [("conv2d", {"activation": "relu", "pads": (1, 1, 1, 1)}, "x w", "s0")],
                              [("conv2d", {"pads": (1, 1, 1, 1)}, "x w", "t0")], [("s0", "t0")]),
    "sigmoid = tanh": _rule(SQUARE, [("sigmoid", {}, "x", "s0")], [("tanh", {}, "x", "t0")], [("s0", "t0")]),
    "transpose of product in order": _rule(SQUARE, [("matmul", {}, "x y", "s0"), ("transpose", {"perm": (1, 0)}, "s0", "s1")],
                                           [("transpose", {"perm": (1, 0)}, "x", "t0"), ("transpose", {"perm": (1, 0)}, "y", "t1"),
                                            ("matmul", {}, "t0 t1", "t2")], [("s1", "t2")]),
}


@pytest.mark.parametrize("name", FALSE_RULES)
def test_all_axioms_together_do_not_prove_a_false_statement(name):
    rule = FALSE_RULES[name]
    verified = verify_rule(rule, Settings(timeout_s=5.0, precheck=False, relevance=False))
    assert verified.status == "unknown", verified.proof


def test_all_axioms_and_a_rules_facts_are_not_contradictory():
    rule = FALSE_RULES["matmul commutes"]
    encoding = encode_rule(rule)
    solver = z3.Solver()
    solver.set("smt.mbqi", False)
    solver.set(timeout=5000)
    solver.add(*[render_axiom(a) for a in AXIOMS], *[f for _, f in encoding.facts])
    solver.push()  # NOTE: incremental mode, as in the prover (no whole-problem preprocessing)
    assert solver.check() != z3.unsat
    assert not prove(encoding, AXIOMS, 5.0).proved
