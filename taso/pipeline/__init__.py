"""The pipeline ``taso optimize`` runs on a model, and the Python API over it.

| module | job |
|---|---|
| :mod:`.source` | the model as given (timed and copied as given, weights spilled or mapped), candidates, written files |
| :mod:`.library` | the proved rules, both directions, admitted lazily |
| :mod:`.passes` | the graph passes: clean-up, the search, clean-up of its result |
| :mod:`.checks` | the output check on ONNX Runtime: the original run once, every candidate compared with it |
| :mod:`.guard` | the end-to-end guard: candidates timed against the input file, verdicts remembered |
| :mod:`.run` | :func:`optimize_model`: the passes, the checks and the guard in order |
| :mod:`.api` | :func:`optimize` and :func:`save_onnx` for Python callers |
| :mod:`.stages`, :mod:`.verdicts`, :mod:`.outcome` | seconds and memory per stage, the remembered verdicts, what was decided |
"""

from .api import optimize, optimize_with_report, save_onnx
from .checks import OutputMismatchError
from .guard import MIN_CONFIRMED_SPEEDUP
from .library import DEFAULT_LIBRARY, both_directions, load_rules
from .outcome import Outcome
from .run import optimize_model, validate_search_settings
from .source import ModelSource, copy_model_file, export_onnx, model_bytes, write_model

__all__ = ["optimize_model", "optimize", "optimize_with_report", "save_onnx", "ModelSource", "Outcome", "OutputMismatchError", "load_rules",
           "both_directions", "DEFAULT_LIBRARY", "MIN_CONFIRMED_SPEEDUP", "validate_search_settings", "export_onnx", "model_bytes",
           "write_model", "copy_model_file"]
