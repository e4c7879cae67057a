"""The rule format: JSON round trips, validation, text form, and clear errors for bad files."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from rule_examples import matmul_assoc_rule
from rule_examples import shared_input_merge_rule as qkv_merge_rule

from taso.errors import TasoError
from taso.rules import VERSION, Library, Rule, RuleFormatError, RuleNode, format_rule


@pytest.mark.parametrize("make", [matmul_assoc_rule, qkv_merge_rule])
def test_rule_json_roundtrip_is_identity(make):
    rule = make()
    rule.validate()
    again = Rule.from_json(json.loads(json.dumps(rule.to_json())))
    assert again == rule and again.id == rule.id
    lib = Library([rule], {"generator": {"max_ops": 3}})
    assert Library.from_json(json.loads(lib.dumps())).rules == [rule]


def test_rule_sides_compute_equal_values_on_example_shapes():
    rng = np.random.default_rng(0)
    rule = qkv_merge_rule()
    feeds = {i.name: rng.standard_normal(i.type.shape).astype(np.float32) for i in rule.inputs}
    src = rule.side_graph("source").run(feeds)
    tgt = rule.side_graph("target").run(feeds)
    for (s, t) in rule.outputs:
        np.testing.assert_allclose(src[s], tgt[t], rtol=1e-5)


def test_shape_expressions_resolve_against_other_shapes():
    rule = qkv_merge_rule()
    shapes = {"x": (3, 8), "w1": (8, 5), "w2": (8, 7)}
    target = rule.side_graph("target", shapes)
    split = [n for n in target.nodes if n.op.name == "split"][0]
    assert split.params["sizes"] == (5, 7)
    constrained = dataclasses.replace(rule, constraints=({"eq": [{"dim": ["w1", 0]}, {"dim": ["w2", 0]}]},))
    assert constrained.constraints_hold(shapes) and not constrained.constraints_hold({**shapes, "w2": (6, 7)})


def test_text_form_reads_like_math():
    assert format_rule(matmul_assoc_rule()) == "matmul(matmul(x, y), z) ⇒ matmul(x, matmul(y, z))"
    assert format_rule(qkv_merge_rule()).startswith("[matmul(x, w1), matmul(x, w2)] ⇒ [split(matmul(x, concat(w1, w2, axis=1)), axis=1, sizes=(4,4))[0]")


def test_validate_rejects_target_reading_an_unbound_name():
    rule = matmul_assoc_rule()
    bad = Rule(rule.inputs, rule.source, (RuleNode("matmul", {"activation": "none"}, ("x", "q"), ("t1",)),), rule.outputs)
    with pytest.raises(TasoError, match="q"):
        bad.validate()


def test_validate_rejects_outputs_of_different_types():
    rule = qkv_merge_rule()
    swapped = Rule(rule.inputs, rule.source, rule.target, (("a", "c"), ("b", "w")), rule.params, rule.constraints)
    with pytest.raises(RuleFormatError, match="output"):
        swapped.validate()


def test_loading_a_newer_version_says_upgrade(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"format": "taso-rules", "version": VERSION + 1, "rules": []}))
    with pytest.raises(RuleFormatError, match="newer.*upgrade"):
        Library.load(path)


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ('{"format": "other"}', "not a taso rule file"),
    ('{"format": "taso-rules", "version": 1, "rules": [{"inputs": []}]}', "malformed rule"),
])
def test_loading_a_malformed_file_gives_a_clear_error(tmp_path, text, message):
    path = tmp_path / "rules.json"
    path.write_text(text)
    with pytest.raises(TasoError, match=message):
        Library.load(path)


def test_a_hand_edited_rule_is_detected(tmp_path):
    data = Library([matmul_assoc_rule()]).to_json()
    data["rules"][0]["target"][1]["inputs"] = ["t0", "x"]
    with pytest.raises(RuleFormatError, match="id does not match"):
        Library.from_json(data)
