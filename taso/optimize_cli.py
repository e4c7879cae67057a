"""`taso optimize IN.onnx -o OUT.onnx`: search, check on ONNX Runtime, write atomically."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .errors import TasoError

__all__ = ["add_parser", "run", "EXIT_MISMATCH"]

EXIT_MISMATCH = 3


def add_parser(sub) -> None:
    from .cost import COST_MODELS
    from .search import SearchConfig

    p = sub.add_parser("optimize", help="optimize an ONNX model with the verified rule library",
                       description="Rewrites a model with proved substitutions chosen by measured cost, checks the result "
                                   "against the original on ONNX Runtime, and writes it only if they match (exit 3 otherwise).")
    p.add_argument("input", help="the .onnx model to optimize (never overwritten)")
    p.add_argument("-o", "--output", required=True, help="where to write the optimized model")
    p.add_argument("--library", help="a verified rule library (default: the one shipped with taso)")
    p.add_argument("--cost", choices=COST_MODELS, default="ort-cpu", help="cost model (default: ort-cpu, measured and cached)")
    p.add_argument("--alpha", type=float, default=SearchConfig.alpha, help="search relaxation (default %(default)s)")
    p.add_argument("--budget", type=int, default=SearchConfig.budget, help="most graphs expanded (default %(default)s)")
    p.add_argument("--time-limit", type=float, default=SearchConfig.time_limit, help="search seconds (default %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads the model will run with (default 1)")
    p.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...", help="fix a symbolic input shape (repeatable)")
    p.add_argument("--inputs", metavar="FILE.npz", help="also check the optimized model on these inputs")
    p.add_argument("--report", metavar="FILE.json", help="write the search report as JSON")
    p.add_argument("--no-confirm", action="store_true",
                   help="keep the search's result even if the whole model is not measurably faster on ONNX Runtime (ort-cpu cost only)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _check_paths(args) -> None:
    if not os.path.exists(args.input):
        raise TasoError(f"{args.input}: no such file")
    if os.path.exists(args.output) and os.path.samefile(args.input, args.output):
        raise TasoError(f"refusing to overwrite the input model {args.input}; choose another -o")
    if os.path.isdir(args.output):
        raise TasoError(f"{args.output}: is a directory; give a file name for the optimized model")
    directory = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(directory):
        raise TasoError(f"{args.output}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK) or (os.path.exists(args.output) and not os.access(args.output, os.W_OK)):
        raise TasoError(f"{args.output}: not writable")
    if args.alpha < 1.0 or args.budget < 1 or args.time_limit <= 0 or args.threads < 1:
        raise TasoError("--alpha must be >= 1, --budget and --threads >= 1, --time-limit > 0")


def run(args: argparse.Namespace) -> int:
    from .cli import parse_input_shapes
    from .cost import make_cost_model
    from .onnx import export_onnx, load_onnx, read_model, save_onnx
    from .optimize import load_rules
    from .search import SearchConfig, search
    from .validate import compare_models, load_inputs, random_inputs

    _check_paths(args)
    cost_model = make_cost_model(args.cost, threads=args.threads)  # fail fast: no GPU, unknown model
    graph = load_onnx(args.input, parse_input_shapes(args.input_shape))
    rules = load_rules(args.library)
    input_sets = [random_inputs(graph.inputs, seed) for seed in (0, 1)]
    if args.inputs:
        input_sets.append(load_inputs(args.inputs, graph.inputs))
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr))
    say(f"taso: {len(graph)} nodes, {len(rules)} proved rules, cost model {cost_model.fingerprint}")
    bar = None
    if not args.quiet:
        from tqdm import tqdm

        bar = tqdm(total=args.budget, desc="search", unit="graph", file=sys.stderr, leave=False, disable=None)  # off when stderr is not a terminal

    def progress(expanded: int, best: float) -> None:
        bar.update(1)
        bar.set_postfix(best_ms=f"{best * 1e3:.3f}")

    try:
        best, report = search(graph, rules, cost_model, SearchConfig(args.alpha, args.budget, args.time_limit), progress if bar else None)
    finally:
        if bar is not None:
            bar.close()
        cost_model.close()
    confirmed = None
    if args.cost == "ort-cpu" and not args.no_confirm:
        from .optimize import MIN_CONFIRMED_SPEEDUP, confirm_end_to_end

        best, confirmed = confirm_end_to_end(graph, best, args.threads)
        if confirmed is not None and best is graph:
            say(f"taso: the rewrites measured {confirmed:.3f}x end to end on ONNX Runtime (< {MIN_CONFIRMED_SPEEDUP}x): keeping the original graph")
    started = time.perf_counter()
    optimized = export_onnx(best)
    comparison = compare_models(read_model(args.input), optimized, input_sets, threads=args.threads)
    check_seconds = time.perf_counter() - started
    if not comparison.ok:
        print(f"taso: error: the optimized model does not match the original on ONNX Runtime: {comparison.describe()}; nothing was written", file=sys.stderr)
        return EXIT_MISMATCH
    save_onnx(best, args.output)
    print(_format_report(args, graph, best, report, comparison, check_seconds, confirmed))
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump({**report.to_json(), "nodes_before": len(graph), "nodes_after": len(best), "check": comparison.describe(),
                       "cost_model": cost_model.fingerprint}, f, indent=2)
    return 0


def _format_report(args, before, after, report, comparison, check_seconds: float, confirmed: float | None) -> str:
    lines = [
        f"wrote {args.output}",
        f"  cost     {report.initial_cost * 1e3:.3f} ms -> {report.best_cost * 1e3:.3f} ms  (predicted speedup {report.predicted_speedup:.2f}x, {args.cost})",
    ]
    if confirmed is not None:
        lines.append(f"  measured {confirmed:.2f}x end to end on ONNX Runtime ({'kept' if after is not before else 'not enough: the original graph was written'})")
    lines += [
        f"  nodes    {len(before)} -> {len(after)}",
        f"  search   {report.seconds:.1f} s, {report.expanded} graphs expanded, {report.generated} rewrites tried, stopped: {report.stop_reason.value}",
        f"  check    {comparison.describe()} ({check_seconds:.1f} s)",
    ]
    if report.applied and after is before:
        lines.append(f"  rules applied: none kept ({sum(report.applied.values())} rewrites found did not pay end to end)")
    elif report.applied:
        lines.append("  rules applied:")
        lines += [f"    {count:>3}  {rule}" for rule, count in report.applied.most_common()]
    else:
        lines.append("  rules applied: none (no rewrite lowered the cost)")
    return "\n".join(lines)
