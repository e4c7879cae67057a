"""The enumerator's speed-ups change nothing it finds: the same graphs, the same candidates, the same rules.

``tests/data/generator_baseline.json`` was written by the enumerator *before* the speed-ups
of issue 27 (``python tests/test_generator_same_set.py --record`` at that revision). Each test
recomputes one of its entries with the code as it is now and compares:

* the rule ids of ``taso generate --max-ops 2`` over TASO's operator set, and its stage counts;
* the rule ids at depth 3 over two small operator sets (a matmul one and a convolution one);
* a digest of every graph visited at depth 3 over TASO's operator set under a sample of
  first operators: each graph's key, operators and outputs, in visiting order.

Re-record only when the enumeration is meant to change, and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from taso.generator import Settings, ShapeClass, generate, parse_ops
from taso.generator.enumerate import Enumerator

BASELINE = Path(__file__).parent / "data" / "generator_baseline.json"

MATMUL_POOL = (ShapeClass("act", "x", (2, 4), 2, "data"), ShapeClass("mat", "w", (4, 4), 2, "weight"))
CONV_POOL = (
    ShapeClass("img", "i", (2, 4, 5, 5), 1, "data"),
    ShapeClass("kernel3x3", "k", (4, 4, 3, 3), 2, "weight"),
    ShapeClass("kernel1x3", "kh", (4, 4, 1, 3), 1, "weight"),
)
SMALL_SETS = {
    "matmul": Settings(max_ops=3, ops=parse_ops("matmul,add,concat,split,transpose"), classes=MATMUL_POOL),
    "conv": Settings(max_ops=3, ops=parse_ops("conv2d,add,concat,split,enlarge,relu"), classes=CONV_POOL),
}
SAMPLE_EVERY = 100  # the depth-3 digest walks roots 0, 100, 200, ... of TASO's operator set


def rule_ids(settings: Settings) -> tuple[list[str], dict[str, int]]:
    """The sorted rule ids and the stage counts of one generator run."""
    result = generate(settings)
    return sorted(rule.id for rule in result.library), dict(result.counts)


def visit_digest(settings: Settings, every: int) -> tuple[int, str]:
    """How many graphs are visited under every ``every``-th root, and a digest of each one's key, operators and outputs, in order."""
    enumerator = Enumerator(settings)
    digest = hashlib.sha256()
    count = 0

    def visit(key, ops, last, outputs):
        nonlocal count
        count += 1
        digest.update(repr((key, tuple(ops), last, tuple(outputs))).encode())

    for root in enumerator.roots()[::every]:
        enumerator.walk(root, visit)
    return count, digest.hexdigest()


def record() -> dict:
    """Every entry of the baseline, computed by the code as it is now."""
    ids, counts = rule_ids(Settings(max_ops=2))
    graphs, digest = visit_digest(Settings(max_ops=3), SAMPLE_EVERY)
    return {
        "depth2_taso_rule_ids": ids,
        "depth2_taso_counts": counts,
        "depth3_small_rule_ids": {name: rule_ids(settings)[0] for name, settings in SMALL_SETS.items()},
        "depth3_taso_sample": {"every": SAMPLE_EVERY, "graphs": graphs, "digest": digest},
    }


@pytest.fixture(scope="module")
def baseline() -> dict:
    return json.loads(BASELINE.read_text())


def test_depth_2_over_tasos_operators_gives_the_recorded_rules_and_counts(baseline):
    ids, counts = rule_ids(Settings(max_ops=2))
    assert counts == baseline["depth2_taso_counts"]
    assert ids == baseline["depth2_taso_rule_ids"] and len(ids) > 100


@pytest.mark.parametrize("name", sorted(SMALL_SETS))
def test_depth_3_over_small_operator_sets_gives_the_recorded_rules(baseline, name):
    ids, _ = rule_ids(SMALL_SETS[name])
    assert ids == baseline["depth3_small_rule_ids"][name] and ids


def test_depth_3_over_tasos_operators_visits_the_recorded_graphs_in_order(baseline):
    sample = baseline["depth3_taso_sample"]
    graphs, digest = visit_digest(Settings(max_ops=3), sample["every"])
    assert graphs == sample["graphs"] and graphs > 100_000
    assert digest == sample["digest"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/test_generator_same_set.py --record   (rewrites tests/data/generator_baseline.json)")
    BASELINE.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {BASELINE}")
