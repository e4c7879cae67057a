"""A journal of finished verifications, so that a killed ``taso verify`` resumes where it stopped.

Every rule is appended, with its status and proof, as one JSON line the moment its
verification finishes, under the id of the candidate it was (a proof that adds shape
constraints changes a rule's id) (flushed, so a kill loses at most the rules in flight). The first
line records the verifier's settings and version: ``--resume`` reuses a journal only when
they are the ones of the resumed run, and ignores a last line cut short by the kill.
"""

from __future__ import annotations

import json
import os

from taso import __version__
from taso.errors import TasoError
from taso.rules import Rule

__all__ = ["Journal"]

_FORMAT = "taso-verify-journal"


class Journal:
    """The journal at ``path`` for a run with ``settings``.

    Args:
        path: the journal file (``taso verify`` uses ``OUTPUT.journal``).
        settings: the verifier settings (:class:`~taso.verifier.verify.Settings`).
        resume: reuse the rules the file holds; without it the file is started afresh.

    Attributes:
        done: candidate id -> the verified rule, for the rules reused.
    """

    def __init__(self, path: str, settings, resume: bool):
        self.path = path
        self.done: dict[str, Rule] = {}
        header = {"format": _FORMAT, "taso": __version__, "settings": settings.to_json()}
        if resume:
            self._read(header)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(json.dumps(header) + "\n")
        self._file = open(path, "a", encoding="utf-8")

    def _read(self, header: dict) -> None:
        if not os.path.exists(self.path):
            raise TasoError(f"--resume: no journal {self.path} (it is written beside -o while a run goes, and removed when it ends)")
        with open(self.path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        try:
            found = json.loads(lines[0])
        except ValueError:
            found = None
        if found != header:
            raise TasoError(f"--resume: {self.path} was written by another taso version or with other settings "
                            f"(--timeout, --no-precheck, --record-axioms); run without --resume")
        for line in lines[1:]:
            try:
                entry = json.loads(line)
                self.done[entry["candidate"]] = Rule.from_json(entry["rule"])
            except (ValueError, KeyError, TypeError, TasoError):
                continue  # the line a kill cut short (the last one)

    def record(self, candidate_id: str, rule: Rule) -> None:
        """Appends one finished rule, verified from the candidate ``candidate_id``."""
        self._file.write(json.dumps({"candidate": candidate_id, "rule": rule.to_json()}) + "\n")
        self._file.flush()

    def close(self, remove: bool) -> None:
        """Closes the journal; ``remove`` once the library is written (nothing is left to resume)."""
        self._file.close()
        if remove:
            os.remove(self.path)
