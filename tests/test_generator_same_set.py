"""The enumerator's speed-ups change nothing it finds: the same graphs, the same candidates, the same rules.

``tests/data/generator_baseline.json`` was written by the enumerator *before* the speed-ups
of issue 27 (``python tests/test_generator_same_set.py --record`` at that revision). Each test
recomputes one of its entries with the code as it is now and compares:

* the rule ids of ``taso generate --max-ops 2`` over TASO's operator set, and its stage counts;
* the rule ids at depth 3 over two small operator sets (a matmul one and a convolution one);
* a digest of every graph visited at depth 3 over TASO's operator set under a sample of
  first operators: each graph's key, operators and outputs, in visiting order; and the same
  digest over only the graphs whose inputs form prefixes of their classes
  (``depth3_taso_sample_prefix_only``, computed with the enumerator at that revision:
  ``visit_digest(..., prefix_only=True, enumerator_class=<its Enumerator>)``). Issue 27 stopped
  enumerating the other graphs (renamings, which its last operator let through), so today's
  enumerator must visit exactly those, in that order.

Re-record only when the enumeration is meant to change, and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from taso.generator import STAGES, Settings, ShapeClass, generate, parse_ops
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


def reads_prefixes(enumerator, ops: tuple) -> bool:
    """Whether a graph's pool tensors form a prefix of each class (x1; x1 and x2; ...), as the enumerator means to record."""
    used = {t for _, _, args in ops for t in args if t < len(enumerator.pool)}
    return all(sorted(used & set(range(start, start + count))) == list(range(start, start + len(used & set(range(start, start + count)))))
               for start, count in enumerator.pool.class_spans)


def visit_digest(settings: Settings, every: int, prefix_only: bool = False, enumerator_class: type = Enumerator) -> tuple[int, str]:
    """How many graphs are visited under every ``every``-th root, and a digest of each one's key, operators and outputs, in order.

    Args:
        settings: what to enumerate.
        every: the sample of roots.
        prefix_only: digest only the graphs whose inputs form prefixes of their classes.
        enumerator_class: the enumerator (the baseline was recorded with the one before issue 27).
    """
    enumerator = enumerator_class(settings)
    digest = hashlib.sha256()
    count = 0

    def visit(key, ops, last, outputs):
        nonlocal count
        graph = tuple(ops) + ((last,) if last is not None else ())
        if prefix_only and not reads_prefixes(enumerator, graph):
            return
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
    """The same rules and the same counts from the float check on; fewer graphs and pairs (renamings are no longer enumerated).

    Common subgraphs are now dropped before renamings (generator/candidates.py): the forms
    left after both are the forms the recording kept after both, and none was trivial.
    """
    ids, counts = rule_ids(Settings(max_ops=2))
    recorded = baseline["depth2_taso_counts"]
    assert ids == baseline["depth2_taso_rule_ids"] and len(ids) > 100
    from_float = list(STAGES)[list(STAGES).index("float_checked"):]
    assert {k: counts[k] for k in from_float} == {k: recorded[k] for k in from_float}
    assert counts["renaming"] == counts["nontrivial"] == recorded["common_subgraph"]
    assert counts["graphs"] < recorded["graphs"] and counts["candidates"] <= recorded["candidates"]


@pytest.mark.parametrize("name", sorted(SMALL_SETS))
def test_depth_3_over_small_operator_sets_gives_the_recorded_rules(baseline, name):
    ids, _ = rule_ids(SMALL_SETS[name])
    assert ids == baseline["depth3_small_rule_ids"][name] and ids


def test_depth_3_over_tasos_operators_visits_the_recorded_graphs_in_order(baseline):
    """The graphs the enumerator before issue 27 visited whose inputs form prefixes, and no others (it also visited renamings)."""
    sample = baseline["depth3_taso_sample_prefix_only"]
    graphs, digest = visit_digest(Settings(max_ops=3), sample["every"])
    assert graphs == sample["graphs"] and graphs > 50_000
    assert digest == sample["digest"]
    assert graphs < baseline["depth3_taso_sample"]["graphs"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/test_generator_same_set.py --record   (rewrites tests/data/generator_baseline.json)")
    BASELINE.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {BASELINE}")
