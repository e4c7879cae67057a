"""TASO's published substitutions (``graph_subst.pb``) read into taso's rule format, and written back.

TASO (SOSP 2019) ships the substitutions its generator found as a protobuf
``GraphSubst.RuleCollection`` (TASO's ``rules.proto``, proto2)::

    Parameter {required int32 key = 1; required int32 value = 2;}
    Tensor    {required int32 opId = 1; required int32 tsId = 2;}
    Operator  {required int32 type = 1; repeated Tensor input = 2; repeated Parameter para = 3;}
    MapOutput {required int32 srcOpId = 1; required int32 dstOpId = 2; required int32 srcTsId = 3; required int32 dstTsId = 4;}
    Rule      {repeated Operator srcOp = 1; repeated Operator dstOp = 2; repeated MapOutput mappedOutput = 3;}
    RuleCollection {repeated Rule rule = 1;}

The message classes are built at run time from a ``FileDescriptorProto`` written here
(no generated code, no protoc). An operator's ``type`` is TASO's ``OpType`` and a
parameter's ``key`` its ``PMParameter`` (``include/taso/ops.h``). A tensor with a negative
``opId`` is a graph input, numbered as TASO's generator numbers its input pool (``-1`` is
the activation ``x1`` of shape 2x4, ``-10`` the 4x4x3x3 kernel TASO calls ``w4`` and taso ``k1``, ...);
otherwise it is output ``tsId`` of operator ``opId`` of the same side.

The file holds no shapes, so the importer chooses them: TASO's own input pool by default
(the shapes its generator found the rules on), or ``generic`` shapes where every dimension
the types leave free takes its own size (which shows rules that hold only where sizes
happen to coincide), or shapes the caller gives per input. Parameters that are shapes in
disguise (split sizes, constant sizes, depthwise groups) become shape expressions by the
generator's own type probing (:mod:`taso.generator.generalize`). No constraint beyond what
the types need is added: deciding which rules need more is the verifier's job.

A TASO operator taso has no counterpart for (batch norm, reshape, merge_gconv, ...) makes
its rule *skipped* with the reason, never silently dropped.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from taso.errors import TasoError
from taso.ir import TensorType
from taso.ops import get as get_op
from taso.rules import Library, Rule, RuleInput, RuleNode, resolve_expr

__all__ = [
    "TasoOp", "TasoRule", "TasoImportError", "Unconvertible", "ImportResult",
    "message_classes", "decode", "encode", "read_file", "to_rule", "import_rules", "run_import",
    "INPUT_POOL", "OP", "PM",
]


OP_TYPES = ("input", "weight", "any", "conv2d", "dropout", "linear", "pool2d_max", "pool2d_avg", "relu", "sigmoid", "tanh",
            "batchnorm", "concat", "split", "reshape", "transpose", "ew_add", "ew_mul", "matmul", "mul", "enlarge", "merge_gconv",
            "constant_imm", "constant_iconv", "constant_one", "constant_pool", "squeeze", "unsqueeze", "ew_sub", "ew_div",
            "ew_equal", "ew_greater", "ew_less", "ew_max", "ew_min", "reduce_argmax", "reduce_argmin", "reduce_max",
            "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum", "pad", "shape", "size", "topk", "where", "ceil", "cast",
            "exp", "round", "log", "logical_not", "sqrt", "leakyrelu", "slice", "resize", "prelu", "fuse_conv_batchnorm",
            "fuse_conv_batchnorm_alpha_var", "fuse_conv_batchnorm_bias", "broadcast_add")


OP = {name: number for number, name in enumerate(OP_TYPES)}


PM_NAMES = ("op_type", "num_inputs", "num_outputs", "group", "kernel_h", "kernel_w", "stride_h", "stride_w", "pad", "acti",
            "numdim", "axis", "perm", "outshuffle", "merge_gconv_count", "axes", "keep_dims")


PM = {name: number for number, name in enumerate(PM_NAMES)}


ACTIVATIONS = ("none", "sigmoid", "relu", "tanh")  # ActiMode


PAD_SAME, PAD_VALID = 0, 1  # PaddingMode


# TASO's generator input pool: opId -> (taso name, shape class, shape). taso's generator
# uses the same shapes; the names follow its prefixes (TASO's w4..w13 kernels are k, kh, kv, kd).
INPUT_POOL: dict[int, tuple[str, str, tuple[int, ...]]] = {
    **{-1 - i: (f"x{i + 1}", "act", (2, 4)) for i in range(3)},
    **{-4 - i: (f"w{i + 1}", "mat", (4, 4)) for i in range(3)},
    **{-7 - i: (f"i{i + 1}", "img", (2, 4, 5, 5)) for i in range(3)},
    **{-10 - i: (f"k{i + 1}", "kernel3x3", (4, 4, 3, 3)) for i in range(3)},
    **{-13 - i: (f"kh{i + 1}", "kernel1x3", (4, 4, 1, 3)) for i in range(3)},
    **{-16 - i: (f"kv{i + 1}", "kernel3x1", (4, 4, 3, 1)) for i in range(3)},
    -19: ("kd1", "dwkernel", (4, 1, 3, 3)),
    -20: ("c1", "scalar", ()),
}


# The sizes TASO's generator gave its constants (they follow their use in taso: shape expressions).
_EYE_N, _KERNEL_CHANNELS, _ONES_SHAPE = 4, 4, (2, 4, 5, 5)


class TasoImportError(TasoError):
    """The file is not a TASO rule collection (exit code 2, one line)."""


class Unconvertible(Exception):
    """One TASO rule cannot be expressed in taso's vocabulary; the message says why."""


_SCHEMA: dict[str, list[tuple[str, int, str, str | None]]] = {  # message -> (field, number, label, message type or None for int32)
    "Parameter": [("key", 1, "required", None), ("value", 2, "required", None)],
    "Tensor": [("opId", 1, "required", None), ("tsId", 2, "required", None)],
    "Operator": [("type", 1, "required", None), ("input", 2, "repeated", "Tensor"), ("para", 3, "repeated", "Parameter")],
    "MapOutput": [("srcOpId", 1, "required", None), ("dstOpId", 2, "required", None), ("srcTsId", 3, "required", None),
                  ("dstTsId", 4, "required", None)],
    "Rule": [("srcOp", 1, "repeated", "Operator"), ("dstOp", 2, "repeated", "Operator"), ("mappedOutput", 3, "repeated", "MapOutput")],
    "RuleCollection": [("rule", 1, "repeated", "Rule")],
}


@functools.cache
def message_classes() -> dict[str, type]:
    """TASO's message classes, from a descriptor built here in a private pool (no generated code)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="rules.proto", package="GraphSubst", syntax="proto2")
    labels = {"required": descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED, "repeated": descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED}
    for message, fields in _SCHEMA.items():
        described = proto.message_type.add(name=message)
        for name, number, label, type_name in fields:
            f = described.field.add(name=name, number=number, label=labels[label])
            if type_name is None:
                f.type = descriptor_pb2.FieldDescriptorProto.TYPE_INT32
            else:
                f.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                f.type_name = f".GraphSubst.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {m: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"GraphSubst.{m}")) for m in _SCHEMA}


@dataclass(frozen=True)
class TasoOp:
    """One TASO operator: its OpType, its inputs as (opId, tsId) and its (PMParameter, value) pairs."""

    type: int
    inputs: tuple[tuple[int, int], ...] = ()
    params: tuple[tuple[int, int], ...] = ()

    @property
    def name(self) -> str:
        return OP_TYPES[self.type] if 0 <= self.type < len(OP_TYPES) else f"type {self.type}"

    def param(self, key: str, default: int | None = None) -> int:
        for k, v in self.params:
            if k == PM[key]:
                return v
        if default is None:
            raise Unconvertible(f"TASO {self.name} without its {key} parameter")
        return default


@dataclass(frozen=True)
class TasoRule:
    """A TASO substitution: source and target operator lists and the (srcOp, srcTs, dstOp, dstTs) output pairs."""

    source: tuple[TasoOp, ...]
    target: tuple[TasoOp, ...]
    outputs: tuple[tuple[int, int, int, int], ...]


def decode(data: bytes) -> list[TasoRule]:
    """Parses a serialized RuleCollection.

    Raises:
        TasoImportError: not a RuleCollection (bad wire format, missing required fields, no rules).
    """
    from google.protobuf.message import DecodeError

    collection = message_classes()["RuleCollection"]()
    try:
        collection.ParseFromString(bytes(data))
    except (DecodeError, ValueError, RuntimeError) as e:
        raise TasoImportError(f"not a TASO rule collection (protobuf: {e})") from None
    if not collection.IsInitialized():
        raise TasoImportError("not a TASO rule collection (required fields are missing)")
    if not collection.rule:
        raise TasoImportError("holds no TASO rules")
    return [_rule_from_message(r) for r in collection.rule]


def _rule_from_message(message) -> TasoRule:
    def op(o) -> TasoOp:
        return TasoOp(o.type, tuple((t.opId, t.tsId) for t in o.input), tuple((p.key, p.value) for p in o.para))

    return TasoRule(tuple(op(o) for o in message.srcOp), tuple(op(o) for o in message.dstOp),
                    tuple((m.srcOpId, m.srcTsId, m.dstOpId, m.dstTsId) for m in message.mappedOutput))


def encode(rules: Sequence[TasoRule]) -> bytes:
    """Serializes rules as TASO's RuleCollection (what TASO's generator writes)."""
    classes = message_classes()
    collection = classes["RuleCollection"]()
    for rule in rules:
        message = collection.rule.add()
        for ops, repeated in ((rule.source, message.srcOp), (rule.target, message.dstOp)):
            for o in ops:
                added = repeated.add(type=o.type)
                for op_id, ts_id in o.inputs:
                    added.input.add(opId=op_id, tsId=ts_id)
                for key, value in o.params:
                    added.para.add(key=key, value=value)
        for src_op, src_ts, dst_op, dst_ts in rule.outputs:
            message.mappedOutput.add(srcOpId=src_op, srcTsId=src_ts, dstOpId=dst_op, dstTsId=dst_ts)
    return collection.SerializeToString()


def read_file(path: str | os.PathLike) -> list[TasoRule]:
    """Reads a ``graph_subst.pb``.

    Raises:
        TasoImportError: missing, unreadable or not a RuleCollection.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TasoImportError(f"{path}: no such file") from None
    except OSError as e:
        raise TasoImportError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        return decode(data)
    except TasoImportError as e:
        raise TasoImportError(f"{path}: {e}") from None


def _same_pads(size: Sequence[int], kernel: Sequence[int], strides: Sequence[int]) -> tuple[int, int, int, int]:
    """TASO's SAME padding (half before, the rest after), as ONNX pads (top, left, bottom, right)."""
    totals = [max((-(-n // s) - 1) * s + k - n, 0) for n, k, s in zip(size, kernel, strides)]
    return totals[0] // 2, totals[1] // 2, totals[0] - totals[0] // 2, totals[1] - totals[1] // 2


def _window(o: TasoOp, image: TensorType, kernel: tuple[int, int]) -> dict[str, Any]:
    strides = (o.param("stride_h", 1), o.param("stride_w", 1))
    pad = o.param("pad", PAD_SAME)
    if pad not in (PAD_SAME, PAD_VALID):
        raise Unconvertible(f"TASO {o.name} with padding mode {pad}")
    if image.rank != 4:
        raise Unconvertible(f"TASO {o.name} of a rank-{image.rank} tensor")
    return {"strides": strides, "pads": _same_pads(image.shape[2:], kernel, strides) if pad == PAD_SAME else (0, 0, 0, 0)}


def _activation(o: TasoOp) -> str:
    mode = o.param("acti", 0)
    if not 0 <= mode < len(ACTIVATIONS):
        raise Unconvertible(f"TASO {o.name} with activation mode {mode}")
    return ACTIVATIONS[mode]


def _conv(o: TasoOp, types: list[TensorType]) -> tuple[str, dict]:
    x, w = types
    if w.rank != 4 or x.rank != 4 or w.shape[1] == 0 or x.shape[1] % w.shape[1]:
        raise Unconvertible(f"TASO conv2d of {x.shape} by {w.shape}")
    kernel = w.shape[2:]
    if (o.param("kernel_h", kernel[0]), o.param("kernel_w", kernel[1])) != kernel:
        raise Unconvertible(f"TASO conv2d whose kernel parameters disagree with its {kernel} weight")
    return "conv2d", {**_window(o, x, kernel), "groups": x.shape[1] // w.shape[1], "activation": _activation(o)}


def _pool(kind: str):
    def convert(o: TasoOp, types: list[TensorType]) -> tuple[str, dict]:
        kernel = (o.param("kernel_h"), o.param("kernel_w"))
        if _activation(o) != "none":
            raise Unconvertible(f"TASO {o.name} with a fused activation")
        params = {**_window(o, types[0], kernel), "kernel": kernel}
        # NOTE: TASO's average pool counts the padding (its axiom: conv2d(x, const_pool) = pool2d_avg(x)).
        return (kind, {**params, "count_include_pad": 1}) if kind == "avg_pool2d" else (kind, params)

    return convert


def _concat(o: TasoOp, types: list[TensorType]) -> tuple[str, dict]:
    if o.param("num_inputs", len(types)) != len(types):
        raise Unconvertible("TASO concat whose num_inputs disagrees with its inputs")
    return "concat", {"axis": o.param("axis")}


def _transpose(o: TasoOp, types: list[TensorType]) -> tuple[str, dict]:
    rank = o.param("numdim", types[0].rank)
    code, perm = o.param("perm"), []
    for _ in range(rank):  # NOTE: TASO packs the permutation as digits in base rank, first axis most significant
        perm.append(code % rank)
        code //= rank
    return "transpose", {"perm": tuple(reversed(perm))}


def _matmul(o: TasoOp, types: list[TensorType]) -> tuple[str, dict]:
    return "matmul", {"activation": _activation(o)}


def _enlarge(o: TasoOp, types: list[TensorType]) -> tuple[str, dict]:
    if len(types) != 1:
        raise Unconvertible("TASO enlarge with a second (shape) input")
    return "enlarge", {"kernel": (o.param("kernel_h"), o.param("kernel_w"))}


def _fixed(name: str, **params: Any):
    return lambda o, types: (name, dict(params))


def _kernel_constant(name: str):
    return lambda o, types: (name, {"channels": _KERNEL_CHANNELS, "kernel": (o.param("kernel_h"), o.param("kernel_w"))})


_CONVERTERS = {
    OP["conv2d"]: _conv,
    OP["pool2d_max"]: _pool("max_pool2d"),
    OP["pool2d_avg"]: _pool("avg_pool2d"),
    OP["relu"]: _fixed("relu"),
    OP["sigmoid"]: _fixed("sigmoid"),
    OP["tanh"]: _fixed("tanh"),
    OP["concat"]: _concat,
    OP["split"]: None,  # needs the split boundary: see _Side.split
    OP["transpose"]: _transpose,
    OP["ew_add"]: _fixed("add"),
    OP["ew_mul"]: _fixed("mul"),
    OP["matmul"]: _matmul,
    OP["mul"]: _fixed("scalar_mul"),
    OP["enlarge"]: _enlarge,
    OP["constant_imm"]: _fixed("eye", n=_EYE_N),
    OP["constant_iconv"]: _kernel_constant("conv_identity"),
    OP["constant_one"]: _fixed("fill", shape=_ONES_SHAPE, value=1.0),
    OP["constant_pool"]: _kernel_constant("pool_kernel"),
}


Boundaries = tuple  # per axis: the sizes of the last concat along it, or None


def _boundaries(name: str, params: Mapping[str, Any], inputs: list[Boundaries], types: list[TensorType], out: TensorType) -> Boundaries:
    """Where a later split may cut the output, as TASO's generator tracks it (SplitInfo, its last level only)."""
    rank = out.rank
    none: list = [None] * rank
    if name == "concat":
        axis = params["axis"]
        b = [x if all(i[k] == x for i in inputs) else None for k, x in enumerate(inputs[0])]
        b[axis] = tuple(t.shape[axis] for t in types)
        return tuple(b)
    if name == "matmul" and rank == 2:
        return inputs[0][0], inputs[1][1]
    if name == "conv2d":
        return inputs[0][0], inputs[1][0], *none[2:]
    if name == "transpose":
        return tuple(inputs[0][k] for k in params["perm"])
    if name in ("add", "mul"):
        return tuple(a if a == b else None for a, b in zip(inputs[0], inputs[1]))
    if name in ("relu", "sigmoid", "tanh", "scalar_mul", "enlarge", "max_pool2d", "avg_pool2d"):
        b = list(inputs[0])
        if name.endswith("pool2d"):
            b[2:] = none[2:]  # NOTE: TASO's pools keep only the batch boundary; per-channel pooling keeps that one too
        return tuple(b[:rank])
    return tuple(none)


@dataclass
class _Side:
    """A side being converted: value names, their types and boundaries, and the nodes so far."""

    prefix: str
    types: dict[str, TensorType]
    boundaries: dict[str, Boundaries]
    nodes: list[RuleNode] = field(default_factory=list)
    values: dict[tuple[int, int], str] = field(default_factory=dict)
    counter: int = 0

    def fresh(self) -> str:
        self.counter += 1
        return f"{self.prefix}{self.counter - 1}"

    def add(self, index: int, o: TasoOp, names: Mapping[int, str]) -> None:
        try:
            self._add(index, o, names)
        except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError) as e:
            # NOTE: a malformed operator (wrong input count, impossible parameter) costs its rule, never the import.
            raise Unconvertible(f"malformed TASO {o.name} ({type(e).__name__}: {e})") from None

    def _add(self, index: int, o: TasoOp, names: Mapping[int, str]) -> None:
        inputs = [self.value(ref, names) for ref in o.inputs]
        types = [self.types[v] for v in inputs]
        if o.type == OP["split"]:
            op_name, params = self.split(o, inputs)
        elif o.type in _CONVERTERS:
            op_name, params = _CONVERTERS[o.type](o, types)
        else:
            raise Unconvertible(f"TASO operator {o.name} has no counterpart in taso")
        try:
            op = get_op(op_name)
            outs = op.infer(types, op.make_params(**params))
        except TasoError as e:
            raise Unconvertible(f"TASO {o.name} does not type-check here: {e}") from None
        names_out = [self.fresh() for _ in outs]
        for k, (v, t) in enumerate(zip(names_out, outs)):
            self.values[(index, k)] = v
            self.types[v] = t
            self.boundaries[v] = _boundaries(op_name, params, [self.boundaries[i] for i in inputs], types, t) if len(outs) == 1 else (None,) * t.rank
        self.nodes.append(RuleNode(op_name, dict(op.make_params(**params)), tuple(inputs), tuple(names_out)))

    def split(self, o: TasoOp, inputs: list[str]) -> tuple[str, dict]:
        axis, count = o.param("axis"), o.param("num_outputs", 2)
        sizes = self.boundaries[inputs[0]][axis] if axis < len(self.boundaries[inputs[0]]) else None
        if sizes is None or len(sizes) != count:
            raise Unconvertible(f"TASO split along axis {axis} of a value with no concat boundary there")
        return "split", {"axis": axis, "sizes": tuple(sizes)}

    def value(self, ref: tuple[int, int], names: Mapping[int, str]) -> str:
        op_id, ts_id = ref
        if op_id < 0:
            return names[op_id]
        if (op_id, ts_id) not in self.values:
            raise Unconvertible(f"reads output {ts_id} of operator {op_id}, which is not defined before it")
        return self.values[(op_id, ts_id)]


def _input_ids(rule: TasoRule) -> list[int]:
    seen: list[int] = []
    for o in rule.source + rule.target:
        for op_id, ts_id in o.inputs:
            if op_id < 0 and op_id not in seen:
                if ts_id != 0:
                    raise Unconvertible(f"reads output {ts_id} of input {op_id}")
                seen.append(op_id)
    return sorted(seen, reverse=True)  # TASO's pool order (-1 first), as taso's generator orders its inputs


def _input_name(op_id: int) -> str:
    return INPUT_POOL[op_id][0] if op_id in INPUT_POOL else f"v{-op_id}"


def _build(rule: TasoRule, shapes: Mapping[int, tuple[int, ...]], index: int) -> Rule:
    """The taso rule at these input shapes (keyed by TASO opId).

    Raises:
        Unconvertible: an operator without a counterpart, or a side that does not type-check.
    """
    names = {op_id: _input_name(op_id) for op_id in shapes}
    inputs = tuple(RuleInput(names[i], INPUT_POOL.get(i, ("", "taso", ()))[1], TensorType(tuple(s))) for i, s in shapes.items())
    sides = {}
    for side, prefix in (("source", "s"), ("target", "t")):
        built = _Side(prefix, {n.name: n.type for n in inputs}, {n.name: (None,) * n.type.rank for n in inputs})
        for k, o in enumerate(getattr(rule, side)):
            built.add(k, o, names)
        sides[side] = built
    try:
        outputs = tuple((sides["source"].values[(so, st)] if so >= 0 else names[so], sides["target"].values[(do, dt)] if do >= 0 else names[do])
                        for so, st, do, dt in rule.outputs)
    except KeyError:
        raise Unconvertible("maps an output that its side does not define") from None
    if not outputs:
        raise Unconvertible("maps no outputs")
    for s, t in outputs:
        if sides["source"].types.get(s) != sides["target"].types.get(t):
            raise Unconvertible(f"mapped outputs {s} and {t} have different types")
    extra = {"taso": {"index": index, "inputs": {names[i]: i for i in shapes}}}
    return Rule(inputs, tuple(sides["source"].nodes), tuple(sides["target"].nodes), outputs, name=f"taso#{index}", extra=extra)


# Shapes to try for an input that TASO's pool does not describe (or whose pool shape does not fit).
_CANDIDATE_SHAPES = tuple(dict.fromkeys(shape for _, _, shape in INPUT_POOL.values()))


def _search_shapes(rule: TasoRule, ids: list[int], fixed: Mapping[int, tuple[int, ...]], index: int) -> Rule:
    """The first assignment of pool shapes to the free inputs under which both sides type-check."""
    free = [i for i in ids if i not in fixed]
    last: Unconvertible | None = None

    def assign(k: int, shapes: dict[int, tuple[int, ...]]) -> Rule | None:
        nonlocal last
        if k == len(free):
            try:
                return _build(rule, {i: shapes[i] for i in ids}, index)
            except Unconvertible as e:
                last = e
                return None
        own = INPUT_POOL[free[k]][2] if free[k] in INPUT_POOL else None
        for shape in ([own] if own is not None else []) + [c for c in _CANDIDATE_SHAPES if c != own]:
            found = assign(k + 1, {**shapes, free[k]: shape})
            if found is not None:
                return found
        return None

    if len(free) > 4:
        raise Unconvertible(f"{len(free)} inputs without known shapes")
    found = assign(0, dict(fixed))
    if found is None:
        raise last or Unconvertible("no input shapes make both sides type-check")
    return found


def to_rule(rule: TasoRule, index: int = 0, shapes: Mapping[str, Sequence[int]] | None = None, generic: bool = False) -> Rule:
    """One TASO rule in taso's format, with shape expressions, at TASO's pool shapes unless told otherwise.

    Args:
        rule: the TASO rule.
        index: its position in the collection (the rule is named ``taso#<index>``, as TASO's verify.py counts).
        shapes: example shapes for inputs by taso name (``k2``) or TASO opId (``-11``), overriding the pool.
        generic: choose example shapes where every dimension the types leave free has its own size.

    Raises:
        Unconvertible: why the rule has no taso counterpart.
    """
    for o in rule.source + rule.target:
        if o.type not in _CONVERTERS:
            raise Unconvertible(f"TASO operator {o.name} has no counterpart in taso")
    ids = _input_ids(rule)
    given = _given_shapes(shapes or {}, ids)
    pool = {i: INPUT_POOL[i][2] for i in ids if i in INPUT_POOL}
    first: Unconvertible | None = None
    try:
        built = _build(rule, pool, index) if len(pool) == len(ids) else None
    except Unconvertible as e:
        built, first = None, e
    if built is None:
        try:
            built = _search_shapes(rule, ids, {i: s for i, s in given.items() if i not in pool}, index)
        except Unconvertible as e:
            raise first or e from None
    try:
        general = _with_shape_expressions(built)
    except TasoError as e:
        raise Unconvertible(f"its shape parameters cannot be expressed over its inputs ({e})") from None
    if generic:
        general = _at_shapes(general, _generic_shapes(general))
    if given:
        names = {op_id: name for name, op_id in general.extra["taso"]["inputs"].items()}
        general = _at_shapes(general, {names[i]: s for i, s in given.items()})
    return general


def _given_shapes(shapes: Mapping[Any, Sequence[int]], ids: list[int]) -> dict[int, tuple[int, ...]]:
    """Caller-given shapes keyed by TASO opId; keys may be taso input names (``k2``) or opIds."""
    by_name = {_input_name(i): i for i in ids}
    out = {}
    for key, shape in shapes.items():
        op_id = int(key) if isinstance(key, int) or str(key).lstrip("-").isdigit() else by_name.get(str(key))
        if op_id in ids:
            out[op_id] = tuple(int(d) for d in shape)
    return out


def _with_shape_expressions(rule: Rule) -> Rule:
    """Shape parameters as expressions over the inputs, and the constraints the types need (the generator's probing)."""
    from taso.generator.generalize import _dim, _partition, _variables

    values = _variables(rule)
    groups, fixed = _partition(rule, values)
    expressions, constraints = {}, []
    for group in groups:
        dims = [v for v in group if v[0] == "in"]
        constraints += [{"eq": [_dim(dims[0]), _dim(other)]} for other in dims[1:]]
        expressions.update({v: _dim(dims[0]) for v in group if v[0] == "param" and dims})
    constraints += [{"eq": [_dim(v), values[v]]} for v in fixed if v[0] == "in"]
    slots: dict[tuple, list] = {}
    for var in values:
        if var[0] == "param":
            slots.setdefault(var[1:4], []).append(var)
    params = []
    for (side, node, param), elements in slots.items():
        if any(v in expressions for v in elements):
            value = expressions[elements[0]] if elements[0][4] is None else [expressions.get(v, values[v]) for v in elements]
            params.append({"side": side, "node": node, "param": param, "value": value})
    general = replace(rule, params=tuple(params), constraints=tuple(constraints))
    general.validate()
    return general


def _generic_shapes(rule: Rule) -> dict[str, tuple[int, ...]]:
    """Shapes where each group of dimensions that may vary together has its own size (a new one, of the same parity)."""
    from taso.generator.generalize import _partition, _variables

    values = _variables(rule)
    groups, _ = _partition(rule, values)
    shapes = {i.name: list(i.type.shape) for i in rule.inputs}
    size = max([d for s in shapes.values() for d in s] + [1])
    for group in groups:
        dims = [v for v in group if v[0] == "in"]
        if dims:
            size += 1 + (size + 1 - values[dims[0]]) % 2  # NOTE: parity kept, so centred kernels stay centred
            for _, name, axis in dims:
                shapes[name][axis] = size
    return {k: tuple(v) for k, v in shapes.items()}


def _at_shapes(rule: Rule, shapes: Mapping[str, Sequence[int]]) -> Rule:
    """The same rule with other example shapes: shape parameters re-resolved, both sides checked.

    Raises:
        Unconvertible: a side does not type-check there, or the rule's constraints reject them.
    """
    inputs = tuple(replace(i, type=TensorType(tuple(shapes.get(i.name, i.type.shape)), i.type.dtype)) for i in rule.inputs)
    dims = {i.name: i.type.shape for i in inputs}
    sides = {}
    for side in ("source", "target"):
        nodes = list(getattr(rule, side))
        for p in rule.params:
            if p["side"] == side:
                node = nodes[p["node"]]
                nodes[p["node"]] = replace(node, params={**node.params, p["param"]: resolve_expr(p["value"], dims)})
        sides[side] = tuple(nodes)
    moved = replace(rule, inputs=inputs, source=sides["source"], target=sides["target"])
    try:
        moved.validate()
    except TasoError as e:
        raise Unconvertible(f"not at shapes {dict(dims)}: {e}") from None
    return moved


@dataclass
class ImportResult:
    """The imported library and what could not be imported (rule index, reason)."""

    library: Library
    total: int
    skipped: list[tuple[int, str]]

    def skipped_by_reason(self) -> Counter:
        return Counter(reason for _, reason in self.skipped)

    def summary(self) -> str:
        lines = [f"read {self.total} TASO rules: imported {len(self.library)}, skipped {len(self.skipped)}"]
        for reason, count in self.skipped_by_reason().most_common():
            which = ", ".join(f"#{i}" for i, r in self.skipped if r == reason)
            lines.append(f"  skipped {count}: {reason} ({which})")
        return "\n".join(lines)


def import_rules(rules: Sequence[TasoRule], shapes: Mapping[str, Sequence[int]] | None = None, generic: bool = False,
                 source: str = "") -> ImportResult:
    """Converts every rule it can; the others are listed with the reason."""
    from taso import __version__

    imported, skipped = [], []
    for index, rule in enumerate(rules):
        try:
            imported.append(to_rule(rule, index, shapes, generic))
        except Unconvertible as e:
            skipped.append((index, str(e)))
    header = {
        "description": "TASO's published substitutions, imported by `taso import-taso` (candidates: verify them with `taso verify`)",
        "format_doc": "docs/rules.md", "taso": __version__,
        "import": {"source": source, "shapes": "generic" if generic else "taso-pool",
                   "given_shapes": {str(k): list(v) for k, v in (shapes or {}).items()}, "taso_rules": len(rules),
                   "imported": len(imported), "skipped": [{"index": i, "reason": r} for i, r in skipped]},
    }
    return ImportResult(Library(imported, header), len(rules), skipped)


def run_import(path: str | os.PathLike, output: str | os.PathLike, shapes: Mapping[str, Sequence[int]] | None = None,
               generic: bool = False) -> ImportResult:
    """``taso import-taso``: reads TASO's collection, writes the importable rules as candidates.

    Raises:
        TasoError: an unreadable or malformed input file, no importable rule, an unwritable output.
    """
    known = {name for name, _, _ in INPUT_POOL.values()}
    for name in shapes or {}:
        if name not in known and not str(name).lstrip("-").isdigit() and not (str(name)[:1] == "v" and str(name)[1:].isdigit()):
            raise TasoImportError(f"--input-shape {name}: no TASO input has that name (TASO's pool: {', '.join(sorted(known))}; or a TASO opId)")
    result = import_rules(read_file(path), shapes, generic, source=os.path.basename(os.fspath(path)))
    if not result.library.rules:
        raise TasoImportError(f"{os.fspath(path)}: none of its {result.total} rules can be imported ({result.skipped[0][1]}, ...)")
    result.library.save(output)
    return result
