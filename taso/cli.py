"""The `taso` command line: one sub-command per job (info, models, ...).

Every error a user can cause is a :class:`~taso.errors.TasoError`: it is printed as one
line on stderr and the exit code is 2. Nothing else should escape; if it does, that is a
bug and the traceback is the right report.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence

from .errors import TasoError

__all__ = ["main", "parse_input_shapes", "EXIT_USAGE", "EXIT_MISMATCH", "EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED"]

# Exit codes (documented in the README): 0 success; 2 a problem with the user's input (one
# line on stderr); 3 the optimized model failed its check on ONNX Runtime (nothing written);
# 130 Ctrl-C; 141 stdout closed early (`taso info MODEL | head -1`), quietly, as SIGPIPE would.
EXIT_USAGE = 2
EXIT_MISMATCH = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

# 2**40 float32 elements are 4 TiB: a shape beyond it is a typo, not a model.
MAX_INPUT_ELEMENTS = 2**40


def parse_input_shapes(items: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """Parses repeated ``--input-shape name=1,3,224,224`` options.

    Raises:
        TasoError: on a malformed item.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or ():
        name, sep, dims = item.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip() != "")
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d <= 0 for d in shape):
            raise TasoError(f"--input-shape {item!r}: expected NAME=D0,D1,... with positive integers, e.g. input=1,3,224,224")
        if math.prod(shape) > MAX_INPUT_ELEMENTS:
            raise TasoError(f"--input-shape {item!r}: {math.prod(shape):,} elements is more than any machine can hold (at most {MAX_INPUT_ELEMENTS:,})")
        shapes[name] = shape
    return shapes


def _add_input_shape_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                        help="the size of an input to measure (info) or import (import-taso) at; symbolic dims stay symbolic (repeatable)")


def _cmd_info(args: argparse.Namespace) -> int:
    from .info import describe_graph, describe_library, format_description, format_library, is_rule_file, to_json
    from .onnx import load_onnx

    if args.costs or args.check is not None:
        _print_costs(args.check, args.json, to_json)
        if args.file is None:
            return 0
    if args.file is None:
        raise TasoError("taso info needs a FILE (an .onnx model or a .json / .jsonl.gz rule file), or --costs")
    if is_rule_file(args.file):
        from .rules import Library

        summary = describe_library(Library.load(args.file))
        print(to_json(summary) if args.json else format_library(summary, args.file))
        return 0
    from .onnx import read_model

    model, shapes = read_model(args.file), parse_input_shapes(args.input_shape)
    graph = load_onnx(model, shapes)
    summary = describe_graph(graph)
    print(to_json(summary) if args.json else format_description(summary, args.file))
    return 0


def _print_costs(check: int | None, as_json: bool, to_json) -> None:
    """`taso info --costs [--check N]`: the cost cache's tables and their health, after spot-checking N entries of this machine's now."""
    from .cost import CostCache, format_cost_report

    cache = CostCache()
    checks = None
    if check is not None:
        if check < 1:
            raise TasoError(f"--check {check}: the number of entries to re-measure must be at least 1")
        from .cost.ort_cpu import check_cached_costs, fingerprint

        checks = check_cached_costs(cache, check)
        cache.save()
    report = cache.report()
    if checks is not None:
        report["checked_now"] = {c.fingerprint: {"entries": [v.to_json() for v in c.verdicts], "marked_stale": c.marked_stale} for c in checks}
    if as_json:
        print(to_json(report))
        return
    print(format_cost_report(report))
    if checks is not None and not checks:
        print(f"no cost table of this machine to check ({fingerprint(1).replace('threads=1', 'threads=N')})")
    for c in checks or ():
        print(f"checked now, {c.fingerprint}:")
        print("\n".join(f"  {line}" for line in c.describe()) or "  (no entry whose key can be re-measured)")


def _cmd_import_taso(args: argparse.Namespace) -> int:
    from taso.verifier.taso_import import run_import

    result = run_import(args.file, args.output, parse_input_shapes(args.input_shape), args.generic_shapes)
    print(result.summary())
    print(f"wrote {len(result.library)} candidate rules to {args.output} (prove them with: taso verify {args.output} -o LIBRARY.json)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="taso", description="A tensor-graph superoptimizer: generate, verify and apply graph substitutions.")
    parser.add_argument("--version", action="version", version=f"taso {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    info = sub.add_parser("info", help="describe an ONNX model or a rule file")
    info.add_argument("file", nargs="?", help="an .onnx model, or a .json or .jsonl.gz rule file (candidates or library)")
    info.add_argument("--costs", action="store_true",
                      help="show the measured-cost cache: entries per hardware fingerprint, how many were spot-checked, are suspect or stale, "
                           "and the worst disagreements")
    info.add_argument("--check", type=int, metavar="N",
                      help="with --costs: re-measure N entries of this machine's cost table now and report them (before quoting figures)")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    _add_input_shape_option(info)
    info.set_defaults(func=_cmd_info)

    taso_import = sub.add_parser("import-taso", help="import TASO's published substitutions (graph_subst.pb) as candidate rules")
    taso_import.add_argument("file", help="TASO's rule collection (protobuf RuleCollection), e.g. graph_subst.pb")
    taso_import.add_argument("-o", "--output", required=True, help="the rule file to write (candidates: prove them with taso verify)")
    taso_import.add_argument("--generic-shapes", action="store_true",
                             help="example shapes where every dimension the types leave free has its own size (not TASO's pool)")
    _add_input_shape_option(taso_import)
    taso_import.set_defaults(func=_cmd_import_taso)

    # Each stage package contributes its own sub-command through a `cli` module.
    import importlib

    for module_name in ("taso.generator.cli", "taso.verifier.cli", "taso.optimize_cli", "taso.bench", "taso.models.cli"):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            continue  # a stage that is not built yet
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not as a traceback at interpreter exit
        return code
    except TasoError as e:
        print(f"taso: error: {e}", file=sys.stderr)
        return e.exit_code
    except MemoryError as e:
        print(f"taso: error: out of memory{f' ({e})' if str(e) else ''}; is an --input-shape too large?", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as e:  # the environment: a full disk, an unusable TMPDIR, a folder that went away
        where = f" {e.filename}" if getattr(e, "filename", None) else " cannot go on"
        print(f"taso: error:{where}: {e.strerror or e} (a full disk, or an unwritable TMPDIR or TASO_CACHE_DIR?); the input is untouched",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("taso: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _silence_stdout() -> None:
    """After the reader went away (`| head`), later writes and the exit-time flush must not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout replaced by an object without a file descriptor (tests)
        pass


if __name__ == "__main__":
    sys.exit(main())
