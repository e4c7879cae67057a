"""Cost tables that travel: measured once per machine type, shipped with the model (a container image, a CI cache).

``taso info --costs --export FILE`` writes the tables of the cost cache that belong to this machine; ``taso info
--costs --import FILE`` adds another machine's tables to this one's cache, where they were measured on a machine of
this type. A table is keyed by its fingerprint (for ONNX Runtime: the processor, ONNX Runtime's version, the thread
count and taso's measuring settings), so a table from another processor, runtime or measuring method would price
this machine wrongly: it is refused, one line each. Entries the cache already holds are kept over imported ones.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import TasoError
from ..onnx.files import write_text_atomically
from .cache import CostCache, entry_from_json

__all__ = ["TABLE_KEY", "this_machines", "export_tables", "import_tables", "Imported"]

TABLE_KEY = "taso-cost-tables"
_VERSION = 1


def this_machines(fingerprint: str) -> str | None:
    """The fingerprint this machine gives a table measured with ``fingerprint``'s settings (its thread count; a region
    table's suffix), or None where this machine cannot say (a runtime or GPU it does not have)."""
    if fingerprint.startswith("ort-cpu|"):
        from .ort_cpu import fingerprint as ort_cpu_fingerprint

        threads = re.search(r"\|threads=(\d+)", fingerprint)
        local = ort_cpu_fingerprint(int(threads.group(1)) if threads else 1)
    elif fingerprint.startswith("torch|"):
        from ..measure.torch_runtime import default_device, torch_or_none

        if torch_or_none() is None:
            return None
        local = default_device().fingerprint()
    else:
        return None
    rest = fingerprint[len(local):]
    return fingerprint if fingerprint.startswith(local) and (not rest or rest.startswith("|")) else local


def _belongs_here(fingerprint: str) -> bool:
    return this_machines(fingerprint) == fingerprint


def export_tables(cache: CostCache, path: str) -> tuple[int, int]:
    """Writes the cache's tables that belong to this machine to ``path``; (tables, entries) written.

    Raises:
        TasoError: no table of this machine's, or the file cannot be written.
    """
    tables = {fp: {key: cache.entry_json(fp, key, seconds) for key, seconds in table.items()}
              for fp, table in cache.tables().items() if table and _belongs_here(fp)}
    if not tables:
        raise TasoError(f"the cost cache {cache.path} holds no table of this machine's to export (run taso optimize here first)")
    write_text_atomically(path, json.dumps({TABLE_KEY: _VERSION, "tables": tables}, indent=0, sort_keys=True))
    return len(tables), sum(len(t) for t in tables.values())


@dataclass
class Imported:
    """What an import took and left: entries added per table, and the tables refused with this machine's fingerprint."""

    added: dict[str, int] = field(default_factory=dict)
    kept: int = 0  # entries the cache already held (measured here, or imported before), kept over the imported ones
    refused: list[tuple[str, str | None]] = field(default_factory=list)


def import_tables(cache: CostCache, path: str) -> Imported:
    """Adds the tables in ``path`` that belong to this machine to ``cache`` (saved by the caller).

    Raises:
        TasoError: the file cannot be read or is not an exported cost table.
    """
    try:
        with open(path, encoding="utf-8") as f:
            raw: Any = json.load(f)
    except OSError as e:
        raise TasoError(f"{path}: cannot read the cost table ({e.strerror or e})") from None
    except ValueError as e:
        raise TasoError(f"{path}: not a cost table (not JSON: {e})") from None
    if not isinstance(raw, dict) or raw.get(TABLE_KEY) != _VERSION or not isinstance(raw.get("tables"), dict):
        raise TasoError(f"{path}: not a cost table written by `taso info --costs --export` (version {_VERSION})")
    done = Imported()
    for fingerprint, entries in raw["tables"].items():
        if not isinstance(entries, dict):
            raise TasoError(f"{path}: the table of {fingerprint!r} is damaged")
        if not _belongs_here(fingerprint):
            done.refused.append((fingerprint, this_machines(fingerprint)))
            continue
        table = cache.table(fingerprint)
        added = 0
        for key, value in entries.items():
            parsed = entry_from_json(value)
            if parsed is None:
                raise TasoError(f"{path}: entry {key!r} of {fingerprint!r} is damaged")
            if key in table:
                done.kept += 1
                continue
            cache.settle(fingerprint, key, *parsed)
            added += 1
        done.added[fingerprint] = added
    return done
