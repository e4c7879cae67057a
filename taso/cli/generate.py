"""`taso generate`: enumerate small graphs and write the candidate substitutions.

    taso generate [--max-ops 3] [--ops LIST] [-j N] [--seed S] -o candidates.json
    taso generate ... [--run-dir DIR | --resume DIR] [--shards N]
    taso generate ... --ray [ADDRESS] [--run-dir DIR | --resume DIR] [--shards N]

With ``--run-dir`` a run keeps every finished shard and stage in DIR; killed, it continues
with ``--resume DIR`` (:mod:`~taso.generator.store`). With ``--ray`` the enumeration's shards
run as Ray tasks (:mod:`~taso.generator.cluster`), on a local cluster of ``-j`` CPUs or on
the cluster at ADDRESS, checkpointed in the run directory (OUTPUT.shards/ by default); the
rule file is byte-identical to the local run's.

Progress goes to stderr (a tqdm bar: graphs/s and candidates found so far); the table of
pruning stages goes to stdout. Bad input (an unknown operator, an unwritable output) is a
:class:`~taso.errors.TasoError`: one line, exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tqdm import tqdm

from taso.errors import TasoError

from ..generator.opset import GENERATOR_OPS, PRESETS, parse_ops
from ..generator.parallel import Workers
from ..generator.pipeline import STAGES, Progress, Result, generate
from ..generator.settings import Settings
from ..generator.shards import DEFAULT_SHARDS
from ..onnx.files import check_writable

__all__ = ["add_parser", "run", "format_summary"]


def add_parser(subparsers) -> None:
    """Registers the ``generate`` sub-command on the ``taso`` command line."""
    parser = subparsers.add_parser(
        "generate",
        help="enumerate small operator graphs and write candidate substitutions",
        description="Enumerates every graph of up to --max-ops operators over a small input pool, pairs graphs "
        "whose outputs fingerprint equal, prunes, and writes the candidates as a taso rule file.",
    )
    parser.add_argument("--max-ops", type=int, default=3, metavar="K", help="operators per graph, at most (default: 3)")
    parser.add_argument("--ops", default=None, metavar="LIST",
                        help=f"comma-separated operators or presets ({', '.join(PRESETS)}); default: TASO's set. "
                        f"Known: {', '.join(GENERATOR_OPS)}")
    parser.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                        help="worker processes (default: 1); with --ray and no ADDRESS, the local cluster's CPUs (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random fingerprint inputs (default: 0)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="the rule file to write (JSON)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    runs = parser.add_argument_group("long runs")
    runs.add_argument("--run-dir", metavar="DIR",
                      help="keep every finished shard and stage in DIR, so that a killed run can --resume "
                      "(default: a temporary directory; with --ray, OUTPUT.shards/)")
    runs.add_argument("--resume", metavar="DIR", help="continue the run kept in DIR, redoing only what did not finish")
    runs.add_argument("--shards", type=int, default=None, metavar="N",
                      help="about how many shards of equal estimated work to plan (default: 64)")
    cluster = parser.add_argument_group("scale-out on Ray (pip install 'taso[cluster]')")
    cluster.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                         help="run the shards as Ray tasks: on the cluster at ADDRESS, or without it on a local cluster")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Runs ``taso generate``; returns the exit code.

    Raises:
        TasoError: bad arguments or an unwritable output file.
    """
    settings = Settings(max_ops=args.max_ops, ops=parse_ops(args.ops), seed=args.seed)
    if args.jobs is not None and args.jobs < 1:
        raise TasoError(f"-j must be at least 1, got {args.jobs}")
    check_writable(args.output)
    run_dir = _check_run_dir(args)
    backend = _ray_backend(args, run_dir)
    make_workers = backend.workers if backend else (lambda s: Workers(s, args.jobs or 1, run_dir, bool(args.resume), args.shards or DEFAULT_SHARDS))
    started = time.perf_counter()
    try:
        with _ProgressBar(disable=args.quiet, unit="shard") as bar:
            result = generate(settings, args.jobs or 1, bar.callbacks(), make_workers=make_workers)
    except KeyboardInterrupt:
        if run_dir:
            print(f"taso generate: what finished is kept in {run_dir}; continue with --resume {run_dir}", file=sys.stderr)
        raise
    result.library.save(args.output)
    print(format_summary(result, args.output, time.perf_counter() - started))
    if backend:
        print(backend.summary())
        backend.save_report()
    return 0


def _check_run_dir(args: argparse.Namespace) -> str | None:
    """The run directory the options name (``--ray`` defaults to OUTPUT.shards/), or None for a temporary one.

    Raises:
        TasoError: both options naming different directories, a missing --resume directory, a bad --shards.
    """
    if args.resume and args.run_dir and os.path.abspath(args.resume) != os.path.abspath(args.run_dir):
        raise TasoError("--resume DIR is the run directory: give --run-dir or --resume, not both")
    if args.resume and not os.path.isdir(args.resume):
        raise TasoError(f"--resume {args.resume}: no such directory")
    if args.shards is not None and args.shards < 1:
        raise TasoError(f"--shards must be at least 1, got {args.shards}")
    run_dir = args.resume or args.run_dir or (f"{args.output}.shards" if args.ray is not None else None)
    if run_dir and os.path.exists(run_dir) and not os.path.isdir(run_dir):
        raise TasoError(f"--run-dir {run_dir}: is a file, not a directory")
    return run_dir


def _ray_backend(args: argparse.Namespace, run_dir: str | None):
    """The Ray backend ``--ray`` asks for, or None for the local process pool.

    Raises:
        TasoError: Ray not installed.
    """
    if args.ray is None:
        return None
    from ..generator.cluster import RayBackend, ray_available

    if reason := ray_available():
        raise TasoError(f"--ray: {reason}")
    return RayBackend(address=args.ray or None, num_cpus=None if args.ray else args.jobs, run_dir=run_dir,
                      resume=bool(args.resume), shards=args.shards or DEFAULT_SHARDS, progress=not args.quiet)




class _ProgressBar:
    """A tqdm bar over the enumeration's units of work, showing graphs/s and candidates so far."""

    def __init__(self, disable: bool, unit: str = "root"):
        self._disable, self._unit = disable, unit
        self._bar: tqdm | None = None
        self._graphs, self._candidates = 0, None
        self._start = time.perf_counter()

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()

    def callbacks(self) -> Progress:
        return Progress(phase=self._phase, advance=self._advance, stage=self._stage)

    def _phase(self, name: str, total: int) -> None:
        if self._bar is not None:
            self._bar.close()
        # disable=None: drawn on a terminal only (a log gets the stage lines below, not redrawn bars)
        self._bar = tqdm(total=total, desc=name, unit=self._unit, file=sys.stderr, disable=True if self._disable else None, dynamic_ncols=True)

    def _advance(self, graphs: int, candidates: int | None) -> None:
        self._graphs += graphs
        self._candidates = candidates if candidates is not None else self._candidates
        rate = self._graphs / max(time.perf_counter() - self._start, 1e-9)
        postfix = {"graphs": f"{self._graphs:,}", "graphs/s": f"{rate:,.0f}"}
        if self._candidates is not None:
            postfix["candidates"] = f"{self._candidates:,}"
        if self._bar is not None:
            self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(1)

    def _stage(self, name: str, count: int) -> None:
        if self._bar is not None and name == "graphs":
            self._bar.close()
            self._bar = None
        if not self._disable:
            print(f"  {name}: {count:,}", file=sys.stderr)


def format_summary(result: Result, output: str, seconds: float) -> str:
    """The table of pruning stages printed after a run."""
    by_ops = ", ".join(f"{k} ops: {n:,}" for k, n in enumerate(result.per_depth) if k)
    width = max([len("count")] + [len(f"{c:,}") for c in result.counts.values()])
    lines = [f"{'stage':<16} {'count':>{width}}  {'seconds':>7}  meaning"]
    rate = result.counts["graphs"] / max(result.seconds.get("graphs", 0.0), 1e-9)
    for name, meaning in STAGES.items():
        count = result.counts[name]
        speed = "" if result.resumed.get("shards") else f"; {rate:,.0f} graphs/s"  # a resumed pass's time is not its graphs'
        detail = f" ({by_ops}{speed})" if name == "graphs" else ""
        lines.append(f"{name:<16} {count:>{width},}  {result.seconds.get(name, 0.0):7.1f}  {meaning}{detail}")
    if result.resumed:
        shards = result.resumed.get("shards")
        stages = [name for name in result.resumed if name != "shards"]
        reused = ([f"{shards:,} shards"] if shards is not None else []) + ([f"stages {', '.join(stages)}"] if stages else [])
        lines.append(f"resumed: reused {' and '.join(reused)} from the run directory")
    lines.append(f"wrote {result.counts['rules']:,} candidate rules to {output} in {seconds:.1f} s")
    return "\n".join(lines)
