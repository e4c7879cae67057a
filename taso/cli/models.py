"""The ``taso models`` command: list the benchmark models or write one to a file.

    taso models list
    taso models build NAME -o FILE.onnx [--batch N] [--seed S] [--option KEY=VALUE ...]

Bad input (an unknown model or option, an unwritable path) ends with one line on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

import onnx

from taso.onnx.files import write_atomically

from ..models import _zoo

_USAGE_ERROR = 2


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Registers the ``models`` sub-command and its ``list`` and ``build`` actions.

    The parsed namespace carries ``func=run``, so a dispatcher can call ``args.func(args)``.
    """
    parser = subparsers.add_parser(
        "models", help="list or build the benchmark models", description=__doc__.split("\n")[0]
    )
    parser.set_defaults(func=run)
    actions = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    actions.add_parser("list", help="print each model's size and cost")
    build = actions.add_parser("build", help="write one model as ONNX")
    build.add_argument("name", metavar="NAME", help="a model name from 'taso models list'")
    build.add_argument("-o", "--output", required=True, metavar="FILE", help="the .onnx path")
    build.add_argument("--batch", type=int, help="inputs per inference (default 1)")
    build.add_argument("--seed", type=int, help="seed of the random weights (default 0)")
    build.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a model option, e.g. layers=2 (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    """Runs ``taso models ACTION`` and returns the exit status."""
    try:
        if args.models_command == "list":
            _list()
            return 0
        return _build(args)
    except (ValueError, OSError) as error:
        print(f"taso models: error: {error}", file=sys.stderr)
        return _USAGE_ERROR


def _list() -> None:
    rows = [("name", "parameters", "nodes", "GFLOPs")]
    for name in _zoo.names():
        info = _zoo.describe(name)
        rows.append((name, f"{info.parameters:,}", str(info.nodes), f"{info.gflops:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:]))]
        print("  ".join(cells))


def _build(args: argparse.Namespace) -> int:
    options = parse_options(args.name, args.option)
    for key in ("batch", "seed"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    directory = os.path.dirname(os.path.abspath(args.output))
    # Check the destination before a build that may take seconds.
    if os.path.isdir(args.output):
        raise OSError(f"cannot write {args.output}: it is a directory")
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
        raise OSError(f"cannot write {args.output}: {directory} is not a writable directory")
    model = _zoo.build(args.name, **options)
    # Written beside the target and renamed, so a failed write leaves no partial model.
    write_atomically(args.output, lambda tmp: onnx.save(model, tmp))
    print(f"wrote {args.output} ({args.name}, {len(model.graph.node)} nodes)")
    return 0


def parse_options(name: str, items: list[str]) -> dict[str, object]:
    """Parses ``KEY=VALUE`` strings into typed options of model ``name``.

    Each value is converted to the type of the option's default.

    Raises:
        ValueError: If an item has no ``=``, names an unknown option or has a bad value.
    """
    defaults = _zoo.default_options(name)
    options: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"option {item!r} is not KEY=VALUE")
        if key not in defaults:
            raise ValueError(
                f"unknown option {key!r} for model {name!r}; valid options: {', '.join(defaults)}"
            )
        kind = type(defaults[key])
        try:
            options[key] = kind(text)
        except ValueError:
            raise ValueError(f"option {key} must be {kind.__name__}, got {text!r}") from None
    return options
