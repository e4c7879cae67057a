"""Rebuilds the library shipped in the package: ``taso generate`` + ``taso verify``.

    python -m taso.verifier.build_library [-j 2] [--timeout 10] [--candidates FILE] [--save-candidates FILE] [-o PATH]
    python -m taso.verifier.build_library --convert OLD.json [-o PATH]

Generation runs with the generator's default settings (the header of the library records
them), verification with the verifier's; the proved rules are written to
``taso/data/library.jsonl.gz`` (rule format version 2), which ``taso optimize`` uses by
default. Every proof records the axioms it used. Timings are printed per step.
``--candidates`` skips generation and verifies an existing candidates file instead.
``--convert`` re-saves an existing library in the format the output name selects without
re-proving it (same rules, same proofs, same digest): a format conversion.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence

import taso
from taso.cli import main as taso_main
from taso.errors import TasoError
from taso.rules import Library, LibraryFile

from . import DEFAULT_TIMEOUT_S
from .report import library_header, progress_bar, summary
from .verify import Settings, verify_rules

__all__ = ["main", "build", "convert", "DEFAULT_OUTPUT"]

DEFAULT_OUTPUT = os.path.join(os.path.dirname(taso.__file__), "data", "library.jsonl.gz")


def _generate(path: str, jobs: int) -> float:
    """Runs ``taso generate`` with default settings; returns its wall time.

    Raises:
        TasoError: the generator is not installed or fails.
    """
    start = time.perf_counter()
    code = taso_main(["generate", "-o", path, "-j", str(jobs)])
    if code != 0:
        raise TasoError(f"taso generate failed (exit code {code})")
    return time.perf_counter() - start


def build(output: str, jobs: int = 2, timeout_s: float = DEFAULT_TIMEOUT_S, candidates: str | None = None,
          save_candidates: str | None = None) -> Library:
    """Generates (unless ``candidates`` is given), verifies, writes ``output``; prints timings.

    Raises:
        TasoError: generation fails, or a file cannot be read or written.
    """
    with tempfile.TemporaryDirectory() as tmp:
        if candidates is None:
            candidates = save_candidates or os.path.join(tmp, "candidates.json")
            print(f"generate: {_generate(candidates, jobs):.1f} s", flush=True)
        pool = Library.load(candidates, check_digest=False)
        settings = Settings(timeout_s=timeout_s, explain=True)
        start = time.perf_counter()
        results = verify_rules(pool.rules, settings, jobs, progress_bar(len(pool)))
        seconds = time.perf_counter() - start
    header = library_header(pool, results, settings, jobs, seconds)
    header["build"] = "python -m taso.verifier.build_library"
    library = Library([r for r in results if r.status == "proved"], header)
    library.save(output)
    print(summary(results, seconds, jobs, output))
    print(f"digest {library.digest()}: pin it in tests/test_library.py (SHIPPED_DIGESTS) when this is the shipped file")
    return library


def convert(source: str, output: str) -> Library:
    """Re-saves ``source`` in the format ``output``'s name selects, without re-proving anything.

    The source's digest is checked first (only an intact library is converted), and the
    written file must carry the same digest: the rules, statuses and proofs are unchanged.

    Raises:
        TasoError: the source cannot be read or fails its digest, the output cannot be
            written, or the written file's digest differs.
    """
    library = Library.load(source)
    if "digest" not in library.header:
        raise TasoError(f"{source}: has no integrity digest; re-prove it with `taso verify` instead of converting it")
    library.save(output)
    written = LibraryFile.read(output)
    if written.digest != library.header["digest"] or len(written) != len(library):
        raise TasoError(f"{output}: the converted file's digest {written.digest} differs from {library.header['digest']}")
    print(f"converted {len(library)} rules: {source} ({os.path.getsize(source):,} bytes) -> {output} "
          f"({os.path.getsize(output):,} bytes, format version {written.version}, digest {written.digest})")
    return library


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m taso.verifier.build_library", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-j", "--jobs", type=int, default=2, help="worker processes for generation and verification (default 2)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="Z3 seconds per rule")
    parser.add_argument("--candidates", help="verify this candidates file instead of generating one")
    parser.add_argument("--save-candidates", metavar="FILE", help="keep the generated candidates in FILE")
    parser.add_argument("--convert", metavar="LIBRARY", help="re-save this proved library in the output's format, without re-proving")
    parser.add_argument("-o", "--output", default=DEFAULT_OUTPUT, help="where to write the library (default: the package's)")
    args = parser.parse_args(argv)
    try:
        if args.convert:
            convert(args.convert, args.output)
            return 0
        build(args.output, args.jobs, args.timeout, args.candidates, args.save_candidates)
    except TasoError as e:
        print(f"build_library: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
