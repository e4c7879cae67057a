"""The input pool: the small fixed set of tensors that enumerated graphs read.

TASO enumerates graphs over a handful of tensors per *shape class* (three 2x4 activations,
three 4x4 matrices, three 2x4x5x5 images, a few kernel shapes, a scalar). Several tensors per
class let a graph use two different matrices of the same shape; the class decides which
operators may combine them. The same pool, with the same random residues, is rebuilt in
every worker process from the seed, so enumeration is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from taso.ir import TensorType
from taso.ops.base import FINGERPRINT_PRIME

__all__ = ["ShapeClass", "InputPool", "DEFAULT_CLASSES", "ROLES", "BN_ROLES"]

# A tensor's role decides which operators may consume it (see ``opset``): activation
# functions, pools and convolution inputs need data; weights only flow into weights. The four
# statistics of an inference batch norm have a role each: they flow only into the batch norm
# and the two ops that fold it into a convolution, each into its own argument position.
BN_ROLES = ("bn_scale", "bn_bias", "bn_mean", "bn_var")
# A channel vector (C, 1, 1) only shifts or scales an image's channels (see ``opset``).
ROLES = ("data", "weight", "scalar", "chan", *BN_ROLES)

# Rule value names are s0, s1... (source) and t0, t1... (target); inputs must not clash.
RESERVED_PREFIXES = ("s", "t")


@dataclass(frozen=True)
class ShapeClass:
    """A family of interchangeable pool tensors.

    Attributes:
        name: the class name written into rules (``RuleInput.shape_class``).
        prefix: the stem of its tensors' names (``x`` gives x1, x2, x3).
        shape: the example shape every tensor of the class has.
        count: how many distinct tensors of the class the pool holds.
        role: 'data', 'weight' or 'scalar' (see ``ROLES``).
    """

    name: str
    prefix: str
    shape: tuple[int, ...]
    count: int
    role: str

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"shape class {self.name}: role must be one of {ROLES}")
        if self.count < 1:
            raise ValueError(f"shape class {self.name}: count must be positive")
        if not self.prefix.isalpha() or self.prefix in RESERVED_PREFIXES:
            raise ValueError(f"shape class {self.name}: prefix must be letters other than {RESERVED_PREFIXES} (rule value names)")

    def to_json(self) -> dict:
        return {"class": self.name, "prefix": self.prefix, "shape": list(self.shape), "count": self.count, "role": self.role}


# TASO's pool (batch 2, 4 channels, 5x5 images, 3x3 / 1x3 / 3x1 / depthwise kernels, a
# scalar), plus what exported graphs have that TASO's pool lacks: bias vectors (bias additions
# next to matmul and conv merges), 1x1 kernels (pointwise convolutions, enlarged to merge
# with 3x3 ones), channel vectors (a bias or scale on the channel axis of an image, as
# exporters write x + b.view(1, C, 1, 1)) and one inference batch norm's statistics (one of
# each suffices at depth 3: a rule never needs two batch norms with different statistics).
DEFAULT_CLASSES: tuple[ShapeClass, ...] = (
    ShapeClass("act", "x", (2, 4), 3, "data"),
    ShapeClass("mat", "w", (4, 4), 3, "weight"),
    ShapeClass("img", "i", (2, 4, 5, 5), 3, "data"),
    ShapeClass("kernel3x3", "k", (4, 4, 3, 3), 3, "weight"),
    ShapeClass("kernel1x3", "kh", (4, 4, 1, 3), 3, "weight"),
    ShapeClass("kernel3x1", "kv", (4, 4, 3, 1), 3, "weight"),
    ShapeClass("dwkernel", "kd", (4, 1, 3, 3), 1, "weight"),
    ShapeClass("scalar", "c", (), 1, "scalar"),
    ShapeClass("bias", "b", (4,), 2, "weight"),
    ShapeClass("kernel1x1", "ko", (4, 4, 1, 1), 3, "weight"),
    ShapeClass("chan", "cv", (4, 1, 1), 2, "chan"),
    ShapeClass("bn_scale", "ga", (4,), 1, "bn_scale"),
    ShapeClass("bn_bias", "be", (4,), 1, "bn_bias"),
    ShapeClass("bn_mean", "mu", (4,), 1, "bn_mean"),
    ShapeClass("bn_var", "va", (4,), 1, "bn_var"),
)


class InputPool:
    """The pool's tensors in a fixed order: class by class, ``count`` tensors each.

    Args:
        classes: the shape classes, in order.

    Attributes:
        classes: as given.
        names: one name per tensor (``x1, x2, x3, w1, ...``).
        types: the example type of each tensor.
        class_of: each tensor's index into ``classes``.
        rank_in_class: each tensor's position within its class (0 for x1).
        roles: each tensor's role.
    """

    def __init__(self, classes: Sequence[ShapeClass] = DEFAULT_CLASSES):
        self.classes = tuple(classes)
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names) or len({c.prefix for c in self.classes}) != len(names):
            raise ValueError("shape class names and prefixes must be unique")
        self.names: list[str] = []
        self.types: list[TensorType] = []
        self.class_of: list[int] = []
        self.rank_in_class: list[int] = []
        for ci, cls in enumerate(self.classes):
            for k in range(cls.count):
                self.names.append(f"{cls.prefix}{k + 1}")
                self.types.append(TensorType(cls.shape))
                self.class_of.append(ci)
                self.rank_in_class.append(k)
        self.roles = [self.classes[c].role for c in self.class_of]

    def __len__(self) -> int:
        return len(self.names)

    @cached_property
    def class_spans(self) -> tuple[tuple[int, int], ...]:
        """(first tensor index, count) of every class: the bit ranges of usage masks."""
        spans, start = [], 0
        for cls in self.classes:
            spans.append((start, cls.count))
            start += cls.count
        return tuple(spans)

    def class_named(self, name: str) -> ShapeClass:
        for cls in self.classes:
            if cls.name == name:
                return cls
        raise KeyError(name)

    def residues(self, seed: int) -> list[np.ndarray]:
        """Random residues modulo the fingerprint prime, one array per tensor (deterministic in ``seed``)."""
        rng = np.random.default_rng(seed)
        return [rng.integers(0, FINGERPRINT_PRIME, size=t.shape, dtype=np.int64) for t in self.types]

    def to_json(self) -> list[dict]:
        return [c.to_json() for c in self.classes]
