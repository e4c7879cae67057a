"""The optimizers a user would otherwise reach for, run on the same model for `taso bench --peers`.

Each peer takes the input model and returns its own; that model must match the input on ONNX Runtime (the check
taso's own output passes) before it is timed beside taso's, in the same interleaved run. A peer that is not
installed, fails, or writes a model that differs is reported in one line and left out of the timing.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

import onnx

from ..errors import TasoError, first_line

__all__ = ["PEERS", "parse_peers", "run_peer"]


def _onnxslim(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxslim

    return onnxslim.slim(model)


def _onnxsim(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxsim

    simplified, ok = onnxsim.simplify(model)
    if not ok:
        raise RuntimeError("onnxsim's own check failed")
    return simplified


def _ort_transformers(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX Runtime's transformers optimizer (its Python fusions into com.microsoft operators: Attention,
    SkipLayerNormalization, BiasGelu), as `python -m onnxruntime.transformers.optimizer` runs it on a CPU."""
    from onnxruntime.transformers.optimizer import optimize_model

    return optimize_model(model, model_type="bert", num_heads=0, hidden_size=0, opt_level=0, use_gpu=False).model


def _onnxscript(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxscript's optimizer (constant folding, inlining), then its default rewrite rules."""
    from onnxscript import optimizer, rewriter

    return rewriter.rewrite(optimizer.optimize(model))


# name -> (what pip installs it, the runner); the order is the columns' order.
PEERS: dict[str, tuple[str, Callable[[onnx.ModelProto], onnx.ModelProto]]] = {
    "onnxslim": ("onnxslim", _onnxslim),
    "onnxsim": ("onnxsim", _onnxsim),
    "ort-transformers": ("onnxruntime and torch", _ort_transformers),
    "onnxscript": ("onnxscript", _onnxscript),
}


def parse_peers(text: str | None) -> list[str]:
    """``--peers a,b``: the peers named, in the columns' order ("all": every one).

    Raises:
        TasoError: a name that is not a peer.
    """
    if not text:
        return []
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(PEERS)
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise TasoError(f"--peers {text}: unknown peer(s) {', '.join(unknown)}; choose from {', '.join(PEERS)} (or all)")
    return [n for n in PEERS if n in names]


def run_peer(name: str, model: onnx.ModelProto, input_sets: list[dict]) -> tuple[onnx.ModelProto | None, str]:
    """The peer's model, checked equal to ``model`` on ONNX Runtime; else None and one line saying why."""
    from ..measure.outputs import compare_models

    installs, runner = PEERS[name]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # peers talk; the table goes to stdout
            result = runner(onnx.ModelProto.FromString(model.SerializeToString()))  # a copy: some peers change their input
    except ImportError:
        return None, f"{name} is not installed (it needs {installs})"
    except Exception as e:  # noqa: BLE001 - a peer's failure is a result to report, not a crash
        return None, f"{name} failed: {type(e).__name__}: {first_line(e)[:160]}"
    try:
        comparison = compare_models(model, result, input_sets)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        return None, f"{name}'s model does not run on ONNX Runtime: {first_line(e)[:160]}"
    if not comparison.ok:
        return None, f"{name}'s model differs from the input: {comparison.describe()}"
    return result, ""
