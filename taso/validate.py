"""Checking an optimized model against the original on ONNX Runtime before anything is written.

Both models run on ONNX Runtime (CPU, full optimizations) on the same inputs: seeded
random ones (standard normal floats, zero integers, random booleans) and, when given, the
user's own. Every output must satisfy ``|optimized - original| <= atol + rtol * |original|``
elementwise with ``rtol = 1e-3`` and ``atol = 1e-4 * max(1, max|original|)``: tight enough
to catch any wrong rewrite (which changes outputs by O(1)), loose enough for float32
re-association.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from .cost import _random_array
from .errors import TasoError
from .ir import TensorType

__all__ = ["Comparison", "compare_models", "random_inputs", "load_inputs", "RTOL", "ATOL_SCALE"]

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


def _session(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        raise TasoError(f"ONNX Runtime cannot load the model: {str(e).splitlines()[0]}") from None


def random_inputs(types: Mapping[str, TensorType], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: _random_array(t, rng) for name, t in types.items()}


def load_inputs(path: str, types: Mapping[str, TensorType]) -> dict[str, np.ndarray]:
    """User inputs from an .npz file, checked against the model's inputs.

    Raises:
        TasoError: unreadable file, missing or extra arrays, wrong shapes or dtypes.
    """
    try:
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise TasoError(f"--inputs {path}: no such file") from None
    except Exception as e:  # noqa: BLE001 - np.load raises many types for bad files
        raise TasoError(f"--inputs {path}: not a readable .npz file ({type(e).__name__})") from None
    if set(arrays) != set(types):
        raise TasoError(f"--inputs {path}: has arrays {sorted(arrays)}, the model's inputs are {sorted(types)}")
    for name, t in types.items():
        if TensorType.of(arrays[name]) != t:
            raise TasoError(f"--inputs {path}: {name!r} is {TensorType.of(arrays[name])}, the model expects {t}")
    return arrays


def compare_models(original: onnx.ModelProto, optimized: onnx.ModelProto, input_sets: Sequence[Mapping[str, np.ndarray]], threads: int = 1) -> Comparison:
    """Runs both models on every input set and compares every output."""
    a, b = _session(original, threads), _session(optimized, threads)
    names = [o.name for o in a.get_outputs()]
    if names != [o.name for o in b.get_outputs()]:
        return Comparison(False, worst_output="(output names differ)", worst_abs=float("inf"), worst_rel=float("inf"))
    result = Comparison(True, input_sets=len(input_sets))
    for feeds in input_sets:
        want_all = a.run(None, dict(feeds))
        got_all = b.run(None, {k: v for k, v in feeds.items() if k in {i.name for i in b.get_inputs()}})
        for name, want, got in zip(names, want_all, got_all):
            want, got = np.asarray(want), np.asarray(got)
            if want.shape != got.shape:
                return Comparison(False, name, float("inf"), float("inf"), len(input_sets))
            if want.dtype.kind not in "fc":
                if not np.array_equal(want, got):
                    return Comparison(False, name, float("inf"), float("inf"), len(input_sets))
                continue
            want64, got64 = want.astype(np.float64), got.astype(np.float64)
            both_nan = np.isnan(want64) & np.isnan(got64)
            finite = want64[np.isfinite(want64)]
            scale = max(1.0, float(np.max(np.abs(finite))) if finite.size else 1.0)
            diff = np.where(both_nan, 0.0, np.abs(got64 - want64))
            diff = np.where(np.isnan(diff), np.inf, diff)
            worst = float(np.max(diff)) if diff.size else 0.0
            if worst > result.worst_abs:
                result.worst_output, result.worst_abs, result.worst_rel = name, worst, worst / scale
            if not np.all(diff <= ATOL_SCALE * scale + RTOL * np.abs(np.nan_to_num(want64))):
                result.ok = False
    return result
