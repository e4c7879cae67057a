"""What the engines' benchmark table (benchmarks/bench_eqsat.py) reports from its runs: peak memory over the file in
bytes over bytes, and the issue's cost bar counted over the zoo models apart."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_eqsat as bench  # noqa: E402 - after the path insert


def _row(model: str, file_bytes: int, bt_peak: float, eq_peak: float, bt60_best: float, eq_best: float) -> bench.Row:
    runs = {"backtracking": bench.Run(initial_ms=10.0, best_ms=10.0, peak_gb=bt_peak),
            "backtracking-60s": bench.Run(initial_ms=10.0, best_ms=bt60_best),
            "eqsat": bench.Run(initial_ms=10.0, best_ms=eq_best, peak_gb=eq_peak)}
    return bench.Row(model, 100, round(file_bytes / 2**20, 1), runs)


def test_peak_over_file_is_bytes_over_bytes():
    # 403,137,865 bytes (zoo BERT) and a peak of 1.16e9 bytes: 2.88x, not the 3.02x of GB over MiB.
    row = _row("zoo/bert", 403_137_865, 1.10, 1.16, 9.0, 9.0)
    assert abs(row.peak_ratio(row.runs["eqsat"]) - 1.16e9 / 403_137_865) < 0.005
    assert "2.88x" in bench.markdown([row])


def test_the_summary_counts_zoo_models_apart_and_names_the_largest_file():
    rows = [_row("zoo/bert", 400 * 2**20, 1.1, 1.2, 9.0, 9.0),
            _row("zoo/nasrnn", 16 * 2**20, 0.4, 0.4, 5.0, 6.0),  # eqsat costlier than backtracking after 60 s
            _row("torch-dynamo/lstm", 2**20, 0.2, 0.2, 5.0, 5.0)]
    text = bench.markdown(rows)
    assert "on 2 of 3 models (1 of 2 zoo models)" in text
    assert "largest file (zoo/bert, 400.0 MiB): backtracking 2.62x, eqsat 2.86x" in text
