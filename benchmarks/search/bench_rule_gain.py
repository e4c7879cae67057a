"""What a library adds to the optimizer: ``taso optimize`` with the shipped library and with another, side by side.

Issue 27 asks what the depth-4 rules add. For each model (taso's zoo, the real-world
corpus's exports; models/corpus.py builds them) it runs ``taso optimize`` through the
CLI twice, measured ``ort-cpu`` costs at the default time limit: once with the shipped
library, once with ``--library FILE`` merged into it (the shipped rules plus FILE's, by rule
id). It reads each run's predicted cost and the rules it applied, and times the input and
both outputs in one :func:`taso.measure.timing.interleaved_times` call (input time / output time).

Run: python benchmarks/search/bench_rule_gain.py --library depth4.json [--model zoo/nasrnn ...] [--rounds 7]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from end_to_end.bench_corpus import read_report  # noqa: E402
from peers.bench_exports import resolve  # noqa: E402
from search.bench_eqsat import geomean, optimize, predicted_speedup, speedup_text  # noqa: E402
from taso.models import corpus

from taso.measure.inputs import random_input_sets
from taso.measure.timing import TimingError, interleaved_times  # noqa: E402
from taso.rules import Library  # noqa: E402

DEFAULT_MODELS = ("zoo/nasrnn", "zoo/squeezenet", "zoo/resnet50", "zoo/bert", "torch-dynamo/lstm_cell_unrolled16",
                  "torch-script/lstm_cell_unrolled16", "torch-dynamo/gru_cell_unrolled32", "torch-dynamo/transformer_decoder")


def merged_library(extra: str, out: Path) -> tuple[int, int]:
    """The shipped library plus ``extra``'s proved rules (by id) written to ``out``: (shipped rules, rules added)."""
    from taso.pipeline.library import DEFAULT_LIBRARY

    shipped = Library.load(DEFAULT_LIBRARY)
    known = {r.id for r in shipped.rules}
    added = [r for r in Library.load(extra).rules if r.status == "proved" and r.id not in known]
    Library([*shipped.rules, *added], {**shipped.header, "merged": {"from": Path(extra).name, "added": len(added)}}).save(out)
    return len(shipped.rules), len(added)


def _applied(report: Path) -> list[str]:
    """The rules the run's best graph applied (the report's ``applied``: rule -> times)."""
    return list(read_report(report).get("applied", {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--library", required=True, help="a verified rule file (taso verify's output) to add to the shipped one")
    parser.add_argument("--model", action="append", help="zoo/NAME or a corpus model; repeatable")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    lines = ["| model | predicted shipped | predicted merged | measured shipped | measured merged | merged-only rules applied |",
             "|---|---:|---:|---:|---:|---|"]
    gains = {"shipped": [], "merged": []}
    with tempfile.TemporaryDirectory(prefix="taso-rule-gain-") as tmp:
        workdir = Path(tmp)
        merged = workdir / "merged.json"
        shipped_count, added = merged_library(args.library, merged)
        log(f"shipped {shipped_count:,} rules; merged adds {added:,} proved rules from {args.library}")
        for name in args.model or DEFAULT_MODELS:
            entry = resolve(name, workdir)
            if isinstance(entry, str):
                log(f"{name}: {entry}")
                continue
            stem = workdir / entry.name.replace("/", "__")
            shape_args = corpus.input_shape_args(entry)
            runs, outputs = {}, {}
            for label, extra in (("shipped", ()), ("merged", ("--library", str(merged)))):
                out, report = stem.with_suffix(f".{label}.onnx"), stem.with_suffix(f".{label}.json")
                run = runs[label] = optimize(entry.path(), out, report, "backtracking", None, shape_args, extra)
                run.eqsat = {"applied": _applied(report)}
                log(f"  {label}: exit {run.exit}, cost {run.initial_ms} -> {run.best_ms} ms {run.note}")
                if run.exit == 0:
                    if run.same_bytes:
                        run.measured = 1.0
                    else:
                        outputs[label] = out
            if outputs:
                model = onnx.load(str(entry.path()))
                feeds = random_input_sets(corpus.with_static_inputs(model, entry.input_shapes), (0,))[0]
                names = ["input", *outputs]
                try:
                    seconds = interleaved_times([str(entry.path()), *map(str, outputs.values())], feeds, 1, args.rounds, labels=names)
                    for label, s in zip(names[1:], seconds[1:]):
                        runs[label].measured = seconds[0] / s
                except TimingError as e:
                    log(f"  timing: {e}")
            shipped_rules = set(runs["shipped"].eqsat["applied"])
            new = sorted(set(runs["merged"].eqsat["applied"]) - shipped_rules)
            for label in gains:
                gains[label].append(runs[label].measured)
            p = {k: predicted_speedup(r) for k, r in runs.items()}
            lines.append(f"| {entry.name} | {p['shipped'] or 0:.3f}x | {p['merged'] or 0:.3f}x | {speedup_text(runs['shipped'])} | "
                         f"{speedup_text(runs['merged'])} | {', '.join(new[:4]) or '—'}{' …' if len(new) > 4 else ''} |")
            log(lines[-1])
    lines += ["", f"geometric mean measured speedup: shipped {geomean(gains['shipped']):.3f}x, merged {geomean(gains['merged']):.3f}x"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
