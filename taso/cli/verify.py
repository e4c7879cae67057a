"""``taso verify``: prove candidate rules with Z3 and write the proved ones as a library.

    taso verify candidates.json -o library.json [-j N] [--timeout S] [--explain RULE_ID] [--ray [ADDRESS]] [--resume]

Only proved rules go into the output, under a header that records the verifier's settings
and the counts; the others are reported on stdout with their reason. ``--explain`` proves
one rule and prints the axioms its proof used. While a run goes, every finished rule is
journalled in OUTPUT.journal; a killed run continues with ``--resume``.
"""

from __future__ import annotations

import argparse
import math
import os
import time

from taso.errors import TasoError

from ..onnx.files import check_writable
from ..verifier import DEFAULT_TIMEOUT_S

__all__ = ["add_parser", "run"]


def add_parser(subparsers) -> None:
    """Registers the ``verify`` sub-command."""
    parser = subparsers.add_parser("verify", help="prove candidate rules with Z3; write the proved ones as a library",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("candidates", help="a rule file (taso generate's output)")
    parser.add_argument("-o", "--output", help="where to write the library of proved rules (required unless --explain)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S", help="Z3 seconds per rule (default %(default)s)")
    parser.add_argument("--explain", metavar="RULE_ID", help="prove one rule (id or name) and print the axioms its proof used")
    parser.add_argument("--record-axioms", action="store_true", help="record in each proof the axioms it used (its unsat core)")
    parser.add_argument("--no-precheck", action="store_true", help="skip the NumPy pre-check (to test the prover alone)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no list of unproved rules")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the rules a killed run finished (its journal, OUTPUT.journal) and verify the rest")
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help="prove the rules as Ray tasks (pip install 'taso[cluster]'): on the cluster at ADDRESS, or "
                        "without it on a local cluster of -j CPUs (default: all when -j is 1)")
    parser.set_defaults(func=run)




def _refuse_overwriting_input(candidates: str, output: str) -> None:
    """The candidates are the only copy of a long generation run: the library never replaces them."""
    same = os.path.abspath(candidates) == os.path.abspath(output)
    if not same and os.path.exists(candidates) and os.path.exists(output):
        same = os.path.samefile(candidates, output)
    if same:
        raise TasoError(f"refusing to overwrite the candidates file {candidates}; choose another -o")


def run(args: argparse.Namespace) -> int:
    """Runs ``taso verify``; returns the exit code (0, or 1 when an explained rule is not proved).

    Raises:
        TasoError: a missing or malformed candidates file, an unwritable output, an unknown rule id.
    """
    from taso.rules import Library

    from ..verifier.journal import Journal
    from ..verifier.report import explain, library_header, progress_bar, summary
    from ..verifier.verify import Settings, verify_rule, verify_rules

    if args.jobs < 1:
        raise TasoError(f"-j/--jobs must be at least 1, got {args.jobs}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):  # nan compares false to everything: name it
        raise TasoError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    candidates = Library.load(args.candidates, check_digest=False)  # every rule is re-proved: an edited file is fine here
    settings = Settings(timeout_s=args.timeout, precheck=not args.no_precheck, explain=args.record_axioms)
    if args.explain:
        rule = verify_rule(candidates.by_id(args.explain), Settings(timeout_s=args.timeout, precheck=not args.no_precheck, explain=True))
        print(explain(rule))
        return 0 if rule.status == "proved" else 1
    if not args.output:
        raise TasoError("verify: -o/--output is required (the library of proved rules)")
    check_writable(args.output)
    _refuse_overwriting_input(args.candidates, args.output)
    journal = Journal(f"{args.output}.journal", settings, args.resume)
    todo = [r for r in candidates.rules if r.id not in journal.done]

    def record(index: int, rule) -> None:
        journal.record(todo[index].id, rule)

    start = time.perf_counter()
    if args.ray is not None:
        from taso.generator.cluster import verify_rules_on_ray

        fresh = verify_rules_on_ray(todo, settings, args.ray or None, args.jobs if args.jobs > 1 else None,
                                    progress_bar(len(todo), args.quiet), on_result=record)
    else:
        fresh = verify_rules(todo, settings, args.jobs, progress_bar(len(todo), args.quiet), on_result=record)
    seconds = time.perf_counter() - start
    # By candidate id: a proof that adds shape constraints gives the rule a new id.
    verified = {**journal.done, **{c.id: r for c, r in zip(todo, fresh, strict=True)}}
    results = [verified[c.id] for c in candidates.rules]
    proved = [r for r in results if r.status == "proved"]
    Library(proved, library_header(candidates, results, settings, args.jobs, seconds)).save(args.output)
    journal.close(remove=True)
    if reused := sum(r.id in journal.done for r in candidates.rules):
        print(f"resumed: {reused:,} rules reused from {journal.path}")
    print(summary(results, seconds, args.jobs, args.output, listing=not args.quiet))
    return 0
