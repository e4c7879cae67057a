"""The output check: the original runs once on the check's input sets; each candidate must match it on ONNX Runtime
before anything is kept (a mismatch is :class:`OutputMismatchError`, exit 3). A valid model the check cannot run is
:class:`~taso.errors.Unsupported`: written unchanged."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..errors import TasoError, Unsupported, first_line
from ..ir import Graph
from ..measure.timing import interleaved_times, open_session
from .outcome import Outcome
from .source import CandidateModel, ModelSource, export_onnx, runnable

__all__ = ["OutputMismatchError", "Checks", "custom_kernels_missing", "check_candidate", "check_into", "require_match", "end_to_end_speedup"]


class OutputMismatchError(TasoError):
    """The optimized model disagrees with the original on ONNX Runtime, or ONNX Runtime cannot run it.

    Nothing is written; the CLI exits 3 (a taso bug or a wrong rule, never the user's fault).
    """

    exit_code = 3


_STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training", "com.microsoft")


def custom_kernels_missing(model: onnx.ModelProto | str, reason: str) -> bool:
    """Whether ONNX Runtime refused ``model`` (a model or its path) for want of the kernels of a custom domain, whose
    library ``--custom-ops`` registers: the model has nodes in such a domain, and ONNX Runtime names a missing operator."""
    if not any(words in reason for words in ("is not a registered function/op", "Could not find an implementation", "No opset import for domain")):
        return False
    if not isinstance(model, onnx.ModelProto):
        from ..onnx import read_model

        model = read_model(model, external_data=False)
    return any(node.domain not in _STANDARD_DOMAINS for node in model.graph.node)


def check_candidate(candidate, reference, threads: int, opened: list | None = None):
    """Compares a candidate (a model, or a session already open) with the original's outputs (run once, before the
    search); ONNX Runtime failures become one-line errors. The candidate's session is appended to ``opened`` when
    given (timing reuses it).

    Raises:
        OutputMismatchError: ONNX Runtime cannot load or run the candidate (exit 3).
    """
    import onnxruntime as ort

    from ..measure.outputs import compare_with
    from ..onnx.files import release_mapped_weights

    release_mapped_weights()
    try:
        session = candidate if isinstance(candidate, ort.InferenceSession) else open_session(runnable(candidate), threads)
        comparison = compare_with(reference, session, threads)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        raise OutputMismatchError(f"ONNX Runtime cannot run the optimized model: {first_line(e)}; nothing was written") from None
    if opened is not None:
        opened.append(session)
    return comparison


def end_to_end_speedup(original: Graph, optimized: Graph, threads: int = 1, rounds: int = 7) -> float:
    """Measured speedup of ``optimized`` over ``original`` on ONNX Runtime (ENABLE_ALL), runs interleaved.

    The per-node cost model adds node costs; ONNX Runtime fuses across nodes. This is the
    check that the sum did not lie.
    """
    from ..measure.inputs import random_inputs

    feeds = random_inputs(original)
    before, after = interleaved_times([export_onnx(g).SerializeToString() for g in (original, optimized)], feeds, threads, rounds)
    return before / after


@dataclass
class Checks:
    """The output check's inputs and the original's outputs on them, run once before the search.

    Input sets: one seeded set at the measurement sizes (two for a static model), one at the
    first other valuation of the size symbols the input model runs at (:func:`taso.measure.inputs.check_sizes`),
    then the user's ``--inputs``. The original runs on them before the search, so a model that
    cannot run where it will be checked is said at once, and every candidate is compared with
    these outputs: the original never runs twice, and its session is closed before any
    candidate's opens.

    Attributes:
        timing_feeds: the first set at the measurement sizes (what end-to-end timing runs).
        reference: the original's run on every set, or None when the check is off.
        valuations: the valuation of the size symbols checked besides the measurement sizes.
        other_sizes: the positions in ``reference`` of the sets at that valuation.
        sessions: the ONNX Runtime session of each candidate whose check passed, which timing takes
            over instead of loading the model again (ALBERT-xxlarge: seconds a load).
        sized_feeds: one drawn set at each further valuation of the model's size range (:mod:`taso.pipeline.sizes`),
            by position in the range; each is also in ``reference`` (at ``range_sets``), so every candidate is
            checked at every size it will be timed at.
        dropped: the range's valuations the input model does not run at, with the reason.
    """

    timing_feeds: dict
    reference: object | None = None
    valuations: list = field(default_factory=list)
    other_sizes: list = field(default_factory=list)
    sessions: dict = field(default_factory=dict)  # candidate -> its session, open since its check passed
    drawn: bool = True  # False: the model does not run on drawn inputs, and the check runs on the user's alone
    sized_feeds: dict = field(default_factory=dict)
    range_sets: list = field(default_factory=list)
    dropped: list = field(default_factory=list)

    @classmethod
    def prepare(cls, source: ModelSource, extra_inputs: Mapping[str, np.ndarray] | None, threads: int, check: bool,
                valuations=()) -> Checks:
        """The check's sets, and one at each of ``valuations`` (the size range's, past the measurement sizes).

        Raises TasoError: ONNX Runtime cannot run the input model, or not at any of the check's sizes (exit 2).
        """
        from ..measure.outputs import ReferenceFailure

        checks, reference, drawer = cls._prepare(source, extra_inputs, threads, check)
        for position, valuation in enumerate(valuations):
            feeds = drawer.draw(0, valuation)
            if reference is None:
                checks.sized_feeds[position] = feeds
                continue
            try:
                run = reference.run([feeds])
            except ReferenceFailure as e:
                checks.dropped.append((valuation, e.reason))
                continue
            checks.sized_feeds[position] = feeds
            checks.range_sets.append(len(checks.reference.input_sets))
            checks.reference = checks.reference + run
        return checks

    @classmethod
    def _prepare(cls, source: ModelSource, extra_inputs: Mapping[str, np.ndarray] | None, threads: int, check: bool):
        from ..measure.inputs import InputDrawer, check_sizes
        from ..measure.outputs import Reference, ReferenceFailure

        choices = check_sizes(source.graph) if check else []
        drawer = InputDrawer(source.graph, source.model)
        measured = [drawer.draw(seed) for seed in ((0,) if choices else (0, 1))]
        if not check:
            return cls(measured[0]), None, drawer
        user = [dict(extra_inputs)] if extra_inputs else []
        try:
            reference = Reference(source.timing_source(), threads)
        except ReferenceFailure as e:
            if custom_kernels_missing(source.model, e.reason):
                raise Unsupported(f"ONNX Runtime has no kernel for a custom-domain operator ({e.reason}); give its library with --custom-ops LIB") from None
            raise TasoError(f"ONNX Runtime cannot load the input model: {e.reason}") from None
        try:
            run = reference.run(measured + user)
        except ReferenceFailure as e:
            if e.position >= len(measured):
                raise TasoError(f"--inputs: the input model does not run on them: {e.reason}") from None
            if not user:
                sizes = source.graph.meta.sizes
                where = (f" at the measurement sizes {', '.join(f'{k}={v}' for k, v in sizes)} (if it runs at other sizes only, give them "
                         "with --input-shape)" if sizes else "")
                raise Unsupported(f"the output check cannot draw inputs the model runs on{where}: {e.reason}; give some with --inputs FILE.npz") from None
            return cls(user[0], reference.run(user), drawn=False)  # the check runs on the user's inputs alone
        failures = []
        for valuation in choices:
            sized = [drawer.draw(0, valuation)]
            try:
                sized_run = reference.run(sized)
            except ReferenceFailure as e:
                failures.append((valuation, e.reason))
                continue
            first = len(measured)
            return cls(measured[0], run.select(range(first)) + sized_run + run.select(range(first, first + len(user))), [valuation],
                       list(range(first, first + len(sized)))), reference, drawer
        if failures:
            from ..measure.inputs import describe_sizes

            where = " nor at ".join(", ".join(f"{k}={v}" for k, v in sorted(valuation.items())) for valuation, _ in failures)
            raise TasoError(f"the input model declares symbolic dims (measured at {describe_sizes([dict(source.graph.meta.sizes)])}) but does not run at {where}: "
                            f"{failures[0][1]}; measure where it runs with --input-shape, or write a fixed-size copy with --static")
        return cls(measured[0], run), reference, drawer

    def at_measurement_sizes(self):
        elsewhere = set(self.other_sizes) | set(self.range_sets)
        return self.reference.select([k for k in range(len(self.reference.input_sets)) if k not in elsewhere])

    def at_other_sizes(self):
        return self.reference.select(self.other_sizes)


def check_into(outcome: Outcome, candidate: CandidateModel, checks: Checks, threads: int, name: str | None = None) -> None:
    """Records the candidate's output check in ``outcome`` (see :func:`require_match`); the session of a candidate
    that passed is kept in ``checks.sessions[name]`` for end-to-end timing."""
    started = time.perf_counter()
    opened: list = []
    comparison = require_match(candidate, checks.reference, threads, opened)
    outcome.check_seconds += time.perf_counter() - started
    outcome.comparison = comparison
    if name is not None:
        checks.sessions[name] = opened[0]


def require_match(candidate: CandidateModel, reference, threads: int, opened: list | None = None):
    """The comparison, when the candidate's outputs match the original's on ONNX Runtime.

    Raises:
        OutputMismatchError: they differ, or ONNX Runtime cannot run the candidate.
    """
    comparison = check_candidate(candidate, reference, threads, opened)
    if not comparison.ok:
        raise OutputMismatchError(f"the optimized model does not match the original on ONNX Runtime: {comparison.describe()}; nothing was written")
    return comparison
