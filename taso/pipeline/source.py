"""The model being optimized as the user gave it (its file, timed and copied as given; its weights spilled or
mapped), taso's export of a graph, and the files written: models are written atomically, streamed from spilled weights."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import onnx

from ..errors import TasoError
from ..ir import Graph
from ..onnx.files import EXTERNAL_DATA_BYTES, SPILL_BYTES, Scratch, SpilledModel, embedded_weight_bytes, write_atomically
from ..ir.dims import evaluate
from .outcome import Outcome
from .sizes import SizeRange

__all__ = ["ModelSource", "CandidateModel", "runnable", "model_bytes", "export_onnx", "add_candidate", "write_model", "copy_model_file"]


@dataclass
class ModelSource:
    """What the optimized model must match and beat: the input as the user gave it.

    Attributes:
        graph: the imported graph.
        model: the model as read (without its weight bytes once spilled).
        path: the input file (timed as given, and copied byte for byte when nothing pays),
            or None for a graph given through the Python API.
        spilled: the input saved with its weights as external data, for ONNX Runtime to map
            (:mod:`taso.onnx.files`), when its file embeds many weight bytes; else None.
        sizes: the sizes of its size symbols it is searched and timed at (:mod:`taso.pipeline.sizes`); the graph is
            imported at the first valuation.
    """

    graph: Graph
    model: onnx.ModelProto
    path: str | None = None
    spilled: SpilledModel | None = None
    sizes: SizeRange = field(default_factory=SizeRange)
    base_dir: str | None = None
    _scratch: Scratch | None = field(default=None, repr=False)
    opset_limit: int | None = None  # the newest opset its target lets the export raise its to (taso.pipeline.targets)

    @classmethod
    def from_file(cls, path: str, input_shapes: Mapping[str, Sequence] | None = None, static: bool = False) -> ModelSource:
        """The model in ``path``; ``input_shapes`` are the sizes to measure at (a dim may be a range of sizes, a tuple: the
        first is the measurement size), ``static`` freezes the symbolic dims there.

        Weights in external data files are mapped, never read whole (:func:`taso.onnx.importer.external_array`);
        a file embedding many weight bytes is spilled once, so ONNX Runtime can map them too.
        """
        from ..onnx import load_onnx, read_model

        model = read_model(path, external_data=False)
        directory = os.path.dirname(os.path.abspath(path))
        spilled, scratch = None, None
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
            spilled = SpilledModel(model, directory, path)  # the user's own files, already as ONNX Runtime maps them
        elif embedded_weight_bytes(model) >= SPILL_BYTES:
            scratch = Scratch()
            spilled = scratch.spill(model, "input")
            model, directory = spilled.model, scratch.path  # the read proto is dropped: its weights live in the spilled file
        graph = load_onnx(model, dict(input_shapes or {}), static=static, base_dir=directory)  # weights mapped, small ones inlined
        return cls(graph, model, path, spilled, SizeRange.of(graph, input_shapes, static), directory, _scratch=scratch)

    def at_sizes(self, valuation: Mapping[str, int]) -> Graph:
        """The model imported again with its size symbols measured at ``valuation`` (the same symbolic graph, other sizes)."""
        from ..onnx import load_onnx

        from .targets import with_opset_limit

        shapes = {name: tuple(evaluate(d, valuation) for d in t.shape) for name, t in self.graph.inputs.items() if hasattr(t, "shape")}
        return with_opset_limit(load_onnx(self.model, shapes, base_dir=self.base_dir), self.opset_limit)

    def for_target(self, target: str) -> ModelSource:
        """This model as ``target`` runs it: the opset the export may raise its to (:func:`taso.pipeline.targets.opset_limit`)."""
        from .targets import opset_limit, with_opset_limit

        limit = opset_limit(self.graph, target)
        return dataclasses.replace(self, graph=with_opset_limit(self.graph, limit), opset_limit=limit)

    @classmethod
    def from_graph(cls, graph: Graph) -> ModelSource:
        return cls(graph, export_onnx(graph))

    def scratch(self) -> Scratch:
        """The private directory this model's spilled files go to (made on first use)."""
        if self._scratch is None:
            self._scratch = Scratch()
        return self._scratch

    def timing_source(self) -> str | bytes:
        """What ONNX Runtime loads to run the input: its spilled copy (the same graph and weights, mapped), the file
        itself, or the model's bytes."""
        if self.spilled is not None:
            return self.spilled.path
        return self.path if self.path is not None else self.model.SerializeToString()

    def uses_external_data(self) -> bool:
        """Whether the input file keeps weights in external data files (a copy of the file alone would lose them)."""
        return self.spilled is not None and self.spilled.path == self.path


# A candidate as taso hands it to ONNX Runtime and writes it: in memory, or spilled when its weights are large.
CandidateModel = onnx.ModelProto | SpilledModel


def runnable(model: CandidateModel | str | bytes) -> str | bytes:
    """What ONNX Runtime loads: the spilled file (weights mapped), or the model's bytes (a file or bytes as they are)."""
    if isinstance(model, (str, bytes)):
        return model
    return model.path if isinstance(model, SpilledModel) else model.SerializeToString()


def model_bytes(model: CandidateModel) -> bytes:
    """The model serialized, weights embedded."""
    return model.to_bytes() if isinstance(model, SpilledModel) else model.SerializeToString()


def export_onnx(graph: Graph, opset: int | None = None, check: bool = True, weights_file=None) -> onnx.ModelProto:
    """``to_onnx_model(graph)``, without turning an IR-3 model's weights into overridable inputs.

    IR 3 requires every initializer to be listed as a graph input, and ONNX Runtime treats
    them as constants there; from IR 4 on, an initializer that is also an input can be
    overridden at run time, so ONNX Runtime neither folds nor pre-packs it (SqueezeNet ran
    0.80x). The export raises the IR version with the opset, so those inputs are dropped.
    """
    from ..onnx import to_onnx_model

    model = to_onnx_model(graph, opset, check, weights_file)
    if graph.meta.ir_version < 4 <= model.ir_version:
        initializers = {t.name for t in model.graph.initializer}
        kept = [i for i in model.graph.input if i.name not in initializers]
        del model.graph.input[:]
        model.graph.input.extend(kept)
    return model


def write_model(model: CandidateModel | bytes, path: str) -> None:
    """Writes a model (or a file's bytes) atomically: a temporary file beside ``path``, renamed over it.

    A spilled model is streamed from its weights file; a model over 1.8 GB of weights is written
    with its weights as external data beside it (protobuf's 2 GB limit). The temporary file is
    removed whatever interrupts the write, Ctrl-C included.

    Raises:
        TasoError: the directory is missing or the file cannot be written.
    """
    _write_atomically(path, lambda tmp: _write_to(model, tmp, os.path.basename(path)))


def copy_model_file(source: str, path: str) -> None:
    """Copies a model file byte for byte, atomically (never read whole into memory)."""
    _write_atomically(path, lambda tmp: shutil.copyfile(source, tmp))


def _write_atomically(path: str, write: Callable[[str], None]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise TasoError(f"{path}: directory {directory} does not exist")
    try:
        write_atomically(path, write)
    except OSError as e:
        raise TasoError(f"{path}: cannot write ({e.strerror or e})") from None


def _write_to(model: CandidateModel | bytes, tmp: str, final_name: str) -> None:
    if isinstance(model, bytes):
        with open(tmp, "wb") as f:
            f.write(model)
    elif isinstance(model, SpilledModel):
        model.write(tmp, final_name)
    elif embedded_weight_bytes(model) > EXTERNAL_DATA_BYTES:
        onnx.save_model(model, tmp, save_as_external_data=True, all_tensors_to_one_file=True, location=final_name + ".data")
    else:
        onnx.save_model(model, tmp)


def as_written(graph: Graph, model: CandidateModel) -> Graph:
    """A candidate's graph as its file reads back, what a deployment runs: an op the model's opset cannot hold is
    written as its definition (an RMS norm below opset 23), which the graph itself would time as one kernel (the torch
    runtime timed transformers' RMS norms 1.54x so, 1.02x from the file)."""
    from ..onnx import load_onnx

    sizes = {name: t.concrete().shape for name, t in graph.inputs.items() if hasattr(t, "concrete")} if graph.meta.sizes else None
    try:
        return load_onnx(model.path if isinstance(model, SpilledModel) else model, input_shapes=sizes)
    except TasoError:
        return graph  # (the file is checked against the input on its own; timing falls back to the graph)


def add_candidate(outcome: Outcome, source: ModelSource, candidates: dict, name: str, graph: Graph) -> None:
    """Exports a candidate, spilled when its weights are large (:mod:`taso.onnx.files`); one taso cannot write is
    dropped with a note (the input, written unchanged, is always valid)."""
    try:
        if sum(array.nbytes for array in graph.weights.values()) >= SPILL_BYTES:
            candidates[name] = (graph, source.scratch().export(name, lambda weights: export_onnx(graph, weights_file=weights)))
        else:
            candidates[name] = (graph, export_onnx(graph))
    except TasoError as e:
        what = "the optimized graph" if name == "optimized" else "taso's re-export of the unchanged graph"
        outcome.notes.append(f"{what} cannot be written as ONNX ({e}); not kept")
