"""Scale-out of `taso generate`: the enumeration on 1 and 2 local Ray workers vs the local process pool.

Measured side by side in one run (back ends interleaved over ``--repeat`` rounds, medians
compared, so load from other processes hits all of them alike):

* throughput (graphs/s) of the first pass (every graph's key), the part that scales out,
  with the local pool at -j 1 and -j 2 and on a local Ray cluster of 1 and 2 CPUs (Ray's
  start is timed apart; the plan, the tasks and the checkpoints are in the pass's time);
* the per-shard work distribution of the Ray plan (graphs and seconds per shard), and of
  one shard per root, which is what splitting large roots buys;
* a projection of depth-4 time over the default operator set on 16, 64 and 256 cores,
  with its assumptions printed beside it;
* the stages after enumeration (canonical forms, common subgraphs, float check, instance
  facts, generalisation: ``taso generate``'s whole run, the seconds ``Result.seconds`` gives
  each stage) in one process, on the local pool of 2, and as Ray tasks on 1 and 2 CPUs,
  with the rule files compared byte for byte (``--skip-stages`` leaves this out).

A calibration runs first: the same pure-Python loop in 1 and 2 processes. Its ratio is the
speed-up the machine offers right now; the back ends' speed-ups are read against it.

Run: python benchmarks/generator/bench_cluster.py [--ops LIST] [--max-ops 3] [--repeat 1] [--skip-stages]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from common.machine import available_speedup  # noqa: E402
from taso.generator import Settings, generate, parse_ops
from taso.generator.cluster import RayBackend, StageReport
from taso.generator.parallel import Workers

DEFAULT_OPS = "matmul,add,mul,scalar_mul,transpose,relu,sigmoid,tanh"
# Graphs enumerated over the default operator set (docs/library.md, "Generating and proving substitutions"):
# depth 2 and depth 3, every depth included.
DEFAULT_SET_GRAPHS = {2: 29_844, 3: 13_557_758}


def _local_pass(settings: Settings, jobs: int) -> tuple[int, float]:
    """(graphs, seconds) of the enumeration pass on the local process pool (every graph spilled to disk)."""
    with Workers(settings, jobs) as workers:
        start = time.perf_counter()
        graphs = sum(workers.spill()[1])
        return graphs, time.perf_counter() - start


def _ray_pass(settings: Settings, cpus: int, shards: int) -> tuple[int, float, float, StageReport]:
    """(graphs, seconds, Ray's start-up seconds, the shard report) of the one-pass enumeration on a local Ray cluster."""
    import ray

    start = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    startup = time.perf_counter() - start
    try:
        with tempfile.TemporaryDirectory(prefix="taso-bench-cluster-") as run_dir:
            backend = RayBackend(run_dir=run_dir, shards=shards)
            start = time.perf_counter()
            with backend.workers(settings) as workers:
                graphs = len(workers.count_and_key().keys)
            return graphs, time.perf_counter() - start, startup, backend.reports[0]
    finally:
        ray.shutdown()


# The stages after enumeration, which run in the workers (generator/pipeline.py).
AFTER = ("candidates", "float_checked", "instances", "rules")  # "candidates": pairing, common subgraphs and renamings, streamed


def _library_bytes(result) -> bytes:
    with tempfile.TemporaryDirectory(prefix="taso-bench-cluster-") as folder:
        path = f"{folder}/candidates.json"
        result.library.save(path)
        with open(path, "rb") as f:
            return f.read()


def _local_stages(settings: Settings, jobs: int) -> tuple[dict[str, float], bytes]:
    """(seconds per stage, the rule file) of a whole run on the local pool (``jobs=1``: in this process)."""
    result = generate(settings, jobs)
    return result.seconds, _library_bytes(result)


def _ray_stages(settings: Settings, cpus: int, shards: int) -> tuple[dict[str, float], bytes]:
    """(seconds per stage, the rule file) of a whole run on a local Ray cluster, started before the clock."""
    import ray

    ray.init(num_cpus=cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        result = generate(settings, make_workers=RayBackend(shards=shards).workers)
        return result.seconds, _library_bytes(result)
    finally:
        ray.shutdown()


def _stages_table(settings: Settings, shards: int, repeat: int) -> list[str]:
    """The stages after enumeration on each back end, interleaved over ``repeat`` rounds; medians."""
    backends = {"one process (-j 1)": lambda: _local_stages(settings, 1), "local -j 2": lambda: _local_stages(settings, 2),
                "ray 1 CPU": lambda: _ray_stages(settings, 1, shards), "ray 2 CPUs": lambda: _ray_stages(settings, 2, shards)}
    seconds: dict[str, dict[str, list[float]]] = {name: {stage: [] for stage in AFTER} for name in backends}
    files: dict[str, bytes] = {}
    for _ in range(repeat):
        for name, run in backends.items():
            times, files[name] = run()
            for stage in AFTER:
                seconds[name][stage].append(times[stage])
    median = {name: {stage: statistics.median(v) for stage, v in per.items()} for name, per in seconds.items()}
    base = sum(median["one process (-j 1)"].values())
    same = len(set(files.values())) == 1
    lines = ["", f"stages after enumeration (seconds, medians of {repeat} round(s); Ray's start not included); "
             f"rule files byte-identical across back ends: {'yes' if same else 'NO'}",
             f"| back end | {' | '.join(AFTER)} | all | vs one process |", "|---|" + "---|" * (len(AFTER) + 2)]
    for name in backends:
        total = sum(median[name].values())
        lines.append(f"| {name} | {' | '.join(f'{median[name][s]:.2f}' for s in AFTER)} | {total:.2f} | {base / total:.2f}x |")
    return lines


def _distribution(label: str, cost: dict[str, tuple[int, float]]) -> str:
    graphs = sorted(g for g, _ in cost.values())
    seconds = sorted(s for _, s in cost.values())
    total, mean = sum(graphs), statistics.mean(graphs)
    q = lambda xs, f: xs[min(len(xs) - 1, int(f * len(xs)))]  # noqa: E731
    return (f"| {label} | {len(graphs)} | {graphs[0]:,} | {q(graphs, 0.5):,} | {q(graphs, 0.9):,} | {graphs[-1]:,} | "
            f"{100 * graphs[-1] / total:.1f}% | {graphs[-1] / mean:.1f} | {q(seconds, 0.5):.3f} | {seconds[-1]:.3f} |")


def _per_root(cost: dict[str, tuple[int, float]]) -> dict[str, tuple[int, float]]:
    """The same work with one shard per root: the split shards of a root added up."""
    roots: dict[str, tuple[int, float]] = {}
    for shard, (graphs, seconds) in cost.items():
        g, s = roots.get(shard.split(".")[0], (0, 0.0))
        roots[shard.split(".")[0]] = (g + graphs, s + seconds)
    return roots


def _projection(rate_per_core: float, efficiency: float, imbalance: float) -> list[str]:
    g2, g3 = DEFAULT_SET_GRAPHS[2], DEFAULT_SET_GRAPHS[3]
    g4 = g3 * g3 / g2
    lines = [
        "",
        "Projection: depth 4 over the default operator set (enumeration passes only)",
        f"- graphs: G4 ~ G3 * (G3 / G2) = {g4:.2e} (G2 = {g2:,}, G3 = {g3:,}, docs/library.md); a guess within a factor of a few: "
        "the branching factor per added operator changes with depth (over matmul,add,transpose it fell from 62 to 43)",
        f"- per core: {rate_per_core:,.0f} graphs/s (1 Ray worker, this run), the same per graph at depth 4 (nearly all "
        "graphs are last-level steps, as at depth 3)",
        f"- scaling: linear in cores times the efficiency measured here (Ray 2-worker speed-up / calibration = {efficiency:.2f}), network ignored "
        "(a shard sends back 8 bytes per graph)",
        "- two passes (keys, then re-enumeration keeping repeated keys), each as long",
        f"- shards: the plan aims at 4 shards per core; the largest shard is {imbalance:.1f}x the mean (this run), which "
        "adds one largest shard to each pass's makespan",
        "- NOT included: the stages after enumeration (they run as Ray tasks over chunks of candidates, see the table "
        "below; the driver only pairs the collected graphs by key and keeps or drops candidates), and the checkpoints, "
        "which pass through the driver to its disk (8 bytes per graph); the keys themselves are reduced by range on the workers",
        "",
        "| cores | per pass | both passes |",
        "|---|---|---|",
    ]
    for cores in (16, 64, 256):
        spread = g4 / (cores * rate_per_core * efficiency)
        largest = imbalance * g4 / (4 * cores * rate_per_core)
        per_pass = spread + largest
        lines.append(f"| {cores} | {_hours(per_pass)} | {_hours(2 * per_pass)} |")
    return lines


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=DEFAULT_OPS, help=f"op set, as for taso generate --ops (default: {DEFAULT_OPS})")
    parser.add_argument("--max-ops", type=int, default=3, help="operators per graph (default: 3)")
    parser.add_argument("--shards", type=int, default=64, help="the Ray plan's target shard count (default: 64)")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved rounds; medians are compared (default: 1)")
    parser.add_argument("--skip-stages", action="store_true", help="leave out the timing of the stages after enumeration")
    args = parser.parse_args()
    settings = Settings(max_ops=args.max_ops, ops=parse_ops(args.ops))

    print(f"op set: {', '.join(settings.ops)}; max ops {settings.max_ops}")
    available = available_speedup(2)
    print(f"calibration: 2 processes run a pure-Python loop {available:.2f}x as fast as one")
    backends = {"local -j 1": lambda: _local_pass(settings, 1), "local -j 2": lambda: _local_pass(settings, 2),
                "ray 1 CPU": lambda: _ray_pass(settings, 1, args.shards), "ray 2 CPUs": lambda: _ray_pass(settings, 2, args.shards)}
    walls: dict[str, list[float]] = {name: [] for name in backends}
    startups: dict[str, list[float]] = {name: [] for name in backends}
    graphs, report = 0, None
    for _ in range(args.repeat):
        for name, run in backends.items():
            result = run()
            graphs = result[0]
            walls[name].append(result[1])
            if name.startswith("ray"):
                startups[name].append(result[2])
                report = result[3]

    wall = {name: statistics.median(w) for name, w in walls.items()}
    print(f"\nfirst pass (keys only), {graphs:,} graphs; medians of {args.repeat} round(s)")
    print("| back end | seconds | graphs/s | speed-up vs its 1-worker run | start-up s (not in seconds) |")
    print("|---|---|---|---|---|")
    for name in backends:
        base = wall["local -j 1" if name.startswith("local") else "ray 1 CPU"]
        start = f"{statistics.median(startups[name]):.1f}" if startups[name] else "-"
        print(f"| {name} | {wall[name]:.1f} | {graphs / wall[name]:,.0f} | {base / wall[name]:.2f} | {start} |")
    ray_speedup = wall["ray 1 CPU"] / wall["ray 2 CPUs"]
    print(f"ray 2 CPUs vs local -j 2: {wall['local -j 2'] / wall['ray 2 CPUs']:.2f}x the throughput; "
          f"ray's 2-worker speed-up {ray_speedup:.2f} of the machine's {available:.2f} available")

    print("\nper-shard work (the 2-CPU Ray run)")
    print("| plan | shards | min graphs | median | p90 | max | max share | max / mean | median s | max s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(_distribution(f"split (--shards {args.shards})", report.cost))
    print(_distribution("one shard per root", _per_root(report.cost)))
    imbalance = max(g for g, _ in report.cost.values()) / statistics.mean(g for g, _ in report.cost.values())
    efficiency = min(1.0, ray_speedup / available)  # of the parallelism the machine offered, how much the shards used
    for line in _projection(graphs / wall["ray 1 CPU"], efficiency, imbalance):
        print(line)
    if not args.skip_stages:
        for line in _stages_table(settings, args.shards, args.repeat):
            print(line)


if __name__ == "__main__":
    main()
