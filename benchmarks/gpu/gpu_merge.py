"""Merges the per-model results of one or more device runs (benchmarks/gpu/gpu_device_run.sh) into one GPU report.

    python benchmarks/gpu/gpu_merge.py RUN_DIR... --out docs/bench-gpu

Each RUN_DIR holds the run's results.tar.gz (as the device tool returns it) and run.log. A model measured in several
runs takes its row from the last RUN_DIR given; every row records the run it came from. Writes bench.json (the device,
driver and library versions, the rows), bench.md (beside TASO's published V100 figures) and bench.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile

from taso.bench import BenchRow, write_results


def _rows_of(run_dir: str) -> tuple[str, list[dict]]:
    hardware, rows = "", []
    with tarfile.open(os.path.join(run_dir, "results.tar.gz")) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.name.endswith("bench.json"):
                result = json.load(tar.extractfile(member))
                hardware = result["hardware"]
                rows += [{**row, "run": os.path.basename(os.path.normpath(run_dir))} for row in result["rows"]]
    return hardware, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    by_model: dict[str, dict] = {}
    hardware = set()
    for run_dir in args.runs:
        name, rows = _rows_of(run_dir)
        hardware.add(name)
        by_model.update({row["model"]: row for row in rows})
    if len(hardware) != 1:
        print(f"the runs were on different hardware: {sorted(hardware)}", file=sys.stderr)
        return 2
    (device,) = hardware
    rows = list(by_model.values())
    fields = set(BenchRow.__dataclass_fields__)
    bench_rows = [BenchRow(**{k: v for k, v in row.items() if k in fields}) for row in rows]
    os.makedirs(args.out, exist_ok=True)
    print(write_results(bench_rows, device, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
