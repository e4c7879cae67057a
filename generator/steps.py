"""Step tables: every operator application on a graph's tensors, as arrays, filtered per graph in a few NumPy passes.

Profiling the enumeration (issue 27) showed that evaluating operators was a small part of its
time: most went to building candidate steps one by one in Python and then refusing them (at
depth 3 over TASO's operator set, 81 % of the steps tried at the last operator left a gap in
an input class, 3 % broke the canonical order). But which applications exist depends only on
the *kinds* of tensors a graph holds: the pool's (always the same) and its operators'
outputs' shapes and roles, and its concat boundaries (for splits). Thousands of graphs share
those, so the steps are listed once per kind of graph, in the enumeration's order, as a
:class:`StepTable`, and each graph only filters the table with array operations:

* **canonical order**: a step must be larger (in the order of operator tuples) than every
  operator after its last dependency; with each operator coded as an integer that keeps
  that order (:class:`OrderCode`), this is one comparison against a suffix maximum;
* **class order**: the pool tensors read, as a bit mask, must leave no more gaps in their
  classes than the remaining operators can fill; at the last operator, none, which is the
  bit test :func:`prefix_masks`;
* **unread constants** (last operator only): the step must read every constant output no
  operator reads yet.

What survives is exactly what the per-step checks (``Enumerator.admissible``) accept, in the
same order; only then are the survivors evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

__all__ = ["OrderCode", "StepTable", "prefix_masks"]

# One candidate step: (variant, split sizes, argument tensor indices, params, output shapes).
Step = tuple


class OrderCode:
    """Maps an operator ``(variant index, sizes, args)`` to an int64 that orders operators as their tuples do.

    Tuples are compared variant first; operators of one variant have sizes of one length and
    the same number of arguments, so a mixed-radix number over (variant, sizes, args) keeps
    the order exactly.

    Args:
        variants: how many variants there are.
        tensors: one more than the largest tensor index an argument can have.
        max_size: one more than the largest split size.
        max_arity: the most arguments of an operator.

    Raises:
        ValueError: when the codes would not fit in 63 bits.
    """

    def __init__(self, variants: int, tensors: int, max_size: int, max_arity: int):
        self._tensors, self._size = tensors, max_size
        self._args_radix = tensors**max_arity
        self._sizes_radix = max_size * max_size + 1
        if variants * self._sizes_radix * self._args_radix >= 2**62:
            raise ValueError("operator order codes do not fit in 63 bits: too many tensors or too large split sizes")

    def of_table(self, variants: list[int], sizes: list[tuple], args: np.ndarray) -> np.ndarray:
        """The codes of many operators at once: their variant indices, sizes, and arguments padded with -1."""
        sizes_code = np.array([1 + s[0] * self._size + s[1] if s else 0 for s in sizes], dtype=np.int64)
        args_code = np.zeros(len(args), dtype=np.int64)
        for column in args.T:  # Horner's rule over each row's arguments; the padding adds nothing
            args_code = np.where(column >= 0, args_code * self._tensors + column, args_code)
        return (np.array(variants, dtype=np.int64) * self._sizes_radix + sizes_code) * self._args_radix + args_code

    def __call__(self, op: tuple) -> int:
        vi, sizes, args = op
        sizes_code = 1 + sizes[0] * self._size + sizes[1] if sizes else 0
        args_code = 0
        for t in args:
            args_code = args_code * self._tensors + t
        return (vi * self._sizes_radix + sizes_code) * self._args_radix + args_code


@dataclass(frozen=True, eq=False)
class StepTable:
    """Every candidate step on one kind of graph, in enumeration order, with the arrays that filter it.

    Compared by identity: a table is built once per kind of graph and kept.

    Attributes:
        steps: (variant, sizes, args, params, output shapes) per row.
        ops: the operator tuple ``(variant index, sizes, args)`` per row.
        codes: the order code of each row's operator (:class:`OrderCode`).
        last_dependency: the last operator each row reads an output of (-1: the pool only).
        arity: the number of arguments per row.
        pool_mask: the pool tensors each row reads, as bits.
        output_mask: the operator outputs each row reads, as bits (bit ``t - pool size``).
        class_starts: the bits of the first tensor of every pool class.
    """

    steps: list[Step]
    ops: list[tuple]
    codes: np.ndarray
    last_dependency: np.ndarray
    arity: np.ndarray
    pool_mask: np.ndarray
    output_mask: np.ndarray
    class_starts: int
    _by_used: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, steps: list[Step], producer: list[int], pool_size: int, max_arity: int, code: OrderCode,
              class_starts: int) -> StepTable:
        """The table of these steps (listed by the enumerator, in its order).

        Args:
            steps: the steps.
            producer: each tensor's producing operator (-1 for the pool).
            pool_size: how many tensors the pool holds.
            max_arity: the most arguments of a variant.
            code: the order code of operators.
            class_starts: the bits of the first tensor of every pool class (see :func:`prefix_masks`).
        """
        ops = [(v.index, sizes, args) for v, sizes, args, _, _ in steps]
        width = max(1, max_arity)
        args = np.array([op[2] + (-1,) * (width - len(op[2])) for op in ops], dtype=np.int64).reshape(len(ops), width)
        present = args >= 0
        from_pool = present & (args < pool_size)
        bits = np.left_shift(1, np.where(from_pool, args, np.where(present, args - pool_size, 0)))
        return cls(
            steps=steps,
            ops=ops,
            codes=code.of_table([op[0] for op in ops], [op[1] for op in ops], args),
            last_dependency=np.array(producer + [-1], dtype=np.int64)[args].max(axis=1),
            arity=present.sum(axis=1),
            pool_mask=np.bitwise_or.reduce(np.where(from_pool, bits, 0), axis=1),
            output_mask=np.bitwise_or.reduce(np.where(present & ~from_pool, bits, 0), axis=1),
            class_starts=class_starts,
        )

    @cached_property
    def last_dependencies(self) -> list[int]:
        """``last_dependency`` as Python ints, for loops over rows."""
        return self.last_dependency.tolist()

    @cached_property
    def output_masks(self) -> list[int]:
        """``output_mask`` as Python ints, for loops over rows."""
        return self.output_mask.tolist()

    def last_candidates(self, used: int) -> np.ndarray:
        """Which rows could be a graph's last operator on a graph that reads the pool tensors ``used``: they read some
        tensor, and the pool tensors read then form prefixes of their classes. Memoised: a table meets few masks."""
        keep = self._by_used.get(used)
        if keep is None:
            keep = self._by_used[used] = (self.arity > 0) & prefix_masks(self.pool_mask | used, self.class_starts)
        return keep

    def __len__(self) -> int:
        return len(self.steps)

    def in_order(self, suffix_max: np.ndarray) -> np.ndarray:
        """Which rows keep the canonical operator order on a graph.

        Args:
            suffix_max: ``suffix_max[j]``: the largest order code among the graph's operators j,
                j+1, ... (-1 past the last one).
        """
        return self.codes > suffix_max[self.last_dependency + 1]


def prefix_masks(masks: np.ndarray, class_starts: int) -> np.ndarray:
    """Which usage masks read, in every class, a prefix of its tensors (x1; x1 and x2; ...), i.e. leave no gap.

    A mask has a gap exactly when some tensor it reads follows, in its class, one it does not
    read: a set bit that is not a class's first whose lower neighbour is clear.

    Args:
        masks: usage masks (bit t: pool tensor t is read).
        class_starts: the bits of the first tensor of every class.
    """
    return ((masks & ~class_starts) >> 1) & ~masks == 0

