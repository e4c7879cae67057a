"""The `taso` command line: the parser of every sub-command (one module of this room each), exit codes, errors.

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

from ..errors import TasoError

__all__ = ["main", "build_parser", "parse_input_shapes", "add_input_shape_option", "COMMANDS", "EXIT_USAGE", "EXIT_MISMATCH", "EXIT_BROKEN_PIPE", "EXIT_INTERRUPTED"]

# Exit codes (documented in the README): 0 success; 2 a problem with the user's input (one
# line on stderr); 3 the optimized model failed its check on ONNX Runtime (nothing written);
# 130 Ctrl-C; 141 stdout closed early (`taso info MODEL | head -1`), quietly, as SIGPIPE would.
EXIT_USAGE = 2
EXIT_MISMATCH = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

# 2**40 float32 elements are 4 TiB: a shape beyond it is a typo, not a model.
MAX_INPUT_ELEMENTS = 2**40


def parse_input_shapes(items: Sequence[str] | None) -> dict[str, tuple[int | tuple[int, ...], ...]]:
    """Parses repeated ``--input-shape name=1,3,224,224`` options.

    A dim may be a range of sizes, ``1:8:128`` (the first is the size costs are measured at), and an input named
    twice with different sizes at one axis gets both as a range: ``x=24,1,256`` and ``x=24,128,256`` are
    ``x=24,1:128,256``.

    Raises:
        TasoError: on a malformed item.
    """
    shapes: dict[str, tuple[int | tuple[int, ...], ...]] = {}
    for item in items or ():
        name, sep, dims = item.rpartition("=")
        try:
            shape = tuple(_dim_sizes(d) for d in dims.replace("x", ",").split(",") if d.strip() != "")
        except ValueError:
            shape = ()
        if not sep or not name or not shape:
            raise TasoError(f"--input-shape {item!r}: expected NAME=D0,D1,... with positive integers (a range as 1:8:128), "
                            "e.g. input=1,3,224,224")
        if math.prod(max(d) for d in shape) > MAX_INPUT_ELEMENTS:
            raise TasoError(f"--input-shape {item!r}: {math.prod(max(d) for d in shape):,} elements is more than any machine can hold "
                            f"(at most {MAX_INPUT_ELEMENTS:,})")
        if name in shapes:
            earlier = shapes[name]
            if len(earlier) != len(shape):
                raise TasoError(f"--input-shape {item!r}: {name} was given rank {len(earlier)} before")
            shape = tuple(_merged(a if isinstance(a, tuple) else (a,), b) for a, b in zip(earlier, shape))
        shapes[name] = tuple(d[0] if len(d) == 1 else d for d in (s if isinstance(s, tuple) else (s,) for s in shape))
    return shapes


def _dim_sizes(text: str) -> tuple[int, ...]:
    """``8`` -> (8,), ``1:8:128`` -> (1, 8, 128); raises ValueError on anything else (sizes must be positive, distinct)."""
    sizes = tuple(int(part) for part in text.split(":"))
    if any(size <= 0 for size in sizes) or len(set(sizes)) != len(sizes):
        raise ValueError(text)
    return sizes


def _merged(first: tuple[int, ...], more: tuple[int, ...]) -> tuple[int, ...]:
    return first + tuple(size for size in more if size not in first)


# The sub-commands, in the order `taso --help` lists them: each a module of this package.
COMMANDS = ("info", "import_taso", "generate", "verify", "optimize", "bench", "models")


def add_input_shape_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...",
                        help="the size of an input to measure (info) or import (import-taso) at; symbolic dims stay symbolic; "
                             "a dim may be a range, 1:8:128 (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(prog="taso", description="A tensor-graph superoptimizer: generate, verify and apply graph substitutions.")
    parser.add_argument("--version", action="version", version=f"taso {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    # Each sub-command is a module of this room with an add_parser(sub); its job's code lives in the room it names.
    import importlib

    for name in COMMANDS:
        importlib.import_module(f"taso.cli.{name}").add_parser(sub)
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
