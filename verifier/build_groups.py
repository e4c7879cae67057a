"""Proves every group family at every shipped arity and writes ``taso/data/groups.jsonl.gz``.

    python -m taso.verifier.build_groups [-j 2] [--timeout 60] [--max-group 64] [-o PATH]

The optimizer's group merges (:mod:`taso.search.groups`) use an arity only when the rule they build
for it is in this file, proved. Proofs use the n-way laws of :mod:`taso.specs.nary` and
record the axioms they used; the build fails, writing nothing, when any arity is not proved.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from taso.errors import TasoError
from taso.rules import Library
from taso.search.groups import FAMILIES, GROUP_LIBRARY, MAX_GROUP, MIN_GROUP

from .report import library_header, progress_bar, summary
from .verify import Settings, verify_rules

__all__ = ["build", "main"]

TIMEOUT_S = 60.0  # a 64-way merge proves in about 1-3 s; the margin is for a loaded machine


def build(output: str = GROUP_LIBRARY, jobs: int = 2, timeout_s: float = TIMEOUT_S, max_group: int = MAX_GROUP) -> Library:
    """Proves each family's rule for arities MIN_GROUP..max_group and writes them to ``output``.

    Raises:
        TasoError: some arity was not proved (nothing is written), or the file cannot be written.
    """
    candidates = Library([family.rule(k) for family in FAMILIES for k in range(MIN_GROUP, min(max_group, family.max_arity) + 1)])
    settings = Settings(timeout_s=timeout_s, explain=True)
    start = time.perf_counter()
    results = verify_rules(candidates.rules, settings, jobs, progress_bar(len(candidates)))
    seconds = time.perf_counter() - start
    failed = [r for r in results if r.status != "proved" or r.id != next(c.id for c in candidates if c.name == r.name)]
    if failed:
        raise TasoError(f"{len(failed)} group rule(s) not proved as built, first {failed[0].name}: {failed[0].status} {failed[0].proof}")
    header = library_header(candidates, results, settings, jobs, seconds)
    header.update(build="python -m taso.verifier.build_groups", families=[{"name": f.name, "doc": f.doc} for f in FAMILIES],
                  arities=[MIN_GROUP, max_group])
    library = Library(results, header)
    library.save(output)
    print(summary(results, seconds, jobs, output))
    print(f"digest {library.digest()}: pin it in tests/test_library.py (SHIPPED_DIGESTS) when this is the shipped file")
    return library


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m taso.verifier.build_groups", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"Z3 seconds per rule (default {TIMEOUT_S:g})")
    parser.add_argument("--max-group", type=int, default=MAX_GROUP, help=f"the largest arity to prove (default {MAX_GROUP})")
    parser.add_argument("-o", "--output", default=GROUP_LIBRARY, help="where to write (default: the package's groups.jsonl.gz)")
    args = parser.parse_args(argv)
    if not MIN_GROUP <= args.max_group:
        print(f"build_groups: error: --max-group must be at least {MIN_GROUP}", file=sys.stderr)
        return 2
    try:
        build(os.path.abspath(args.output), args.jobs, args.timeout, args.max_group)
    except TasoError as e:
        print(f"build_groups: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
