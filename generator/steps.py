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

    def sizes_code(self, sizes: tuple) -> int:
        """The digit of split sizes (0: none)."""
        return 1 + sizes[0] * self._size + sizes[1] if sizes else 0

    def of_arrays(self, variants: np.ndarray, sizes_codes: np.ndarray, args: np.ndarray) -> np.ndarray:
        """The codes of many operators at once: their variant indices, sizes digits, and arguments padded with -1."""
        args_code = np.zeros(len(args), dtype=np.int64)
        for column in args.T:  # Horner's rule over each row's arguments; the padding adds nothing
            args_code = np.where(column >= 0, args_code * self._tensors + column, args_code)
        return (variants * self._sizes_radix + sizes_codes) * self._args_radix + args_code

    def __call__(self, op: tuple) -> int:
        vi, sizes, args = op
        sizes_code = self.sizes_code(sizes)
        args_code = 0
        for t in args:
            args_code = args_code * self._tensors + t
        return (vi * self._sizes_radix + sizes_code) * self._args_radix + args_code


@dataclass(frozen=True, eq=False)
class StepTable:
    """Every candidate step on one kind of graph, in enumeration order, with the arrays that filter it.

    Rows come in blocks, one per *combo* (a variant with its split sizes, params and output
    shapes for some argument shapes), so a table is built from one argument array per combo
    and a row's step tuple is made only when asked for (:meth:`step`). Compared by identity: a
    table is built once per kind of graph and kept.

    Attributes:
        combos: (variant, sizes, params, output shapes) of each combo.
        combo: each row's combo.
        args: the arguments per row, padded with -1 to the largest arity.
        codes: the order code of each row's operator (:class:`OrderCode`).
        last_dependency: the last operator each row reads an output of (-1: the pool only).
        arity: the number of arguments per row.
        pool_mask: the pool tensors each row reads, as bits.
        output_mask: the operator outputs each row reads, as bits (bit ``t - pool size``).
        class_starts: the bits of the first tensor of every pool class.
    """

    combos: list[tuple]
    combo: np.ndarray
    args: np.ndarray
    codes: np.ndarray
    last_dependency: np.ndarray
    arity: np.ndarray
    pool_mask: np.ndarray
    output_mask: np.ndarray
    class_starts: int
    _by_used: dict = field(default_factory=dict, repr=False)
    _steps: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, blocks: list[tuple[tuple, list[tuple[int, ...]]]], producer: list[int], pool_size: int, max_arity: int,
              code: OrderCode, class_starts: int) -> StepTable:
        """The table of these blocks of steps (listed by the enumerator, in its order).

        Args:
            blocks: per combo, (variant, sizes, params, output shapes) and its argument tuples.
            producer: each tensor's producing operator (-1 for the pool).
            pool_size: how many tensors the pool holds.
            max_arity: the most arguments of a variant.
            code: the order code of operators.
            class_starts: the bits of the first tensor of every pool class (see :func:`prefix_masks`).
        """
        combos = [combo for combo, _ in blocks]
        combo = np.repeat(np.arange(len(blocks), dtype=np.int64), [len(block) for _, block in blocks])
        width = max(1, max_arity)
        padding = [(-1,) * (width - n) for n in range(width + 1)]
        args = np.array([t + padding[len(t)] for _, block in blocks for t in block], dtype=np.int64).reshape(len(combo), width)
        present = args >= 0
        from_pool = present & (args < pool_size)
        bits = np.left_shift(1, np.where(from_pool, args, np.where(present, args - pool_size, 0)))
        variants = np.array([v.index for v, *_ in combos], dtype=np.int64)
        sizes_codes = np.array([code.sizes_code(sizes) for _, sizes, *_ in combos], dtype=np.int64)
        return cls(
            combos=combos,
            combo=combo,
            args=args,
            codes=code.of_arrays(variants[combo], sizes_codes[combo], args),
            last_dependency=np.array(producer + [-1], dtype=np.int64)[args].max(axis=1),
            arity=present.sum(axis=1),
            pool_mask=np.bitwise_or.reduce(np.where(from_pool, bits, 0), axis=1),
            output_mask=np.bitwise_or.reduce(np.where(present & ~from_pool, bits, 0), axis=1),
            class_starts=class_starts,
        )

    def step(self, row: int) -> Step:
        """Row ``row`` as (variant, sizes, argument tensors, params, output shapes), memoised."""
        step = self._steps.get(row)
        if step is None:
            v, sizes, params, out_shapes = self.combos[self._combo_list[row]]
            step = self._steps[row] = (v, sizes, tuple(self._args_list[row][: v.arity]), params, out_shapes)
        return step

    def op(self, row: int) -> tuple:
        """Row ``row`` as an operator tuple ``(variant index, sizes, args)``."""
        v, sizes, args, _, _ = self.step(row)
        return (v.index, sizes, args)

    @property
    def ops(self) -> list[tuple]:
        """Every row as an operator tuple."""
        return [self.op(row) for row in range(len(self))]

    def slots(self, width: int) -> np.ndarray:
        """Every row's operator as ``width`` ints: variant index, the two split sizes (-1 without), arguments, -1 padding."""
        sizes = np.array([sizes or (-1, -1) for _, sizes, *_ in self.combos], dtype=np.int64).reshape(len(self.combos), 2)
        slots = np.full((len(self), width), -1, dtype=np.int64)
        slots[:, 0] = np.array([v.index for v, *_ in self.combos], dtype=np.int64)[self.combo]
        slots[:, 1:3] = sizes[self.combo]
        slots[:, 3 : 3 + self.args.shape[1]] = self.args
        return slots

    @cached_property
    def _combo_list(self) -> list[int]:
        return self.combo.tolist()

    @cached_property
    def _args_list(self) -> list[list[int]]:
        return self.args.tolist()

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
        return len(self.combo)

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

