"""The candidate rules from the forms exporters write into ONNX's fused operators (GELU, LayerNormalization,
RMSNormalization, Attention, LSTM and GRU): writes ``exporter_forms.json``.

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
from taso.specs.attention import HEAD_SIZES, MASKS, default_scale, scales, split_scale

__all__ = ["FORMS", "NORM_FORMS", "ATTENTION_MASKS", "rules", "main"]

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = (2, 3, 4)


class Side:
    """One side of a rule, built a node at a time; each call returns the new node's output. A parameter given as
    ``(example, shape expression)`` through ``shaped`` is recorded as the rule's shape-dependent parameter."""

    def __init__(self, side: str = "source"):
        self.side = side
        self.nodes: list[RuleNode] = []
        self.params: list[dict] = []

    def __call__(self, op: str, *inputs: str, shaped: dict | None = None, **params) -> str:
        name = f"v{len(self.nodes)}"
        for param, (example, expression) in (shaped or {}).items():
            params[param] = example
            self.params.append({"side": self.side, "node": len(self.nodes), "param": param, "value": expression})
        self.nodes.append(RuleNode(op, params, inputs, (name,)))
        return name

    def multi(self, op: str, count: int, *inputs: str, shaped: dict | None = None, **params) -> tuple[str, ...]:
        """A node with ``count`` outputs (a split, a recurrent cell); returns them."""
        first = self(op, *inputs, shaped=shaped, **params)
        names = (first,) + tuple(f"{first}_{k}" for k in range(1, count))
        node = self.nodes[-1]
        self.nodes[-1] = RuleNode(node.op, node.params, node.inputs, names)
        return names

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


def _root(s: Side, x: str, axis: int, eps: float) -> str:
    """sqrt(mean(x^2) + eps) over the last axis; the + eps left out at 0."""
    variance = s("reduce_mean", s("pow", x, s.const(2)), axes=(axis,), keepdims=1)
    return s("sqrt", s("add", variance, s.const(eps)) if eps else variance)


def _normalized(s: Side, x: str, axis: int, eps: float) -> str:
    """(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) over the last axis."""
    centred = s("sub", x, s("reduce_mean", x, axes=(axis,), keepdims=1))
    return s("div", centred, _root(s, centred, axis, eps))


# name -> (how the source computes the normalization of x over ``axis`` scaled by g (and shifted by b), the operator)
NORM_FORMS: dict[str, tuple[Callable[..., str], str]] = {
    # torch.nn.LayerNorm by the TorchScript exporter below opset 17: (x - mean) / sqrt(var + eps) * g + b
    "layer-norm-torchscript": (lambda s, axis, eps: s("add", s("mul", _normalized(s, "x", axis, eps), "g"), "b"), "layer_norm"),
    # written out in Python (transformers' BertLayerNorm and its kin), either exporter: g * ((x - mean) / sqrt(var + eps)) + b
    "layer-norm-python": (lambda s, axis, eps: s("add", s("mul", "g", _normalized(s, "x", axis, eps)), "b"), "layer_norm"),
    # RMS norm written out (transformers' LlamaRMSNorm, T5LayerNorm): g * (x * rsqrt(mean(x^2) + eps)), rsqrt as the
    # dynamo exporter writes it (Reciprocal of Sqrt) and as TorchScript does (1 / Sqrt)
    "rms-norm-torchlib": (lambda s, axis, eps: s("mul", "g", s("mul", "x", s("reciprocal", _root(s, "x", axis, eps)))), "rms_norm"),
    "rms-norm-torchscript": (lambda s, axis, eps: s("mul", "g", s("mul", "x", s("div", s.const(1), _root(s, "x", axis, eps)))), "rms_norm"),
}
# The epsilons each operator's rules are stated at (those of specs/norm.py's definitions): 0 is the layer norm that
# the dynamo exporter's optimizer leaves where it dropped a + 1e-12 (transformers' BERT-style code)
NORM_EPSILONS = {"layer_norm": (1e-5, 1e-6, 1e-12, 0.0), "rms_norm": (1e-5, 1e-6)}


def _gelu_rules() -> list[Rule]:
    out = []
    for name, (form, approximate) in FORMS.items():
        for rank in RANKS:
            source, target = Side(), Side()
            y = form(source, "x")
            z = target("gelu", "x", approximate=approximate)
            out.append(Rule(inputs=(RuleInput("x", "act", TensorType((2, 3, 4, 5)[:rank], "float32")),),
                            source=tuple(source.nodes), target=tuple(target.nodes), outputs=((y, z),), name=f"{name}-{rank}d"))
    return out


def _norm_rules() -> list[Rule]:
    out = []
    for name, (form, operator) in NORM_FORMS.items():
        for eps in NORM_EPSILONS[operator]:
            for rank in RANKS:
                shape = (2, 3, 4, 5)[:rank]
                source, target = Side(), Side()
                y = form(source, rank - 1, eps)
                vectors = ("g", "b") if operator == "layer_norm" else ("g",)
                z = target(operator, "x", *vectors, axis=rank - 1, epsilon=eps)
                inputs = (RuleInput("x", "act", TensorType(shape, "float32")),
                          *[RuleInput(v, "vec", TensorType(shape[-1:], "float32")) for v in vectors])
                out.append(Rule(inputs=inputs, source=tuple(source.nodes), target=tuple(target.nodes), outputs=((y, z),),
                                name=f"{name}-{rank}d[{eps:g}]"))
    return out


ATTENTION_MASKS = MASKS  # the masks exporters add to attention's scores (taso.specs.attention)


def _dim(name: str, axis: int) -> dict:
    return {"dim": [name, axis]}


def _mask_input(mask: str, queries: tuple, keys: tuple) -> tuple[RuleInput, list[dict]]:
    """The mask input, and the constraints that it is ``[1 or batch, 1, queries, keys]`` or ``[queries, keys]`` (those
    ONNX Runtime runs)."""
    if mask == "2d":
        constraints = [{"eq": [_dim("m", 0), _dim(*queries)]}, {"eq": [_dim("m", 1), _dim(*keys)]}]
        return RuleInput("m", "act", TensorType((4, 5), "float32")), constraints
    batch = 1 if mask == "one" else 2
    constraints = [{"eq": [_dim("m", 0), 1 if mask == "one" else _dim("q", 0)]}, {"eq": [_dim("m", 1), 1]},
                   {"eq": [_dim("m", 2), _dim(*queries)]}, {"eq": [_dim("m", 3), _dim(*keys)]}]
    return RuleInput("m", "act", TensorType((batch, 1, 4, 5), "float32")), constraints


def _scores(s: Side, q: str, k_t: str, v: str, scale: float, mask: str | None) -> str:
    """softmax(q @ k^T * scale (+ mask)) @ v as both exporters write transformers' eager attention: the product scaled."""
    scores = s("scalar_mul", s("matmul", q, k_t), s.const(scale))
    return s("matmul", s("softmax", s("add", scores, "m") if mask else scores, axis=3), v)


def _sdpa_scores(s: Side, q: str, k_t: str, v: str, root: float, mask: str | None, guarded: bool) -> str:
    """torch's scaled_dot_product_attention as both exporters write it: q and k^T each scaled by the scale's root,
    the product (plus the mask) softmaxed, its NaN rows zeroed where ``guarded``, times v."""
    scores = s("matmul", s("scalar_mul", q, s.const(root)), s("scalar_mul", k_t, s.const(root)))
    weights = s("softmax", s("add", scores, "m") if mask else scores, axis=3)
    if guarded:
        weights = s("where", s("is_nan", weights), s.const(0), weights)
    return s("matmul", weights, v)


def _attention_on_heads(head_size: int, mask: str | None, sdpa: bool = False, guarded: bool = False) -> Rule:
    """An exporter's form on heads q [b, h, s, d], k^T [b, h, d, t], v [b, h, t, e] into attention on heads: the
    eager form, or torch's scaled_dot_product_attention (``sdpa``) with its NaN guard or without."""
    source, target = Side(), Side("target")
    if sdpa:
        root = split_scale(head_size)
        scale = root * root
        y = _sdpa_scores(source, "q", "kt", "v", root, mask, guarded)
        name = f"attention-heads-sdpa{'-mask-' + mask if mask else ''}{'-guarded' if guarded else ''}-d{head_size}"
    else:
        scale = default_scale(head_size)
        y = _scores(source, "q", "kt", "v", scale, mask)
        name = f"attention-heads{'-mask-' + mask if mask else ''}[{scale:.6g}]"
    inputs = [RuleInput("q", "act", TensorType((2, 3, 4, head_size), "float32")), RuleInput("kt", "act", TensorType((2, 3, head_size, 5), "float32")),
              RuleInput("v", "act", TensorType((2, 3, 5, 6), "float32"))]
    constraints = [{"eq": [_dim(t, a), _dim("q", a)]} for t in ("kt", "v") for a in (0, 1)]
    if mask:
        mask_input, mask_constraints = _mask_input(mask, ("q", 2), ("kt", 3))
        inputs.append(mask_input)
        constraints += mask_constraints
    z = target("attention", "q", target("transpose", "kt", perm=(0, 1, 3, 2)), "v", *(("m",) if mask else ()), scale=scale, head_size=0)
    return Rule(inputs=tuple(inputs), source=tuple(source.nodes), target=tuple(target.nodes), outputs=((y, z),), constraints=tuple(constraints),
                name=name)


def _split_heads(side: Side, t: str, head_size: int, perm: tuple) -> str:
    """A projection [b, s, h * d] reshaped to heads [b, s, h, d] and transposed by ``perm``."""
    example = (2, 4 if t == "q" else 5, 2, head_size)
    shape = [_dim(t, 0), _dim(t, 1), {"div": [_dim(t, 2), head_size]}, head_size]
    return side("transpose", side("reshape", t, shaped={"shape": (example, shape)}), perm=perm)


def _merge_heads(side: Side, heads: str, head_size: int) -> str:
    """Heads [b, h, s, d] transposed back and reshaped to [b, s, h * d]."""
    return side("reshape", side("transpose", heads, perm=(0, 2, 1, 3)), shaped={"shape": ((2, 4, 2 * head_size), [_dim("q", 0), _dim("q", 1), _dim("v", 2)])})


def _projection_inputs(head_size: int) -> list[RuleInput]:
    return [RuleInput("q", "act", TensorType((2, 4, 2 * head_size), "float32")), RuleInput("k", "act", TensorType((2, 5, 2 * head_size), "float32")),
            RuleInput("v", "act", TensorType((2, 5, 2 * head_size), "float32"))]


_SAME_PROJECTIONS = [{"eq": [_dim("k", 2), _dim("q", 2)]}, {"eq": [_dim("v", 2), _dim("q", 2)]}, {"eq": [_dim("k", 0), _dim("q", 0)]},
                     {"eq": [_dim("v", 0), _dim("q", 0)]}, {"eq": [_dim("v", 1), _dim("k", 1)]}]


def _attention_on_projections(head_size: int, mask: str | None) -> Rule:
    """The exporters' whole eager form on projections q [b, s, h * d], k and v [b, t, h * d]: each reshaped to heads
    and transposed (k to [b, h, d, t]), the scores, and the output transposed and reshaped back, into attention on
    projections (Attention-23's 3-D form); the head count is the width over d."""
    scale = default_scale(head_size)
    source, target = Side(), Side("target")
    split = [_split_heads(source, t, head_size, perm) for t, perm in (("q", (0, 2, 1, 3)), ("k", (0, 2, 3, 1)), ("v", (0, 2, 1, 3)))]
    y = _merge_heads(source, _scores(source, *split, scale, mask), head_size)
    inputs, constraints = _projection_inputs(head_size), list(_SAME_PROJECTIONS)
    if mask:
        mask_input, mask_constraints = _mask_input(mask, ("q", 1), ("k", 1))
        inputs.append(mask_input)
        constraints += mask_constraints
    z = target("attention", "q", "k", "v", *(("m",) if mask else ()), scale=scale, head_size=head_size)
    return Rule(inputs=tuple(inputs), source=tuple(source.nodes), target=tuple(target.nodes), outputs=((y, z),), params=tuple(source.params),
                constraints=tuple(constraints), name=f"attention-projections-d{head_size}{'-mask-' + mask if mask else ''}")


def _heads_to_projections(head_size: int, scale: float, mask: bool) -> Rule:
    """Attention on the heads of projections, its output's heads merged back, into attention on the projections: what
    a rule into attention on heads leaves of a model's layer (the split form's scale and the eager one's)."""
    source, target = Side(), Side("target")
    split = [_split_heads(source, t, head_size, (0, 2, 1, 3)) for t in "qkv"]
    y = _merge_heads(source, source("attention", *split, *(("m",) if mask else ()), scale=scale, head_size=0), head_size)
    inputs = _projection_inputs(head_size) + ([RuleInput("m", "act", TensorType((2, 1, 4, 5), "float32"))] if mask else [])
    z = target("attention", "q", "k", "v", *(("m",) if mask else ()), scale=scale, head_size=head_size)
    form = "sdpa" if scale != default_scale(head_size) else "eager"
    return Rule(inputs=tuple(inputs), source=tuple(source.nodes), target=tuple(target.nodes), outputs=((y, z),), params=tuple(source.params),
                constraints=tuple(_SAME_PROJECTIONS), name=f"attention-heads-to-projections-{form}-d{head_size}{'-mask' if mask else ''}")


def _attention_rules() -> list[Rule]:
    return [*[form(d, mask) for form in (_attention_on_heads, _attention_on_projections) for d in HEAD_SIZES for mask in ATTENTION_MASKS],
            *[_attention_on_heads(d, mask, sdpa=True, guarded=guarded) for d in HEAD_SIZES for mask in ATTENTION_MASKS for guarded in (False, True)],
            *[_heads_to_projections(d, scale, mask) for d in HEAD_SIZES for scale in scales(d) for mask in (False, True)]]


# ---- recurrent cells: an unrolled nn.LSTMCell / nn.GRUCell loop into ONNX's LSTM / GRU (taso.specs.recurrent) -------

_CELL = {"batch": 2, "hidden": 3, "features": 5}


def _gate_split(s: Side, value: str, gates: int) -> tuple[str, ...]:
    """A cell's gates split along axis 1 into ``gates`` parts as wide as the state."""
    return s.multi("split", gates, value, axis=1, shaped={"sizes": ((_CELL["hidden"],) * gates, [_dim("h", 1)] * gates)})


def _lstm_cell(s: Side, x: str, h: str, c: str) -> tuple[str, str]:
    """(h', c') of nn.LSTMCell as both exporters write it (the recurrent product's sum first, the gates i, f, g, o)."""
    gates = s("add", s("add", s("matmul", h, "wh"), "bh"), s("add", s("matmul", x, "wi"), "bi"))
    i, f, g, o = _gate_split(s, gates, 4)
    new_c = s("add", s("mul", s("sigmoid", f), c), s("mul", s("sigmoid", i), s("tanh", g)))
    return s("mul", s("sigmoid", o), s("tanh", new_c)), new_c


def _gru_cell(s: Side, x: str, h: str) -> tuple[str]:
    """h' of nn.GRUCell as both exporters write it (each product and its bias split r, z, n; h' = (h - n) * z + n)."""
    ir, iz, in_ = _gate_split(s, s("add", s("matmul", x, "wi"), "bi"), 3)
    hr, hz, hn = _gate_split(s, s("add", s("matmul", h, "wh"), "bh"), 3)
    r, z = s("sigmoid", s("add", hr, ir)), s("sigmoid", s("add", hz, iz))
    n = s("tanh", s("add", in_, s("mul", hn, r)))
    return (s("add", s("mul", s("sub", h, n), z), n),)


def _recurrent_rule(kind: str, extend: bool) -> Rule:
    """A cell into the op over its one step (``extend`` False), or the op over a sequence followed by the next cell into
    the op over the sequence and that step (``extend``): an unrolled loop becomes one node a cell at a time."""
    batch, hidden, features = _CELL["batch"], _CELL["hidden"], _CELL["features"]
    gates, states = (4, ("h", "c")) if kind == "lstm" else (3, ("h",))
    width = gates * hidden
    weights = ("wi", "bi", "wh", "bh")
    source, target = Side(), Side("target")
    ins = source.multi(kind, len(states), "xs", *states, *weights) if extend else states
    outs = _lstm_cell(source, "x", *ins) if kind == "lstm" else _gru_cell(source, "x", *ins)
    sequence = target("concat", "xs", "x", axis=0) if extend else "x"
    fused = target.multi(kind, len(states), sequence, *states, *weights)
    inputs = [RuleInput("x", "act", TensorType((batch, features), "float32")),
              *[RuleInput(s, "act", TensorType((batch, hidden), "float32")) for s in states],
              RuleInput("wi", "weight", TensorType((features, width), "float32")), RuleInput("bi", "vec", TensorType((width,), "float32")),
              RuleInput("wh", "weight", TensorType((hidden, width), "float32")), RuleInput("bh", "vec", TensorType((width,), "float32"))]
    if extend:
        inputs.insert(0, RuleInput("xs", "act", TensorType((2 * batch, features), "float32")))
    constraints = [{"eq": [_dim("x", 0), _dim("h", 0)]}, *[{"eq": [_dim(s, k), _dim("h", k)]} for s in states[1:] for k in (0, 1)],
                   *[{"eq": [_dim(w, a), _dim("wh", 1)]} for w, a in (("wi", 1), ("bi", 0), ("bh", 0))]]
    if extend:
        constraints.append({"eq": [_dim("xs", 1), _dim("x", 1)]})
    return Rule(inputs=tuple(inputs), source=tuple(source.nodes), target=tuple(target.nodes), outputs=tuple(zip(outs, fused)),
                params=tuple(source.params + target.params), constraints=tuple(constraints), name=f"{kind}-cell-{'extend' if extend else 'start'}")


def _recurrent_rules() -> list[Rule]:
    return [_recurrent_rule(kind, extend) for kind in ("lstm", "gru") for extend in (False, True)]


def rules() -> list[Rule]:
    return _gelu_rules() + _norm_rules() + _attention_rules() + _recurrent_rules()


def main() -> None:
    library = Library(rules(), {"about": "Candidate rules from the forms exporters write into ONNX's fused operators (GELU, layer and RMS norm, attention, LSTM and GRU); "
                                         "written by `python specs/rules/exporter_forms.py`, proved into "
                                         "taso/data/exporter_forms.jsonl.gz by `taso verify specs/rules/exporter_forms.json "
                                         "-o taso/data/exporter_forms.jsonl.gz --record-axioms`"})
    path = os.path.join(HERE, "exporter_forms.json")
    library.save(path)
    print(f"{len(library)} candidate rules -> {path}")


if __name__ == "__main__":
    main()
