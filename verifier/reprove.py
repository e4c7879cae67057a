"""Proves the shipped libraries again against today's specifications: what CI runs on every change.

    python -m taso.verifier.reprove [-j 2] [--timeout 10] [--groups-timeout 60] [--sample N]

Every rule of ``taso/data/library.jsonl.gz``, of the runtime forms, exporter forms and ONNX Runtime fusions
(``runtime_forms.jsonl.gz``, ``exporter_forms.jsonl.gz``, ``ort_fusions.jsonl.gz``) and every group rule of ``taso/data/groups.jsonl.gz``
is verified again from its source and target, as ``taso verify`` would a candidate, with the
settings the builders use. The run fails (exit 1) when a rule is not proved again, or is proved
only as another rule (a proof that needed shape constraints the shipped rule does not state):
a change to ``specs/`` that breaks a shipped proof shows here, not in a user's model. A library
file whose digest does not match its rules fails before anything is proved (exit 2).
``--sample N`` re-proves every N-th rule only (a quick local check; CI proves them all).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from taso.errors import TasoError
from taso.pipeline.library import EXPORTER_FORMS, ORT_FUSIONS, RUNTIME_FORMS
from taso.rules import Library, Rule
from taso.search.groups import GROUP_LIBRARY

from . import DEFAULT_TIMEOUT_S
from .build_groups import TIMEOUT_S as GROUP_TIMEOUT_S
from .build_library import DEFAULT_OUTPUT as SHIPPED_LIBRARY
from .report import progress_bar
from .verify import Settings, verify_rules

__all__ = ["reprove", "main"]


def reprove(path: str, timeout_s: float, jobs: int, every: int = 1) -> tuple[int, list[tuple[Rule, Rule]]]:
    """Verifies the rules of the library at ``path`` again; returns how many were checked and the (shipped, now) pairs
    that did not come out as the same proved rule.

    Raises:
        TasoError: the file is unreadable or its digest does not match its rules.
    """
    shipped = Library.load(path).rules[::every]
    # NOTE: without the unsat cores (which axioms a proof used, recorded when the library was built): the 64-way group
    # merges prove 4.6x faster without them, and whether a rule is proved does not depend on them.
    results = verify_rules([rule.with_status("candidate", None) for rule in shipped], Settings(timeout_s=timeout_s, explain=False), jobs,
                           progress_bar(len(shipped)))
    failed = [(old, new) for old, new in zip(shipped, results) if new.status != "proved" or new.id != old.id]
    return len(shipped), failed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m taso.verifier.reprove", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help=f"Z3 seconds per library rule (default {DEFAULT_TIMEOUT_S:g}, as the build)")
    parser.add_argument("--groups-timeout", type=float, default=GROUP_TIMEOUT_S, help=f"Z3 seconds per group rule (default {GROUP_TIMEOUT_S:g}, as the build)")
    parser.add_argument("--sample", type=int, default=1, metavar="N", help="re-prove every N-th rule only (default: all)")
    args = parser.parse_args(argv)
    if args.sample < 1 or args.jobs < 1:
        parser.error("--sample and --jobs must be at least 1")
    failures = 0
    try:
        libraries = ((SHIPPED_LIBRARY, args.timeout), (RUNTIME_FORMS, args.timeout), (EXPORTER_FORMS, args.timeout), (ORT_FUSIONS, args.timeout), (GROUP_LIBRARY, args.groups_timeout))
        for path, timeout in libraries:
            start = time.perf_counter()
            checked, failed = reprove(path, timeout, args.jobs, args.sample)
            print(f"{path}: {checked - len(failed)} of {checked} rules proved again in {time.perf_counter() - start:.1f} s (-j {args.jobs})")
            for old, new in failed:
                why = (new.proof or {}).get("reason", "") if new.status != "proved" else f"proved only as {new.id} (added shape constraints)"
                print(f"  {old.id} {old.name or ''}: {new.status} {why}".rstrip())
            failures += len(failed)
    except TasoError as e:
        print(f"taso: error: {e}", file=sys.stderr)
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
