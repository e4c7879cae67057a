"""Per-stage seconds and peak memory (taso.pipeline.stages): what `taso optimize` reports beside its search."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from taso.pipeline.stages import StageClock


def test_each_stage_gets_its_own_seconds_and_peak_memory():
    clock = StageClock()
    with clock.stage("small"):
        time.sleep(0.01)
    with clock.stage("large"):
        # Not the small stage's peak: the heap a test before this one left is given back between stages.
        before = _resident_mb() * 2**20 if os.path.exists("/proc/self/status") else 0
        block = np.ones(200_000_000 // 8)  # 200 MB touched
        block[::512] += 1
        del block
    with clock.stage("small again"):
        pass
    small, large, after = clock.totals()
    assert small.seconds >= 0.01 and large.peak_bytes >= before + 150_000_000
    if clock.per_stage_peaks:  # the kernel reset the mark: a later stage does not inherit the large peak
        assert after.peak_bytes < large.peak_bytes - 150_000_000
    assert "large" in clock.describe() and clock.to_json()["stages"][1]["name"] == "large"


def test_a_stage_entered_twice_is_reported_once_with_its_total():
    clock = StageClock()
    for _ in range(2):
        with clock.stage("check"):
            time.sleep(0.005)
    (check,) = clock.totals()
    assert check.name == "check" and check.seconds >= 0.01


def test_a_stage_that_raises_is_still_recorded():
    clock = StageClock()
    try:
        with clock.stage("load"):
            raise ValueError("bad file")
    except ValueError:
        pass
    assert [s.name for s in clock.stages] == ["load"]


def test_taso_optimize_reports_every_stage_with_seconds_and_peak_memory(tmp_path, capsys, monkeypatch):
    """The report's stages cover the run: load, rules, the input's check, clean-up, search, export, check,
    timing and write, each with its seconds and peak memory, on the terminal and in --report."""
    import json

    import onnx
    import taso.models as zoo

    from taso.cli import main

    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    src, out, report = tmp_path / "nasrnn.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(zoo.build("nasrnn"), str(src))
    assert main(["optimize", str(src), "-o", str(out), "--budget", "3", "--report", str(report), "--quiet"]) == 0
    stages = json.loads(report.read_text())["stages"]
    assert {s["name"] for s in stages} >= {"load", "rules", "clean-up", "search", "export", "check", "timing", "write"}
    assert all(s["seconds"] >= 0 for s in stages)
    if sys.platform.startswith("linux"):  # VmHWM: every stage has its own peak, and the process holds more than 10 MB
        assert all(s["peak_bytes"] is not None and s["peak_bytes"] > 10_000_000 for s in stages), stages
    assert "  stages   load " in capsys.readouterr().out


def _resident_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_memory_freed_in_a_stage_goes_back_to_the_system_after_it():
    """glibc keeps the heap a large freed allocation taught it to use (ONNX Runtime's closed session of a 400 MB model:
    0.45 GB still resident), and the next stage's sessions came on top of it."""
    import numpy as np
    import pytest

    from taso.pipeline.stages import _malloc_trim

    if _malloc_trim() is None:
        pytest.skip("not glibc on Linux")
    clock = StageClock()
    with clock.stage("check"):
        big = np.ones(16 << 20, np.uint8)  # freed, it raises glibc's threshold for mapping allocations apart
        del big
        parts, pins = [], []
        for _ in range(100):  # so these 200 MB come from the heap, each part held in place by a small block after it
            parts.append(np.ones(2 << 20, np.uint8))
            pins.append(np.ones(4096, np.uint8))
        holding = _resident_mb()
        del parts
    assert _resident_mb() < holding - 150
    del pins
