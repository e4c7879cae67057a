"""Real exports against the graph simplifiers: ONNX Runtime alone, onnxslim, onnxsim, taso, and taso after the best of them (issues 12, 22).

For each model — transformers (``nn.TransformerEncoder``/``Decoder``, GPT-2- and
DistilBERT-style models, a BERT encoder), PyTorch ``LSTMCell``/``GRUCell`` unrolled over time and
a two-layer ``nn.LSTM``, each from both exporters, a NASNet-A cell and an application's CRNN from
the corpus (models/corpus.py; build it first), and models of taso's own zoo
(``taso.models``) — and each thread count:

* the input file on ONNX Runtime CPU with ORT_ENABLE_ALL: the reference (1.00x);
* the peers a user would run first: ``onnxslim.slim`` and ``onnxsim.simplify`` on the model (its
  shapes pinned as taso's are), each checked against the input on random inputs, then ENABLE_ALL;
* ``taso optimize`` through the CLI as a user would (measured ``ort-cpu`` costs at that thread
  count, ``--time-limit`` seconds of search), then ENABLE_ALL. When taso wrote the input's bytes
  back, its ratio is 1 by construction;
* ``taso optimize`` run on the faster peer's output ("taso after the best peer"): what is left
  for taso once a simplifier ran. Above taso alone by more than 2%, the peer did something taso
  does not.

The variants of one model are timed together in interleaved series (rounds in a rotating order,
the median of each round's fastest run), so a load change hits them alike; ratios are input time
/ variant time (above 1: faster than the input), the median over ``--series`` series (3), each in
fresh sessions (:func:`taso.measure.timing.fresh_session_speedups`: one session's memory layout once
measured the BERT encoder's taso output at 0.97x, 1.11x when timed again). The best peer
is picked by a first, shorter interleaved timing of the two. Prints one Markdown table and the
geometric means, writes JSON after every model, prints progress on stderr.

``--peers all --target ort --model transformers``: the ten transformer exports against every peer (ONNX Runtime's
transformers optimizer and onnxscript's optimizer and rewriter too), taso allowed ONNX Runtime's contrib operators.

Run: python -m taso.models.corpus build && python benchmarks/peers/bench_exports.py [--threads 1 --threads 2]
     [--model torch-script/lstm_cell_unrolled16 --model zoo/nasrnn ... | --model transformers] [--peers all] [--target ort]
     [--time-limit 9] [--rounds 9] [--series 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from end_to_end.bench_corpus import read_report  # noqa: E402
from taso.models import corpus

from taso.bench import peers as peer_runs
from taso.measure.inputs import random_input_sets
from taso.measure.timing import TimingError, fresh_session_speedups, interleaved_times  # noqa: E402

TRANSFORMERS = ("transformer_encoder", "transformer_decoder", "gpt2_decoder", "distilbert_encoder", "bert_encoder", "vit_encoder")
RECURRENT = ("lstm_cell_unrolled16", "lstm_cell_unrolled64", "gru_cell_unrolled32", "lstm_2layer")
DEFAULT_MODELS = (*(f"{source}/{arch}" for arch in TRANSFORMERS + RECURRENT for source in ("torch-script", "torch-dynamo")),
                  "torch-dynamo/nasnet_a_cell", "pypi-wheel/captcha_crnn", "zoo/nasrnn", "zoo/squeezenet", "zoo/bert_base")
TRANSFORMER_MODELS = tuple(f"{source}/{arch}" for source in ("torch-dynamo", "torch-script") for arch in TRANSFORMERS)  # --model transformers
PEERS = ("onnxslim", "onnxsim")  # the default peers; --peers chooses among taso.bench.peers.PEERS
LEVEL = 0.02  # within 2% of each other: level


@dataclass
class Row:
    model: str
    threads: int
    nodes: int
    input_ms: float | None = None
    peers: dict[str, float | None] = field(default_factory=dict)  # input time / the peer's output time; None when it failed
    peer_notes: dict[str, str] = field(default_factory=dict)  # why a peer has no figure
    taso: float | None = None  # input time / taso's output time; 1.0 when taso wrote the input's bytes back
    taso_note: str = ""
    best_peer: str = ""
    taso_after_peer: float | None = None  # input time / (taso run on the best peer's output)'s time
    predicted: float | None = None  # taso's search: initial cost / best cost
    changed: bool = False  # taso wrote a rewritten graph (kept "optimized")
    change: str = ""
    optimize_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def best_peer_ratio(self) -> float:
        """The faster peer's ratio; 1.00x when both failed (the user keeps the input)."""
        return max([v for v in self.peers.values() if v is not None], default=1.0)


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
        return "not a corpus model (python -m taso.models.corpus list)"
    if not entries[name].path().exists():
        return f"not built: python -m taso.models.corpus build --only {name}"
    return entries[name]


def run_peer(peer: str, model: onnx.ModelProto, input_sets: list[dict], out: Path) -> str:
    """The peer's model of ``model`` (:func:`taso.bench.peers.run_peer`: checked against it) written to ``out``; "" on
    success, else one line saying what failed."""
    result, note = peer_runs.run_peer(peer, model, input_sets)
    if result is None:
        return note
    onnx.save(result, str(out))
    return ""


def _optimize(path: Path, out: Path, report: Path, time_limit: float, threads: int, shape_args: list[str],
              target: str = "onnx") -> tuple[subprocess.CompletedProcess, float]:
    """Runs ``taso optimize`` through the CLI as a user would (measured costs); the process and its seconds."""
    command = [sys.executable, "-m", "taso", "optimize", str(path), "-o", str(out), "--cost", "ort-cpu", "--threads", str(threads),
               "--time-limit", str(time_limit), "--report", str(report), "--quiet", "--target", target, *shape_args]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    return proc, time.perf_counter() - start


def _change(report: dict) -> tuple[bool, str]:
    kept = report.get("kept", "?")
    cleaned = sum(((report.get("cleanup") or {}).get("steps") or {}).values())
    if kept == "optimized":
        applied = report.get("applied") or {}
        return True, (f"yes: {sum(applied.values())} rewrites, {cleaned} clean-up steps, "
                      f"{report.get('nodes_before')} → {report.get('nodes_after')} nodes")
    measured = report.get("measured_speedups") or {}
    found = len(report.get("trace") or [])
    why = f"{found} rewrite{'s' if found != 1 else ''} found, measured {measured['optimized']:.2f}x by taso, not kept" if found and "optimized" in measured else "no rewrite found"
    return False, f"no ({'re-export kept' if kept == 're-export' else 'input kept'}; {why})"


def bench_model(entry: corpus.Entry, threads: list[int], time_limit: float, rounds: int, workdir: Path, log, series: int = 3,
                peers: tuple[str, ...] = PEERS, target: str = "onnx") -> list[Row]:
    """One model at every thread count: the peers once, taso per thread count (alone and after the best peer), all timed interleaved."""
    model = onnx.load(str(entry.path()))
    static = corpus.with_static_inputs(model, entry.input_shapes)
    input_sets = random_input_sets(static, (0, 1))
    stem = workdir / entry.name.replace("/", "__")
    peer_paths, peer_notes = {}, {}
    for peer in peers:
        start, path = time.perf_counter(), stem.with_suffix(f".{peer}.onnx")
        peer_notes[peer] = run_peer(peer, static, input_sets, path)
        log(f"  {peer}: {peer_notes[peer] or 'ok'} ({time.perf_counter() - start:.1f} s)")
        if not peer_notes[peer]:
            peer_paths[peer] = path
    shape_args = corpus.input_shape_args(entry)
    rows = []
    for t in threads:
        row = Row(entry.name, t, len(model.graph.node), peer_notes={k: v for k, v in peer_notes.items() if v})
        out, report_path = stem.with_suffix(f".taso{t}.onnx"), stem.with_suffix(f".taso{t}.json")
        proc, row.optimize_seconds = _optimize(entry.path(), out, report_path, time_limit, t, shape_args, target)
        report = read_report(report_path)
        if proc.returncode != 0:
            row.taso_note = f"taso exit {proc.returncode}: {_one_line(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else '')}"
        else:
            row.predicted = report.get("predicted_speedup")
            row.changed, row.change = _change(report)
        same = proc.returncode == 0 and out.read_bytes() == entry.path().read_bytes()
        variants = [("input", entry.path()), *peer_paths.items()]
        try:
            row.best_peer = _faster_peer(variants, input_sets[0], t, peers) if len(peer_paths) > 1 else next(iter(peer_paths), "")
        except TimingError as e:
            row.errors.append(str(e))
        if row.best_peer:
            after = stem.with_suffix(f".{row.best_peer}.taso{t}.onnx")
            after_proc, _ = _optimize(peer_paths[row.best_peer], after, stem.with_suffix(f".after{t}.json"), time_limit, t, shape_args, target)
            if after_proc.returncode == 0:
                variants.append(("taso after the best peer", after))
        if proc.returncode == 0 and not same:
            variants.append(("taso", out))
        try:
            input_seconds, ratios = fresh_session_speedups([str(p) for _, p in variants], input_sets[0], t, rounds, series,
                                                           labels=[v[0] for v in variants])
        except TimingError as e:
            row.errors.append(str(e))
            log(f"  {t} thread(s): {e}")
            rows.append(row)
            continue
        speedups = dict(zip((v[0] for v in variants), ratios))
        row.input_ms = input_seconds * 1e3
        row.peers = {peer: speedups.get(peer) for peer in peers}
        if "taso" in speedups:
            row.taso = speedups["taso"]
        elif same:
            row.taso, row.taso_note = 1.0, "input bytes kept"
        row.taso_after_peer = speedups.get("taso after the best peer")
        log(f"  {t} thread(s): input {row.input_ms:.3f} ms, " + ", ".join(f"{p} {_ratio(v)}" for p, v in row.peers.items())
            + f", taso {_ratio(row.taso)}, taso after {row.best_peer or '—'} {_ratio(row.taso_after_peer)} "
            f"(predicted {_ratio(row.predicted)}; {row.change or row.taso_note}; optimize {row.optimize_seconds:.0f} s)")
        rows.append(row)
    return rows


def _faster_peer(variants: list[tuple[str, Path]], feeds: dict, threads: int, peers: tuple[str, ...] = PEERS) -> str:
    """The peer whose output runs fastest, by a short interleaved timing of the peers' outputs."""
    timed = [(name, path) for name, path in variants if name in peers]
    seconds = interleaved_times([str(p) for _, p in timed], feeds, threads, 3, labels=[n for n, _ in timed])
    return min(zip(seconds, (n for n, _ in timed)))[1]


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def verdict(row: Row) -> str:
    """taso against the best peer on this row: ahead, level (within 2%) or behind; "" when taso has no figure."""
    if row.taso is None:
        return ""
    peer = row.best_peer_ratio
    if row.taso > peer * (1 + LEVEL):
        return "ahead"
    return "behind" if row.taso < peer * (1 - LEVEL) else "level"


def markdown(rows: list[Row], peers: tuple[str, ...] = PEERS) -> str:
    lines = ["| model | threads | ORT ENABLE_ALL (input) | " + " | ".join(f"{p} → ENABLE_ALL" for p in peers)
             + " | taso → ENABLE_ALL | taso after the best peer | taso predicted | taso changed the graph | taso vs the best peer |",
             "|---|---:|---:|" + "---:|" * len(peers) + "---:|---:|---:|---|---|"]
    for r in rows:
        base = "—" if r.input_ms is None else f"1.00x ({r.input_ms:.3f} ms)"
        cells = [_ratio(r.peers.get(p)) if r.peers.get(p) is not None else _one_line(r.peer_notes.get(p, "—"), 60) for p in peers]
        taso = _ratio(r.taso) + (" (input kept)" if r.taso_note == "input bytes kept" else "") if r.taso is not None else r.taso_note or "—"
        after = f"{_ratio(r.taso_after_peer)} (after {r.best_peer})" if r.taso_after_peer is not None else "—"
        if r.errors:
            base = f"timing failed: {_one_line(r.errors[0])}"
        lines.append(f"| {r.model} | {r.threads} | {base} | {' | '.join(cells)} | {taso} | {after} | {_ratio(r.predicted)} | {r.change or '—'} | {verdict(r)} |")
    lines.append("")
    for t in sorted({r.threads for r in rows}):
        timed = [r for r in rows if r.threads == t and r.taso is not None and r.input_ms is not None]
        if not timed:
            continue
        means = ", ".join(f"{p} {_geomean([r.peers.get(p) or 1.0 for r in timed]):.3f}x" for p in peers)
        counts = {v: sum(verdict(r) == v for r in timed) for v in ("ahead", "level", "behind")}
        after = [r for r in timed if r.taso_after_peer is not None]
        gains = [r.taso_after_peer / r.taso for r in after]
        lines.append(f"{t} thread(s), {len(timed)} models: geometric mean {means}, best peer {_geomean([r.best_peer_ratio for r in timed]):.3f}x, "
                     f"taso {_geomean([r.taso for r in timed]):.3f}x (a failed peer counts as 1.00x); taso ahead of the best peer on "
                     f"{counts['ahead']}, level on {counts['level']}, behind on {counts['behind']}"
                     + (f"; taso after the best peer / taso alone: geometric mean {_geomean(gains):.3f}, at most {max(gains):.3f}" if gains else "") + ".")
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", help="a corpus model (torch-script/lstm_cell_unrolled16) or zoo/NAME (taso.models); repeatable "
                                                         "(default: the transformer and recurrent exports of both exporters, nasnet_a_cell, captcha_crnn, zoo nasrnn, squeezenet, bert_base)")
    parser.add_argument("--threads", type=int, action="append", help="intra-op threads, repeatable (default 1 and 2)")
    parser.add_argument("--time-limit", type=float, default=9.0, help="taso optimize's search seconds per model and thread count (default 9, taso's)")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds per series (default 9)")
    parser.add_argument("--series", type=int, default=3, help="timing series, each in fresh sessions; the median ratio is reported (default 3)")
    parser.add_argument("--json", type=Path, default=Path("bench_exports.json"), help="where to write the rows (default bench_exports.json)")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated peers (taso.bench.peers: onnxslim, onnxsim, "
                                                                  "ort-transformers, onnxscript) or all (default %(default)s)")
    parser.add_argument("--target", choices=("onnx", "ort"), default="onnx", help="taso optimize's --target (default onnx)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    threads = args.threads or [1, 2]
    names = [n for name in (args.model or DEFAULT_MODELS) for n in (TRANSFORMER_MODELS if name == "transformers" else (name,))]
    peers = tuple(peer_runs.parse_peers(args.peers))
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
                rows += [Row(name, t, 0, taso_note=entry) for t in threads]
                continue
            rows += bench_model(entry, threads, args.time_limit, args.rounds, Path(tmp), log, args.series, peers, args.target)
            args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")  # kept after every model
    rows.sort(key=lambda r: (r.threads, names.index(r.model)))
    print(markdown(rows, peers))
    log(f"done in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
