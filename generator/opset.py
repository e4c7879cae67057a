"""The enumeration vocabulary: which operator applications the generator tries.

The registry (:mod:`taso.ops`) says what an operator computes and which shapes it accepts;
this module only says *how the generator uses it*: the fixed parameters of each variant
(a 3x3 SAME convolution with a fused relu, a 3x3 average pool, a split along axis 1...)
and the argument policy that keeps the search on graphs that can occur in a model. The
policies are TASO's:

* activation functions, pools and convolution inputs consume data, never raw weights;
* element-wise operands have equal shapes, or one is a bias vector (rank 1); a channel
  vector (C, 1, 1) only shifts or scales the channels of an image (data, never a kernel);
* batch norm normalises an image with the pool's statistics, each in its own position;
  bn_kernel and bn_shift read the same statistics (and a kernel) to fold it into a conv;
* matmul and transpose work on matrices (rank 2); scalar_mul scales by the pool's scalar;
* enlarge grows a pool kernel to a larger pool kernel size;
* split undoes a concatenation: it cuts an operator's output into the two sizes of a concat
  in the same graph;
* constants (identity matrix, identity kernel, pool kernel, all-ones) take the shapes of
  the pool classes they combine with.

Fused activations follow the op set: matmul and conv2d get a ``relu`` variant when relu is
enumerated, and likewise for sigmoid and tanh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from taso import ops as registry
from taso.errors import ShapeError, TasoError
from taso.ir import Params, TensorType
from taso.ops import ACTIVATIONS
from taso.ops.conv import same_pads

from .pool import BN_ROLES, InputPool

__all__ = ["Variant", "ArgRule", "build_variants", "parse_ops", "GENERATOR_OPS", "TASO_OPS", "BN_OPS", "DEFAULT_OPS", "PRESETS"]

Shape = tuple[int, ...]
# A shape policy: argument shapes and the split sizes (or ()) -> derived parameters, or None to refuse.
ShapePolicy = Callable[[tuple[Shape, ...], tuple[int, ...]], "dict | None"]


@dataclass(frozen=True, eq=False)
class ArgRule:
    """What one argument position accepts: tensor roles, and where the tensor may come from.

    Compared by identity (the rules are a few module constants), which keeps hashing cheap.

    Attributes:
        roles: the roles accepted (see :data:`~taso.generator.pool.ROLES`).
        origin: 'any', 'pool' (a pool tensor) or 'computed' (an operator's output).
    """

    roles: frozenset[str]
    origin: str = "any"

    def accepts(self, role: str, from_pool: bool) -> bool:
        return role in self.roles and (self.origin == "any" or (self.origin == "pool") == from_pool)


ANY = ArgRule(frozenset({"data", "weight"}))
DATA = ArgRule(frozenset({"data"}))
WEIGHT = ArgRule(frozenset({"weight"}))
POOL_WEIGHT = ArgRule(frozenset({"weight"}), origin="pool")
POOL_SCALAR = ArgRule(frozenset({"scalar"}), origin="pool")
CHAN = ArgRule(frozenset({"chan"}), origin="pool")
BN_SCALE, BN_BIAS, BN_MEAN, BN_VAR = (ArgRule(frozenset({role}), origin="pool") for role in BN_ROLES)
COMPUTED = ArgRule(frozenset({"data", "weight"}), origin="computed")


@dataclass(frozen=True, eq=False)
class Variant:
    """One way to apply an operator: the op, its fixed parameters and its argument policy.

    Attributes:
        index: position in the variant table (part of the enumeration's canonical op order).
        label: a short name for people (``conv2d[3x3]+relu``).
        op: the registry operator.
        params: the fixed parameters; ``policy`` may derive more (conv groups, split sizes).
        args: one :class:`ArgRule` per argument.
        commutative: arguments are an unordered pair (the registry's 'commutative' group).
        policy: the shape policy (see ``ShapePolicy``).
        splits: the variant takes its sizes from a concat boundary of the graph.
        ranks: per argument, the ranks the policy accepts (None: any), declared beside the policy;
            the enumeration binds no shape tuple outside them (a test checks every policy refuses them).
        batched: argument positions whose first axis the variant maps independently: evaluated
            on these arguments of several steps concatenated along axis 0 (the others the same),
            its outputs are theirs concatenated along axis 0. Only an argument of the output's
            rank has that axis; one of lower rank broadcasts (a bias) and stays the same (see
            :meth:`batch_positions`). The enumeration evaluates such steps together
            (:mod:`~taso.generator.leaves`); a test checks every declaration on every binding.
    """

    index: int
    label: str
    op: registry.Op
    params: Params
    args: tuple[ArgRule, ...]
    commutative: bool
    policy: ShapePolicy
    splits: bool = False
    ranks: tuple[frozenset[int] | None, ...] | None = None  # per argument, the ranks the policy can accept (None: any)
    batched: tuple[int, ...] = ()  # argument positions whose first axis is a batch axis (see the docstring)

    @property
    def arity(self) -> int:
        return len(self.args)

    def batch_positions(self, ranks: tuple[int, ...], out_rank: int) -> tuple[int, ...]:
        """The ``batched`` positions that hold a batch axis for arguments of these ranks: those of the output's rank (>= 1)."""
        return tuple(k for k in self.batched if ranks[k] == out_rank >= 1)

    def bind(self, shapes: tuple[Shape, ...], sizes: tuple[int, ...] = ()) -> tuple[Params, tuple[Shape, ...]] | None:
        """Parameters and output shapes of this variant on arguments of these shapes, or None.

        None when the policy refuses the shapes or the registry's shape rule rejects them.
        """
        derived = self.policy(shapes, sizes)
        if derived is None:
            return None
        params = self.params.replace(**derived) if derived else self.params
        try:
            outs = self.op.infer([TensorType(s) for s in shapes], params)
        except ShapeError:
            return None
        return params, tuple(t.shape for t in outs)


# ---- shape policies ------------------------------------------------------------------------


def _ranks(*ranks: int) -> ShapePolicy:
    return lambda shapes, sizes: {} if tuple(len(s) for s in shapes) == ranks else None


def _elementwise(shapes, sizes):
    """Equal shapes, or a bias vector broadcast along the last axis of the other operand."""
    a, b = shapes
    if a == b:
        return {}
    small, large = sorted((a, b), key=len)
    return {} if len(small) == 1 and len(large) > 1 and large[-1] == small[0] else None


def _channelwise(shapes, sizes):
    """An image and a channel vector (C, 1, 1) of its channel count."""
    image, vector = shapes
    return {} if len(image) == 4 and vector == (image[1], 1, 1) else None


def _batch_norm(shapes, sizes):
    """An image and its per-channel statistics (the registry checks their shapes)."""
    return {} if len(shapes[0]) == 4 else None


def _conv(kernel: Shape) -> ShapePolicy:
    def policy(shapes, sizes):
        x, w = shapes[0], shapes[1]
        if len(x) != 4 or len(w) != 4 or w[2:] != kernel or w[1] == 0 or x[1] % w[1]:
            return None
        if len(shapes) == 3 and len(shapes[2]) != 1:
            return None
        return {"groups": x[1] // w[1]}

    return policy


def _enlarge(kernel: Shape) -> ShapePolicy:
    def policy(shapes, sizes):
        (w,) = shapes
        return {} if len(w) == 4 and w[2:] != kernel and w[2] <= kernel[0] and w[3] <= kernel[1] else None

    return policy


def _split(axis: int) -> ShapePolicy:
    def policy(shapes, sizes):
        (x,) = shapes
        return {"sizes": tuple(sizes)} if len(x) > axis and sizes and sum(sizes) == x[axis] else None

    return policy


def _no_args(shapes, sizes):
    return {}


# The ranks each policy above can accept, per argument (None: any): the enumeration tries no shape outside them.
_RANK_2x2 = (frozenset({2}), frozenset({2}))
_RANK_4 = (frozenset({4}),)
_RANK_CONV = (frozenset({4}), frozenset({4}))
_RANK_CONV_BIAS = (frozenset({4}), frozenset({4}), frozenset({1}))
_RANK_CHANNEL = (frozenset({4}), frozenset({3}))
_RANK_BATCH_NORM = (frozenset({4}), None, None, None, None)


# ---- the variants of each operator -----------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    label: str
    op: str
    params: dict
    args: tuple[ArgRule, ...]
    policy: ShapePolicy
    splits: bool = False
    ranks: tuple[frozenset[int] | None, ...] | None = None
    batched: tuple[int, ...] = ()


def _activation_suffix(act: str) -> str:
    return "" if act == "none" else f"+{act}"


def _kernel_sizes(pool: InputPool) -> list[Shape]:
    """Spatial sizes of the pool's convolution kernels (rank-4 weights), in pool order."""
    sizes: list[Shape] = []
    for cls in pool.classes:
        if cls.role == "weight" and len(cls.shape) == 4 and cls.shape[2:] not in sizes:
            sizes.append(cls.shape[2:])
    return sizes


def _size(kernel: Shape) -> str:
    return "x".join(map(str, kernel))


def _matmul(pool, acts):
    return [_Spec(f"matmul{_activation_suffix(a)}", "matmul", {"activation": a}, (ANY, ANY), _ranks(2, 2), ranks=_RANK_2x2, batched=(0,))
            for a in acts]


def _conv2d(pool, acts):
    # a bias comes from the pool, or from batch norm statistics (bn_shift folds them into one)
    has_bias = any(c.role in ("weight", *BN_ROLES) and len(c.shape) == 1 for c in pool.classes)
    specs = []
    for kernel in _kernel_sizes(pool):
        pads = same_pads((max(kernel) * 2 + 1,) * 2, kernel, (1, 1), (1, 1))
        for bias in (False, True) if has_bias else (False,):
            args = (DATA, WEIGHT, WEIGHT) if bias else (DATA, WEIGHT)
            for a in acts:
                specs.append(_Spec(f"conv2d[{_size(kernel)}{',bias' if bias else ''}]{_activation_suffix(a)}", "conv2d",
                                   {"pads": pads, "activation": a}, args, _conv(kernel), ranks=_RANK_CONV_BIAS if bias else _RANK_CONV,
                                   batched=(0,)))
    return specs


def _enlarge_specs(pool, acts):
    kernels = _kernel_sizes(pool)
    return [_Spec(f"enlarge[{_size(k)}]", "enlarge", {"kernel": k}, (POOL_WEIGHT,), _enlarge(k), ranks=_RANK_4)
            for k in kernels if any(o != k and o[0] <= k[0] and o[1] <= k[1] for o in kernels)]


def _pool2d(name: str, extra: dict):
    def specs(pool, acts):
        return [_Spec(f"{name}[3x3]", name, {"kernel": (3, 3), "pads": (1, 1, 1, 1), **extra}, (DATA,), _ranks(4), ranks=_RANK_4,
                      batched=(0,))]

    return specs


def _unary_activation(name: str):
    return lambda pool, acts: [_Spec(name, name, {}, (DATA,), lambda shapes, sizes: {}, batched=(0,))]


def _binary_elementwise(name: str):
    def specs(pool, acts):
        out = [_Spec(name, name, {}, (ANY, ANY), _elementwise, batched=(0, 1))]
        if any(c.role == "chan" for c in pool.classes):
            out.append(_Spec(f"{name}[channel]", name, {}, (DATA, CHAN), _channelwise, ranks=_RANK_CHANNEL, batched=(0,)))
        return out

    return specs


def _concat(pool, acts):
    # concatenating along axis 1 keeps axis 0 a batch axis; along axis 0 it does not
    return [_Spec(f"concat[axis={a}]", "concat", {"axis": a}, (ANY, ANY), lambda shapes, sizes: {}, batched=(0, 1) if a else ())
            for a in (0, 1)]


def _split_specs(pool, acts):
    return [_Spec(f"split[axis={a}]", "split", {"axis": a, "sizes": (1, 1)}, (COMPUTED,), _split(a), splits=True) for a in (0, 1)]


def _batch_norm_specs(pool, acts):
    return [_Spec("batch_norm", "batch_norm", {}, (DATA, BN_SCALE, BN_BIAS, BN_MEAN, BN_VAR), _batch_norm, ranks=_RANK_BATCH_NORM,
                  batched=(0,))]


def _bn_kernel_specs(pool, acts):
    return [_Spec("bn_kernel", "bn_kernel", {}, (WEIGHT, BN_SCALE, BN_VAR), _no_args)]


def _bn_shift_specs(pool, acts):
    return [_Spec("bn_shift", "bn_shift", {}, (BN_SCALE, BN_BIAS, BN_MEAN, BN_VAR), _no_args)]


def _classes(pool: InputPool, test: Callable) -> list:
    return [c for c in pool.classes if test(c)]


def _eye(pool, acts):
    squares = {c.shape[0] for c in _classes(pool, lambda c: len(c.shape) == 2 and c.shape[0] == c.shape[1])}
    return [_Spec(f"eye[{n}]", "eye", {"n": n}, (), _no_args) for n in sorted(squares)]


def _conv_identity(pool, acts):
    # TASO's identity kernel has the shape of the first full (not depthwise) kernel class.
    full = _classes(pool, lambda c: c.role == "weight" and len(c.shape) == 4 and c.shape[0] == c.shape[1])
    return [_Spec(f"conv_identity[{_size(c.shape)}]", "conv_identity", {"channels": c.shape[0], "kernel": c.shape[2:]}, (), _no_args)
            for c in full[:1]]


def _pool_kernel(pool, acts):
    depthwise = _classes(pool, lambda c: c.role == "weight" and len(c.shape) == 4 and c.shape[1] == 1 and c.shape[0] > 1)
    return [_Spec(f"pool_kernel[{_size(c.shape)}]", "pool_kernel", {"channels": c.shape[0], "kernel": c.shape[2:]}, (), _no_args)
            for c in depthwise[:1]]


def _fill(pool, acts):
    images = _classes(pool, lambda c: c.role == "data" and len(c.shape) == 4)
    return [_Spec(f"fill[ones {_size(c.shape)}]", "fill", {"shape": c.shape, "value": 1.0}, (), _no_args) for c in images[:1]]


# Canonical op name -> the builder of its variants. Order = variant order = canonical op order.
_BUILDERS: dict[str, Callable[[InputPool, Sequence[str]], list[_Spec]]] = {
    "matmul": _matmul,
    "conv2d": _conv2d,
    "add": _binary_elementwise("add"),
    "mul": _binary_elementwise("mul"),
    "scalar_mul": lambda pool, acts: [_Spec("scalar_mul", "scalar_mul", {}, (ANY, POOL_SCALAR), lambda shapes, sizes: {}, batched=(0,))],
    "transpose": lambda pool, acts: [_Spec("transpose", "transpose", {"perm": (1, 0)}, (ANY,), _ranks(2), ranks=(frozenset({2}),))],
    "enlarge": _enlarge_specs,
    "relu": _unary_activation("relu"),
    "sigmoid": _unary_activation("sigmoid"),
    "tanh": _unary_activation("tanh"),
    "avg_pool2d": _pool2d("avg_pool2d", {"count_include_pad": 1}),
    "max_pool2d": _pool2d("max_pool2d", {}),
    "concat": _concat,
    "split": _split_specs,
    "conv_identity": _conv_identity,
    "eye": _eye,
    "fill": _fill,
    "pool_kernel": _pool_kernel,
    "batch_norm": _batch_norm_specs,
    "bn_kernel": _bn_kernel_specs,
    "bn_shift": _bn_shift_specs,
}

GENERATOR_OPS: tuple[str, ...] = tuple(_BUILDERS)
# The ops that read a batch norm's statistics (without them the statistics leave the pool: Settings).
BN_OPS: frozenset[str] = frozenset({"batch_norm", "bn_kernel", "bn_shift"})
TASO_OPS: tuple[str, ...] = tuple(n for n in GENERATOR_OPS if n not in ("sigmoid", "tanh") and n not in BN_OPS)
# NOTE: the default goes beyond TASO with sigmoid and tanh next to relu and with inference
# batch norm and its folding into a convolution, as real models need (and as the shipped
# library was generated); `--ops taso` gives TASO's own set.
DEFAULT_OPS: tuple[str, ...] = GENERATOR_OPS
# Named op sets for --ops.
PRESETS: dict[str, tuple[str, ...]] = {"taso": TASO_OPS, "all": GENERATOR_OPS}


def parse_ops(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """The op set named by ``--ops``: comma-separated canonical names or presets, in canonical order.

    ``None`` gives :data:`DEFAULT_OPS` (TASO's set plus sigmoid, tanh and batch norm with its two
    folding ops). Presets (:data:`PRESETS`) expand in place: ``taso`` is TASO's set, ``all`` adds
    the others; ``taso,sigmoid`` works.

    Raises:
        TasoError: an unknown operator, or one the generator cannot enumerate.
    """
    if text is None:
        return DEFAULT_OPS
    names: list[str] = []
    for name in (n.strip() for n in (text.split(",") if isinstance(text, str) else text)):
        names.extend(PRESETS.get(name, (name,) if name else ()))
    if not names:
        raise TasoError("--ops: the operator list is empty")
    for name in names:
        if name not in registry.OPS:
            raise TasoError(f"--ops: unknown operator {name!r}; the generator enumerates {', '.join(GENERATOR_OPS)} (presets: {', '.join(PRESETS)})")
        if name not in _BUILDERS:
            why = "it has no exact (modular) semantics" if registry.get(name).exact_impl is None else "it has no enumeration policy"
            raise TasoError(f"--ops: the generator cannot enumerate {name!r} ({why}); it enumerates {', '.join(GENERATOR_OPS)}")
    return tuple(n for n in GENERATOR_OPS if n in names)


def build_variants(op_names: Sequence[str], pool: InputPool) -> tuple[Variant, ...]:
    """The variant table for an op set and pool; deterministic, so every worker builds the same one.

    Raises:
        TasoError: an operator in the set lacks exact semantics.
    """
    acts = [a for a in ACTIVATIONS if a == "none" or a in op_names]
    variants: list[Variant] = []
    for name in GENERATOR_OPS:
        if name not in op_names:
            continue
        op = registry.get(name)
        if op.exact_impl is None:
            raise TasoError(f"{name} has no exact (modular) semantics, so the generator cannot fingerprint it")
        for spec in _BUILDERS[name](pool, acts):
            variants.append(Variant(len(variants), spec.label, op, op.make_params(**spec.params), spec.args,
                                    "commutative" in op.groups, spec.policy, spec.splits, spec.ranks, spec.batched))
    return tuple(variants)
