"""Large models on disk: weights as external data that ONNX Runtime maps, and files streamed from them.

Handed a model's bytes, ONNX Runtime holds three copies of its weights while it loads (the
bytes, the parsed proto, its tensors) and its session keeps one. Handed a file whose weights
are external data, it maps them and keeps only what it repacks (a BERT-base session: 335 MB
instead of 560 MB, and no 1.3 GB peak while loading). So every model with many weight bytes
that taso hands to ONNX Runtime is first *spilled*: saved once, weights beside it, into a
private temporary directory, after which the proto in memory holds no weight bytes at all.
The output file is then streamed from the spilled weights, never built whole in memory.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
import tempfile
import weakref
from collections.abc import Callable, Iterator

import numpy as np
import onnx
from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_model

from ..errors import TasoError

__all__ = ["check_writable", "SPILL_BYTES", "EXTERNAL_DATA_BYTES", "SpilledModel", "Scratch", "WeightsFile", "embedded_weight_bytes", "external_region",
           "write_atomically", "write_bytes_atomically", "write_text_atomically", "graph_tensors", "subgraphs"]

# A model with at least this many bytes of weights embedded is spilled before ONNX Runtime sees it.
SPILL_BYTES = 64 << 20
# Above this many bytes of weights a model is written with external data (protobuf's 2 GB limit).
EXTERNAL_DATA_BYTES = 1_800_000_000
# External data smaller than this stays embedded in the spilled file (shape tensors, small constants).
_SMALL_TENSOR = 1024


def write_atomically(path: str | os.PathLike, write: Callable[[str], None], sync: bool = False) -> None:
    """Writes ``path`` through ``write(temporary)``, a file beside it renamed over it at the end: a reader sees the old
    file or the new one, never half of one, and the temporary file is removed whatever interrupts the write, Ctrl-C
    included. The one way taso writes a file (models, rule files, caches, the generator's shards).

    Args:
        sync: flush the file to the disk before the rename (a shard a crash must not lose).

    Raises:
        OSError: the directory is missing, or the file cannot be written (full, read-only).
    """
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{name}.taso-{os.getpid()}.tmp")
    try:
        write(tmp)
        if sync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes_atomically(path: str | os.PathLike, data: bytes | list[bytes], sync: bool = False) -> None:
    """:func:`write_atomically` of bytes (or of pieces of bytes, written one after another)."""
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            for piece in [data] if isinstance(data, bytes) else data:
                f.write(piece)

    write_atomically(path, write, sync)


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """:func:`write_atomically` of UTF-8 text, making the directory first (a cache's first save)."""
    os.makedirs(os.path.dirname(os.path.abspath(os.fspath(path))), exist_ok=True)
    write_bytes_atomically(path, text.encode("utf-8"))


def check_writable(path: str, option: str = "") -> None:
    """Fails early, before a long run, when ``path`` (given as ``option``, if named) cannot be written."""
    label = f"{option} {path}" if option else path
    if os.path.isdir(path):
        raise TasoError(f"{label}: is a directory; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise TasoError(f"{label}: cannot write (no such directory {folder})")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise TasoError(f"{label}: cannot write (permission denied)")


def embedded_weight_bytes(model: onnx.ModelProto) -> int:
    """The bytes of the weights stored inside the model (counted without copying them out of the proto)."""
    return sum(t.ByteSize() for t in model.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL)


class Scratch:
    """A private temporary directory (under $TMPDIR), removed when the last model spilled into it is gone."""

    def __init__(self) -> None:
        with _disk_errors(tempfile.gettempdir()):
            self._directory = tempfile.TemporaryDirectory(prefix="taso-")
        self.path = self._directory.name
        self._names: set[str] = set()

    def spill(self, model: onnx.ModelProto, name: str) -> SpilledModel:
        """Saves ``model`` here with its weights as external data (``model`` itself is left holding none).

        Raises:
            TasoError: the temporary directory cannot take the files (full, say).
        """
        stem = self._stem(name)
        with _disk_errors(self.path):
            # onnx.save_model moves each large tensor's bytes into the data file and clears them in ``model``.
            onnx.save_model(model, os.path.join(self.path, stem + ".onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=stem + ".onnx.data", size_threshold=_SMALL_TENSOR)
        # A fresh copy: the cleared proto's arena would keep the weights' memory for as long as it lives.
        return SpilledModel._in(self, stem, onnx.ModelProto.FromString(model.SerializeToString()))

    def export(self, name: str, export: Callable[[WeightsFile], onnx.ModelProto]) -> SpilledModel:
        """The model ``export`` builds, its large tensors written straight to the data file (never into a proto).

        Raises:
            TasoError: the temporary directory cannot take the files (full, say).
        """
        stem = self._stem(name)
        with _disk_errors(self.path):
            with WeightsFile(os.path.join(self.path, stem + ".onnx.data")) as weights:
                model = export(weights)
            onnx.save_model(model, os.path.join(self.path, stem + ".onnx"))
        return SpilledModel._in(self, stem, model)

    def _stem(self, name: str) -> str:
        stem, k = name, 1
        while stem in self._names:
            stem, k = f"{name}-{k}", k + 1
        self._names.add(stem)
        return stem


@contextlib.contextmanager
def _disk_errors(directory: str) -> Iterator[None]:
    """A failed write of taso's temporary files is one clear error (exit 2), not a traceback."""
    try:
        yield
    except OSError as e:
        raise TasoError(f"cannot write taso's temporary copy of the weights in {directory} ({e.strerror or e}); "
                        "set TMPDIR to a directory with room for them") from None


def map_weights(path: str, dtype: np.dtype, offset: int, shape: tuple[int, ...]) -> np.ndarray:
    """Weights in a file, mapped copy-on-write: nothing is read until used, pages are shared with the file cache, and
    a write changes this process's copy only, never the file."""
    mapped = np.memmap(path, dtype=dtype, mode="c", offset=offset, shape=shape)
    key = id(mapped)
    _MAPPED[key] = weakref.ref(mapped, lambda _: _MAPPED.pop(key, None))
    return np.asarray(mapped)


# Every weight mapped by map_weights and still alive (the arrays' bases keep them).
_MAPPED: dict[int, weakref.ref] = {}
# madvise(MADV_PAGEOUT) (Linux 5.4 on; Python 3.11 does not name it): clean pages leave this process's resident set,
# dirty ones (a weight written to, copy-on-write) stay.
_MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21 if sys.platform.startswith("linux") else None)


def release_mapped_weights() -> None:
    """Lets the kernel take back the pages of mapped weights that taso read (clean-up compares them, export copies
    them): they count in the resident set until then, and ONNX Runtime is about to load its own copy. A weight
    read again is paged in again from the file cache; nothing changes but the memory it holds meanwhile."""
    for ref in list(_MAPPED.values()):
        mapped = ref()
        if mapped is not None and not _page_out(mapped):
            return


def release_pages(array: np.ndarray) -> None:
    """:func:`release_mapped_weights` for one array, when it is a mapped weight (once its bytes were copied out)."""
    base = array
    while isinstance(base, np.ndarray) and not isinstance(base, np.memmap):
        base = base.base
    if isinstance(base, np.memmap) and id(base) in _MAPPED:
        _page_out(base)


def _page_out(mapped: np.memmap) -> bool:
    """False where the kernel cannot (an older one, or a mapping numpy did not keep): the pages just stay."""
    if _MADV_PAGEOUT is None:
        return False
    try:
        mapped._mmap.madvise(_MADV_PAGEOUT)
    except (OSError, AttributeError, ValueError):
        return False
    return True


class WeightsFile:
    """An external-data file being written: each large tensor's bytes are appended and its header returned."""

    def __init__(self, path: str):
        self.location = os.path.basename(path)
        self._file = open(path, "wb")  # noqa: SIM115 - closed by __exit__

    def __enter__(self) -> WeightsFile:
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def tensor(self, array: np.ndarray, name: str) -> onnx.TensorProto | None:
        """``array`` written to the file, as an initializer pointing there; None for a small or non-numeric one."""
        if not stored_apart(array, _SMALL_TENSOR):
            return None
        offset = self._file.tell()
        self._file.write(memoryview(array.astype(array.dtype.newbyteorder("<"), copy=False)).cast("B"))
        release_pages(array)  # a re-export after timing paged every mapped weight back in: BERT's 0.4 GB at the peak
        return external_header(array, name, self.location, offset)


def stored_apart(array: np.ndarray, min_bytes: int) -> bool:
    """Whether a weights file takes ``array`` (numeric, contiguous, at least ``min_bytes``) rather than the model itself."""
    return array.nbytes >= min_bytes and array.dtype.kind in "biuf" and array.flags.c_contiguous


def external_header(array: np.ndarray, name: str, location: str, offset: int) -> onnx.TensorProto:
    """The initializer naming ``array``'s bytes at ``offset`` in the external data file ``location``."""
    tensor = onnx.TensorProto(name=name, dims=array.shape, data_type=onnx.helper.np_dtype_to_tensor_dtype(array.dtype),
                              data_location=onnx.TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(array.nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


class SpilledModel:
    """A model whose large weights are external data in files of one directory (a :class:`Scratch`, or the user's own
    files beside a model that has external data already).

    Attributes:
        path: the .onnx file ONNX Runtime loads.
        model: the model without its weight bytes (each large initializer points into a data file).
        directory: where the data files named by the model lie.
    """

    def __init__(self, model: onnx.ModelProto, directory: str, path: str, keep: object = None):
        self.model, self.directory, self.path = model, directory, path
        self._keep = keep  # a Scratch: its directory lives as long as this model

    @classmethod
    def _in(cls, scratch: Scratch, stem: str, model: onnx.ModelProto) -> SpilledModel:
        return cls(model, scratch.path, os.path.join(scratch.path, stem + ".onnx"), scratch)

    @property
    def weight_bytes(self) -> int:
        return sum(length for _, _, length in _external_regions(self.model))

    def write(self, target: str, final_name: str | None = None) -> None:
        """Writes the model to ``target``: one file with its weights embedded, streamed from the data files, or, over
        :data:`EXTERNAL_DATA_BYTES`, the model and one data file beside it named after ``final_name`` (the name
        ``target`` will be renamed to; default: its own)."""
        data = (final_name or os.path.basename(target)) + ".data"
        if _nested_external(self.model):
            whole = self.loaded()
            large = embedded_weight_bytes(whole) > EXTERNAL_DATA_BYTES
            onnx.save_model(whole, target, save_as_external_data=large, all_tensors_to_one_file=True, location=data)
        elif self.weight_bytes > EXTERNAL_DATA_BYTES:
            _write_external(self.model, self.directory, target, data)
        else:
            with open(target, "wb") as out:
                _stream_embedded(self.model, self.directory, out)

    def to_bytes(self) -> bytes:
        """The model serialized with its weights embedded (a full copy in memory: for small models and tests)."""
        import io

        if _nested_external(self.model):
            return self.loaded().SerializeToString()
        buffer = io.BytesIO()
        _stream_embedded(self.model, self.directory, buffer)
        return buffer.getvalue()

    def loaded(self) -> onnx.ModelProto:
        """A copy with every weight read into it, those of nested graphs too (a size-choosing file's branches, which
        the streaming writers, field by field over the main graph's initializers, do not reach)."""
        whole = onnx.ModelProto.FromString(self.model.SerializeToString())
        load_external_data_for_model(whole, self.directory)
        return whole


def _nested_external(model: onnx.ModelProto) -> bool:
    """Whether a tensor of a nested graph (an If's branch) is kept in external data."""
    return any(t.data_location == onnx.TensorProto.EXTERNAL for node in model.graph.node for g in subgraphs(node) for t in graph_tensors(g))


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held by a node's attributes (If, Loop, Scan bodies)."""
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor ``graph`` holds: initializers, sparse ones, attribute tensors, those of nested graphs."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
        for subgraph in subgraphs(node):
            yield from graph_tensors(subgraph)


def external_region(tensor: onnx.TensorProto) -> tuple[str, int, int | None]:
    """(location, offset, length or None) of a tensor kept in external data, as onnx reads them (ValueError: a negative one)."""
    info = ExternalDataInfo(tensor)
    return info.location, info.offset or 0, info.length


def _external_regions(model: onnx.ModelProto) -> list[tuple[str, int, int]]:
    """(location, offset, length) of each initializer kept in external data, in order."""
    return [external_region(t) for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]


class _DataFiles:
    """The data files a model's external tensors name, each opened once."""

    def __init__(self, directory: str):
        self._directory = directory
        self._open: dict[str, object] = {}

    def __enter__(self) -> _DataFiles:
        return self

    def __exit__(self, *exc) -> None:
        for f in self._open.values():
            f.close()

    def copy(self, location: str, offset: int, length: int, out) -> None:
        """Copies ``length`` bytes at ``offset`` of ``location`` to ``out``, a chunk at a time."""
        if location not in self._open:
            self._open[location] = open(os.path.join(self._directory, location), "rb")  # noqa: SIM115 - closed by __exit__
        source = self._open[location]
        source.seek(offset)
        while length:
            chunk = source.read(min(length, _CHUNK))
            if not chunk:
                raise OSError(f"the external data file {location} ends early")
            out.write(chunk)
            length -= len(chunk)


def _write_external(model: onnx.ModelProto, directory: str, target: str, data_name: str) -> None:
    """The model at ``target`` with every external tensor copied into one data file ``data_name`` beside it."""
    moved = onnx.ModelProto()
    moved.CopyFrom(model)
    with open(os.path.join(os.path.dirname(os.path.abspath(target)), data_name), "wb") as out, _DataFiles(directory) as files:
        for tensor in moved.graph.initializer:
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            location, start, length = external_region(tensor)
            offset = out.tell()
            files.copy(location, start, length, out)
            del tensor.external_data[:]
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(length))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
    onnx.save_model(moved, target)


# ---- protobuf wire format: a ModelProto written field by field, weights copied straight from the data file ----
# Parsers accept fields in any order and concatenate repeated ones, so the model's other fields, then its graph's
# other fields, then each initializer (its header, then its raw_data) form the same message onnx.save would write.

_LEN = 2  # wire type of a length-delimited field
_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA = 7, 5, 9
_CHUNK = 16 << 20


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, length: int) -> bytes:
    """The key and length that open a length-delimited field."""
    return _varint(number << 3 | _LEN) + _varint(length)


def _stream_embedded(model: onnx.ModelProto, directory: str, out) -> None:
    """Writes ``model`` with the external data it names (files in ``directory``) embedded as raw_data."""
    pieces = []  # per initializer: (header bytes, region) or (whole tensor bytes, None)
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            header = onnx.TensorProto()
            header.CopyFrom(tensor)
            header.ClearField("external_data")
            header.ClearField("data_location")
            pieces.append((header.SerializeToString(), external_region(tensor)))
        else:
            pieces.append((tensor.SerializeToString(), None))
    rest_of_graph = onnx.GraphProto()
    rest_of_graph.CopyFrom(model.graph)
    rest_of_graph.ClearField("initializer")
    rest_of_model = onnx.ModelProto()
    rest_of_model.CopyFrom(model)
    rest_of_model.ClearField("graph")
    graph_head = rest_of_graph.SerializeToString()
    tensor_sizes = [len(h) + (0 if r is None else len(_field(_TENSOR_RAW_DATA, r[2])) + r[2]) for h, r in pieces]
    graph_size = len(graph_head) + sum(len(_field(_GRAPH_INITIALIZER, s)) + s for s in tensor_sizes)
    out.write(rest_of_model.SerializeToString())
    out.write(_field(_MODEL_GRAPH, graph_size))
    out.write(graph_head)
    with _DataFiles(directory) as files:
        for (head, region), size in zip(pieces, tensor_sizes):
            out.write(_field(_GRAPH_INITIALIZER, size))
            out.write(head)
            if region is not None:
                out.write(_field(_TENSOR_RAW_DATA, region[2]))
                files.copy(*region, out)
