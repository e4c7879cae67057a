"""Merges the series of one or more device runs (benchmarks/gpu/gpu_device_run.sh) into one GPU report.

    python benchmarks/gpu/gpu_merge.py RESULTS... --out docs/bench-gpu

Each RESULTS is a run's folder of series (``MODEL/s1/bench.json`` from `taso bench`, ``MODEL/s2/retime.json`` from
benchmarks/gpu/retime.py, as the device script leaves them), or a folder holding that run's results.tar.gz (as the device tool returns it). A model's row is its
first series; the speedups of all its series go into the row (``series``), and whether they lie within 3% of each
other (``series_agree``). A model measured in several runs takes its rows from the last RESULTS given. Writes
bench.json (the device, driver, runtime and timing method, the rows), bench.md (beside TASO's and Tensat's
published speedups) and bench.png.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from pathlib import Path

from taso.bench import BenchRow, write_results

AGREE = 0.03  # two series of one model within 3% of each other


def _series_dirs(results: Path, scratch: Path) -> Path:
    """The folder holding MODEL/sK/bench.json: ``results`` itself, or its results.tar.gz unpacked into ``scratch``."""
    packed = results / "results.tar.gz"
    if packed.exists():
        target = scratch / results.name
        with tarfile.open(packed) as tar:
            tar.extractall(target, filter="data")
        return target / "res"
    return results


def _runs_of(folder: Path) -> dict[str, list[dict]]:
    """Each model's series in order: the bench's bench.json (s1), then the retimed pair's retime.json (s2)."""
    found: dict[str, list[dict]] = {}
    for bench in sorted(folder.glob("*/s1/bench.json")):
        model = bench.parent.parent
        found[model.name] = [json.loads(bench.read_text())] + [json.loads(p.read_text()) for p in sorted(model.glob("s[2-9]/retime.json"))]
    return found


def merged_rows(runs: dict[str, list[dict]]) -> tuple[dict, list[dict]]:
    """The facts of the runtime and one row per model: its first series, with every series' speedup. Where taso kept
    the input, the second series would time one file against itself: it is 1.0 by construction."""
    facts, rows = {}, []
    for _, series in sorted(runs.items()):
        first = series[0]
        facts = facts or {k: v for k, v in first.items() if k != "rows"}
        for row in first["rows"]:
            speedups = [row["speedup_vs_ortall"], *(s["speedup"] for s in series[1:])]
            if row["kept"] == "input" and len(speedups) == 1:
                speedups.append(1.0)
            agree = len(speedups) > 1 and max(speedups) / min(speedups) <= 1 + AGREE
            rows.append({**row, "series": speedups, "series_agree": agree})
    return facts, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", type=Path, metavar="RESULTS")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for results in args.results:
            runs.update(_runs_of(_series_dirs(results, Path(scratch))))
    if not runs:
        print(f"no series found in {', '.join(map(str, args.results))}", file=sys.stderr)
        return 2
    facts, rows = merged_rows(runs)
    fingerprints = {series[0].get("fingerprint", series[0]["hardware"]) for series in runs.values()}
    if len(fingerprints) != 1:
        print(f"the runs were on different devices: {sorted(fingerprints)}", file=sys.stderr)
        return 2
    fields = set(BenchRow.__dataclass_fields__)
    bench_rows = [BenchRow(**{k: v for k, v in row.items() if k in fields}) for row in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    hardware = facts.pop("hardware")
    facts["series_agree"] = {row["model"]: row["series_agree"] for row in rows}
    print(write_results(bench_rows, hardware, str(args.out), facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
