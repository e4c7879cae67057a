"""The original model's outputs, run once, and a candidate's compared with them on ONNX Runtime.

Both run on ONNX Runtime (CPU, full optimizations) on the same input sets (:mod:`taso.measure.inputs`). Every
output must satisfy ``|optimized - original| <= atol + rtol * |original|`` elementwise with ``rtol = 1e-3`` and
``atol = 1e-4 * max(1, max|original|)``: tight enough to catch any wrong rewrite (which changes outputs by O(1)),
loose enough for float32 re-association. Integers, strings, sequences and maps must be equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from ..errors import first_line

__all__ = ["Comparison", "Reference", "ReferenceRun", "ReferenceFailure", "run_reference", "compare_with", "compare_outputs", "compare_models",
           "RTOL", "ATOL_SCALE"]

RTOL = 1e-3
ATOL_SCALE = 1e-4


@dataclass
class Comparison:
    """The worst disagreement over all outputs and input sets."""

    ok: bool
    worst_output: str = ""
    worst_abs: float = 0.0
    worst_rel: float = 0.0
    input_sets: int = 0

    def describe(self) -> str:
        return (f"outputs match on {self.input_sets} input set(s) (worst |diff| {self.worst_abs:.3g}, relative {self.worst_rel:.3g})" if self.ok
                else f"output {self.worst_output!r} differs: worst |diff| {self.worst_abs:.3g} (relative {self.worst_rel:.3g})")


def _session(model: onnx.ModelProto | str | bytes | ort.InferenceSession, threads: int) -> ort.InferenceSession:
    """A session for a model, a model file (ONNX Runtime reads its weights itself: no copy here) or a model's bytes;
    a session already open is used as it is."""
    from .timing import open_session

    if isinstance(model, ort.InferenceSession):
        return model
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return open_session(source, threads)


class ReferenceFailure(Exception):
    """ONNX Runtime cannot load the reference model (``position`` -1) or run it on input set ``position``."""

    def __init__(self, position: int, reason: str):
        super().__init__(reason)
        self.position, self.reason = position, reason


@dataclass
class ReferenceRun:
    """The original model's outputs on each input set of the check, run once.

    Every candidate is compared with these, so the original runs once per input set however
    many candidates are checked, and its session is closed before any candidate's opens: one
    model's weights in ONNX Runtime at a time.
    """

    names: list[str]
    input_sets: list[dict[str, np.ndarray]]
    outputs: list[list[np.ndarray]]

    def select(self, positions: Sequence[int]) -> ReferenceRun:
        """The same run restricted to some input sets (those at the measurement sizes, say)."""
        return ReferenceRun(self.names, [self.input_sets[k] for k in positions], [self.outputs[k] for k in positions])

    def __add__(self, other: ReferenceRun) -> ReferenceRun:
        return ReferenceRun(self.names, self.input_sets + other.input_sets, self.outputs + other.outputs)


class Reference:
    """The original model open in ONNX Runtime, to run on the check's input sets (close it by dropping it)."""

    def __init__(self, model: onnx.ModelProto | str | bytes, threads: int = 1):
        """Raises ReferenceFailure (position -1): ONNX Runtime cannot load the model."""
        try:
            self._session = _session(model, threads)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise ReferenceFailure(-1, first_line(e)) from None
        self._names = [o.name for o in self._session.get_outputs()]
        self._inputs = {i.name for i in self._session.get_inputs()}

    def run(self, input_sets: Sequence[Mapping[str, np.ndarray]]) -> ReferenceRun:
        """Its outputs on every set.

        Raises:
            ReferenceFailure: it cannot run on one of them (``position`` says which).
        """
        quiet = _quiet()
        outputs = []
        for position, feeds in enumerate(input_sets):
            try:
                outputs.append(self._session.run(None, {k: v for k, v in feeds.items() if k in self._inputs}, quiet))
            except Exception as e:  # noqa: BLE001
                raise ReferenceFailure(position, first_line(e)) from None
        return ReferenceRun(self._names, [dict(feeds) for feeds in input_sets], outputs)


def run_reference(model: onnx.ModelProto | str | bytes, input_sets: Sequence[Mapping[str, np.ndarray]], threads: int = 1) -> ReferenceRun:
    """Runs the original model (a model, a file or its bytes) on every input set.

    Raises:
        ReferenceFailure: ONNX Runtime cannot load it, or cannot run it on one of the sets.
    """
    return Reference(model, threads).run(input_sets)


def _quiet() -> ort.RunOptions:
    """A run that logs nothing: the caller reports a failure in one line; ONNX Runtime's log would repeat it in red
    (an optimized BERT export failing the check at batch 2 printed two such lines before taso's own)."""
    options = ort.RunOptions()
    options.log_severity_level = 4
    return options


def compare_with(reference: ReferenceRun, candidate: onnx.ModelProto | str | bytes | ort.InferenceSession, threads: int = 1) -> Comparison:
    """Runs the candidate (a model, a file, its bytes or a session) on the reference's input sets and compares every output.

    ONNX Runtime's own exceptions (it cannot load or run the candidate) pass through.
    """
    session = _session(candidate, threads)
    if reference.names != [o.name for o in session.get_outputs()]:
        return Comparison(False, worst_output="(output names differ)", worst_abs=float("inf"), worst_rel=float("inf"))
    inputs = {i.name for i in session.get_inputs()}
    result = Comparison(True, input_sets=len(reference.input_sets))
    quiet = _quiet()
    for feeds, want_all in zip(reference.input_sets, reference.outputs):
        got_all = session.run(None, {k: v for k, v in feeds.items() if k in inputs}, quiet)
        for name, want, got in zip(reference.names, want_all, got_all):
            if not _agree_into(result, name, want, got):
                return result
    return result


def _agree_into(result: Comparison, name: str, want, got) -> bool:
    """Folds one output's disagreement into ``result``; False when it rules the candidate out at once
    (a different shape, different integers or strings, a sequence or map that differs in length or keys)."""
    if isinstance(want, (list, dict)) or want is None or isinstance(got, (list, dict)) or got is None:
        return _agree_values_into(result, name, want, got)
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape or (want.dtype.kind not in "fc" and not np.array_equal(want, got)):
        result.ok, result.worst_output, result.worst_abs, result.worst_rel = False, name, float("inf"), float("inf")
        return False
    if want.dtype.kind not in "fc":
        return True
    want64, got64 = want.astype(np.float64), got.astype(np.float64)
    agree = (want64 == got64) | (np.isnan(want64) & np.isnan(got64))  # equal infinities agree too
    finite = want64[np.isfinite(want64)]
    scale = max(1.0, float(np.max(np.abs(finite))) if finite.size else 1.0)
    with np.errstate(invalid="ignore"):
        diff = np.where(agree, 0.0, np.abs(got64 - want64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    worst = float(np.max(diff)) if diff.size else 0.0
    if worst > result.worst_abs:
        result.worst_output, result.worst_abs, result.worst_rel = name, worst, worst / scale
    if not np.all(diff <= ATOL_SCALE * scale + RTOL * np.abs(np.nan_to_num(want64))):
        result.ok = False
    return True


def _agree_values_into(result: Comparison, name: str, want, got) -> bool:
    """:func:`_agree_into` for a value that is not a tensor, element by element."""
    same_kind = type(want) is type(got) or (want is not None and got is not None and not isinstance(want, (list, dict)) and not isinstance(got, (list, dict)))
    if want is None and got is None:
        return True
    if not same_kind or (isinstance(want, (list, dict)) and len(want) != len(got)) or (isinstance(want, dict) and set(want) != set(got)):
        result.ok, result.worst_output, result.worst_abs, result.worst_rel = False, name, float("inf"), float("inf")
        return False
    pairs = [(want[k], got[k]) for k in want] if isinstance(want, dict) else zip(want, got) if isinstance(want, list) else [(want, got)]
    return all(_agree_into(result, name, w, g) for w, g in pairs)


def compare_outputs(want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> Comparison:
    """Two runs' outputs (by name, ``want``'s order), compared as :func:`compare_with` compares a model's: one input set."""
    result = Comparison(True, input_sets=1)
    for name, array in want.items():
        if not _agree_into(result, name, array, got[name]):
            break
    return result


def compare_models(original: onnx.ModelProto | str | bytes, optimized: onnx.ModelProto | str | bytes,
                   input_sets: Sequence[Mapping[str, np.ndarray]], threads: int = 1) -> Comparison:
    """Runs both models on every input set and compares every output."""
    return compare_with(run_reference(original, input_sets, threads), optimized, threads)
