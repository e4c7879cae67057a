"""Symbolic dims against frozen ones: what keeping ``batch``/``seq`` symbolic costs taso's result, per model.

For each ONNX model with symbolic input dims (e.g. the exports of models/symbolic_exports.py),
one after the other:

a) ``taso optimize FILE -o A.onnx --report A.json``: symbolic, default flags (measured ``ort-cpu``
   costs at the default measurement sizes: 1 for a dim at axis 0, 128 for others; default time limit);
b) the baseline: ``taso optimize NAME.static.onnx`` when that file lies beside FILE (the same model
   exported with fixed sizes, ``symbolic_exports.py --static-too``: what taso gets on a static export,
   each speedup against its own input), else ``taso optimize FILE --static`` (every dim frozen at the
   measurement sizes; that speedup includes what freezing alone buys ONNX Runtime).

Each run times its result against the input file inside taso (interleaved rounds), so the two
runs' ``measured_speedups`` (input time / result time, above 1: faster) are the side-by-side
figures: the kept candidate's speedup, 1.00 when taso kept the input. Printed per model: both
measured speedups and their ratio (symbolic / static; "within 2%" when it is at least 0.98),
both predicted speedups (the search's cost model), A's input and output dims (``dim_param`` names),
whether B's dims are all frozen, and the sizes taso checked A at (from A.json).

Then A.onnx is checked here, independently of taso, against FILE on ONNX Runtime CPU at batch 1, 3
and 7 (times seq 64, 128 and 256 when the inputs have a second symbolic dim): random float
inputs, int inputs as token ids in [0, 100) (attention masks, named ``*mask*``: all ones),
tolerance rtol 1e-3 and atol 1e-4 x max|FILE's output|; OK or MISMATCH per size.

Output: a Markdown table and the per-size checks on stdout, progress on stderr, JSON rewritten after
every model (``--out``, default bench-results/symbolic.json), taso's files in ``--work``.

Run: python -m taso.models.symbolic_exports /tmp/symexports
     python benchmarks/end_to_end/bench_symbolic.py --dir /tmp/symexports [--time-limit S] [--threads T] [--out FILE.json]
  or python benchmarks/end_to_end/bench_symbolic.py /tmp/symexports/lstm_cell_loop.torchscript.onnx ...
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from taso.measure.inputs import describe_sizes

BATCHES = (1, 3, 7)  # sizes of the symbol at axis 0
SEQS = (64, 128, 256)  # sizes of any other symbol
WITHIN = 0.02  # "within 2%": symbolic's speedup at least 98% of static's
RTOL, ATOL_SCALE = 1e-3, 1e-4
TOKEN_IDS = 100  # int inputs: ids drawn from [0, TOKEN_IDS)
REPO = Path(__file__).resolve().parents[2]
SEED = 0


@dataclass
class TasoRun:
    """One ``taso optimize`` process: what it wrote and what its report says."""

    mode: str  # "symbolic" or "static"
    command: list[str]
    returncode: int
    seconds: float
    output: str
    report: dict = field(default_factory=dict)
    stdout: str = ""
    stderr_tail: str = ""  # the last lines of stderr when it failed

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.report)

    @property
    def measured(self) -> float | None:
        """The kept candidate's measured speedup over the input file; 1.0 when the input was kept."""
        kept = self.report.get("kept")
        if kept == "input":
            return 1.0
        return self.report.get("measured_speedups", {}).get(kept)

    @property
    def predicted(self) -> float | None:
        return self.report.get("predicted_speedup")


@dataclass
class Row:
    """One model's results."""

    model: str
    path: str
    symbolic: TasoRun
    static: TasoRun
    a_dims: str = ""  # A.onnx's inputs -> outputs with dim_param names
    b_frozen: bool | None = None  # no dim_param left in B.onnx's inputs and outputs
    checks: dict[str, str] = field(default_factory=dict)  # size label ("b3s128") -> "OK" / "MISMATCH ..." / "ERROR ..."
    side_by_side: dict[str, float] = field(default_factory=dict)  # speedups timed here in one interleaved session

    @property
    def ratio(self) -> float | None:
        """Symbolic's speedup over static's (above 1: symbolic's result is the faster): timed side by side here when
        that ran, else from the two taso runs' own measurements (separate processes, minutes apart)."""
        if self.side_by_side:
            return self.side_by_side["symbolic"] / self.side_by_side["static"]
        a, b = self.symbolic.measured, self.static.measured
        return a / b if a is not None and b else None

    @property
    def level(self) -> bool | None:
        return None if self.ratio is None else self.ratio >= 1.0 - WITHIN  # symbolic at most 2% behind static (ahead is fine)

    @property
    def verified(self) -> bool:
        return bool(self.checks) and all(v == "OK" for v in self.checks.values())


# --------------------------------------------------------------------------- taso


def run_taso(model: Path, work: Path, mode: str, time_limit: float | None, threads: int | None) -> TasoRun:
    """``taso optimize`` through the CLI as a user runs it; ``mode`` "static" adds ``--static``."""
    stem = f"{model.name.removesuffix('.onnx')}.{mode}"  # not Path.with_suffix: the model's name has dots of its own
    output, report = work / f"{stem}.onnx", work / f"{stem}.json"
    report.unlink(missing_ok=True)  # a stale report must not pass for this run's
    command = [sys.executable, "-m", "taso", "optimize", str(model), "-o", str(output), "--report", str(report)]
    command += ["--static"] if mode == "static" else []
    command += ["--time-limit", f"{time_limit:g}"] if time_limit is not None else []
    command += ["--threads", str(threads)] if threads is not None else []
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - start
    run = TasoRun(mode, command, proc.returncode, round(seconds, 1), str(output), _read_json(report), proc.stdout.strip())
    if not run.ok:
        run.stderr_tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
    return run


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


# --------------------------------------------------------------------------- dims


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in initializers]


def _dims(value: onnx.ValueInfoProto) -> list[str]:
    """Each dim's dim_param name or value (``?`` when neither)."""
    return [d.dim_param or (str(d.dim_value) if d.HasField("dim_value") else "?") for d in value.type.tensor_type.shape.dim]


def _symbols(values: Sequence[onnx.ValueInfoProto]) -> list[str]:
    return [d.dim_param for v in values for d in v.type.tensor_type.shape.dim if d.dim_param]


def describe_io(model: onnx.ModelProto) -> str:
    """``x[batch,3,224,224] -> output[batch,1000]``."""
    def show(values: Sequence[onnx.ValueInfoProto]) -> str:
        return " ".join(f"{v.name}[{','.join(_dims(v))}]" for v in values)

    return f"{show(_graph_inputs(model))} -> {show(model.graph.output)}"


def is_frozen(model: onnx.ModelProto) -> bool:
    """No dim_param left on the graph's inputs and outputs."""
    return not _symbols([*_graph_inputs(model), *model.graph.output])


# --------------------------------------------------------------------------- independent check


def check_sizes(model: onnx.ModelProto) -> list[dict[str, int]]:
    """The valuations to check at: the symbol at axis 0 takes BATCHES, any other symbol SEQS (all combinations)."""
    names: dict[str, tuple[int, ...]] = {}
    for value in _graph_inputs(model):
        for axis, d in enumerate(value.type.tensor_type.shape.dim):
            if d.dim_param and d.dim_param not in names:
                names[d.dim_param] = BATCHES if axis == 0 else SEQS
    return [dict(zip(names, sizes)) for sizes in itertools.product(*names.values())]


def size_label(sizes: Mapping[str, int], model: onnx.ModelProto) -> str:
    """``b3s128`` for batch and seq, ``b3`` for batch only; other symbols by name (``n=5``)."""
    axis0 = {d.dim_param for v in _graph_inputs(model) for d in v.type.tensor_type.shape.dim[:1] if d.dim_param}
    if not sizes:
        return "static"
    if len(sizes) > 2:
        return ",".join(f"{k}={v}" for k, v in sizes.items())
    return "".join(f"b{v}" if k in axis0 else f"s{v}" for k, v in sizes.items())


def random_feeds(model: onnx.ModelProto, sizes: Mapping[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs at these sizes: floats N(0, 1), ints token ids in [0, TOKEN_IDS) (``*mask*`` inputs all ones), bools True."""
    feeds = {}
    for value in _graph_inputs(model):
        shape = [sizes[d.dim_param] if d.dim_param else d.dim_value for d in value.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        if np.issubdtype(dtype, np.integer):
            array = np.ones(shape, dtype) if "mask" in value.name.lower() else rng.integers(0, TOKEN_IDS, shape).astype(dtype)
        elif dtype == np.bool_:
            array = np.ones(shape, np.bool_)
        else:
            array = rng.standard_normal(shape).astype(dtype)
        feeds[value.name] = array
    return feeds


def _session(path: str, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.log_severity_level = 4  # a failure is reported by the check, not logged
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def compare(ref: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> str:
    """OK, or MISMATCH with the first output that differs (rtol 1e-3, atol 1e-4 x max|ref|)."""
    if len(ref) != len(got):
        return f"MISMATCH {len(got)} outputs, the original has {len(ref)}"
    for i, (r, g) in enumerate(zip(ref, got)):
        if r.shape != g.shape:
            return f"MISMATCH output {i} shape {list(g.shape)} != {list(r.shape)}"
        scale = float(np.max(np.abs(r), initial=0.0))
        if not np.allclose(g, r, rtol=RTOL, atol=ATOL_SCALE * scale):
            return f"MISMATCH output {i} max|d|={float(np.max(np.abs(g - r))):.2e} max|ref|={scale:.2e}"
    return "OK"


def verify(original: Path, optimized: str, threads: int) -> dict[str, str]:
    """A.onnx against the original on ONNX Runtime at every check size: label -> OK / MISMATCH ... / ERROR ..."""
    model = onnx.load(str(original), load_external_data=False)
    try:
        ref_session, got_session = _session(str(original), threads), _session(optimized, threads)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return {"load": f"ERROR {_one_line(e)}"}
    rng = np.random.default_rng(SEED)
    checks = {}
    for sizes in check_sizes(model):
        label = size_label(sizes, model)
        feeds = random_feeds(model, sizes, rng)
        try:
            ref = ref_session.run(None, feeds)
        except Exception as e:  # noqa: BLE001 - the original cannot run at this size: say so
            checks[label] = f"ERROR original: {_one_line(e)}"
            continue
        try:
            checks[label] = compare(ref, got_session.run(None, feeds))
        except Exception as e:  # noqa: BLE001
            checks[label] = f"MISMATCH optimized fails: {_one_line(e)}"
    return checks


def _one_line(error: BaseException, limit: int = 300) -> str:
    """The error on one line, without ONNX Runtime's boilerplate (status prefix, source path)."""
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : |Non-zero status code returned while running |/onnxruntime_src/\S+ ", "", str(error))
    return " ".join(text.split())[:limit]


# --------------------------------------------------------------------------- one model, report


def bench_model(path: Path, work: Path, time_limit: float | None, threads: int | None) -> Row:
    """Both taso runs, one after the other, then the independent check of the symbolic one."""
    name = path.name.removesuffix(".onnx")
    runs = {}
    static_export = path.with_name(f"{name}.static.onnx")  # the same model exported with fixed sizes, when there is one
    for mode in ("symbolic", "static"):
        _progress(f"{name}: taso optimize ({mode}) ...")
        if mode == "static" and static_export.exists():
            runs[mode] = run_taso(static_export, work, "static-export", time_limit, threads)
        else:
            runs[mode] = run_taso(path, work, mode, time_limit, threads)
        _progress(f"{name}: {mode} exit {runs[mode].returncode} in {runs[mode].seconds} s, kept {runs[mode].report.get('kept')}")
    row = Row(name, str(path), runs["symbolic"], runs["static"])
    if row.symbolic.ok:
        row.a_dims = describe_io(onnx.load(row.symbolic.output, load_external_data=False))
        _progress(f"{name}: checking A against the input on ONNX Runtime ...")
        row.checks = verify(path, row.symbolic.output, threads or 1)
    if row.static.ok:
        row.b_frozen = is_frozen(onnx.load(row.static.output, load_external_data=False))
    if row.symbolic.ok and row.static.ok:
        _progress(f"{name}: timing input, A, static input and B side by side ...")
        baseline = static_export if static_export.exists() else path
        row.side_by_side = side_by_side(path, Path(row.symbolic.output), baseline, Path(row.static.output), threads or 1)
    return row


def side_by_side(symbolic_in: Path, symbolic_out: Path, static_in: Path, static_out: Path, threads: int, rounds: int = 11) -> dict[str, float]:
    """Both speedups (input time / output time) from one interleaved session at the measurement sizes: the four
    models take turns, so the machine's load drifts through all of them alike."""
    from taso.measure.inputs import random_inputs
    from taso.measure.timing import interleaved_times

    frozen = onnx.load(str(static_out), load_external_data=False)
    feeds = random_inputs(frozen if is_frozen(frozen) else onnx.load(str(static_in), load_external_data=False))
    times = interleaved_times([str(symbolic_in), str(symbolic_out), str(static_in), str(static_out)], feeds, threads, rounds)
    return {"symbolic": times[0] / times[1], "static": times[2] / times[3]}


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _yes_no(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _speedup_cell(run: TasoRun) -> str:
    """``1.18x (optimized)``; when the input was kept, also its best candidate: ``1.00x (input; optimized 1.02x)``."""
    if not run.ok:
        return f"FAILED (exit {run.returncode})"
    kept, candidates = run.report.get("kept"), run.report.get("measured_speedups") or {}
    if kept == "input" and candidates:
        best = max(candidates, key=candidates.get)
        return f"{_x(run.measured)} (input; {best} {_x(candidates[best])})"
    return f"{_x(run.measured)} ({kept})"


def _checks_cell(row: Row) -> str:
    if not row.checks:
        return "—"
    bad = [label for label, verdict in row.checks.items() if verdict != "OK"]
    return f"{len(row.checks)}/{len(row.checks)} OK" if not bad else f"MISMATCH at {', '.join(bad)}"


HEADER = ("model", "measured symbolic", "measured static", "side by side: symbolic, static", "sym/static", "predicted sym / static",
          "A dims (inputs -> outputs)", "B frozen", "taso checked A at", "within 2%", "A vs input here")


def table_row(row: Row) -> tuple[str, ...]:
    checked = describe_sizes(row.symbolic.report.get("checked_sizes") or [])
    pair = f"{_x(row.side_by_side['symbolic'])}, {_x(row.side_by_side['static'])}" if row.side_by_side else "—"
    return (row.model, _speedup_cell(row.symbolic), _speedup_cell(row.static), pair, _x(row.ratio),
            f"{_x(row.symbolic.predicted)} / {_x(row.static.predicted)}", f"`{row.a_dims}`" if row.a_dims else "—",
            _yes_no(row.b_frozen), checked or "—", _yes_no(row.level), _checks_cell(row))


def markdown(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(table_row(r)) + " |" for r in rows]
    return "\n".join(lines)


def details(rows: Sequence[Row]) -> str:
    """The per-size checks, then every failed taso run's command and stderr."""
    lines = ["", "Independent check of A.onnx against the input (ONNX Runtime CPU):"]
    lines += [f"- {r.model}: " + (", ".join(f"{k} {v}" for k, v in r.checks.items()) or "not run (the symbolic run failed)") for r in rows]
    for r in rows:
        for run in (r.symbolic, r.static):
            if not run.ok:
                lines += ["", f"taso FAILED on {r.model} ({run.mode}), exit {run.returncode}: {' '.join(run.command)}", "```",
                          run.stderr_tail or "(no stderr)", "```"]
    return "\n".join(lines)


def write_json(path: Path, rows: Sequence[Row], args: argparse.Namespace) -> None:
    data = {"command": [sys.executable, *sys.argv], "taso_commit": _git_commit(), "machine": platform.platform(),
            "processor": platform.processor(), "time_limit": args.time_limit, "threads": args.threads,
            "rows": [{**asdict(r), "ratio": r.ratio, "within_2pct": r.level, "verified": r.verified,
                      "symbolic_measured": r.symbolic.measured, "static_measured": r.static.measured} for r in rows]}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def _git_commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "taso"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    return proc.stdout.strip() + (" (taso/ modified)" if dirty else "")


def model_files(files: Sequence[Path], directory: Path | None) -> list[Path]:
    """The files given, then every .onnx in ``directory`` (sorted), skipping any this benchmark wrote."""
    found = list(files) + (sorted(directory.glob("*.onnx")) if directory else [])
    return [p for p in found if not p.name.endswith((".symbolic.onnx", ".static.onnx"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path, help="ONNX files with symbolic input dims")
    parser.add_argument("--dir", type=Path, help="also every .onnx file in this directory")
    parser.add_argument("--time-limit", type=float, help="taso's search seconds (default: taso's)")
    parser.add_argument("--threads", type=int, help="taso's --threads and the check's ONNX Runtime threads (default: taso's, 1)")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "symbolic.json", help="JSON results (default %(default)s)")
    parser.add_argument("--work", type=Path, default=REPO / "bench-results" / "symbolic",
                        help="where taso's outputs and reports go, as MODEL.symbolic.onnx/.json and MODEL.static.onnx/.json "
                             "(default %(default)s)")
    args = parser.parse_args(argv)
    paths = model_files(args.models, args.dir)
    if not paths:
        parser.error("no models: give .onnx files or --dir")
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}")
    args.work.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    for path in paths:
        rows.append(bench_model(path.resolve(), args.work.resolve(), args.time_limit, args.threads))
        write_json(args.out, rows, args)
    print(markdown(rows))
    print(details(rows))
    _progress(f"wrote {args.out}")
    failed = any(not (r.symbolic.ok and r.static.ok and r.verified) for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
