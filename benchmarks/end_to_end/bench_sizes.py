"""Fast at every size a model ships for: taso's default run on dynamic-batch recurrent exports, timed at batch 1, 8, 32
and 128 by a timer of this script's own (not taso's guard), beside files optimized for one size alone.

For each file (by default the steps-first LSTMCell and GRUCell loops of ``taso.models.symbolic_exports``, input
``[24, batch, 256]``, from both PyTorch exporters):

a) ``taso optimize FILE -o default.onnx``: no flags (the batch's default range: 1 and a large batch), with the cost
   cache as it is (warm after the first file);
b) the same with ``--time-limit 60`` (warm: after a)), and with an empty cost cache and verdict store
   (``TASO_CACHE_DIR`` a fresh directory): the cold first run;
c) ``taso optimize FILE -o at_B.onnx --input-shape x=24,B,256`` for each batch B: a file optimized for that size alone.

A file of fixed sizes (``taso models build nasrnn``) is timed at its one size, where its default file is the file
optimized for that size alone; its row repeats that size's figures in each batch's column.

Then, for each batch B, the input, default.onnx, cold.onnx and at_B.onnx are opened in ONNX Runtime (1 thread,
ENABLE_ALL) and timed in interleaved rounds (each round runs every model once, in an order rotated per round;
``--rounds`` rounds after a warm-up), in ``--series`` series, each in fresh sessions of every file: a session keeps
its own bias for as long as it lives (the same file read 1.35x in one and 1.43x in another, on the same rounds), so
the figure is the median over series of each series' median. Printed: each file's speedup over the input at each
batch (above 1: faster), the default file's share of the single-size file's speedup, and what taso kept.

Run: python -m taso.models.symbolic_exports /tmp/symexports --only lstm_cell_steps gru_cell_steps
     python benchmarks/end_to_end/bench_sizes.py --dir /tmp/symexports [--rounds 21] [--series 5] [--out bench-results/sizes.json]
     (``--time-only``: time the files an earlier run left in ``--work`` again, without optimizing)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

BATCHES = (1, 8, 32, 128)
FILES = ("lstm_cell_steps.torchscript.onnx", "lstm_cell_steps.dynamo.onnx", "gru_cell_steps.torchscript.onnx", "gru_cell_steps.dynamo.onnx")


def optimize(source: Path, output: Path, flags: list[str], env: dict[str, str] | None = None, reuse: bool = False) -> dict:
    """Runs ``taso optimize`` and returns its JSON report (what it kept, its per-size speedups); ``reuse``: the file and
    report an earlier run wrote instead."""
    report = output.with_suffix(".json")
    if reuse:
        if not (output.exists() and report.exists()):
            sys.exit(f"--time-only: {output} or its report is missing: run without --time-only first")
        data = json.loads(report.read_text())
        return {"kept": data["kept"], "dispatch": data.get("dispatch"), "size_speedups": data.get("size_speedups"),
                "measured_speedups": data["measured_speedups"], "seconds": None}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "taso", "optimize", str(source), "-o", str(output), "--report", str(report), "--quiet", *flags],
                   check=True, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL)
    data = json.loads(report.read_text())
    return {"kept": data["kept"], "dispatch": data.get("dispatch"), "size_speedups": data.get("size_speedups"),
            "measured_speedups": data["measured_speedups"], "seconds": round(time.perf_counter() - started, 1)}


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def feeds_at(model: onnx.ModelProto, batch: int) -> dict[str, np.ndarray]:
    """Random float inputs with every symbolic dim at ``batch``."""
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value if d.HasField("dim_value") else batch for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def interleaved_speedups(paths: dict[str, Path], feeds: dict[str, np.ndarray], rounds: int, series: int) -> dict[str, float]:
    """Each model's speedup over ``paths["input"]``: in each of ``series`` series of fresh sessions, the median over
    rounds of input time / model time (models run once per round in a rotated order); then the median over series.
    Each series makes its sessions in another order."""
    per_series: dict[str, list[float]] = {name: [] for name in paths if name != "input"}
    names = list(paths)
    for k in range(series):
        # made in an order rotated per series: where a session's memory lies depends on what was made before it
        made = names[k % len(names):] + names[:k % len(names)]
        sessions = {name: session(paths[name]) for name in made}
        for s in sessions.values():
            s.run(None, feeds)
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                started = time.perf_counter()
                sessions[name].run(None, feeds)
                times[name].append(time.perf_counter() - started)
        for name in per_series:
            per_series[name].append(statistics.median(a / b for a, b in zip(times["input"], times[name])))
        del sessions  # (before the next series makes its own)
    return {name: round(statistics.median(values), 3) for name, values in per_series.items()}


def bench_file(source: Path, work: Path, rounds: int, series: int, reuse: bool = False) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(source), load_external_data=False)
    shape = [d.dim_value if d.HasField("dim_value") else None for d in model.graph.input[0].type.tensor_type.shape.dim]
    runs = {"default": optimize(source, work / "default.onnx", [], reuse=reuse)}
    runs["warm60"] = optimize(source, work / "warm60.onnx", ["--time-limit", "60"], reuse=reuse)
    with tempfile.TemporaryDirectory() as cold_cache:
        runs["cold"] = optimize(source, work / "cold.onnx", [], {"TASO_CACHE_DIR": cold_cache, "TASO_VERDICTS": f"{cold_cache}/v.json"}, reuse)
    sized = None in shape  # a file of fixed sizes (NasRNN) is optimized for its one size by default: that is "alone"
    for batch in BATCHES if sized else ():
        given = ",".join(str(batch if d is None else d) for d in shape)
        runs[f"at_{batch}"] = optimize(source, work / f"at_{batch}.onnx", ["--input-shape", f"{model.graph.input[0].name}={given}"], reuse=reuse)
    timed = {}
    for batch in BATCHES if sized else BATCHES[:1]:
        paths = {"input": source, "default": work / "default.onnx", "cold": work / "cold.onnx", "warm60": work / "warm60.onnx",
                 "alone": work / (f"at_{batch}.onnx" if sized else "default.onnx")}
        timed[batch] = interleaved_speedups(paths, feeds_at(model, batch), rounds, series)
        print(f"  batch {batch:>3}: " + "  ".join(f"{k} {v:.2f}x" for k, v in timed[batch].items()), file=sys.stderr)
    return {"file": source.name, "runs": runs, "speedups": {str(b): t for b, t in timed.items()}}


def table(results: list[dict]) -> str:
    lines = ["| file | kept by default | " + " | ".join(f"batch {b}: default / alone / cold / warm 60 s" for b in BATCHES)
             + " | default's worst | share of alone (worst) | cold's share of warm 60 s (worst) |",
             "|---|---|" + "---|" * len(BATCHES) + "---|---|---|"]
    for r in results:
        s = r["speedups"]
        s = {str(b): s.get(str(b), s[str(BATCHES[0])]) for b in BATCHES}  # a file of fixed sizes: its one size in each column
        cells = [f"{s[str(b)]['default']:.2f}x / {s[str(b)]['alone']:.2f}x / {s[str(b)]['cold']:.2f}x / {s[str(b)]['warm60']:.2f}x" for b in BATCHES]
        worst = min(s[str(b)]["default"] for b in BATCHES)
        share = min(s[str(b)]["default"] / max(s[str(b)]["alone"], 1.0) for b in BATCHES)
        kept = r["runs"]["default"]["kept"] + (f" ({r['runs']['default']['dispatch']})" if r["runs"]["default"]["dispatch"] else "")
        cold = min(s[str(b)]["cold"] / max(s[str(b)]["warm60"], 1.0) for b in BATCHES)
        lines.append(f"| {r['file']} | {kept} | " + " | ".join(cells) + f" | {worst:.2f}x | {share:.0%} | {cold:.0%} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--dir", type=Path, help="where the exports lie (the four default files)")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--series", type=int, default=5, help="fresh sessions of every file, each timed --rounds rounds")
    parser.add_argument("--time-only", action="store_true", help="time the files an earlier run left in --work, without optimizing")
    parser.add_argument("--work", type=Path, default=Path("bench-results/sizes"))
    parser.add_argument("--out", type=Path, default=Path("bench-results/sizes.json"))
    args = parser.parse_args()
    files = args.files or [args.dir / name for name in FILES if (args.dir / name).exists()]
    if not files:
        parser.error("no files: give them, or --dir with the exports of taso.models.symbolic_exports")
    results = []
    for path in files:
        print(f"{path.name}:", file=sys.stderr)
        results.append(bench_file(path, args.work / path.stem, args.rounds, args.series, args.time_only))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
