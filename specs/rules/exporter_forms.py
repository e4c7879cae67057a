"""The candidate rules from the forms exporters write into ONNX's fused operators: writes ``exporter_forms.json``.

    python specs/rules/exporter_forms.py          # then:
    taso verify specs/rules/exporter_forms.json -o taso/data/exporter_forms.jsonl.gz --record-axioms

Each form is the graph taso imports from an exporter's output (a multiplication by a one-element
constant reads as ``scalar_mul``), at ranks 2 to 4, the constants written as float32 fill nodes that
match a file's one-element weights of those values. Each rule is then proved like any other: the
numeric check, then Z3 from the operator's definition in ``specs/``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

from taso.ir import TensorType
from taso.rules import Library, Rule, RuleInput, RuleNode

__all__ = ["FORMS", "rules", "main"]

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = (2, 3, 4)


class Side:
    """One side of a rule, built a node at a time; each call returns the new node's output."""

    def __init__(self):
        self.nodes: list[RuleNode] = []

    def __call__(self, op: str, *inputs: str, **params) -> str:
        name = f"v{len(self.nodes)}"
        self.nodes.append(RuleNode(op, params, inputs, (name,)))
        return name

    def const(self, value: float) -> str:
        """A float32 scalar, as exporters write it."""
        return self("fill", shape=(), value=float(np.float32(value)), dtype="float32")


def _erf_part(s: Side, x: str) -> str:
    """1 + erf(x / sqrt(2))"""
    return s("add", s("erf", s("div", x, s.const(math.sqrt(2)))), s.const(1))


# name -> (how the source computes GELU of x, the approximation it is)
FORMS: dict[str, tuple[Callable[[Side, str], str], str]] = {
    # torchlib (the dynamo exporter) below opset 20: x * (0.5 * (1 + erf(x / sqrt 2)))
    "gelu-erf-torchlib": (lambda s, x: s("mul", x, s("scalar_mul", _erf_part(s, x), s.const(0.5))), "none"),
    # TorchScript below opset 20: (x * (1 + erf(x / sqrt 2))) * 0.5
    "gelu-erf-torchscript": (lambda s, x: s("scalar_mul", s("mul", x, _erf_part(s, x)), s.const(0.5)), "none"),
    # written out in Python (transformers' GELUActivation in its own code): x * 0.5 * (1 + erf(x / sqrt 2))
    "gelu-erf-python": (lambda s, x: s("mul", s("scalar_mul", x, s.const(0.5)), _erf_part(s, x)), "none"),
    # transformers' gelu_new (GPT-2), either exporter: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
    "gelu-tanh-gpt2": (lambda s, x: s("mul", s("scalar_mul", x, s.const(0.5)), s("add", s("tanh", s("scalar_mul", s("add", x, s(
        "scalar_mul", s("pow", x, s.const(3)), s.const(0.044715))), s.const(math.sqrt(2 / math.pi)))), s.const(1))), "tanh"),
}


def rules() -> list[Rule]:
    out = []
    for name, (form, approximate) in FORMS.items():
        for rank in RANKS:
            source, target = Side(), Side()
            y = form(source, "x")
            z = target("gelu", "x", approximate=approximate)
            out.append(Rule(inputs=(RuleInput("x", "act", TensorType((2, 3, 4, 5)[:rank], "float32")),),
                            source=tuple(source.nodes), target=tuple(target.nodes), outputs=((y, z),), name=f"{name}-{rank}d"))
    return out


def main() -> None:
    library = Library(rules(), {"about": "Candidate rules from the forms exporters write into ONNX's fused operators (GELU); "
                                         "written by `python specs/rules/exporter_forms.py`, proved into "
                                         "taso/data/exporter_forms.jsonl.gz by `taso verify specs/rules/exporter_forms.json "
                                         "-o taso/data/exporter_forms.jsonl.gz --record-axioms`"})
    path = os.path.join(HERE, "exporter_forms.json")
    library.save(path)
    print(f"{len(library)} candidate rules -> {path}")


if __name__ == "__main__":
    main()
