"""The exceptions taso raises on bad input.

Every error a user can cause (a missing file, a malformed model, a symbolic shape, a bad
rule file) is a :class:`TasoError`. The CLI prints its message on one line and exits 2;
anything else escaping is a bug in taso.
"""

from __future__ import annotations

import sys

__all__ = ["TasoError", "ShapeError", "GraphError", "ImportError_", "Unsupported", "ExportError", "first_line", "warn"]


class TasoError(Exception):
    """Base class: a problem with the user's input, reported without a traceback."""

    exit_code = 2


class ShapeError(TasoError):
    """An operator was applied to tensors whose shapes or parameters it does not accept."""


class GraphError(TasoError):
    """A graph is malformed: a cycle, an undefined tensor, a tensor defined twice."""


class ImportError_(TasoError):  # noqa: N801 - avoid shadowing the builtin ImportError
    """An ONNX model cannot be loaded (unreadable, invalid, unsupported opset, symbolic dims)."""


class Unsupported(ImportError_):
    """A valid model uses something taso cannot optimize or check (a value type it does not model, an opset newer
    than the installed onnx defines, inputs it cannot draw): ``taso optimize`` writes the input unchanged and says
    why in one line, and only a file ONNX Runtime cannot load at all is refused."""


class ExportError(TasoError):
    """A graph cannot be written as ONNX (for example an op that needs a newer opset)."""


def first_line(error: BaseException) -> str:
    """An error's message in one line (ONNX Runtime's run to many), or its type's name when it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


_warned: set[str] = set()


def warn(message: str) -> None:
    """One line on stderr, ``taso: warning: MESSAGE``, once per process: something the run goes on without (a cost cache
    it cannot save, a damaged one it ignores)."""
    if message not in _warned:
        _warned.add(message)
        print(f"taso: warning: {message}", file=sys.stderr)
