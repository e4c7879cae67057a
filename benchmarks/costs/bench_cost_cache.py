"""What the cost cache's spot-check costs a search: the same warm-cache search with the check on and off, as a ratio.

    python benchmarks/costs/bench_cost_cache.py [--models squeezenet,nasrnn] [--repeat 5]

For each model, one search (shipped library, ort-cpu costs, default settings but no time
limit) fills a fresh cache; then each round runs the search twice from that same cache file, once with the
default spot-check (``SpotCheckPolicy()``) and once without (``SPOT_CHECK_OFF``), in
alternating order, each with a cache loaded anew (as a new process would) and never saved,
so every round starts from the same entries. It prints, per model, the medians of the search's
wall time and of its pricing time (``SearchReport.seconds_costing``: the cost model, where the
check runs) with the check on over off, how many measurements the check made, and the graphs
expanded (a search that stops at its time limit pays for a check in expansions, not time).
The ratios are the result; the absolute seconds depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from taso.models import build

from taso.cost import SPOT_CHECK_OFF, CostCache, SpotCheckPolicy, make_cost_model
from taso.onnx import load_onnx
from taso.pipeline.library import load_rules
from taso.search import SearchConfig, search


def _search(graph, rules, path: str, policy: SpotCheckPolicy) -> tuple[float, float, int, int]:
    """(search seconds, pricing seconds, the check's measurements, graphs expanded) of one search on a cache loaded from ``path``."""
    cache = CostCache(path, spot_check=policy)
    model = make_cost_model("ort-cpu", cache=cache)
    started = time.perf_counter()
    _, report = search(graph, rules, model, SearchConfig())
    seconds = time.perf_counter() - started
    return seconds, report.seconds_costing, cache.spot_check(model.fingerprint).measurements, report.expanded


def _medians(runs: list[tuple[float, float, int, int]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def _bench(name: str, rules, repeat: int, directory: str) -> str:
    graph = load_onnx(build(name))
    path = os.path.join(directory, f"{name}.json")
    filling = make_cost_model("ort-cpu", cache=CostCache(path, spot_check=SPOT_CHECK_OFF))
    search(graph, rules, filling, SearchConfig(time_limit=600.0))  # every entry the timed searches take, measured
    filling.close()
    runs: dict[str, list[tuple[float, float, int, int]]] = {"on": [], "off": []}
    for round_ in range(repeat):
        order = ("on", "off") if round_ % 2 == 0 else ("off", "on")
        for label in order:
            runs[label].append(_search(graph, rules, path, SpotCheckPolicy() if label == "on" else SPOT_CHECK_OFF))
    on_s, on_c = _medians(runs["on"])
    off_s, off_c = _medians(runs["off"])
    checked = statistics.mean(r[2] for r in runs["on"])
    expanded = [statistics.median(r[3] for r in runs[label]) for label in ("off", "on")]
    return (f"| {name} | {len(filling.cache.table(filling.fingerprint))} | {on_s / off_s:.3f}x | {on_c / off_c:.2f}x | {checked:.1f} | "
            f"{expanded[0]:.0f} / {expanded[1]:.0f} | {off_s:.2f} / {on_s:.2f} | {off_c:.3f} / {on_c:.3f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="squeezenet,nasrnn", help="zoo models, comma-separated (default squeezenet,nasrnn)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of (on, off) per model (default 5)")
    args = parser.parse_args(argv)
    rules = load_rules()
    print("| model | entries | search time on/off | pricing time on/off | check measurements | expanded off / on | search s off / on "
          "| pricing s off / on |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        for name in (n for n in args.models.split(",") if n):
            print(_bench(name, rules, args.repeat, directory), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
