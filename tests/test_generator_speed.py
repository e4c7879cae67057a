"""The pieces of the enumerator's fast path (issue 27) against the slow definitions they replace.

The whole-enumeration checks (same graphs, same rules) are in ``test_generator_same_set.py``;
these pin each piece on its own, so a failure says which one is wrong.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import numpy as np
import pytest
from taso.generator import Settings
from taso.generator.enumerate import Enumerator
from taso.generator.fingerprint import ExactEvaluator
from taso.generator.parallel import _packer
from taso.generator.steps import OrderCode, prefix_masks


@pytest.fixture(scope="module")
def enumerator() -> Enumerator:
    return Enumerator(Settings(max_ops=3))


def test_order_codes_order_operators_as_their_tuples_do(enumerator):
    """The canonical-order filter compares codes where the enumerator compared (variant, sizes, args) tuples."""
    rng = random.Random(0)
    code = OrderCode(len(enumerator.variants), 44, 26, enumerator._max_arity)
    ops = []
    for v in enumerator.variants:
        for _ in range(20):
            sizes = (rng.randrange(1, 25), rng.randrange(1, 25)) if v.splits else ()
            ops.append((v.index, sizes, tuple(rng.randrange(44) for _ in range(v.arity))))
    for a, b in itertools.combinations(rng.sample(ops, 400), 2):
        assert (a < b) == (code(a) < code(b)) and (a == b) == (code(a) == code(b)), (a, b)


def test_order_codes_refuse_what_does_not_fit_in_63_bits():
    with pytest.raises(ValueError, match="63 bits"):
        OrderCode(100, 10_000, 1_000, 5)


def test_a_mask_reads_prefixes_exactly_when_it_leaves_no_gap(enumerator):
    n = len(enumerator.pool)
    rng = np.random.default_rng(0)
    masks = np.concatenate([rng.integers(0, 1 << n, 3000), [0, (1 << n) - 1, 1, 0b11, 0b101]]).astype(np.int64)
    fast = prefix_masks(masks, enumerator._class_starts)
    assert fast.tolist() == [enumerator._gaps(int(m)) == 0 for m in masks] and fast.any() and not fast.all()


def test_the_step_table_lists_every_step_in_the_order_steps_does(enumerator):
    root = enumerator.roots()[5]
    enumerator.push_root(root)
    try:
        table = enumerator._table()
        assert table.ops == [(v.index, sizes, args) for v, sizes, args, *_ in enumerator.steps(prefilter=False)]
        # the prefiltered steps are a subsequence of the table's
        table_rows = iter(table.ops)
        assert all(op in table_rows for op in ((v.index, s, a) for v, s, a, *_ in enumerator.steps()))
    finally:
        enumerator.pop()


def _bindings(enumerator, variant):
    """Every tuple of pool shapes the variant binds with some batch position, with its params and those positions."""
    shapes = sorted({t.shape for t in enumerator.pool.types})
    for combo in itertools.product(shapes, repeat=variant.arity):
        bound = variant.bind(combo)
        if bound is not None:
            positions = variant.batch_positions(tuple(len(s) for s in combo), len(bound[1][0]))
            if positions:
                yield combo, bound[0], positions


def _batched_agrees(enumerator, variant, rng) -> bool:
    """Whether evaluating 3 steps of ``variant`` at once gives their one-by-one fingerprints, on every shape it binds.

    The steps get fresh residues at the batched positions and share one array elsewhere.
    """
    bindings = list(_bindings(enumerator, variant))
    assert bindings, variant.label
    for shapes, params, positions in bindings:
        shared = [rng.integers(0, 1 << 20, size=s, dtype=np.int64) for s in shapes]
        items = [[rng.integers(0, 1 << 20, size=s, dtype=np.int64) if k in positions else shared[k] for k, s in enumerate(shapes)]
                 for _ in range(3)]
        # ExactEvaluator(0) caches nothing, so the fingerprints it is given (its cache key) do not matter
        one_by_one = [tuple(f for f, _ in ExactEvaluator(0).apply(variant, (), params, [0] * len(item), item)) for item in items]
        try:
            if ExactEvaluator(0).apply_batched(variant, params, items, positions) != one_by_one:
                return False
        except ValueError:
            return False
    return True


def test_every_batch_axis_a_variant_declares_gives_the_fingerprints_of_one_by_one_evaluation(enumerator):
    rng = np.random.default_rng(1)
    declared = [v for v in enumerator.variants if v.batched]
    assert {v.op.name for v in declared} >= {"conv2d", "matmul", "relu", "avg_pool2d", "max_pool2d", "batch_norm", "add", "concat"}
    for v in declared:
        assert _batched_agrees(enumerator, v, rng), v.label


@pytest.mark.parametrize("label", ["transpose", "concat[axis=0]"])
def test_a_wrong_batch_axis_declaration_is_caught(enumerator, label):
    """Transposing a stack of matrices is not the stack of their transposes, nor is concatenating along the stacking axis."""
    variant = next(v for v in enumerator.variants if v.label == label)
    assert not variant.batched
    assert not _batched_agrees(enumerator, replace(variant, batched=tuple(range(variant.arity))), np.random.default_rng(2))


def test_packing_a_parents_leaves_at_once_writes_the_rows_of_packing_them_one_by_one(enumerator):
    packer = _packer(enumerator)
    batches = []
    for root in enumerator.roots()[::200]:
        enumerator.walk(root, lambda *graph: None, batches.append)
    assert len(batches) > 10
    for batch in batches:
        one_by_one = b"".join(packer.pack(batch.ops, last, outputs) for last, outputs in zip(batch.last(), batch.outputs))
        assert packer.pack_leaves(batch) == one_by_one


def test_order_codes_of_a_table_are_the_codes_of_its_operators(enumerator):
    enumerator.push_root(enumerator.roots()[3])
    try:
        table = enumerator._table()
    finally:
        enumerator.pop()
    assert len(table) > 100 and table.codes.tolist() == [enumerator._order_code(op) for op in table.ops]
    assert table.arity.tolist() == [len(op[2]) for op in table.ops]
    n_pool = len(enumerator.pool)
    assert table.pool_mask.tolist() == [sum(1 << t for t in op[2] if t < n_pool) for op in table.ops]
    assert table.output_mask.tolist() == [sum(1 << (t - n_pool) for t in op[2] if t >= n_pool) for op in table.ops]
