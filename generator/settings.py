"""Generator settings: everything that decides the output, and nothing that does not.

The number of worker processes is deliberately not a setting: the same settings give the
same rule file byte for byte, whatever ``-j``.
"""

from __future__ import annotations

from dataclasses import dataclass

from taso.errors import TasoError

from .opset import BN_OPS, DEFAULT_OPS
from .pool import BN_ROLES, DEFAULT_CLASSES, ShapeClass

__all__ = ["Settings"]


@dataclass(frozen=True)
class Settings:
    """What to enumerate.

    Attributes:
        max_ops: the largest number of operators in an enumerated graph (TASO: 3).
        ops: canonical names of the enumerated operators (see :func:`~taso.generator.opset.parse_ops`).
        seed: seeds the random residues of the pool and the float re-check's inputs.
        classes: the input pool's shape classes.
    """

    max_ops: int = 3
    ops: tuple[str, ...] = DEFAULT_OPS
    seed: int = 0
    classes: tuple[ShapeClass, ...] = DEFAULT_CLASSES

    def __post_init__(self):
        if not 1 <= self.max_ops <= 6:
            raise TasoError(f"--max-ops must be between 1 and 6, got {self.max_ops}")
        if not BN_OPS & set(self.ops):
            # NOTE: frozen dataclass; the pool recorded in to_json is the one enumerated.
            object.__setattr__(self, "classes", tuple(c for c in self.classes if c.role not in BN_ROLES))

    def to_json(self) -> dict:
        return {"max_ops": self.max_ops, "ops": list(self.ops), "seed": self.seed, "pool": [c.to_json() for c in self.classes]}
