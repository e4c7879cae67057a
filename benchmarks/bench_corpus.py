"""`taso optimize` over the real-world corpus, timed against the input file: is anything ever slower?

For each corpus model (benchmarks/corpus.py; build it first), runs ``taso optimize`` through the
CLI exactly as a user would, with the measured cost model (``--cost ort-cpu``, 1 thread), then
times its output against the input *file* on ONNX Runtime (CPU, ORT_ENABLE_ALL, 1 intra-op
thread), interleaved round by round so machine noise hits both alike. The result per model is
the ratio input time / output time (above 1: taso's file is faster); a ratio below 0.98 is a
slower model, which taso must never write. Prints a Markdown table and writes JSON.

Run: python benchmarks/corpus.py build && python benchmarks/bench_corpus.py [--only NAME ...] [--source S ...]
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
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402 - a sibling script, not a package

from taso.validate import random_inputs  # noqa: E402

SLOWER, FASTER = 0.98, 1.02


@dataclass
class Row:
    model: str
    source: str
    nodes: int
    exit_code: int
    ratio: float | None  # input ms / output ms; None when nothing was written
    input_ms: float | None
    output_ms: float | None
    same_bytes: bool
    optimize_seconds: float
    verdict: str


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _one_round(session: ort.InferenceSession, feeds: dict, min_seconds: float = 0.05, max_runs: int = 50) -> float:
    """Median seconds of one run over a short burst."""
    times: list[float] = []
    while (sum(times) < min_seconds or len(times) < 5) and len(times) < max_runs:
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_ms(paths: dict[str, Path], feeds: dict, rounds: int) -> dict[str, float]:
    """Median milliseconds per model, timing each model in turn every round (after a warm-up)."""
    sessions = {k: _session(p) for k, p in paths.items()}
    for s in sessions.values():
        for _ in range(3):
            s.run(None, feeds)
    samples: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(rounds):
        for k, s in sessions.items():
            samples[k].append(_one_round(s, feeds))
    return {k: statistics.median(v) * 1e3 for k, v in samples.items()}


def _optimize(entry: corpus.Entry, out: Path, time_limit: float) -> tuple[subprocess.CompletedProcess, float]:
    command = [sys.executable, "-m", "taso", "optimize", str(entry.path()), "-o", str(out), "--cost", "ort-cpu", "--threads", "1",
               "--time-limit", str(time_limit), "--quiet", *corpus.input_shape_args(entry)]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    return proc, time.perf_counter() - start


def _verdict(ratio: float, same_bytes: bool) -> str:
    if same_bytes:
        return "input bytes kept"
    if ratio < SLOWER:
        return "SLOWER"
    return "faster" if ratio >= FASTER else "equal (within 2%)"


def bench_entry(entry: corpus.Entry, time_limit: float, rounds: int, workdir: Path) -> Row:
    """Optimizes one corpus model with the CLI and times its output against the input file."""
    model = onnx.load(str(entry.path()))
    nodes = len(model.graph.node)
    out = workdir / (entry.name.replace("/", "__") + ".taso.onnx")
    proc, seconds = _optimize(entry, out, time_limit)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        return Row(entry.name, entry.source, nodes, proc.returncode, None, None, None, False, round(seconds, 1), f"exit {proc.returncode}: {reason[:160]}")
    same = out.read_bytes() == entry.path().read_bytes()
    feeds = random_inputs(corpus.with_static_inputs(model, entry.input_shapes), 0)
    ms = interleaved_ms({"input": entry.path(), "output": out}, feeds, rounds)
    ratio = ms["input"] / ms["output"]
    return Row(entry.name, entry.source, nodes, 0, round(ratio, 3), round(ms["input"], 3), round(ms["output"], 3), same, round(seconds, 1), _verdict(ratio, same))


def markdown(rows: list[Row]) -> str:
    lines = ["| model | source | nodes | ratio (input ms / output ms) | verdict |", "|---|---|---:|---:|---|"]
    for r in rows:
        ratio = f"{r.ratio:.3f} ({r.input_ms:.3f} / {r.output_ms:.3f})" if r.ratio is not None else "—"
        lines.append(f"| {r.model.split('/', 1)[1]} | {r.source} | {r.nodes} | {ratio} | {r.verdict} |")
    timed = [r for r in rows if r.ratio is not None]
    slower = [r.model for r in timed if r.verdict == "SLOWER"]
    lines.append("")
    lines.append(f"{len(rows)} models, {len(timed)} timed: {sum(r.verdict == 'faster' for r in timed)} faster, "
                 f"{sum(r.verdict == 'input bytes kept' for r in timed)} kept as the input bytes, {len(slower)} slower"
                 + (f" ({', '.join(slower)})" if slower else ""))
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
        print("no corpus model matches; build the corpus first: python benchmarks/corpus.py build", file=sys.stderr)
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
