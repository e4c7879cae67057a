"""The shipped verified library: every rule is proved, well formed, and applies where its pattern is."""

from __future__ import annotations

import numpy as np
import pytest

from taso.pipeline.library import DEFAULT_LIBRARY, load_rules
from taso.rules import Library
from taso.search.rewrite import CompiledRule, rewrites

LIBRARY = Library.load(DEFAULT_LIBRARY)
# Every rule in the direction it was proved, plus a sample of the reversed ones the optimizer adds.
RULES = list(LIBRARY.rules) + [r for r in load_rules() if "reversed_from" in r.extra][::25]


# The shipped libraries, pinned: a change to either file must come through its builder (python -m
# taso.verifier.build_library / build_groups, which print the new digest), and CI proves every rule of both again
# (python -m taso.verifier.reprove). A library edited by hand fails here, or in Library.load's digest check.
SHIPPED_DIGESTS = {
    "library.jsonl.gz": "blake2b-128:cb8994b5ea0214146f7a14cede084ef4",
    "groups.jsonl.gz": "blake2b-128:72e3b3f0e867c27009199e36eea42819",
}


@pytest.mark.parametrize("name", sorted(SHIPPED_DIGESTS))
def test_the_shipped_library_is_the_one_its_builder_wrote(name):
    import os

    import taso

    library = Library.load(os.path.join(os.path.dirname(taso.__file__), "data", name))  # checks the digest against the rules
    assert library.header["digest"] == library.digest() == SHIPPED_DIGESTS[name], (
        f"{name} changed: if its builder wrote it, pin its digest {library.digest()} in SHIPPED_DIGESTS")
    assert library.header["build"].startswith("python -m taso.verifier.build_")


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
