"""Hand-written rules used by tests of the rule format, the rewrite engine and the search."""

from __future__ import annotations

from taso.ir import TensorType
from taso.rules import Rule, RuleInput, RuleNode

MM = {"activation": "none"}


def _inp(name: str, cls: str, shape) -> RuleInput:
    return RuleInput(name, cls, TensorType(tuple(shape)))


def matmul_assoc_rule() -> Rule:
    return Rule(
        inputs=(_inp("x", "mat", (4, 4)), _inp("y", "mat", (4, 4)), _inp("z", "mat", (4, 4))),
        source=(RuleNode("matmul", MM, ("x", "y"), ("s0",)), RuleNode("matmul", MM, ("s0", "z"), ("s1",))),
        target=(RuleNode("matmul", MM, ("y", "z"), ("t0",)), RuleNode("matmul", MM, ("x", "t0"), ("t1",))),
        outputs=(("s1", "t1"),),
        name="assoc-matmul",
    )


def shared_input_merge_rule() -> Rule:
    """Two matmuls sharing x -> one matmul over concatenated weights, then split (the Q/K/V merge)."""
    return Rule(
        inputs=(_inp("x", "act", (2, 4)), _inp("w1", "mat", (4, 4)), _inp("w2", "mat", (4, 4))),
        source=(RuleNode("matmul", MM, ("x", "w1"), ("a",)), RuleNode("matmul", MM, ("x", "w2"), ("b",))),
        target=(
            RuleNode("concat", {"axis": 1}, ("w1", "w2"), ("w",)),
            RuleNode("matmul", MM, ("x", "w"), ("y",)),
            RuleNode("split", {"axis": 1, "sizes": (4, 4)}, ("y",), ("c", "d")),
        ),
        outputs=(("a", "c"), ("b", "d")),
        params=({"side": "target", "node": 2, "param": "sizes", "value": [{"dim": ["w1", 1]}, {"dim": ["w2", 1]}]},),
        name="merge-matmul-shared-input",
    )


def shared_weight_merge_rule() -> Rule:
    """Two matmuls sharing the weight -> one matmul over concatenated rows, then split (batching)."""
    return Rule(
        inputs=(_inp("x", "act", (2, 4)), _inp("y", "act", (2, 4)), _inp("w", "mat", (4, 4))),
        source=(RuleNode("matmul", MM, ("x", "w"), ("a",)), RuleNode("matmul", MM, ("y", "w"), ("b",))),
        target=(
            RuleNode("concat", {"axis": 0}, ("x", "y"), ("xy",)),
            RuleNode("matmul", MM, ("xy", "w"), ("p",)),
            RuleNode("split", {"axis": 0, "sizes": (2, 2)}, ("p",), ("c", "d")),
        ),
        outputs=(("a", "c"), ("b", "d")),
        params=({"side": "target", "node": 2, "param": "sizes", "value": [{"dim": ["x", 0]}, {"dim": ["y", 0]}]},),
        name="merge-matmul-shared-weight",
    )


def relu_fusion_rule() -> Rule:
    return Rule(
        inputs=(_inp("x", "act", (2, 4)), _inp("w", "mat", (4, 4))),
        source=(RuleNode("matmul", MM, ("x", "w"), ("a",)), RuleNode("relu", {}, ("a",), ("b",))),
        target=(RuleNode("matmul", {"activation": "relu"}, ("x", "w"), ("c",)),),
        outputs=(("b", "c"),),
        name="fuse-matmul-relu",
    )


def add_commute_rule() -> Rule:
    return Rule(
        inputs=(_inp("x", "act", (2, 4)), _inp("y", "act", (2, 4))),
        source=(RuleNode("add", {}, ("x", "y"), ("a",)),),
        target=(RuleNode("add", {}, ("y", "x"), ("b",)),),
        outputs=(("a", "b"),),
        name="comm-add",
    )


def all_rules() -> list[Rule]:
    return [matmul_assoc_rule(), shared_input_merge_rule(), shared_weight_merge_rule(), relu_fusion_rule()]
