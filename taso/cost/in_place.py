"""Large weights that ONNX Runtime reads where they are: a node measured alone holds its weight once.

Measured the plain way, a Gather from GPT-2's 154 MB embedding table had its table copied into
the one-node ONNX model, into that model's bytes, into the profiler's reloaded copy, into its
bytes again and into ONNX Runtime's session: the search's peak memory went from 1.0 GB to
1.6-1.9 GB on that one measurement. Here the exporter (as its weights file) names each large
weight as external data in a sparse file that holds nothing, and the session is handed the array
itself (``SessionOptions.add_initializer``) before it loads, so ONNX Runtime never reads the file
and keeps no copy. A product timed either way takes the same time (``[64, 768] x [768, 3072]``
at 1 thread: 2.60-2.67 ms both).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort

from ..onnx.files import external_header, stored_apart

__all__ = ["IN_PLACE_BYTES", "InPlaceWeights", "in_place_session"]

IN_PLACE_BYTES = 16 << 20  # weights at least this large are handed over in place; smaller ones are cheaper to copy


class InPlaceWeights:
    """The weights file :func:`taso.onnx.to_onnx_model` writes a measured node's large weights to: it writes nothing,
    remembers each array and returns the initializer's header, pointing at an empty stretch of ``LOCATION``."""

    LOCATION = "in-place.bin"

    def __init__(self, min_bytes: int | None = None):
        self.arrays: dict[str, np.ndarray] = {}
        self._min_bytes, self._end = IN_PLACE_BYTES if min_bytes is None else min_bytes, 0
        self.location = self.LOCATION

    def tensor(self, array: np.ndarray, name: str) -> onnx.TensorProto | None:
        """The header of ``array`` as external data; None (embed it) for a small, non-numeric or strided one."""
        if not stored_apart(array, self._min_bytes):
            return None
        self.arrays[name] = array
        header = external_header(array, name, self.location, self._end)
        self._end += array.nbytes
        return header

    @property
    def nbytes(self) -> int:
        """The bytes the headers point at: the sparse file's length."""
        return self._end


def in_place_session(model: bytes | onnx.ModelProto, options: ort.SessionOptions, in_place: InPlaceWeights | None = None,
                     providers: Sequence[str] = ("CPUExecutionProvider",), **kwargs) -> ort.InferenceSession:
    """An ONNX Runtime session of ``model``, whose weights in ``in_place`` are the arrays themselves (``options`` are
    given them: a fresh set of options per session).

    The model is loaded from a file in a temporary directory beside a sparse file as long as the
    weights (ONNX Runtime checks that the external data it names exists, and reads none of it);
    the arrays stay referenced by the session, which uses them, as long as it lives.
    """
    proto_bytes = model if isinstance(model, bytes) else model.SerializeToString()
    if in_place is None or not in_place.arrays:
        return ort.InferenceSession(proto_bytes, options, providers=list(providers), **kwargs)
    values = {name: ort.OrtValue.ortvalue_from_numpy(array) for name, array in in_place.arrays.items()}
    for name, value in values.items():
        options.add_initializer(name, value)
    with tempfile.TemporaryDirectory(prefix="taso-in-place-") as directory:
        with open(os.path.join(directory, in_place.location), "wb") as sparse:
            sparse.truncate(in_place.nbytes)
        path = os.path.join(directory, "model.onnx")
        with open(path, "wb") as f:
            f.write(proto_bytes)
        session = ort.InferenceSession(path, options, providers=list(providers), **kwargs)
    session._taso_in_place = values  # the session reads these buffers: they live as long as it does
    return session
