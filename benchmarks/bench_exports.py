"""Real exports against a peer: ONNX Runtime alone, onnxslim first, taso first — timed side by side (issue 12).

For each model — PyTorch ``LSTMCell``/``GRUCell`` unrolled over time and a two-layer ``nn.LSTM``
from both exporters, a NASNet-A cell, a BERT encoder and an application's CRNN (a bidirectional LSTM
unrolled by its exporter) from the corpus (benchmarks/corpus.py;
build it first), and models of taso's own zoo (``taso.models``) — and each thread count:

* the input file on ONNX Runtime CPU with ORT_ENABLE_ALL: the reference (1.00x);
* the peer a user would run first: ``onnxslim.slim`` on the model (its shapes pinned as taso's
  are), checked against the input on random inputs, then ENABLE_ALL;
* ``taso optimize`` through the CLI as a user would (measured ``ort-cpu`` costs at that thread
  count, ``--time-limit`` seconds of search), then ENABLE_ALL. When taso wrote the input's bytes
  back, its ratio is 1 by construction and it is not timed again.

The variants of one model are timed in one :func:`taso.timing.interleaved_times` call (rounds
interleaved in a rotating order, the median of each round's fastest run), so a load change hits
them alike; ratios are input time / variant time (above 1: faster than the input). Also printed:
taso's predicted speedup (its search's cost model) and whether it changed the graph. Prints one
Markdown table and the geometric means, writes JSON after every model, prints progress on stderr.

Run: python benchmarks/corpus.py build && python benchmarks/bench_exports.py [--threads 1 --threads 2]
     [--model torch-script/lstm_cell_unrolled16 --model zoo/nasrnn ...] [--time-limit 20] [--rounds 9] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402 - sibling scripts, not a package
from bench_corpus import _optimize, read_report  # noqa: E402

from taso.timing import TimingError, interleaved_times  # noqa: E402
from taso.validate import compare_models, random_input_sets  # noqa: E402

RECURRENT = ("lstm_cell_unrolled16", "lstm_cell_unrolled64", "gru_cell_unrolled32", "lstm_2layer")
DEFAULT_MODELS = (*(f"{source}/{arch}" for arch in RECURRENT for source in ("torch-script", "torch-dynamo")),
                  "torch-dynamo/nasnet_a_cell", "torch-dynamo/bert_encoder", "pypi-wheel/captcha_crnn", "zoo/nasrnn", "zoo/squeezenet",
                  "zoo/bert_base")
LEVEL = 0.02  # taso and the peer within 2% of each other: level


@dataclass
class Row:
    model: str
    threads: int
    nodes: int
    input_ms: float | None = None
    slim: float | None = None  # input time / onnxslim's output time; None when onnxslim failed (slim_note says why)
    slim_note: str = ""
    taso: float | None = None  # input time / taso's output time; 1.0 when taso wrote the input's bytes back
    taso_note: str = ""
    predicted: float | None = None  # taso's search: initial cost / best cost
    changed: bool = False  # taso wrote a rewritten graph (kept "optimized")
    change: str = ""
    optimize_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


def _one_line(error: BaseException | str, limit: int = 120) -> str:
    text = (str(error).strip().splitlines() or [type(error).__name__ if isinstance(error, BaseException) else "(no message)"])[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def resolve(name: str, workdir: Path) -> corpus.Entry | str:
    """A model by name: ``zoo/NAME`` builds taso.models' NAME into ``workdir``; anything else is a corpus entry. A string says why not."""
    if name.startswith("zoo/"):
        import taso.models as zoo

        arch = name.split("/", 1)[1]
        if arch not in zoo.names():
            return f"no zoo model {arch!r} (taso.models has {', '.join(zoo.names())})"
        path = workdir / f"zoo__{arch}.onnx"
        onnx.save(zoo.build(arch), str(path))
        return corpus.Entry(name=name, source="zoo", relpath=str(path), origin=f"taso.models.build({arch!r})", licence="taso")
    entries = {e.name: e for e in corpus.all_entries()}
    if name not in entries:
        return "not a corpus model (python benchmarks/corpus.py list)"
    if not entries[name].path().exists():
        return f"not built: python benchmarks/corpus.py build --only {name}"
    return entries[name]


def slim(model: onnx.ModelProto, input_sets: list[dict], out: Path) -> str:
    """onnxslim's model of ``model`` written to ``out``, checked against it; "" on success, else one line saying what failed."""
    try:
        import onnxslim
    except ImportError:
        return "onnxslim not installed (pip install -e '.[corpus]')"
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # onnxslim reports on stdout; the table goes there
            slimmed = onnxslim.slim(model)
    except Exception as e:  # noqa: BLE001 - a peer's failure is a result to report, not a crash
        return f"onnxslim failed: {type(e).__name__}: {_one_line(e)}"
    if slimmed is None:
        return "onnxslim returned no model"
    try:
        comparison = compare_models(model, slimmed, input_sets)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        return f"onnxslim's model does not run: {_one_line(e)}"
    if not comparison.ok:
        return f"onnxslim's model differs: {comparison.describe()}"
    onnx.save(slimmed, str(out))
    return ""


def _change(report: dict) -> tuple[bool, str]:
    kept = report.get("kept", "?")
    if kept == "optimized":
        applied = report.get("applied") or {}
        return True, f"yes: {sum(applied.values())} rewrites, {report.get('nodes_before')} → {report.get('nodes_after')} nodes"
    measured = report.get("measured_speedups") or {}
    found = len(report.get("trace") or [])
    why = f"{found} rewrite{'s' if found != 1 else ''} found, measured {measured['optimized']:.2f}x by taso, not kept" if found and "optimized" in measured else "no rewrite found"
    return False, f"no ({'re-export kept' if kept == 're-export' else 'input kept'}; {why})"


def bench_model(entry: corpus.Entry, threads: list[int], time_limit: float, rounds: int, workdir: Path, log) -> list[Row]:
    """One model at every thread count: onnxslim once, taso optimize per thread count, the variants timed interleaved per thread count."""
    model = onnx.load(str(entry.path()))
    static = corpus.with_static_inputs(model, entry.input_shapes)
    input_sets = random_input_sets(static, (0, 1))
    stem = workdir / entry.name.replace("/", "__")
    slim_path = stem.with_suffix(".slim.onnx")
    start = time.perf_counter()
    slim_note = slim(static, input_sets, slim_path)
    log(f"  onnxslim: {slim_note or 'ok'} ({time.perf_counter() - start:.1f} s)")
    rows = []
    for t in threads:
        row = Row(entry.name, t, len(model.graph.node), slim_note=slim_note)
        out, report_path = stem.with_suffix(f".taso{t}.onnx"), stem.with_suffix(f".taso{t}.json")
        proc, row.optimize_seconds = _optimize(entry, out, report_path, time_limit, threads=t)
        report = read_report(report_path)
        if proc.returncode != 0:
            row.taso_note = f"taso exit {proc.returncode}: {_one_line(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else '')}"
        else:
            row.predicted = report.get("predicted_speedup")
            row.changed, row.change = _change(report)
        same = proc.returncode == 0 and out.read_bytes() == entry.path().read_bytes()
        variants = [("input", entry.path())]
        if not slim_note:
            variants.append(("onnxslim", slim_path))
        if proc.returncode == 0 and not same:
            variants.append(("taso", out))
        try:
            seconds = dict(zip((v[0] for v in variants),
                               interleaved_times([str(p) for _, p in variants], input_sets[0], t, rounds, labels=[v[0] for v in variants])))
        except TimingError as e:
            row.errors.append(str(e))
            log(f"  {t} thread(s): {e}")
            rows.append(row)
            continue
        row.input_ms = seconds["input"] * 1e3
        if "onnxslim" in seconds:
            row.slim = seconds["input"] / seconds["onnxslim"]
        if "taso" in seconds:
            row.taso = seconds["input"] / seconds["taso"]
        elif same:
            row.taso, row.taso_note = 1.0, "input bytes kept"
        log(f"  {t} thread(s): input {row.input_ms:.3f} ms, onnxslim {_ratio(row.slim)}, taso {_ratio(row.taso)} "
            f"(predicted {_ratio(row.predicted)}; {row.change or row.taso_note}; optimize {row.optimize_seconds:.0f} s)")
        rows.append(row)
    return rows


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def verdict(row: Row) -> str:
    """taso against the peer on this row: ahead, level (within 2%) or behind; "" when either is missing."""
    if row.taso is None:
        return ""
    peer = row.slim if row.slim is not None else 1.0  # a user whose onnxslim fails keeps the input
    if row.taso > peer * (1 + LEVEL):
        return "ahead"
    return "behind" if row.taso < peer * (1 - LEVEL) else "level"


def markdown(rows: list[Row]) -> str:
    lines = ["| model | threads | ORT ENABLE_ALL (input) | onnxslim → ENABLE_ALL | taso → ENABLE_ALL | taso predicted | taso changed the graph | taso vs onnxslim |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        base = "—" if r.input_ms is None else f"1.00x ({r.input_ms:.3f} ms)"
        peer = _ratio(r.slim) if r.slim is not None else r.slim_note or "—"
        taso = _ratio(r.taso) + (" (input kept)" if r.taso_note == "input bytes kept" else "") if r.taso is not None else r.taso_note or "—"
        if r.errors:
            base = f"timing failed: {_one_line(r.errors[0])}"
        lines.append(f"| {r.model} | {r.threads} | {base} | {peer} | {taso} | {_ratio(r.predicted)} | {r.change or '—'} | {verdict(r)} |")
    lines.append("")
    for t in sorted({r.threads for r in rows}):
        timed = [r for r in rows if r.threads == t and r.taso is not None and r.input_ms is not None]
        if not timed:
            continue
        peers = [r.slim if r.slim is not None else 1.0 for r in timed]
        counts = {v: sum(verdict(r) == v for r in timed) for v in ("ahead", "level", "behind")}
        changed = [r for r in timed if r.changed]
        lines.append(f"{t} thread(s), {len(timed)} models: geometric mean onnxslim {_geomean(peers):.3f}x, taso {_geomean([r.taso for r in timed]):.3f}x "
                     f"(onnxslim failures count as 1.00x); taso ahead of onnxslim on {counts['ahead']}, level on {counts['level']}, "
                     f"behind on {counts['behind']}; taso changed the graph on {len(changed)}"
                     + (f", ahead on {sum(verdict(r) == 'ahead' for r in changed)} of them" if changed else "") + ".")
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="a corpus model (torch-script/lstm_cell_unrolled16) or zoo/NAME (taso.models); repeatable "
                                                         "(default: the recurrent exports of both exporters, nasnet_a_cell, bert_encoder, zoo nasrnn, squeezenet, bert_base)")
    parser.add_argument("--threads", type=int, action="append", help="intra-op threads, repeatable (default 1 and 2)")
    parser.add_argument("--time-limit", type=float, default=20.0, help="taso optimize's search seconds per model and thread count (default 20)")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds (default 9)")
    parser.add_argument("--json", type=Path, default=Path("bench_exports.json"), help="where to write the rows (default bench_exports.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    threads = args.threads or [1, 2]
    names = args.model or list(DEFAULT_MODELS)
    rows: list[Row] = []

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(names, 1):
            log(f"[{i}/{len(names)}] {name} ({time.perf_counter() - start:.0f} s so far)")
            entry = resolve(name, Path(tmp))
            if isinstance(entry, str):
                log(f"  skipped: {entry}")
                rows += [Row(name, t, 0, slim_note="—", taso_note=entry) for t in threads]
                continue
            rows += bench_model(entry, threads, args.time_limit, args.rounds, Path(tmp), log)
            args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")  # kept after every model
    rows.sort(key=lambda r: (r.threads, names.index(r.model)))
    print(markdown(rows))
    log(f"done in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
