"""What the environment does to a run: an unwritable or damaged cache, a full disk, a read-only folder, no temporary
directory. Each is one line (a warning where the run goes on without it), never a traceback; the input is untouched
and nothing is half-written."""

from __future__ import annotations

import builtins
import errno
import json
import os
import tempfile

import pytest
from test_cli_robustness import matmul_relu_model

from taso.cli import main

# A small search on measured costs: the cost cache, the verdicts and the guard's timing all run.
MEASURED = ["--cost", "ort-cpu", "--budget", "3", "--time-limit", "3", "--quiet"]


@pytest.fixture
def model_file(tmp_path) -> str:
    import onnx

    path = tmp_path / "mr.onnx"
    onnx.save(matmul_relu_model(), str(path))
    return str(path)


def _lines(err: str, kind: str) -> list[str]:
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith(f"taso: {kind}")]


def _leftovers(folder) -> list[str]:
    return [name for name in os.listdir(folder) if ".taso-" in name or name.endswith(".tmp")]


def test_a_cache_directory_under_a_regular_file_is_one_warning_and_the_model_is_written(tmp_path, model_file, monkeypatch, capsys):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("TASO_CACHE_DIR", str(blocker / "cache"))
    before = open(model_file, "rb").read()
    out = tmp_path / "out.onnx"
    assert main(["optimize", model_file, "-o", str(out), *MEASURED]) == 0
    warnings = _lines(capsys.readouterr().err, "warning")
    assert any("cannot save the cost cache" in w for w in warnings), warnings
    assert out.exists() and open(model_file, "rb").read() == before


def test_a_damaged_cost_cache_is_one_warning_and_replaced(tmp_path, model_file, monkeypatch, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "costs.json").write_text('{"cpu": {"a": 1.0, "b": ')  # cut off mid-write by another program
    monkeypatch.setenv("TASO_CACHE_DIR", str(cache))
    assert main(["optimize", model_file, "-o", str(tmp_path / "out.onnx"), *MEASURED]) == 0
    warnings = _lines(capsys.readouterr().err, "warning")
    assert len([w for w in warnings if "is damaged" in w]) == 1, warnings
    assert json.loads((cache / "costs.json").read_text())["taso-cost-cache-format"] == 2


def test_a_cost_cache_of_another_version_is_one_warning_and_left_as_it_is(tmp_path, model_file, monkeypatch, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    foreign = json.dumps({"taso-cost-cache-format": 99, "tables": {"cpu": [1, 2, 3]}})
    (cache / "costs.json").write_text(foreign)
    monkeypatch.setenv("TASO_CACHE_DIR", str(cache))
    assert main(["optimize", model_file, "-o", str(tmp_path / "out.onnx"), *MEASURED]) == 0
    warnings = _lines(capsys.readouterr().err, "warning")
    assert len([w for w in warnings if "another version of taso" in w]) == 1, warnings
    assert (cache / "costs.json").read_text() == foreign


def _failing_writes(monkeypatch, error: int) -> None:
    """Every file taso writes through its atomic writer (a temporary file beside the target) fails with ``error``."""
    real_open = builtins.open

    def fake_open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and ".taso-" in os.fspath(file) and any(m in mode for m in "wax"):
            raise OSError(error, os.strerror(error), os.fspath(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EROFS], ids=["full-disk", "read-only-folder"])
def test_an_output_that_cannot_be_written_is_one_line_and_nothing_is_left(tmp_path, model_file, monkeypatch, capsys, error):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    before = open(model_file, "rb").read()
    _failing_writes(monkeypatch, error)
    code = main(["optimize", model_file, "-o", str(out_dir / "out.onnx"), "--cost", "analytic", "--budget", "3", "--quiet"])
    errors = _lines(capsys.readouterr().err, "error")
    assert code == 2 and len(errors) == 1 and os.strerror(error) in errors[0], errors
    assert os.listdir(out_dir) == [], "no output and no temporary file"
    assert open(model_file, "rb").read() == before


def test_a_full_disk_under_the_cost_cache_is_one_warning(tmp_path, model_file, monkeypatch, capsys):
    """The cache's save fails (the disk filled during the run); the model itself is written before the disk is full."""
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    from taso.cost import cache as cache_module

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(cache_module, "write_text_atomically", full)
    out = tmp_path / "out.onnx"
    assert main(["optimize", model_file, "-o", str(out), *MEASURED]) == 0
    warnings = _lines(capsys.readouterr().err, "warning")
    assert any("cannot save the cost cache" in w and "No space left" in w for w in warnings), warnings
    assert out.exists()


def test_no_usable_temporary_directory_is_one_line(tmp_path, model_file, monkeypatch, capsys):
    """Measuring a node profiles it into a temporary directory: with none to make, the run stops in one line."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "tmp"))
    before = open(model_file, "rb").read()
    code = main(["optimize", model_file, "-o", str(tmp_path / "out.onnx"), *MEASURED])
    errors = _lines(capsys.readouterr().err, "error")
    assert code == 2 and len(errors) == 1 and "TMPDIR" in errors[0], errors
    assert not (tmp_path / "out.onnx").exists() and open(model_file, "rb").read() == before
    assert _leftovers(tmp_path) == []
