"""The run directory: every finished piece of a generator run, on disk, checked before reuse.

A run directory holds one file per finished shard of each pass (:class:`ShardStore`), and
one per finished stage after enumeration (and per finished prefix of a long stage). Each
file is written atomically (a temporary file renamed) with a SHA-256 over its contents, so
a run killed at any moment leaves only whole files; a resumed run reuses the files that
check out and redoes the rest. A file that does not check out (truncated, edited, not
ours) is deleted and counted in ``corrupt``: it is redone, never merged.

A shard file is a JSON header line (shard, stage, the byte length of each part, counts,
digest) followed by the parts; a reader maps the parts it needs (:meth:`StoredShard.array`)
instead of reading them, so a pass over every shard's keys holds one key range at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from dataclasses import dataclass

import numpy as np

from taso.errors import TasoError
from taso.onnx.files import write_bytes_atomically

from .settings import Settings
from .shards import Shard

__all__ = ["ShardStore", "StoredShard", "write_atomically"]

_FORMAT = "taso-shards"
_VERSION = 2
_BLOCK = 1 << 22  # bytes hashed per read when a file is checked


@dataclass
class StoredShard:
    """A checked shard file: its counts (``info``) and where each part lies in the file."""

    path: str
    info: dict
    spans: dict[str, tuple[int, int]]  # part -> (offset, length)

    def bytes(self, part: str) -> bytes:
        offset, length = self.spans[part]
        with open(self.path, "rb") as f:
            f.seek(offset)
            return f.read(length)

    def array(self, part: str, dtype, width: int | None = None) -> np.ndarray:
        """The part as a read-only array mapped from the file (rows of ``width`` when given)."""
        offset, length = self.spans[part]
        itemsize = np.dtype(dtype).itemsize * (width or 1)
        shape = (length // itemsize, width) if width else (length // itemsize,)
        if length == 0:
            return np.zeros(shape, dtype=dtype)
        return np.memmap(self.path, dtype=dtype, mode="r", offset=offset, shape=shape)


class ShardStore:
    """A run directory (created if needed) for the run with ``settings``.

    Args:
        folder: the run directory.
        settings: the run's settings; a resumed run must have the same.
        resume: keep the finished pieces already there; without it they are removed first.
    """

    def __init__(self, folder: str, settings: Settings, resume: bool):
        self.folder = folder
        self.corrupt: list[str] = []
        os.makedirs(folder, exist_ok=True)
        manifest = os.path.join(folder, "manifest.json")
        expected = {"format": _FORMAT, "version": _VERSION, "settings": settings.to_json()}
        if resume:
            self._check_manifest(manifest, expected)
        for name in os.listdir(folder):  # a killed writer's temporary file; without resume, every finished piece too
            if name.endswith(".tmp") or (not resume and name.endswith((".shard", ".stage"))):
                os.remove(os.path.join(folder, name))
        write_atomically(manifest, json.dumps(expected, indent=1).encode())

    @staticmethod
    def _check_manifest(path: str, expected: dict) -> None:
        if not os.path.exists(path):
            raise TasoError(f"--resume {os.path.dirname(path)}: not a run directory (no manifest.json)")
        try:
            with open(path, "rb") as f:
                found = json.loads(f.read())
        except (OSError, ValueError) as e:
            raise TasoError(f"--resume {path}: unreadable manifest ({e})") from None
        if found != expected:
            was = {k: (found.get("settings") or {}).get(k) for k in ("max_ops", "ops", "seed")}
            raise TasoError(f"--resume {os.path.dirname(path)}: the run used other settings ({was}, or another pool or "
                            "checkpoint format); resume with the same --max-ops, --ops and --seed")

    # ---- shards ----------------------------------------------------------------------------------------
    def path(self, stage: str, shard: Shard) -> str:
        return os.path.join(self.folder, f"{stage}-{shard.id}.shard")

    def save(self, stage: str, shard: Shard, parts: dict[str, bytes], info: dict) -> None:
        """Writes one finished shard: its parts (in this order) and its counts (JSON values)."""
        write_shard(self.path(stage, shard), stage, shard.id, parts, info)

    def open(self, stage: str, shard: Shard) -> StoredShard | None:
        """The shard's file if it checks out; None when missing, or when corrupt (then deleted and counted)."""
        path = self.path(stage, shard)
        if not os.path.exists(path):
            return None
        found = read_shard(path, stage, shard.id)
        if found is None:
            self.corrupt.append(os.path.basename(path))
            os.remove(path)
        return found

    def load(self, stage: str, shard: Shard) -> dict | None:
        """The shard's parts (as bytes) and counts, or None (see :meth:`open`)."""
        found = self.open(stage, shard)
        return None if found is None else {**{name: found.bytes(name) for name in found.spans}, **found.info}

    # ---- stages after enumeration ---------------------------------------------------------------------------
    def save_stage(self, name: str, value) -> None:
        """Keeps a finished stage's result (any picklable value)."""
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        write_atomically(self._stage_path(name), hashlib.sha256(data).hexdigest().encode() + b"\n" + data)

    def load_stage(self, name: str):
        """A finished stage's result, or None when it is not there or does not check out (then deleted)."""
        path = self._stage_path(name)
        if not os.path.exists(path):
            return None
        with open(path, "rb") as f:
            digest, _, data = f.read().partition(b"\n")
        if hashlib.sha256(data).hexdigest().encode() != digest:
            self.corrupt.append(os.path.basename(path))
            os.remove(path)
            return None
        return pickle.loads(data)

    def drop_stage(self, name: str) -> None:
        if os.path.exists(path := self._stage_path(name)):
            os.remove(path)

    def _stage_path(self, name: str) -> str:
        return os.path.join(self.folder, f"{name}.stage")


def write_shard(path: str, stage: str, shard_id: str, parts: dict[str, bytes], info: dict) -> None:
    """Writes a shard file (see the module docstring); safe to call from any process."""
    meta = {"shard": shard_id, "stage": stage, "lengths": [[name, len(data)] for name, data in parts.items()], **info}
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    for data in parts.values():
        h.update(data)
    meta["sha256"] = h.hexdigest()
    write_atomically(path, [json.dumps(meta).encode() + b"\n", *parts.values()])


def read_shard(path: str, stage: str, shard_id: str) -> StoredShard | None:
    """The shard file's counts and part spans, or None when it is not exactly what :func:`write_shard` wrote."""
    try:
        with open(path, "rb") as f:
            head = f.readline()
            meta = json.loads(head)
            digest = meta.pop("sha256")
            lengths = [(str(name), int(length)) for name, length in meta["lengths"]]
            if meta["shard"] != shard_id or meta["stage"] != stage:
                return None
            h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
            body = 0
            while block := f.read(_BLOCK):
                h.update(block)
                body += len(block)
        if body != sum(length for _, length in lengths) or h.hexdigest() != digest:
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    spans, offset = {}, len(head)
    for name, length in lengths:
        spans[name] = (offset, length)
        offset += length
    info = {k: v for k, v in meta.items() if k not in ("shard", "stage", "lengths")}
    return StoredShard(path, info, spans)


def write_atomically(path: str, data: bytes | list[bytes]) -> None:
    """Writes a temporary file beside ``path``, flushed to the disk, and renames it: a reader sees all of it or nothing."""
    write_bytes_atomically(path, data, sync=True)
