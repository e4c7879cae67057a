"""`taso optimize IN.onnx -o OUT.onnx`: search, check on ONNX Runtime, write atomically."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import TasoError, Unsupported, first_line

__all__ = ["add_parser", "run", "EXIT_MISMATCH"]

from ..onnx.files import check_writable
from ..pipeline.checks import OutputMismatchError

EXIT_MISMATCH = OutputMismatchError.exit_code


def add_parser(sub) -> None:
    from ..cost import COST_MODELS
    from ..pipeline.library import TARGETS
    from ..search import ENGINES, SearchConfig

    p = sub.add_parser("optimize", help="optimize an ONNX model with the verified rule library",
                       description="Rewrites a model with proved substitutions chosen by measured cost and checks the result "
                                   "against the original on ONNX Runtime; with measured costs it keeps the result only when it "
                                   "runs faster than the input file, and otherwise writes the input's bytes unchanged. "
                                   "Exit codes: 0 written; 2 bad input (one line on stderr); 3 the optimized model does not "
                                   "match the original or ONNX Runtime cannot run it (nothing written).")
    p.add_argument("input", help="the .onnx model to optimize (never overwritten)")
    p.add_argument("-o", "--output", help="where to write the optimized model (required unless --explain)")
    p.add_argument("--library", help="a verified rule library (default: the one shipped with taso)")
    p.add_argument("--target", choices=TARGETS, default="onnx",
                   help="the runtime the written model is for: onnx (default), standard operators only; ort, ONNX Runtime, "
                        "whose contrib operators (com.microsoft SkipLayerNormalization) it may use too")
    p.add_argument("--cost", choices=COST_MODELS, default="ort-cpu", help="cost model (default: ort-cpu, measured per node and cached; ort-cpu-region also times the region each rewrite changes)")
    p.add_argument("--alpha", type=float, default=SearchConfig.alpha, help="search relaxation (default %(default)s)")
    p.add_argument("--budget", type=int, default=SearchConfig.budget, help="most graphs expanded (default %(default)s)")
    p.add_argument("--time-limit", type=float, default=SearchConfig.time_limit, help="search seconds (default %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads the model will run with (default 1)")
    p.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                   help="the sizes to measure costs at (repeatable); symbolic dims stay symbolic in the output; a dim may be a range, "
                        "x=24,1:8:128,256: searched and timed at each size (default: a batch at 1 and a large batch, 128 for others)")
    p.add_argument("--static", action="store_true", help="freeze every symbolic dim at its measurement size: the output runs at that size only")
    p.add_argument("--inputs", metavar="FILE.npz", help="also check the optimized model on these inputs")
    p.add_argument("--report", metavar="FILE.json", help="write the search report as JSON")
    p.add_argument("--search", choices=ENGINES, default=SearchConfig.engine, dest="engine",
                   help="search engine (default %(default)s): backtracking is TASO's; eqsat saturates an e-graph with the same rules "
                        "and extracts the cheapest graph in it exactly (Tensat); docs/eqsat.md says where each wins")
    p.add_argument("--no-groups", action="store_true",
                   help="no group merges (k products sharing a weight merged in one proved step; taso info lists them): the library's rules only")
    p.add_argument("--no-confirm", action="store_true",
                   help="keep the search's result even if the whole model is not measurably faster on ONNX Runtime (measured ort-cpu and ort-cpu-region costs only)")
    p.add_argument("--retime", action="store_true",
                   help="time the result against the input even if an earlier run on this machine judged the same pair (taso remembers each verdict; the new one replaces it)")
    p.add_argument("--custom-ops", action="append", metavar="LIB", default=[],
                   help="an ONNX Runtime custom-op library (a .so) the model's custom-domain operators need: registered for the "
                        "checks and the timing (repeatable; also $TASO_CUSTOM_OPS). Without it such a model is written unchanged")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--explain", metavar="RULE", help="instead of optimizing, say for each place the rule's operators occur "
                   "whether it applies and why not (a rule id, or text of the rule as `taso info LIBRARY` prints it)")
    p.set_defaults(func=run)


def _check_paths(args) -> None:
    """Everything the user can get wrong is refused before the search, not after it."""
    from ..pipeline.run import validate_search_settings

    if not os.path.exists(args.input):
        raise TasoError(f"{args.input}: no such file")
    if os.path.exists(args.output) and os.path.samefile(args.input, args.output):
        raise TasoError(f"refusing to overwrite the input model {args.input}; choose another -o")
    check_writable(args.output, "-o")
    if args.report:
        if os.path.abspath(args.report) in (os.path.abspath(args.output), os.path.abspath(args.input)):
            raise TasoError(f"--report {args.report}: is the model file; choose another name for the report")
        check_writable(args.report, "--report")
    validate_search_settings(args.alpha, args.budget, args.time_limit, args.threads)




def run(args: argparse.Namespace) -> int:
    from ..cost import make_cost_model
    from ..measure.inputs import load_inputs
    from ..measure.timing import use_custom_ops
    from ..onnx import folding_plan
    from ..pipeline.library import for_target, load_rules
    from ..pipeline.run import optimize_model
    from ..pipeline.source import ModelSource, copy_model_file, write_model
    from ..pipeline.stages import StageClock
    from ..search import SearchConfig
    from .main import parse_input_shapes

    if args.explain is not None:
        return _explain(args)
    if args.output is None:
        raise TasoError("taso optimize needs -o/--output FILE (or --explain RULE)")
    _check_paths(args)
    use_custom_ops(args.custom_ops)
    cost_model = make_cost_model(args.cost, threads=args.threads)  # fail fast: no GPU, unknown model
    clock = StageClock()
    shapes = parse_input_shapes(args.input_shape)
    try:
        with _Progress(args, clock) as progress:
            with clock.stage("load"):
                source = ModelSource.from_file(args.input, shapes, static=args.static).for_target(args.target)
            with clock.stage("rules"):
                rules = for_target(load_rules(args.library), args.target)
            extra = load_inputs(args.inputs, source.graph.inputs) if args.inputs else None
            say = (lambda *a: None) if args.quiet else progress.say
            say(f"taso: {len(source.graph)} nodes, {len(rules)} proved rules, cost model {cost_model.fingerprint}")
            if source.graph.meta.sizes:
                say(f"taso: symbolic dims kept; costs measured at {', '.join(f'{k}={v}' for k, v in source.graph.meta.sizes)}")
            if source.sizes.ranged:
                say(f"taso: searched and timed at each size of {source.sizes.describe()} ({len(source.sizes.valuations())} searches)")
            outcome = optimize_model(source, rules, cost_model, SearchConfig(args.alpha, args.budget, args.time_limit, groups=not args.no_groups, engine=args.engine), args.threads,
                                     confirm=False if args.no_confirm else None, extra_inputs=extra, progress=progress.search_progress, clock=clock,
                                     retime=args.retime)
    except Unsupported as e:
        return _write_unchanged(args, str(e))
    if args.target == "onnx":
        from ..pipeline.targets import ort_gain

        left = ort_gain(outcome.graph, cost_model).note()
        if left:
            outcome.notes.append(left)
    for note in outcome.notes:  # even with --quiet: they say why a candidate was not kept
        print(f"taso: note: {note}", file=sys.stderr)
    with clock.stage("write"):
        if outcome.model is not None:
            write_model(outcome.model, args.output)
        elif source.uses_external_data():  # its data files would not follow a copy: written whole from them
            write_model(source.spilled, args.output)
        else:
            copy_model_file(args.input, args.output)
    folding = folding_plan(outcome.graph)
    print(_format_report(args, source.graph, outcome, folding))
    if args.report:
        _write_report(args.report, source.graph, outcome, folding, cost_model.fingerprint)
    return 0


def _write_unchanged(args: argparse.Namespace, why: str) -> int:
    """A valid model taso cannot optimize or check (``why``): its bytes are the output, and one line says why.

    Only a file that ONNX Runtime cannot load at all is refused (exit 2); one that needs custom-op kernels ONNX Runtime
    was not given is written unchanged too, saying so.

    Raises:
        TasoError: ONNX Runtime cannot load the model either: it is not a valid model.
    """
    from ..measure.timing import open_session
    from ..pipeline.checks import custom_kernels_missing
    from ..pipeline.source import copy_model_file

    try:
        open_session(args.input, threads=1, optimize=False)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        reason = first_line(e)
        if not custom_kernels_missing(args.input, reason):
            raise TasoError(f"{args.input}: ONNX Runtime cannot load the model ({reason}); taso: {why}") from None
        why = f"ONNX Runtime has no kernel for a custom-domain operator ({reason}); give its library with --custom-ops LIB"
    copy_model_file(args.input, args.output)
    print(f"taso: note: written unchanged: {why}", file=sys.stderr)
    print(f"wrote {args.output}: {_KEPT['input']} (taso could not check or optimize it; the note on stderr says why)")
    if args.report:
        from ..pipeline.source import write_model

        write_model(json.dumps({"kept": "input", "unchanged_because": why}, indent=2).encode(), args.report)
    return 0


def _explain(args: argparse.Namespace) -> int:
    """``--explain RULE``: why each directed rule the query names does or does not apply to the model."""
    from ..onnx import load_onnx
    from ..pipeline.library import for_target, load_rules
    from ..search.explain import explain_rule, find_rules
    from .main import parse_input_shapes

    graph = load_onnx(args.input, parse_input_shapes(args.input_shape), static=args.static)
    for rule in find_rules(for_target(load_rules(args.library), args.target), args.explain)[:20]:
        print("\n".join(explain_rule(graph, rule)))
    return 0


class _Progress:
    """Where the run is, on a terminal: a status line naming the stage under way, and a bar over the search
    budget under it (tqdm). Nothing with --quiet, or when stderr is not a terminal."""

    def __init__(self, args, clock):
        self.args, self.clock, self.status, self.search = args, clock, None, None

    def __enter__(self) -> _Progress:
        if not self.args.quiet:
            from tqdm import tqdm

            self.status = tqdm(desc="load", bar_format="taso: {desc} ({elapsed})", file=sys.stderr, leave=False, disable=None)
            if self.status.disable:
                self.status = None
            else:
                self.clock.on_start = self._stage
        return self

    def say(self, line: str) -> None:
        """A line on stderr that the status line does not overwrite."""
        if self.status is None:
            print(line, file=sys.stderr)
        else:
            self.status.write(line, file=sys.stderr)

    def _stage(self, name: str) -> None:
        self.status.set_description_str(name)

    @property
    def search_progress(self):
        """The search's progress callback, or None when nothing is shown."""
        return None if self.status is None else self._searched

    def _searched(self, expanded: int, best: float) -> None:
        if self.search is None:
            from tqdm import tqdm

            self.search = tqdm(total=self.args.budget, desc="search", unit="graph", file=sys.stderr, leave=False, position=1)
        self.search.update(1)
        self.search.set_postfix(best_ms=f"{best * 1e3:.3f}")

    def __exit__(self, *exc) -> None:
        self.clock.on_start = None
        for bar in (self.search, self.status):
            if bar is not None:
                bar.close()


def _write_report(path: str, before, outcome, plan, cost_fingerprint: str) -> None:
    from ..pipeline.source import write_model

    data = {**outcome.report.to_json(), "nodes_before": len(before), "nodes_after": len(outcome.graph), "kept": outcome.kept,
            "cleanup": outcome.cleanup.to_json() if outcome.cleanup else None,
            "folding": {"folded": len(plan.folded), "unfolded": [{"op": n.op.name, "output": n.outputs[0], "why": why} for n, why in plan.unfolded]},
            "measured_speedups": outcome.speedups, "remembered_verdicts": sorted(outcome.remembered), "notes": outcome.notes, "check": outcome.comparison.describe() if outcome.comparison else None,
            "measurement_sizes": dict(before.meta.sizes), "checked_sizes": outcome.checked_sizes,
            "size_speedups": outcome.size_speedups, "dispatch": outcome.dispatch,
            "cost_model": cost_fingerprint, **outcome.clock.to_json()}
    write_model(json.dumps(data, indent=2).encode(), path)


_KEPT = {
    "optimized": "the optimized model",
    "re-export": "taso's cleaned-up graph without rewrites (measured faster than the input)",
    "input": "the input model, byte for byte unchanged",
}


def _cleanup_lines(outcome, plan) -> list[str]:
    """What clean-up and constant folding (``plan``) did, apart from the proved rewrites (for the graph written)."""
    if outcome.kept == "input":
        return []
    lines = [f"  clean-up {outcome.cleanup.describe()}"] if outcome.cleanup is not None else []
    if plan.folded or plan.unfolded:
        lines.append(f"  folding  {plan.describe()}")
    return lines


_EQSAT_CHOICE = {"input": "input (nothing cheaper priced whole on measured costs)", "extraction": "extracted graph",
                 "version": "group-merged version (priced whole at most as the extracted graph)"}


def _search_line(report) -> str:
    """What the search did, in the engine's own terms."""
    if report.engine == "eqsat":
        e = report.eqsat
        return (f"  search   {report.seconds:.1f} s eqsat: {e.iterations} rounds, {e.enodes} e-nodes, {e.applied} of {e.matches} matches "
                f"added, saturation stopped: {e.stop_reason} ({e.seconds_saturating:.1f} s); extraction: {e.extraction} "
                f"({e.seconds_extracting:.1f} s); kept the {_EQSAT_CHOICE[e.chosen]}")
    return (f"  search   {report.seconds:.1f} s ({report.seconds_rewriting:.1f} s rewriting, {report.seconds_costing:.1f} s costing), "
            f"{report.expanded} graphs expanded ({report.cleaned} cleaned up), {report.generated} rewrites tried, {report.accepted} queued, "
            f"stopped: {report.stop_reason.value}")


def _kept(outcome) -> str:
    if outcome.kept == "dispatch":
        return f"one file choosing by size at run time ({outcome.dispatch})"
    if outcome.kept.startswith("optimized@"):
        return f"the model optimized at {outcome.kept.partition('@')[2]} (the fastest at every size)"
    return _KEPT[outcome.kept]


def _size_lines(outcome) -> list[str]:
    """Each candidate's measured speedup at each size of the range (``taso.pipeline.size_guard``)."""
    if not outcome.size_speedups:
        return []
    labels = list(next(iter(outcome.size_speedups.values())))
    width = max(len(name) for name in outcome.size_speedups)
    lines = [f"  measured end to end on ONNX Runtime vs the input file at each size: {'  '.join(f'{label:>10}' for label in labels)}"]
    for name, row in outcome.size_speedups.items():
        figures = "  ".join(f"{row[label]:>9.2f}x" for label in labels)
        lines.append(f"    {name:<{width}} {' ' * max(0, 58 - width)}{figures}  ({'kept' if outcome.kept == name else 'not kept'})")
    return lines


RULE_TEXT_WIDTH = 160  # a rule text past this (an LSTM cell written out: 1,100 characters) is cut; --report has it whole


def _applied_lines(report) -> list[str]:
    """One line per rule applied, with its count and the rule as people read it."""
    lines = []
    for rule, count in report.applied.most_common():
        text = report.rule_texts.get(rule, "")
        if len(text) > RULE_TEXT_WIDTH:
            text = text[:RULE_TEXT_WIDTH - 60].rstrip() + f" ... ({len(text)} characters: --report's rule_texts)"
        lines.append(f"    {count:>3}  {rule}  {text}".rstrip())
    return lines


def _format_report(args, before, outcome, folding) -> str:
    from ..measure.inputs import describe_sizes
    from ..search import StopReason

    report, after = outcome.report, outcome.graph
    lines = [
        f"wrote {args.output}: {_kept(outcome)}",
        f"  cost     {report.initial_cost * 1e3:.3f} ms -> {report.best_cost * 1e3:.3f} ms  (predicted speedup {report.predicted_speedup:.2f}x, {args.cost})",
    ]
    if report.input_overhead:
        lines.append(f"  input    {report.input_overhead * 1e3:+.3f} ms in the file for the shapes only its value_info declares "
                     "(the prediction counts it; taso's output declares none)")
    lines += _size_lines(outcome)
    for name, speedup in ({} if outcome.size_speedups else outcome.speedups).items():
        lines.append(f"  measured {speedup:.2f}x end to end on ONNX Runtime vs the input file: {name} "
                     f"({'kept' if outcome.kept == name else 'not kept'}"
                     f"{'; remembered from an earlier run on this machine, --retime times it again' if name in outcome.remembered else ''})")
    lines += [
        f"  nodes    {len(before)} -> {len(after)}",
        *_cleanup_lines(outcome, folding),
        _search_line(report)
        + (f" (a longer --time-limit than {args.time_limit:g} s may find more)" if report.stop_reason is StopReason.TIME_LIMIT else ""),
    ]
    lines.append(f"  stages   {outcome.clock.describe()}")
    if outcome.comparison is not None:
        at = f" at {describe_sizes([dict(before.meta.sizes), *outcome.checked_sizes])}" if outcome.checked_sizes else ""
        lines.append(f"  check    {outcome.comparison.describe()}{at} ({outcome.check_seconds:.1f} s)")
    if report.applied and outcome.kept == "dispatch":
        lines.append(f"  rules applied in the branches optimized at the measurement sizes ({outcome.dispatch}):")
        lines += _applied_lines(report)
    elif report.applied and outcome.kept != "optimized":
        lines.append(f"  rules applied: none kept ({sum(report.applied.values())} rewrites found did not pay end to end)")
    elif report.applied:
        lines.append("  rules applied:")
        lines += _applied_lines(report)
    else:
        lines.append("  rules applied: none (no rewrite lowered the cost)")
    return "\n".join(lines)
