"""`taso bench --peers`: the optimizers a user would otherwise run, timed beside taso in the same interleaved run."""

from __future__ import annotations

import json
import sys

import onnx
import pytest
import taso.models as zoo

from taso.bench import peers as peer_module
from taso.cli import main


@pytest.fixture
def small_model(tmp_path, monkeypatch):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "nasrnn.onnx"
    path.write_bytes(zoo.build("nasrnn", steps=2, hidden=16).SerializeToString())
    return path


def _bench(path, tmp_path, peers: str) -> dict:
    out = tmp_path / "out"
    assert main(["bench", str(path), "--cost", "analytic", "--budget", "3", "--rounds", "2", "--peers", peers, "--out", str(out)]) == 0
    return json.loads((out / "bench.json").read_text())["rows"][0] | {"md": (out / "bench.md").read_text()}


def test_a_peer_is_timed_beside_taso_and_written_up(small_model, tmp_path, monkeypatch):
    """A peer that returns the model as it is: timed in the same run, its column in bench.md."""
    monkeypatch.setitem(peer_module.PEERS, "onnxslim", ("nothing", lambda model: model))
    row = _bench(small_model, tmp_path, "onnxslim")
    assert set(row["peers"]) == {"onnxslim"} and row["peers"]["onnxslim"] > 0 and row["ms"]["onnxslim_ortall"] > 0
    assert "| onnxslim + ORT all |" in row["md"] and not row["peer_notes"]


def test_a_peer_not_installed_or_wrong_is_noted_and_not_timed(small_model, tmp_path, monkeypatch):
    def wrong(model):
        changed = onnx.ModelProto.FromString(model.SerializeToString())
        output = changed.graph.output[0].name
        node = next(n for n in changed.graph.node if output in n.output)
        node.op_type = "Sigmoid" if node.op_type != "Sigmoid" else "Tanh"
        del node.input[1:]
        return changed

    monkeypatch.setitem(sys.modules, "onnxsim", None)  # import onnxsim fails, as where it is not installed
    monkeypatch.setitem(peer_module.PEERS, "onnxscript", ("nothing", wrong))
    row = _bench(small_model, tmp_path, "onnxsim,onnxscript")
    assert not row["peers"]
    assert "not installed" in row["peer_notes"]["onnxsim"] and "differs from the input" in row["peer_notes"]["onnxscript"]
    assert "Peers not timed" in row["md"]


@pytest.mark.parametrize("args, message", [(["--peers", "tvm"], "unknown peer(s) tvm"),
                                           (["--peers", "onnxsim", "--runtime", "torch"], "--peers times on ONNX Runtime's CPU")])
def test_bad_peer_settings_are_one_line_and_exit_2(small_model, tmp_path, capsys, args, message):
    assert main(["bench", str(small_model), "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
