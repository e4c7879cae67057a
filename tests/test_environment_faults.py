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


# ---- custom-domain operators: ONNX Runtime runs them only with the user's kernel library ---------------------

CUSTOM = """
    <ir_version: 8, opset_import: ["" : 17, "ai.onnx.contrib" : 1]>
    g (float[8, 8] x) => (float[8, 8] y) <float[8, 8] w = {{{weights}}}> {{
        inv = ai.onnx.contrib.Inverse (x)
        m = MatMul (inv, w)
        y = Relu (m)
    }}
"""


def _custom_op_model(tmp_path) -> str:
    import numpy as np
    import onnx
    from helpers import model_from_text

    weights = ", ".join(str(v) for v in np.random.default_rng(1).integers(-3, 4, 64) / 4)
    path = tmp_path / "custom.onnx"
    onnx.save(model_from_text(CUSTOM.format(weights=weights)), str(path))
    return str(path)


def test_a_custom_operator_without_its_library_is_written_unchanged_with_one_line(tmp_path, library, capsys):
    source, out = _custom_op_model(tmp_path), tmp_path / "out.onnx"
    assert main(["optimize", source, "-o", str(out), "--library", library, "--cost", "analytic", "--quiet"]) == 0
    notes = _lines(capsys.readouterr().err, "note")
    assert len(notes) == 1 and "--custom-ops" in notes[0] and "written unchanged" in notes[0], notes
    assert out.read_bytes() == open(source, "rb").read()


def test_a_custom_operator_with_its_library_is_optimized_and_checked_with_it(tmp_path, library, capsys):
    """The library registers in every session taso opens: the check of the rewritten MatMul + Relu runs the custom
    Inverse kernel, and the written file runs with it too."""
    import numpy as np
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    source, out = _custom_op_model(tmp_path), tmp_path / "out.onnx"
    code = main(["optimize", source, "-o", str(out), "--library", library, "--cost", "analytic", "--quiet", "--custom-ops", get_library_path()])
    captured = capsys.readouterr()
    assert code == 0 and "written unchanged" not in captured.err, captured.err
    assert "wrote" in captured.out and "the optimized model" in captured.out, captured.out
    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    x = (np.eye(8) * 2 + np.random.default_rng(0).standard_normal((8, 8)) * 0.1).astype(np.float32)
    want = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_path_that_is_no_custom_op_library_is_one_line(tmp_path, model_file, capsys):
    bogus = tmp_path / "not-a-library.so"
    bogus.write_bytes(b"\x7fELF but not really")
    code = main(["optimize", model_file, "-o", str(tmp_path / "out.onnx"), "--cost", "analytic", "--quiet", "--custom-ops", str(bogus)])
    errors = _lines(capsys.readouterr().err, "error")
    assert code == 2 and len(errors) == 1 and "custom-op library" in errors[0], errors
