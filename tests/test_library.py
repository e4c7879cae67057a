"""The shipped verified library: every rule is proved, well formed, and applies where its pattern is."""

from __future__ import annotations

import numpy as np
import pytest

from taso.optimize import DEFAULT_LIBRARY, load_rules
from taso.rewrite import CompiledRule, rewrites
from taso.rules import Library

LIBRARY = Library.load(DEFAULT_LIBRARY)
# Every rule in the direction it was proved, plus a sample of the reversed ones the optimizer adds.
RULES = list(LIBRARY.rules) + [r for r in load_rules() if "reversed_from" in r.extra][::25]


def test_the_shipped_library_holds_only_proved_rules():
    assert len(LIBRARY) > 0
    assert all(rule.status == "proved" and rule.proof for rule in LIBRARY)
    assert LIBRARY.header.get("generator") and LIBRARY.header.get("verifier"), "the header must say how the library was made"


def _applies_and_keeps_the_values(rule) -> None:
    rule.validate()
    source = rule.side_graph("source")
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(t.shape).astype(t.dtype) for name, t in source.inputs.items()}
    before = source.run(feeds)
    results = list(rewrites(source, CompiledRule(rule)))
    assert results, "the rule does not fire on its own source pattern"
    for graph in results:
        after = graph.run(feeds)
        for name, want in before.items():
            np.testing.assert_allclose(after[name], want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


# Rules are checked 50 to a test: one test per rule spent as long in pytest as in the check.
BATCHES = [RULES[i:i + 50] for i in range(0, len(RULES), 50)]


@pytest.mark.parametrize("rules", BATCHES, ids=lambda batch: f"{batch[0].name or batch[0].id}+{len(batch) - 1}")
def test_each_rule_applies_to_its_pattern_and_keeps_the_values(rules):
    failures = []
    for rule in rules:
        try:
            _applies_and_keeps_the_values(rule)
        except Exception as error:  # noqa: BLE001 - every failing rule of the batch is reported, not only the first
            failures.append(f"{rule.name or rule.id}: {type(error).__name__}: {error}")
    assert not failures, f"{len(failures)} of {len(rules)} rules fail:\n" + "\n".join(failures[:10])
