"""taso's rules written in TASO's format (the encoder): each taso operator back to TASO's op and parameters, so a
library round-trips through ``graph_subst.pb`` (``tests/test_taso_import.py``) and TASO's tools can read what taso proved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from taso.ir import Params, TensorType
from taso.rules import Rule, RuleNode

from .taso_import import (
    _EYE_N,
    _KERNEL_CHANNELS,
    _ONES_SHAPE,
    ACTIVATIONS,
    INPUT_POOL,
    OP,
    PAD_SAME,
    PAD_VALID,
    PM,
    TasoOp,
    TasoRule,
    Unconvertible,
    _same_pads,
    encode,
)

__all__ = ["from_rule", "export_rules"]


def _reverse_window(name: str, params: Mapping[str, Any], image: TensorType, kernel: tuple[int, int]) -> list[tuple[int, int]]:
    strides = tuple(params["strides"])
    pads = tuple(params["pads"])
    if pads == _same_pads(image.shape[2:], kernel, strides):
        pad = PAD_SAME
    elif pads == (0, 0, 0, 0):
        pad = PAD_VALID
    else:
        raise Unconvertible(f"{name} with pads {pads}: TASO pads SAME or VALID only")
    if tuple(params.get("dilations", (1, 1))) != (1, 1):
        raise Unconvertible(f"{name} with dilations: TASO has none")
    return [(PM["kernel_h"], kernel[0]), (PM["kernel_w"], kernel[1]), (PM["stride_h"], strides[0]), (PM["stride_w"], strides[1]), (PM["pad"], pad)]


def _reverse_conv(name: str, params: Params, types: list[TensorType]) -> tuple[int, list[tuple[int, int]]]:
    return OP["conv2d"], _reverse_window(name, params, types[0], types[1].shape[2:]) + [(PM["acti"], ACTIVATIONS.index(params["activation"]))]


def _reverse_pool(name: str, params: Params, types: list[TensorType]) -> tuple[int, list[tuple[int, int]]]:
    if name == "avg_pool2d" and params["count_include_pad"] != 1 and any(params["pads"]):
        raise Unconvertible("avg_pool2d not counting its padding: TASO's average pool counts it")
    if params["ceil_mode"]:
        raise Unconvertible(f"{name} with ceil_mode: TASO has none")
    kind = OP["pool2d_avg" if name == "avg_pool2d" else "pool2d_max"]
    return kind, [(PM["op_type"], kind)] + _reverse_window(name, params, types[0], tuple(params["kernel"])) + [(PM["acti"], 0)]


def _reverse_transpose(name: str, params: Params, types: list[TensorType]) -> tuple[int, list[tuple[int, int]]]:
    perm, code = tuple(params["perm"]), 0
    for p in perm:
        code = code * len(perm) + p  # TASO's packing: digits in base rank, first axis most significant
    return OP["transpose"], [(PM["numdim"], len(perm)), (PM["perm"], code), (PM["outshuffle"], 0)]


def _plain(taso_name: str):
    return lambda name, params, types: (OP[taso_name], [])


_REVERSERS = {
    "conv2d": _reverse_conv,
    "avg_pool2d": _reverse_pool,
    "max_pool2d": _reverse_pool,
    "transpose": _reverse_transpose,
    "concat": lambda name, p, types: (OP["concat"], [(PM["num_inputs"], len(types)), (PM["axis"], p["axis"]), (PM["numdim"], types[0].rank)]),
    "split": lambda name, p, types: (OP["split"], [(PM["num_outputs"], len(p["sizes"])), (PM["axis"], p["axis"])]),
    "matmul": lambda name, p, types: (OP["matmul"], [(PM["acti"], ACTIVATIONS.index(p["activation"]))]),
    "enlarge": lambda name, p, types: (OP["enlarge"], [(PM["kernel_h"], p["kernel"][0]), (PM["kernel_w"], p["kernel"][1])]),
    **{name: (lambda name, p, types: _reverse_constant(name, p)) for name in ("eye", "conv_identity", "pool_kernel", "fill")},
    **{name: _plain(taso_name) for name, taso_name in
       (("relu", "relu"), ("sigmoid", "sigmoid"), ("tanh", "tanh"), ("add", "ew_add"), ("mul", "ew_mul"), ("scalar_mul", "mul"))},
}


def _reverse(node: RuleNode, params: Params, types: list[TensorType]) -> tuple[int, list[tuple[int, int]]]:
    """The TASO OpType and parameters of one taso node."""
    if node.op not in _REVERSERS:
        raise Unconvertible(f"taso operator {node.op} has no TASO counterpart")
    return _REVERSERS[node.op](node.op, params, types)


def _reverse_constant(name: str, params: Params) -> tuple[int, list[tuple[int, int]]]:
    """TASO's constants carry no sizes: they have its pool's, which the rule's example must then have."""
    if name == "eye":
        if params["n"] != _EYE_N:
            raise Unconvertible(f"eye of size {params['n']}: TASO's identity matrix is {_EYE_N}x{_EYE_N}")
        return OP["constant_imm"], []
    if name == "fill":
        if params["value"] != 1.0 or tuple(params["shape"]) != _ONES_SHAPE:
            raise Unconvertible(f"fill of {params['value']} with shape {tuple(params['shape'])}: TASO's only is all-ones of shape {_ONES_SHAPE}")
        return OP["constant_one"], []
    if params["channels"] != _KERNEL_CHANNELS:
        raise Unconvertible(f"{name} of {params['channels']} channels: TASO's has {_KERNEL_CHANNELS}")
    kind = OP["constant_iconv" if name == "conv_identity" else "constant_pool"]
    return kind, [(PM["kernel_h"], params["kernel"][0]), (PM["kernel_w"], params["kernel"][1])]


def from_rule(rule: Rule) -> TasoRule:
    """A taso rule as TASO writes it (inputs numbered by TASO's pool; shapes are not part of TASO's format).

    Raises:
        Unconvertible: an input outside TASO's pool, or an operator or parameter TASO cannot express.
    """
    ids = {name: op_id for op_id, (name, _, _) in INPUT_POOL.items()}
    ids.update(rule.extra.get("taso", {}).get("inputs", {}))
    sides = {}
    for side in ("source", "target"):
        graph = rule.side_graph(side)
        refs: dict[str, tuple[int, int]] = {}
        for i in rule.inputs:
            if i.name not in ids:
                raise Unconvertible(f"input {i.name} is not in TASO's input pool")
            pool = INPUT_POOL.get(ids[i.name])
            if pool is not None and len(pool[2]) != i.type.rank:  # a rank-lifted rule: TASO's format has no shapes to say so
                raise Unconvertible(f"input {i.name} has rank {i.type.rank}; TASO's pool has it at rank {len(pool[2])}")
            refs[i.name] = (ids[i.name], 0)
        ops = []
        by_name = {n.name: n for n in graph.nodes}
        for k, node in enumerate(getattr(rule, side)):
            built = by_name[f"{side}{k}"]
            kind, params = _reverse(node, built.params, [graph.type(v) for v in node.inputs])
            ops.append(TasoOp(kind, tuple(refs[v] for v in node.inputs), tuple(params)))
            refs.update({v: (k, j) for j, v in enumerate(node.outputs)})
        sides[side] = (tuple(ops), refs)
    outputs = tuple((*sides["source"][1][s], *sides["target"][1][t]) for s, t in rule.outputs)
    return TasoRule(sides["source"][0], sides["target"][0], outputs)


def export_rules(rules: Sequence[Rule]) -> tuple[bytes, list[tuple[str, str]]]:
    """Serializes the rules TASO can express; returns the bytes and the (rule id, reason) of the others."""
    kept, skipped = [], []
    for rule in rules:
        try:
            kept.append(from_rule(rule))
        except Unconvertible as e:
            skipped.append((rule.id, str(e)))
    return encode(kept), skipped
