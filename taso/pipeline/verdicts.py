"""End-to-end verdicts remembered: what a candidate model measured beside its input on this machine.

``taso optimize`` keeps an optimized model only when it beats the input by a margin in two timed
series (:mod:`taso.pipeline.guard`). Near the margin that decision is the timing's noise: a sub-millisecond
LSTMCell export whose merge runs 1.04-1.18x faster, pair of sessions by pair of sessions, was kept
in one run and not in the next, so the same command on the same file wrote different files. Like an
autotuner's cache (Triton's, TVM's tuning logs), taso remembers each verdict under the pair of models
it judged and the machine it was judged on, and the next run with the same pair writes what the
first wrote, without timing it again (``--retime`` measures again and replaces the verdict).

A pair is named by the models' layouts (:func:`layout_digest`): operators, attributes, value
types, the order of the nodes (ONNX Runtime runs them in an order that follows it) and the values
of small weights (its no-op eliminations read them), not the values of large weights, which no
kernel's speed depends on. The file is ``$TASO_VERDICTS``, else ``$TASO_CACHE_DIR/verdicts.json``
(default ``~/.cache/taso``); an unreadable file is ignored and replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import onnx

from ..cost.cache import cache_directory
from ..errors import warn
from ..onnx.files import write_text_atomically

__all__ = ["GuardVerdict", "VerdictCache", "layout_digest"]

# Initializers up to this many bytes are named by their values as well (ONNX Runtime's graph optimizations read
# small constants: an Add of zeros is removed); larger ones by name, type and shape only.
_VALUES_UP_TO = 4096


@dataclass(frozen=True)
class GuardVerdict:
    """A candidate's measured speedup over its input (input time / candidate time) and whether it was kept."""

    speedup: float
    kept: bool


def layout_digest(model: onnx.ModelProto) -> str:
    """A digest of what decides how fast ONNX Runtime runs ``model``: everything but the names of its nodes and of the
    values they compute (numbered in order instead), and the values of large weights (and of weights kept outside the
    file, named by name, type and shape)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"ir{model.ir_version}".encode())
    for opset in model.opset_import:
        h.update(f"|{opset.domain}:{opset.version}".encode())
    graph = model.graph
    for part in (graph.input, graph.output):
        h.update(b"|part")
        for item in part:
            h.update(item.SerializeToString(deterministic=True))
    outputs = {o.name for o in graph.output}
    numbered: dict[str, str] = {}
    h.update(b"|nodes")
    for node in graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = ""
        copy.input[:] = [numbered.get(v, v) for v in node.input]
        for i, v in enumerate(node.output):
            if v and v not in outputs:
                numbered[v] = copy.output[i] = f"%{len(numbered)}"
        h.update(copy.SerializeToString(deterministic=True))
    for tensor in graph.initializer:
        h.update(f"|{tensor.name}:{tensor.data_type}:{list(tensor.dims)}".encode())
        if tensor.data_location != onnx.TensorProto.EXTERNAL and tensor.ByteSize() <= _VALUES_UP_TO:
            h.update(tensor.SerializeToString(deterministic=True))
    return h.hexdigest()


def default_path() -> str:
    return os.environ.get("TASO_VERDICTS") or os.path.join(cache_directory(), "verdicts.json")


class VerdictCache:
    """The verdicts of one machine (``machine``: the cost model's hardware fingerprint), read from and saved to ``path``."""

    def __init__(self, machine: str, path: str | None = None):
        self.machine, self.path = machine, path or default_path()
        self._data: dict[str, dict[str, dict]] = {}
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            if isinstance(data, dict):
                self._data = {k: v for k, v in data.items() if isinstance(v, dict)}
        except (OSError, ValueError):
            pass

    @staticmethod
    def key(input_layout: str, candidate_layout: str) -> str:
        return f"{input_layout}>{candidate_layout}"

    def get(self, key: str) -> GuardVerdict | None:
        entry = self._data.get(self.machine, {}).get(key)
        try:
            return GuardVerdict(float(entry["speedup"]), bool(entry["kept"])) if isinstance(entry, dict) else None
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, key: str, verdict: GuardVerdict) -> None:
        """Records the verdict and saves the file at once (atomically; an unwritable cache is not an error)."""
        self._data.update(VerdictCache(self.machine, self.path)._data)  # another run may have saved since this one read
        self._data.setdefault(self.machine, {})[key] = {"speedup": round(verdict.speedup, 4), "kept": verdict.kept}
        try:
            write_text_atomically(self.path, json.dumps(self._data, indent=0, sort_keys=True))
        except OSError as e:
            warn(f"cannot save taso's verdicts {self.path} ({e.strerror or e}): the next run times this result again")
