"""The two search engines side by side: backtracking (TASO) and equality saturation (Tensat), issue 25.

For each model — taso's zoo, the real-world corpus's recurrent and transformer exports
(models/corpus.py; build it first) — it runs ``taso optimize`` through the CLI as a user
would (measured ``ort-cpu`` costs, 1 thread):

* ``--search backtracking`` at the default time limit, and again with ``--time-limit 60``
  (the issue's bar: eqsat's cost within the default limit against backtracking's after 60 s);
* ``--search eqsat`` at the default time limit.

Each model first gets a warm-up run of each engine (not reported, the cost table's usual spot-checks on); the three
runs compared then re-measure no cached entry (``TASO_SPOT_CHECKS=0``), so their predicted costs come from one table.
It reads each run's report (predicted cost, engine figures), the peak memory of the process
(the largest of the report's per-stage peaks; at the default limit, the larger of the run's and its engine's warm-up
run's, which timed what the run after it read as a remembered verdict), and times the input and the two default-limit outputs side by side
(ratios: input time / output time), the median of ``--series`` interleaved series each in fresh sessions
(:func:`taso.measure.timing.fresh_session_speedups`): a pair of sessions can run a sub-millisecond LSTM 10% apart from the
next pair for as long as they live. The two engines' outputs, when they are the same file, are timed once and
given the same figure: two timings of one file differ only by the timing's noise. An output that is the input's
bytes is 1 by construction. Prints a Markdown table and geometric means, and writes JSON after every model.

Run: python benchmarks/search/bench_eqsat.py [--model zoo/nasrnn --model torch-dynamo/lstm_cell_unrolled16 ...] [--rounds 7] [--series 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from end_to_end.bench_corpus import read_report  # noqa: E402
from peers.bench_exports import resolve  # noqa: E402
from taso.models import corpus

from taso.measure.inputs import random_input_sets
from taso.measure.timing import TimingError, fresh_session_speedups  # noqa: E402

DEFAULT_MODELS = ("zoo/nasrnn", "zoo/squeezenet", "zoo/resnet50", "zoo/inception_v3", "zoo/bert", "zoo/nasnet_a",
                  "torch-dynamo/lstm_cell_unrolled16", "torch-script/lstm_cell_unrolled16", "torch-dynamo/gru_cell_unrolled32",
                  "torch-dynamo/transformer_encoder", "torch-dynamo/transformer_decoder", "torch-script/lstm_2layer")
RUNS = (("backtracking", "backtracking", None), ("backtracking-60s", "backtracking", 60.0), ("eqsat", "eqsat", None))


@dataclass
class Run:
    """One ``taso optimize`` run: exit status, predicted costs, the engine's figures, seconds and peak memory."""

    exit: int = 0
    note: str = ""
    initial_ms: float | None = None
    best_ms: float | None = None
    seconds: float = 0.0
    peak_gb: float = 0.0
    same_bytes: bool = False
    eqsat: dict = field(default_factory=dict)
    measured: float | None = None  # input time / output time


@dataclass
class Row:
    model: str
    nodes: int
    file_mb: float  # MiB (2**20 bytes)
    runs: dict[str, Run] = field(default_factory=dict)
    same_output: bool | None = None  # both default-limit runs wrote the same bytes

    def peak_ratio(self, run: Run | None) -> float | None:
        """The run's peak memory over the file's size, both in bytes (the peak is in GB of 1e9, the file in MiB)."""
        return None if run is None or not run.peak_gb or not self.file_mb else run.peak_gb * 1e9 / (self.file_mb * 2**20)


def optimize(path: Path, out: Path, report: Path, engine: str, time_limit: float | None, shape_args: list[str],
             extra: tuple[str, ...] = (), spot_checks: bool = False) -> Run:
    """``taso optimize`` in a child process: its report, seconds and peak memory (from the report's stages).

    Without ``spot_checks`` the run re-measures none of the cost table's entries (``TASO_SPOT_CHECKS=0``): the runs
    compared price with one table (entries they measure new are recorded and read alike by the runs after)."""
    command = [sys.executable, "-m", "taso", "optimize", str(path), "-o", str(out), "--cost", "ort-cpu", "--search", engine,
               "--report", str(report), "--quiet", *shape_args, *extra] + (["--time-limit", str(time_limit)] if time_limit else [])
    env = None if spot_checks else {**os.environ, "TASO_SPOT_CHECKS": "0"}  # None: this environment as it is
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, text=True, env=env)
        _, status, _ = os.wait4(proc.pid, 0)
        err.seek(0)
        message = err.read()
    code = os.waitstatus_to_exitcode(status)
    run = Run(exit=code, seconds=time.perf_counter() - start)
    if code != 0:
        run.note = (message.strip().splitlines() or ["(no message)"])[-1][:160]
        return run
    data = read_report(report)
    run.initial_ms = _ms(data.get("initial_cost_s"))
    run.best_ms = _ms(data.get("best_cost_s"))
    run.eqsat = data.get("eqsat", {})
    # The process's own peak per stage (taso resets the kernel's mark each stage): a child's ru_maxrss counts the
    # parent's memory at fork, and this script holds models it times.
    run.peak_gb = max((s.get("peak_bytes") or 0 for s in data.get("stages", [])), default=0) / 1e9
    run.same_bytes = out.read_bytes() == path.read_bytes()
    return run


def _ms(seconds) -> float | None:
    return None if seconds is None else seconds * 1e3


def bench_model(entry: corpus.Entry, rounds: int, series: int, workdir: Path, log) -> Row:
    model = onnx.load(str(entry.path()))
    row = Row(entry.name, len(model.graph.node), round(entry.path().stat().st_size / 2**20, 1))
    shape_args = corpus.input_shape_args(entry)
    stem = workdir / entry.name.replace("/", "__")
    # Warm-up runs, one per engine: they measure the nodes both will price and give the table its usual spot-checks, so
    # that no compared run prices a node estimated that another measured, or with an entry a later run replaced. Each is
    # also a user's first run: it times end to end, where the runs after it read its verdict, so an engine's peak
    # memory is the larger of its two runs'.
    warm_peaks = {}
    for engine in ("backtracking", "eqsat"):
        warm = optimize(entry.path(), stem.with_suffix(".warm.onnx"), stem.with_suffix(".warm.json"), engine, None, shape_args,
                        spot_checks=True)
        warm_peaks[engine] = warm.peak_gb
        log(f"  warm-up {engine}: exit {warm.exit}, {warm.seconds:.1f} s, peak {warm.peak_gb:.2f} GB {warm.note}")
    outputs = {}
    for label, engine, limit in RUNS:
        out, report = stem.with_suffix(f".{label}.onnx"), stem.with_suffix(f".{label}.json")
        run = row.runs[label] = optimize(entry.path(), out, report, engine, limit, shape_args)
        if limit is None:
            run.peak_gb = max(run.peak_gb, warm_peaks[engine])
        log(f"  {label}: exit {run.exit}, cost {run.initial_ms} -> {run.best_ms} ms, {run.seconds:.1f} s, peak {run.peak_gb:.2f} GB {run.note}")
        if run.exit == 0:
            if run.same_bytes:
                run.measured = 1.0
            elif limit is None:
                outputs[label] = out
    written = [stem.with_suffix(f".{label}.onnx") for label in ("backtracking", "eqsat") if row.runs[label].exit == 0]
    if len(written) == 2:
        row.same_output = written[0].read_bytes() == written[1].read_bytes()
    if outputs:
        static = corpus.with_static_inputs(model, entry.input_shapes)
        feeds = random_input_sets(static, (0,))[0]
        distinct: dict[bytes, list[str]] = {}  # the engines' outputs, one entry per distinct file
        for label, out in outputs.items():
            distinct.setdefault(out.read_bytes(), []).append(label)
        files = [str(outputs[labels[0]]) for labels in distinct.values()]
        try:
            _, speedups = fresh_session_speedups([str(entry.path()), *files], feeds, 1, rounds, series,
                                                 labels=["input", *(" = ".join(labels) for labels in distinct.values())])
        except TimingError as e:
            log(f"  timing: {e}")
            return row
        for labels, speedup in zip(distinct.values(), speedups[1:]):
            for label in labels:
                row.runs[label].measured = speedup
    return row


def geomean(values) -> float:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def predicted_speedup(run: Run | None) -> float | None:
    """The run's predicted speedup (its input's cost over its best graph's: costs are measured, so each run has its own)."""
    return None if run is None or not run.best_ms or run.initial_ms is None else run.initial_ms / run.best_ms


def _cost(run: Run | None) -> str:
    p = predicted_speedup(run)
    return "—" if p is None else f"{run.best_ms:.3f} ({p:.3f}x)"


def markdown(rows: list[Row]) -> str:
    lines = ["| model | nodes | input cost ms | backtracking cost ms, predicted (9 s) | backtracking (60 s) | eqsat (9 s) | "
             "measured backtracking | measured eqsat | same file | seconds bt / eqsat | peak GB bt / eqsat (file MiB) | "
             "peak / file bt / eqsat | eqsat e-nodes, extraction |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        bt, bt60, eq = (r.runs.get(k) for k in ("backtracking", "backtracking-60s", "eqsat"))
        initial = next((x.initial_ms for x in (bt, eq) if x and x.initial_ms), None)
        e = eq.eqsat if eq else {}
        lines.append(f"| {r.model} | {r.nodes} | {initial or 0:.3f} | {_cost(bt)} | {_cost(bt60)} | {_cost(eq)} | "
                     f"{speedup_text(bt)} | {speedup_text(eq)} | {_same(r)} | {bt.seconds if bt else 0:.0f} / {eq.seconds if eq else 0:.0f} | "
                     f"{bt.peak_gb if bt else 0:.2f} / {eq.peak_gb if eq else 0:.2f} ({r.file_mb}) | {_ratio(r, bt)} / {_ratio(r, eq)} | "
                     f"{e.get('enodes', '—')}, {e.get('extraction', eq.note if eq else '—')} |")
    costs_ok = [r.model for r in rows if _le(r.runs.get("eqsat"), r.runs.get("backtracking-60s"))]
    zoo = sum(1 for r in rows if r.model.startswith("zoo/"))
    lines += ["", f"eqsat's predicted speedup at least backtracking's after 60 s on {len(costs_ok)} of {len(rows)} models "
              f"({sum(1 for m in costs_ok if m.startswith('zoo/'))} of {zoo} zoo models); geometric mean measured speedup: "
              f"backtracking {geomean(r.runs['backtracking'].measured for r in rows if 'backtracking' in r.runs):.3f}x, "
              f"eqsat {geomean(r.runs['eqsat'].measured for r in rows if 'eqsat' in r.runs):.3f}x"]
    lines += _largest_file_line(rows)
    return "\n".join(lines)


def _le(a: Run | None, b: Run | None) -> bool:
    """Whether run a's best graph is at most as costly as b's, relative to each run's own measure of the input."""
    pa, pb = predicted_speedup(a), predicted_speedup(b)
    return pa is not None and pb is not None and pa >= pb * 0.9999


def _ratio(row: Row, run: Run | None) -> str:
    ratio = row.peak_ratio(run)
    return "—" if ratio is None else f"{ratio:.2f}x"


def _largest_file_line(rows: list[Row]) -> list[str]:
    """Peak memory against the largest file's size: on small files the interpreter, the rule library and ONNX Runtime
    (about 0.2 GB before any model) dominate the ratio."""
    if not rows:
        return []
    largest = max(rows, key=lambda r: r.file_mb)
    ratios = {k: largest.peak_ratio(largest.runs.get(k)) for k in ("backtracking", "eqsat")}
    return [f"peak memory on the largest file ({largest.model}, {largest.file_mb} MiB): "
            + ", ".join(f"{k} {v:.2f}x" if v else f"{k} —" for k, v in ratios.items()) + " the file's size"]


def _same(row: Row) -> str:
    return "—" if row.same_output is None else ("yes" if row.same_output else "no")


def speedup_text(run: Run | None) -> str:
    return "—" if run is None or run.measured is None else f"{run.measured:.3f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="zoo/NAME or a corpus model; repeatable (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per timing series")
    parser.add_argument("--series", type=int, default=3, help="timing series, each in fresh sessions (the median is reported)")
    parser.add_argument("--json", default="bench_eqsat.json")
    parser.add_argument("--table", metavar="JSON", help="print the table of an earlier run's JSON and exit")
    args = parser.parse_args(argv)
    if args.table:
        rows = [Row(r["model"], r["nodes"], r["file_mb"], {k: Run(**v) for k, v in r["runs"].items()}, r.get("same_output"))
                for r in json.loads(Path(args.table).read_text())]
        print(markdown(rows))
        return 0

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="taso-eqsat-") as tmp:
        workdir = Path(tmp)
        for name in args.model or DEFAULT_MODELS:
            entry = resolve(name, workdir)
            if isinstance(entry, str):
                log(f"{name}: {entry}")
                continue
            log(name)
            rows.append(bench_model(entry, args.rounds, args.series, workdir, log))
            Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
