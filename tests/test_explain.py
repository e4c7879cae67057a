"""`taso optimize --explain RULE`: for each place a rule could start, whether it applies and why not."""

from __future__ import annotations

import onnx
import pytest
from test_soundness import _cast_model

from taso import load_onnx
from taso.cli import main
from taso.errors import TasoError
from taso.pipeline.library import load_rules
from taso.search.explain import explain_rule, find_rules


@pytest.fixture(scope="module")
def rules():
    return load_rules()


def test_a_rule_outside_its_proved_ranks_says_so(rules):
    rule = next(r for r in find_rules(rules, "r-bc3f90ab56") if r.id == "r-bc3f90ab56")  # mul(b1, matmul(w1, w2)), b1 a vector
    lines = explain_rule(load_onnx(_cast_model()), rule)
    mul_lines = [line for line in lines if line.lstrip().startswith("mul ")]
    assert mul_lines and all("no: input b1 binds" in line and "the proof assumed rank 1" in line for line in mul_lines)


def test_a_rule_that_applies_says_yes(rules):
    rule = next(r for r in find_rules(rules, "r-d29bdc89c1") if r.id == "r-d29bdc89c1")  # its reverse comes too
    graph = rule.side_graph("source")
    assert any("yes: the rule applies here" in line for line in explain_rule(graph, rule))


def test_rules_are_found_by_text_and_unknown_ones_are_an_error(rules):
    assert all("matmul" in str(r) for r in find_rules(rules, "matmul(x1, mul(w1, b1))"))
    with pytest.raises(TasoError, match="no rule"):
        find_rules(rules, "no-such-rule")


def test_cli_explains_without_writing_and_optimize_still_needs_an_output(tmp_path, capsys):
    path = str(tmp_path / "cast.onnx")
    onnx.save(_cast_model(), path)
    assert main(["optimize", path, "--explain", "r-bc3f90ab56"]) == 0
    assert "the proof assumed rank 1" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == [tmp_path / "cast.onnx"]
    assert main(["optimize", path]) == 2
    assert "-o/--output" in capsys.readouterr().err
