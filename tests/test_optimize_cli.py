"""`taso optimize`: writes only checked models, refuses bad input with exit 2, and a wrong rule with exit 3."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from rule_examples import all_rules

import taso
from taso.cli import main
from taso.ir import TensorType
from taso.rules import Library, Rule, RuleInput, RuleNode


def _rnn_model(tmp_path) -> str:
    """Four steps of x_t @ W with one shared weight (the batching rewrite pays here)."""
    import taso.models

    path = tmp_path / "rnn.onnx"
    onnx.save(taso.models.build("nasrnn", steps=2, hidden=64), str(path))
    return str(path)


def _wrong_library(tmp_path) -> str:
    """A rule claiming tanh(x) = x, marked proved by hand: only the output check stands between it and a wrong model."""
    x = RuleInput("x", "act", TensorType((2, 4)))
    wrong = Rule((x,), (RuleNode("tanh", {}, ("x",), ("a",)), RuleNode("relu", {}, ("a",), ("b",))),
                 (RuleNode("relu", {}, ("x",), ("c",)),), (("b", "c"),), name="planted-wrong", status="proved")
    path = tmp_path / "wrong.json"
    Library([wrong]).save(path)
    return str(path)


def _tanh_relu_model(tmp_path) -> str:
    from helpers import model_from_text

    model = model_from_text("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4] x) => (float[2, 4] y) { t = Tanh (x)  y = Relu (t) }
    """)
    path = tmp_path / "tr.onnx"
    onnx.save(model, str(path))
    return str(path)


def test_optimize_writes_a_checked_faster_model_and_a_report(tmp_path, library, capsys):
    src, out, report = _rnn_model(tmp_path), tmp_path / "out.onnx", tmp_path / "report.json"
    code = main(["optimize", src, "-o", str(out), "--library", library, "--cost", "analytic", "--budget", "20", "--report", str(report), "--quiet"])
    assert code == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "predicted speedup" in text and "rules applied" in text and "s costing)" in text
    data = json.loads(report.read_text())
    assert data["nodes_before"] > 0 and data["stop_reason"] in ("budget", "saturated", "time limit")
    assert len(data["expansions"]) == data["expanded"] > 0 and data["seconds_costing"] > 0
    assert sum(e["tried"] for e in data["expansions"]) == data["generated"]
    assert all(e["accepted"] <= e["tried"] for e in data["expansions"])
    optimized = taso.load_onnx(str(out))
    assert [i for i in optimized.inputs] == [i for i in taso.load_onnx(src).inputs]


def test_a_planted_wrong_rule_is_caught_and_nothing_is_written(tmp_path, capsys):
    out = tmp_path / "out.onnx"
    code = main(["optimize", _tanh_relu_model(tmp_path), "-o", str(out), "--library", _wrong_library(tmp_path), "--cost", "analytic", "--quiet"])
    assert code == 3
    assert "does not match" in capsys.readouterr().err
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.suffix == ".onnx"] == ["tr.onnx"]


def test_unproved_rules_are_never_used(tmp_path, capsys):
    path = tmp_path / "candidates.json"
    Library(all_rules()).save(path)  # status "candidate"
    assert main(["optimize", _tanh_relu_model(tmp_path), "-o", str(tmp_path / "o.onnx"), "--library", str(path), "--quiet"]) == 2
    assert "no proved rule" in capsys.readouterr().err


def test_refuses_to_overwrite_its_input(tmp_path, library, capsys):
    src = _tanh_relu_model(tmp_path)
    before = open(src, "rb").read()
    assert main(["optimize", src, "-o", src, "--library", library, "--quiet"]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err and open(src, "rb").read() == before


@pytest.mark.parametrize("case", ["missing-input", "missing-dir", "output-is-a-directory", "bad-inputs-file", "mismatched-inputs"])
def test_cli_errors_are_one_line_and_exit_2(tmp_path, library, capsys, case):
    src = _tanh_relu_model(tmp_path)
    out = tmp_path / "out.onnx"
    extra = []
    if case == "missing-input":
        src = str(tmp_path / "nope.onnx")
    elif case == "missing-dir":
        out = tmp_path / "no" / "out.onnx"
    elif case == "output-is-a-directory":
        out = tmp_path
    elif case == "bad-inputs-file":
        bad = tmp_path / "in.npz"
        bad.write_text("garbage")
        extra = ["--inputs", str(bad)]
    else:
        np.savez(tmp_path / "in.npz", x=np.zeros((3, 4), np.float32))
        extra = ["--inputs", str(tmp_path / "in.npz")]
    code = main(["optimize", src, "-o", str(out), "--library", library, "--cost", "analytic", "--quiet", *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err


def test_user_inputs_are_checked_too(tmp_path, library, capsys):
    src = _rnn_model(tmp_path)  # rewritten: a model with nothing to rewrite is written unchanged, with nothing to check
    np.savez(tmp_path / "in.npz", **{name: np.ones(t.shape, np.float32) for name, t in taso.load_onnx(src).inputs.items()})
    code = main(["optimize", src, "-o", str(tmp_path / "o.onnx"), "--cost", "analytic", "--budget", "5",  # the shipped library
                 "--inputs", str(tmp_path / "in.npz")])
    assert code == 0
    assert "3 input set(s)" in capsys.readouterr().out


def test_a_search_cut_short_by_the_time_limit_says_so_and_how_to_give_it_more(tmp_path, library, capsys):
    src, out = _rnn_model(tmp_path), tmp_path / "out.onnx"
    assert main(["optimize", src, "-o", str(out), "--library", library, "--cost", "analytic", "--budget", "20"]) == 0
    assert "may find more" not in capsys.readouterr().out  # stopped by its budget: nothing to suggest
    assert main(["optimize", src, "-o", str(out), "--library", library, "--cost", "analytic", "--time-limit", "0.001"]) == 0
    assert "stopped: time limit (a longer --time-limit than 0.001 s may find more)" in capsys.readouterr().out


class _Terminal:
    """A stderr that says it is a terminal, keeping what is written to it."""

    def __init__(self):
        self.text = []

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.text.append(s)
        return len(s)

    def flush(self) -> None:
        pass


def test_a_terminal_shows_each_stage_and_the_search_and_a_pipe_shows_none(tmp_path, library, capsys, monkeypatch):
    import sys

    src = _rnn_model(tmp_path)
    args = ["optimize", src, "-o", str(tmp_path / "out.onnx"), "--library", library, "--cost", "analytic", "--budget", "5"]
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(args) == 0
    shown = "".join(terminal.text)
    for stage in ("load", "rules", "check", "clean-up", "search"):
        assert f"taso: {stage} (" in shown, stage
    assert "search:" in shown and "graph" in shown, "the search's own bar"
    monkeypatch.undo()
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "taso: check (" not in err and "search:" not in err, "nothing drawn when stderr is not a terminal"
    assert main([*args, "--quiet"]) == 0 and capsys.readouterr().err == ""
