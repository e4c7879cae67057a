"""Hand-written substitutions of known truth, after the ones TASO's paper discusses.

They exercise every part of the verifier without depending on the generator: the tests
prove them and mutate them (every wrong mutant must fail), and the benchmark times them.
Shape-dependent parameters are written as shape expressions, as the generator writes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from taso.ir import TensorType
from taso.rules import Rule, RuleInput, RuleNode

__all__ = ["EXAMPLES", "example"]


def _node(op: str, inputs: str, outputs: str, **params: Any) -> RuleNode:
    return RuleNode(op, params, tuple(inputs.split()), tuple(outputs.split()))


def _rule(name: str, inputs: Mapping[str, Sequence[int]], source: Sequence[RuleNode], target: Sequence[RuleNode], outputs: str,
          params: Sequence[Mapping[str, Any]] = (), constraints: Sequence[Mapping[str, Any]] = ()) -> Rule:
    """A rule; ``outputs`` pairs source and target values as ``"s=t s2=t2"``."""
    return Rule(
        inputs=tuple(RuleInput(n, f"rank{len(s)}", TensorType(tuple(s))) for n, s in inputs.items()),
        source=tuple(source), target=tuple(target),
        outputs=tuple(tuple(pair.split("=")) for pair in outputs.split()),
        params=tuple(params), constraints=tuple(constraints), name=name,
    )


def _dim(name: str, axis: int) -> dict:
    return {"dim": [name, axis]}


SAME3 = {"pads": (1, 1, 1, 1)}  # SAME padding of a 3x3 kernel

EXAMPLES: list[Rule] = [
    _rule("assoc-matmul", {"x": (2, 3), "y": (3, 4), "z": (4, 5)},
          [_node("matmul", "x y", "s0"), _node("matmul", "s0 z", "s1")],
          [_node("matmul", "y z", "t0"), _node("matmul", "x t0", "t1")], "s1=t1"),
    _rule("merge-qkv-matmuls", {"x": (2, 4), "w1": (4, 3), "w2": (4, 5)},
          [_node("matmul", "x w1", "a"), _node("matmul", "x w2", "b")],
          [_node("concat", "w1 w2", "w", axis=1), _node("matmul", "x w", "y"), _node("split", "y", "c d", axis=1, sizes=(3, 5))],
          "a=c b=d", params=[{"side": "target", "node": 2, "param": "sizes", "value": [_dim("w1", 1), _dim("w2", 1)]}],
          constraints=[{"eq": [_dim("w1", 0), _dim("w2", 0)]}]),
    _rule("transpose-of-product", {"x": (2, 3), "y": (3, 4)},
          [_node("matmul", "x y", "s0"), _node("transpose", "s0", "s1", perm=(1, 0))],
          [_node("transpose", "y", "t0", perm=(1, 0)), _node("transpose", "x", "t1", perm=(1, 0)), _node("matmul", "t0 t1", "t2")], "s1=t2"),
    _rule("sum-of-products", {"x": (2, 3), "y": (3, 4), "z": (2, 5), "w": (5, 4)},
          [_node("matmul", "x y", "s0"), _node("matmul", "z w", "s1"), _node("add", "s0 s1", "s2")],
          [_node("concat", "x z", "t0", axis=1), _node("concat", "y w", "t1", axis=0), _node("matmul", "t0 t1", "t2")], "s2=t2"),
    _rule("fuse-tanh-into-matmul", {"x": (2, 3), "y": (3, 4)},
          [_node("matmul", "x y", "s0"), _node("tanh", "s0", "s1")], [_node("matmul", "x y", "t0", activation="tanh")], "s1=t0"),
    _rule("matmul-eye", {"x": (3, 4)}, [_node("eye", "", "s0", n=4), _node("matmul", "x s0", "s1")], [], "s1=x", params=[{"side": "source", "node": 0, "param": "n", "value": _dim("x", 1)}]),
    _rule("conv-distributes-over-add", {"x": (1, 4, 6, 6), "w1": (8, 4, 3, 3), "w2": (8, 4, 3, 3)},
          [_node("conv2d", "x w1", "s0", **SAME3), _node("conv2d", "x w2", "s1", **SAME3), _node("add", "s0 s1", "s2")],
          [_node("add", "w1 w2", "t0"), _node("conv2d", "x t0", "t1", **SAME3)], "s2=t1"),
    _rule("fuse-relu-into-conv", {"x": (1, 3, 5, 5), "w": (4, 3, 3, 3)},
          [_node("conv2d", "x w", "s0", strides=(2, 2)), _node("relu", "s0", "s1")],
          [_node("conv2d", "x w", "t0", strides=(2, 2), activation="relu")], "s1=t0"),
    _rule("fuse-sigmoid-into-biased-conv", {"x": (1, 3, 5, 5), "w": (4, 3, 1, 1), "b": (4,)},
          [_node("conv2d", "x w b", "s0"), _node("sigmoid", "s0", "s1")],
          [_node("conv2d", "x w b", "t0", activation="sigmoid")], "s1=t0"),
    _rule("enlarge-and-merge-convs", {"x": (1, 4, 6, 6), "w1": (4, 4, 1, 3), "w2": (6, 4, 3, 3)},
          [_node("conv2d", "x w1", "a", pads=(0, 1, 0, 1), activation="relu"), _node("conv2d", "x w2", "b", **SAME3, activation="relu")],
          [_node("enlarge", "w1", "t0", kernel=(3, 3)), _node("concat", "t0 w2", "t1", axis=0),
           _node("conv2d", "x t1", "t2", **SAME3, activation="relu"), _node("split", "t2", "c d", axis=1, sizes=(4, 6))],
          "a=c b=d", params=[{"side": "target", "node": 3, "param": "sizes", "value": [_dim("w1", 0), _dim("w2", 0)]}]),
    _rule("merge-convs-over-batch", {"x1": (1, 3, 6, 6), "x2": (2, 3, 6, 6), "w": (4, 3, 3, 3)},
          [_node("conv2d", "x1 w", "a", **SAME3), _node("conv2d", "x2 w", "b", **SAME3)],
          [_node("concat", "x1 x2", "t0", axis=0), _node("conv2d", "t0 w", "t1", **SAME3), _node("split", "t1", "c d", axis=0, sizes=(1, 2))],
          "a=c b=d", params=[{"side": "target", "node": 2, "param": "sizes", "value": [_dim("x1", 0), _dim("x2", 0)]}]),
    _rule("sum-of-convs", {"x": (1, 2, 5, 5), "y": (1, 3, 5, 5), "w": (4, 2, 3, 3), "v": (4, 3, 3, 3)},
          [_node("conv2d", "x w", "s0", **SAME3), _node("conv2d", "y v", "s1", **SAME3), _node("add", "s0 s1", "s2")],
          [_node("concat", "x y", "t0", axis=1), _node("concat", "w v", "t1", axis=1), _node("conv2d", "t0 t1", "t2", **SAME3)], "s2=t2"),
    _rule("merge-convs-into-a-grouped-conv", {"x": (1, 3, 5, 5), "y": (1, 3, 5, 5), "w": (4, 3, 1, 3), "v": (4, 3, 1, 3)},
          [_node("conv2d", "x w", "s0", pads=(0, 1, 0, 1), activation="relu"), _node("conv2d", "y v", "s1", pads=(0, 1, 0, 1), activation="relu"),
           _node("concat", "s0 s1", "s2", axis=1)],
          [_node("concat", "x y", "t0", axis=1), _node("concat", "w v", "t1", axis=0),
           _node("conv2d", "t0 t1", "t2", pads=(0, 1, 0, 1), groups=2, activation="relu")], "s2=t2"),
    _rule("fold-residual-into-conv", {"x": (1, 4, 5, 5), "w": (4, 4, 3, 3)},
          [_node("conv2d", "x w", "s0", **SAME3), _node("add", "s0 x", "s1")],
          [_node("conv_identity", "", "t0", channels=4, kernel=(3, 3)), _node("add", "w t0", "t1"), _node("conv2d", "x t1", "t2", **SAME3)], "s1=t2",
          params=[{"side": "target", "node": 0, "param": "channels", "value": _dim("x", 1)}]),
    _rule("avg-pool-as-conv", {"x": (1, 3, 6, 6)},
          [_node("avg_pool2d", "x", "s0", kernel=(3, 3), pads=(1, 1, 1, 1), count_include_pad=1)],
          [_node("pool_kernel", "", "t0", channels=3, kernel=(3, 3)), _node("conv2d", "x t0", "t1", **SAME3, groups=3)], "s0=t1",
          params=[{"side": "target", "node": 0, "param": "channels", "value": _dim("x", 1)},
                  {"side": "target", "node": 1, "param": "groups", "value": _dim("x", 1)}]),
    _rule("scale-before-conv", {"x": (1, 3, 5, 5), "w": (4, 3, 3, 3), "s": ()},
          [_node("scalar_mul", "x s", "s0"), _node("conv2d", "s0 w", "s1")], [_node("conv2d", "x w", "t0"), _node("scalar_mul", "t0 s", "t1")], "s1=t1"),
    _rule("relu-of-concat", {"x": (2, 3), "y": (2, 5)},
          [_node("relu", "x", "s0"), _node("relu", "y", "s1"), _node("concat", "s0 s1", "s2", axis=1)],
          [_node("concat", "x y", "t0", axis=1), _node("relu", "t0", "t1")], "s2=t1"),
    _rule("factor-mul", {"x": (3, 4), "y": (3, 4), "z": (3, 4)},
          [_node("mul", "x z", "s0"), _node("mul", "y z", "s1"), _node("add", "s0 s1", "s2")],
          [_node("add", "x y", "t0"), _node("mul", "t0 z", "t1")], "s2=t1"),
    _rule("transpose-twice", {"x": (2, 3, 4)},
          [_node("transpose", "x", "s0", perm=(1, 2, 0)), _node("transpose", "s0", "s1", perm=(2, 0, 1))], [], "s1=x"),
    _rule("split-after-relu", {"x": (4, 6)},
          [_node("split", "x", "s0 s1", axis=1, sizes=(2, 4)), _node("relu", "s0", "s2"), _node("relu", "s1", "s3")],
          [_node("relu", "x", "t0"), _node("split", "t0", "t1 t2", axis=1, sizes=(2, 4))], "s2=t1 s3=t2"),
    _rule("max-pool-of-concat", {"x": (1, 2, 6, 6), "y": (1, 3, 6, 6)},
          [_node("max_pool2d", "x", "s0", kernel=(3, 3), strides=(2, 2)), _node("max_pool2d", "y", "s1", kernel=(3, 3), strides=(2, 2)),
           _node("concat", "s0 s1", "s2", axis=1)],
          [_node("concat", "x y", "t0", axis=1), _node("max_pool2d", "t0", "t1", kernel=(3, 3), strides=(2, 2))], "s2=t1"),
]


def example(name: str) -> Rule:
    """The example rule with this name."""
    for rule in EXAMPLES:
        if rule.name == name:
            return rule
    raise KeyError(name)
