"""`taso optimize` over the real-world corpus, timed against the input file: is anything ever slower?

For each corpus model (models/corpus.py; build it first), runs ``taso optimize`` through the
CLI exactly as a user would, with the measured cost model (``--cost ort-cpu``, 1 thread), then
times its output against the input *file* on ONNX Runtime (CPU, ORT_ENABLE_ALL, 1 intra-op
thread), interleaved: each round times the two back to back, in alternating order, so machine
noise hits both alike. The result per model is the median over rounds of input time / output
time (above 1: taso's file is faster), with half the interquartile range as its noise; a ratio
below 0.98 is a slower model, which taso must never write. A model for which taso wrote the
input's bytes back is not timed (ratio 1 by construction). Prints a Markdown table, writes JSON.

Run: python -m taso.models.corpus build && python benchmarks/end_to_end/bench_corpus.py [--only NAME ...] [--source S ...]
     [--time-limit 10] [--rounds 15] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from taso.models import corpus

from taso.measure.inputs import random_inputs
from taso.measure.timing import interleaved_samples, median_run, warm_session  # noqa: E402

SLOWER, FASTER = 0.98, 1.02


@dataclass
class Row:
    model: str
    source: str
    nodes: int
    exit_code: int
    kept: str  # what taso optimize wrote: "optimized", "original" (the input's bytes), ... (its --report); "" when nothing was written
    ratio: float | None  # median over rounds of input ms / output ms, measured back to back; None when nothing was timed
    spread: float | None  # half the interquartile range of the per-round ratios: the noise of this measurement
    input_ms: float | None
    output_ms: float | None
    same_bytes: bool
    optimize_seconds: float
    verdict: str


def paired_ratios(input_path: Path, output_path: Path, feeds: dict, rounds: int) -> tuple[list[float], float, float]:
    """Per-round ratios input time / output time, the two timed back to back in alternating order, and the median ms of each.

    A ratio of two neighbouring bursts cancels most of the load that other processes put on a
    shared machine; the median over rounds is the result, the spread of the rounds its noise.
    """
    sessions = [warm_session(i, name, str(path), feeds) for i, (name, path) in enumerate((("the input", input_path), ("the output", output_path)))]
    bursts = [lambda s=s, f=f: median_run(s, f, min_seconds=0.05, min_runs=5, max_runs=50, warmup=0) for s, f in sessions]
    inputs, outputs = interleaved_samples(bursts, rounds)
    ratios = [i / o for i, o in zip(inputs, outputs)]
    return ratios, statistics.median(inputs) * 1e3, statistics.median(outputs) * 1e3


def _optimize(entry: corpus.Entry, out: Path, report: Path, time_limit: float, threads: int = 1) -> tuple[subprocess.CompletedProcess, float]:
    """Runs ``taso optimize`` through the CLI as a user would (measured costs); the process and its seconds."""
    command = [sys.executable, "-m", "taso", "optimize", str(entry.path()), "-o", str(out), "--cost", "ort-cpu", "--threads", str(threads),
               "--time-limit", str(time_limit), "--report", str(report), "--quiet", *corpus.input_shape_args(entry)]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    return proc, time.perf_counter() - start


def _verdict(ratio: float) -> str:
    if ratio < SLOWER:
        return "SLOWER"
    return "faster" if ratio >= FASTER else "equal (within 2%)"


def read_report(report: Path) -> dict:
    """``taso optimize --report``'s JSON, or {} when it was not written or cannot be read."""
    try:
        return json.loads(report.read_text())
    except (OSError, ValueError):
        return {}


def _kept(report: Path) -> str:
    return str(read_report(report).get("kept", "?"))


def bench_entry(entry: corpus.Entry, time_limit: float, rounds: int, workdir: Path) -> Row:
    """Optimizes one corpus model with the CLI and times its output against the input file.

    When taso wrote the input's bytes back, the ratio is 1 by construction and nothing is timed.
    """
    model = onnx.load(str(entry.path()))
    nodes = len(model.graph.node)
    stem = workdir / entry.name.replace("/", "__")
    out, report = stem.with_suffix(".taso.onnx"), stem.with_suffix(".report.json")
    proc, seconds = _optimize(entry, out, report, time_limit)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        return Row(entry.name, entry.source, nodes, proc.returncode, "", None, None, None, None, False, round(seconds, 1),
                   f"exit {proc.returncode}: {reason if len(reason) <= 160 else reason[:159] + '…'}")
    kept = _kept(report)
    if out.read_bytes() == entry.path().read_bytes():
        return Row(entry.name, entry.source, nodes, 0, kept, 1.0, 0.0, None, None, True, round(seconds, 1), "input bytes kept")
    feeds = random_inputs(corpus.with_static_inputs(model, entry.input_shapes), 0)
    ratios, input_ms, output_ms = paired_ratios(entry.path(), out, feeds, rounds)
    q1, median, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    return Row(entry.name, entry.source, nodes, 0, kept, round(median, 3), round((q3 - q1) / 2, 3), round(input_ms, 3), round(output_ms, 3),
               False, round(seconds, 1), _verdict(median))


def markdown(rows: list[Row]) -> str:
    lines = ["| model | source | nodes | ratio (input / output time) | verdict |", "|---|---|---:|---:|---|"]
    for r in rows:
        if r.ratio is None:
            ratio = "—"
        elif r.same_bytes:
            ratio = "1 (same file)"
        else:
            ratio = f"{r.ratio:.3f} ± {r.spread:.3f} ({r.input_ms:.3f} / {r.output_ms:.3f} ms)"
        lines.append(f"| {r.model.split('/', 1)[1]} | {r.source} | {r.nodes} | {ratio} | {r.verdict}{'' if r.same_bytes or not r.kept else f' (kept: {r.kept})'} |")
    ran = [r for r in rows if r.ratio is not None]
    slower = [r.model for r in ran if r.verdict == "SLOWER"]
    lines.append("")
    lines.append(f"{len(rows)} models, {len(ran)} written: {sum(r.verdict == 'faster' for r in ran)} faster, "
                 f"{sum(r.verdict.startswith('equal') for r in ran)} equal within 2%, {sum(r.same_bytes for r in ran)} kept as the input bytes, "
                 f"{len(slower)} slower" + (f" ({', '.join(slower)})" if slower else "") + f"; {len(rows) - len(ran)} refused")
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", help="bench only these models, by name (repeatable)")
    parser.add_argument("--source", action="append", choices=corpus.SOURCES, help="bench only these sources (repeatable)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="taso optimize's search seconds per model (default 10)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds (default 15)")
    parser.add_argument("--json", type=Path, default=Path("bench_corpus.json"), help="where to write the rows (default bench_corpus.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    entries = [e for e in corpus.available_entries() if (not args.only or e.name in args.only) and (not args.source or e.source in args.source)]
    if not entries:
        print("no corpus model matches; build the corpus first: python -m taso.models.corpus build", file=sys.stderr)
        return 2
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for entry in entries:
            row = bench_entry(entry, args.time_limit, args.rounds, Path(tmp))
            print(f"{row.model}: {row.verdict}" + (f", ratio {row.ratio}" if row.ratio is not None else ""), file=sys.stderr, flush=True)
            rows.append(row)
            args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")  # kept after every model
    print(markdown(rows))
    return 1 if any(r.verdict == "SLOWER" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
