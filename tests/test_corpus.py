"""The real-world corpus (models/corpus.py): every model round-trips equal and `taso optimize` takes it or refuses in one line.

Per model: ``taso.load_onnx`` -> ``taso.export_onnx`` -> ONNX Runtime equality with the original
file on two seeded random input sets (integers drawn from a valid range), and ``taso optimize``
through the CLI with the analytic cost model: exit 0, or exit 2 with a one-line reason.

The default run (CI) covers a fast subset that needs neither torch nor a download: the
model-zoo files inside the onnx wheel (IR 3, initializers listed as inputs). The full corpus
(PyTorch exports with both exporters, models shipped inside PyPI wheels) is one command::

    python -m taso.models.corpus build && python -m pytest -m corpus

(``TASO_CORPUS=1 python -m pytest tests/test_corpus.py`` does the same; ``TASO_CORPUS_DIR`` moves the cache.)
A known defect is an ``xfail(strict=True)`` naming it, so that its fix flips the test.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from helpers import run_ort
from taso.models import corpus

import taso
from taso.errors import TasoError
from taso.measure.inputs import check_sizes, random_input_sets, random_inputs
from taso.measure.outputs import compare_models

ROOT = Path(__file__).resolve().parent.parent
FULL_COMMAND = "python -m taso.models.corpus build && python -m pytest -m corpus"
OPTIMIZE_TIME_LIMIT = {"fast": "3", "full": "10"}
# The fast subset's optimize run: small zoo models (VGG-19 and DenseNet-121 cost 15-30 s each on this machine).
FAST_OPTIMIZE = {"onnx-zoo/squeezenet", "onnx-zoo/inception_v1", "onnx-zoo/bvlc_alexnet", "onnx-zoo/shufflenet"}



# Models taso refuses with their symbolic dims (exit 2, one line): name -> a phrase of the reason. They load with
# --static (their round trip is checked that way). Two Silero VAD exports choose a branch by an If on a size
# (squeeze when the batch is 1): with a symbolic batch their output rank depends on the size.
REFUSED: dict[str, str] = {
    "pypi-wheel/silero_vad_16k_op15": "optimize a fixed-size copy with --static",
    "pypi-wheel/silero_vad_half": "optimize a fixed-size copy with --static",
}
# Models that declare a dim symbolic but run at one size of it only: `taso optimize` says so in one line (exit 2) and
# optimizes them with --static. Silero VAD's 16 kHz network takes 512 samples; PP-OCR's recognizer, 48-pixel lines.
PINNED: dict[str, str] = {
    "pypi-wheel/silero_vad": "does not run at",
    "pypi-wheel/rapidocr_rec_ppocrv4": "does not run at",
}

# Known defects (another part of taso owns the fix): (test, model name) -> the defect, as seen.
KNOWN_DEFECTS: dict[tuple[str, str], str] = {}


def _full_corpus_requested(config: pytest.Config) -> bool:
    expression = config.getoption("markexpr") or ""
    return ("corpus" in expression and "not corpus" not in expression) or os.environ.get("TASO_CORPUS") == "1"


def _torch_missing() -> bool:
    return importlib.util.find_spec("torch") is None


def _params(test: str, entries) -> list:
    params = []
    for entry in entries:
        marks = [pytest.mark.corpus]
        if (test, entry.name) in KNOWN_DEFECTS:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_DEFECTS[test, entry.name]))
        params.append(pytest.param(entry, id=entry.name, marks=marks))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The fast subset always; the whole corpus only when asked for (-m corpus or TASO_CORPUS=1)."""
    if "entry" not in metafunc.fixturenames:
        return
    full = _full_corpus_requested(metafunc.config)
    entries = corpus.all_entries() if full else corpus.zoo_entries()
    if metafunc.function.__name__ == "test_optimize_cli" and not full:
        entries = [e for e in entries if e.name in FAST_OPTIMIZE]
    metafunc.parametrize("entry", _params(metafunc.function.__name__, entries))


def _require_file(entry) -> Path:
    path = entry.path()
    if path.exists():
        return path
    if entry.needs_torch and _torch_missing():
        pytest.skip(f"{entry.name}: torch is not installed, so the model cannot be exported (pip install torch==2.13.0 onnxscript transformers)")
    pytest.skip(f"{entry.name}: not in the corpus cache {path.parent}; build it with: python -m taso.models.corpus build")


def test_roundtrip_matches_on_onnx_runtime(entry):
    """Import then export, unchanged: ONNX Runtime gives the same outputs as the original file."""
    path = _require_file(entry)
    model = onnx.load(str(path))
    if entry.name in REFUSED:
        with pytest.raises(TasoError, match=REFUSED[entry.name]):
            taso.load_onnx(model, entry.input_shapes or None)
        graph = taso.load_onnx(model, entry.input_shapes or None, static=True)
        pinned = corpus.with_static_inputs(model, entry.input_shapes)
        assert compare_models(model, taso.export_onnx(graph), [random_inputs(pinned, seed) for seed in (0, 1)]).ok
        return
    graph = taso.load_onnx(model, entry.input_shapes or None)
    exported = taso.export_onnx(graph)
    # Inputs drawn at the pinned shapes, run through the file as given (as `taso optimize` checks it): pinning
    # Silero VAD's input to 512 samples makes ONNX Runtime refuse the file, whose 8 kHz branch cannot run there.
    pinned = corpus.with_static_inputs(model, entry.input_shapes)
    input_sets = [random_inputs(pinned, seed) for seed in (0, 1)]
    result = compare_models(model, exported, input_sets)
    assert result.ok, f"{entry.name}: {result.describe()}"
    # Symbolic dims stay symbolic: equal at every check size at which the original runs (three or more per symbol).
    assert [vi.name for vi in exported.graph.input][: len(graph.inputs)] == list(graph.inputs)
    sized = [s for s in random_input_sets(graph, seeds=(), sizes=check_sizes(graph)) if _runs(model, s)]
    if graph.meta.sizes and entry.name not in PINNED:
        assert len(sized) >= 3, f"{entry.name}: the original runs at {len(sized)} of the check sizes"
    if sized:
        result = compare_models(model, exported, sized)
        assert result.ok, f"{entry.name} at the check sizes: {result.describe()}"


def _runs(model: onnx.ModelProto, feeds) -> bool:
    try:
        run_ort(model, feeds)
    except Exception:  # noqa: BLE001 - ONNX Runtime's own exception types
        return False
    return True


def _optimize_command(entry, path: Path, out: Path, time_limit: str) -> list[str]:
    return [sys.executable, "-m", "taso", "optimize", str(path), "-o", str(out), "--cost", "analytic", "--time-limit", time_limit, "--quiet",
            *corpus.input_shape_args(entry)]


def test_optimize_cli(entry, tmp_path, request):
    """`taso optimize` exits 0 with a model, or 2 with one line for a model it cannot take; never a traceback."""
    path = _require_file(entry)
    out = tmp_path / "out.onnx"
    limit = OPTIMIZE_TIME_LIMIT["full" if _full_corpus_requested(request.config) else "fast"]
    proc = subprocess.run(_optimize_command(entry, path, out, limit), capture_output=True, text=True, timeout=900)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    refused = REFUSED.get(entry.name) or PINNED.get(entry.name)
    if refused:
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (proc.returncode, proc.stderr[-2000:])
        assert refused in proc.stderr
        proc = subprocess.run(_optimize_command(entry, path, out, limit) + ["--static"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr.strip()[-2000:]}"
    assert onnx.load(str(out)).graph.output, "the written model has no outputs"


@pytest.mark.corpus
def test_full_corpus_is_one_command(request):
    """Says how to run the whole corpus when the default run only covers the fast subset."""
    if not _full_corpus_requested(request.config):
        pytest.skip(f"the full real-world corpus runs with: {FULL_COMMAND}")
    missing = [e.name for e in corpus.all_entries() if not e.path().exists()]
    assert len(corpus.all_entries()) >= 40
    assert len({e.source for e in corpus.all_entries()}) >= 4
    if missing:
        pytest.skip(f"{len(missing)} corpus models not built ({', '.join(missing[:5])}...): python -m taso.models.corpus build")
