"""Checking an optimized model against the original on ONNX Runtime before anything is written.

Both models run on ONNX Runtime (CPU, full optimizations) on the same inputs: seeded
random ones (standard normal floats, random booleans, integers in the range the model can
index with, never all zeros, or drawn from the constants an If's condition compares them with) and, when given, the user's own. Every output must satisfy ``|optimized - original| <= atol + rtol * |original|``
elementwise with ``rtol = 1e-3`` and ``atol = 1e-4 * max(1, max|original|)``: tight enough
to catch any wrong rewrite (which changes outputs by O(1)), loose enough for float32
re-association.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

from .cost import random_array
from .ir.dims import bare_symbol
from .errors import TasoError, first_line
from .ir import OpaqueType, TensorType
from .onnx.values import random_value

__all__ = ["Comparison", "Reference", "ReferenceRun", "ReferenceFailure", "run_reference", "compare_with", "compare_outputs", "compare_models", "InputDrawer", "random_inputs", "random_input_sets", "integer_ranges", "integer_choices", "load_inputs", "RTOL", "ATOL_SCALE",
           "check_sizes", "describe_sizes"]

RTOL = 1e-3
ATOL_SCALE = 1e-4


@dataclass
class Comparison:
    """The worst disagreement over all outputs and input sets."""

    ok: bool
    worst_output: str = ""
    worst_abs: float = 0.0
    worst_rel: float = 0.0
    input_sets: int = 0

    def describe(self) -> str:
        return (f"outputs match on {self.input_sets} input set(s) (worst |diff| {self.worst_abs:.3g}, relative {self.worst_rel:.3g})" if self.ok
                else f"output {self.worst_output!r} differs: worst |diff| {self.worst_abs:.3g} (relative {self.worst_rel:.3g})")


def _session(model: onnx.ModelProto | str | bytes | ort.InferenceSession, threads: int) -> ort.InferenceSession:
    """A session for a model, a model file (ONNX Runtime reads its weights itself: no copy here) or a model's bytes;
    a session already open is used as it is."""
    from .timing import open_session

    if isinstance(model, ort.InferenceSession):
        return model
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return open_session(source, threads)


# Integer inputs reach index operands through these without changing their values.
_VALUE_PRESERVING = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose", "Concat", "Slice", "Tile"}
_DEFAULT_INT_RANGE = (0, 3)  # an integer input nothing bounds: small, non-negative, and not all zeros


def integer_ranges(model: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """A valid half-open value range for each integer graph input, from how the model uses it.

    An input that reaches the index operand of a Gather (directly or through casts and
    reshapes) must stay below that axis's size, one that reaches the divisor of a Div or Mod
    above zero; others get a small range that is not all zeros, so the check exercises the
    graph (zeros hid a wrong rewrite behind a Cast).
    """
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is only a help; initializer shapes remain
        pass
    graph = model.graph
    dims: dict[str, list] = {t.name: list(t.dims) for t in graph.initializer}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims.setdefault(vi.name, [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim])
    users = _users(graph)
    initializers = {t.name for t in graph.initializer}
    ranges = {}
    for name in _integer_inputs(graph, initializers):
        bound = _index_bound(name, users, dims)
        if bound is not None:
            ranges[name] = (0, bound)
        else:
            ranges[name] = _DIVISOR_RANGE if _divides(name, users) else _DEFAULT_INT_RANGE
    return ranges


_DIVISOR_RANGE = (1, 4)  # an integer that divides (Div, Mod) is never zero: ONNX Runtime fails on an integer division by zero


def _divides(name: str, users: Mapping[str, list]) -> bool:
    """Whether ``name``'s values reach the divisor of an integer Div or Mod (directly or through casts and reshapes)."""
    frontier, seen = [name], {name}
    while frontier:
        for node, slot in users.get(frontier.pop(), ()):
            if node.op_type in ("Div", "Mod") and slot == 1:
                return True
            if node.op_type in _VALUE_PRESERVING and (slot == 0 or node.op_type == "Concat"):
                fresh = [o for o in node.output if o not in seen]
                seen.update(fresh)
                frontier.extend(fresh)
    return False


def _integer_inputs(graph: onnx.GraphProto, constants) -> list[str]:
    """The graph's integer-typed inputs that are not constants (IR-3 files list weights as inputs too)."""
    names = []
    for vi in graph.input:
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if vi.name not in constants and elem in _INTEGER_TYPES:
            names.append(vi.name)
    return names


_INTEGER_TYPES = {onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
                  onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}


def _index_bound(name: str, users: Mapping[str, list], dims: Mapping[str, list]) -> int | None:
    """The smallest size an index reached from ``name`` may address, or None when it indexes nothing."""
    bound, frontier, seen = None, [name], {name}
    while frontier:
        for node, slot in users.get(frontier.pop(), ()):
            size = None
            if node.op_type in ("Gather", "GatherElements") and slot == 1:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                data = dims.get(node.input[0]) or []
                size = data[axis] if -len(data) <= axis < len(data) else None
            elif node.op_type == "GatherND" and slot == 1:
                known = [d for d in dims.get(node.input[0]) or [] if d]
                size = min(known) if known else None
            elif node.op_type in _VALUE_PRESERVING and (slot == 0 or node.op_type == "Concat"):
                fresh = [o for o in node.output if o not in seen]
                seen.update(fresh)
                frontier.extend(fresh)
            if size:
                bound = size if bound is None else min(bound, size)
    return bound


# A condition keeps its truth through these on its way to an If (And/Or: any operand).
_CONDITION_PRESERVING = {"Not", "And", "Or", "Xor", "Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"}


def integer_choices(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """The values to draw for each integer graph input that selects an If's branch by equality.

    An input whose value reaches (unchanged: casts, reshapes, Gather of its elements) one side
    of an ``Equal`` with a constant on the other side, where that comparison decides an If's
    condition, is a mode switch: silero-vad's sample rate ``sr`` picks the 16 kHz network when
    ``sr == 16000``. Such an input draws from the constants it is compared with, so the check
    runs the branches the model names; a small random integer would take the else branch, which
    may not run at the fixed input shapes at all (the importer checked, for each branch, that it
    runs with the node's output types or not at all).
    """
    graph = model.graph
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name in ("value", "value_int", "value_ints"):
            value = onnx.helper.get_attribute_value(node.attribute[0])
            constants[node.output[0]] = onnx.numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)
    users = _users(graph)
    choices = {}
    for name in _integer_inputs(graph, constants):
        values = _branch_selecting_constants(name, users, constants)
        if values:
            choices[name] = values
    return choices


def _users(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    users: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for slot, name in enumerate(node.input):
            users.setdefault(name, []).append((node, slot))
    return users


def _branch_selecting_constants(name: str, users: Mapping[str, list], constants: Mapping[str, np.ndarray]) -> tuple[int, ...]:
    """The integral constants that ``name``'s values are compared with for equality to decide an If's condition."""
    found: list[int] = []
    frontier, seen = [name], {name}
    while frontier:
        for node, slot in users.get(frontier.pop(), ()):
            if node.op_type == "Equal":
                other = constants.get(node.input[1 - slot])
                if other is not None and other.size and np.all(np.mod(other, 1) == 0) and _decides_if(node.output[0], users):
                    found.extend(int(v) for v in np.asarray(other).ravel())
            elif (node.op_type in _VALUE_PRESERVING and (slot == 0 or node.op_type == "Concat")) or (node.op_type == "Gather" and slot == 0):
                fresh = [o for o in node.output if o not in seen]
                seen.update(fresh)
                frontier.extend(fresh)
    return tuple(sorted(set(found)))


def _decides_if(condition: str, users: Mapping[str, list]) -> bool:
    frontier, seen = [condition], {condition}
    while frontier:
        for node, slot in users.get(frontier.pop(), ()):
            if node.op_type == "If" and slot == 0:
                return True
            if node.op_type in _CONDITION_PRESERVING and (slot == 0 or node.op_type in ("And", "Or", "Xor")):
                fresh = [o for o in node.output if o not in seen]
                seen.update(fresh)
                frontier.extend(fresh)
    return False


def random_inputs(source, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for a model: standard normal floats, random booleans, integers in a valid range.

    Args:
        source: an ONNX model or a taso Graph (integer inputs then get ranges from how the
            model uses them, see :func:`integer_ranges`, or the values that select an If's
            branch, see :func:`integer_choices`), or a mapping of input types.
        seed: the random seed.
    """
    return random_input_sets(source, (seed,))[0]


class InputDrawer:
    """Seeded random inputs for one model, its input types and integer ranges worked out once.

    Args:
        source: an ONNX model, a taso Graph, or a mapping of input types (see :func:`random_inputs`).
        model: the ONNX model a graph was imported from, whose uses of its integer inputs bound
            their ranges (by default the graph is exported to find them).
    """

    def __init__(self, source, model: onnx.ModelProto | None = None):
        from .ir import Graph

        if isinstance(source, (onnx.ModelProto, Graph)):
            if isinstance(source, onnx.ModelProto):
                self.types, model = _model_input_types(source), source
            else:
                from .onnx import export_onnx

                self.types, model = source.inputs, model if model is not None else export_onnx(source)
            from .onnx import weightless

            model = weightless(model)  # the ranges need shapes and small constants, never the weights' bytes
            self._ranges, self._choices = integer_ranges(model), integer_choices(model)
        else:
            self.types, self._ranges, self._choices = source, {}, {}

    def draw(self, seed: int, valuation: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        """One input set, the size symbols at ``valuation`` (default: the measurement sizes)."""
        at = {n: t.at(valuation) for n, t in self.types.items()} if valuation else self.types
        return _draw(at, self._ranges, self._choices, np.random.default_rng(seed))


def random_input_sets(source, seeds: Sequence[int] = (0, 1), sizes: Sequence[Mapping[str, int] | None] = (),
                      model: onnx.ModelProto | None = None) -> list[dict[str, np.ndarray]]:
    """:func:`random_inputs` for several seeds (an :class:`InputDrawer`'s sets).

    ``sizes`` adds one input set per valuation of the size symbols (a graph's symbolic inputs
    drawn at those sizes), seeded after ``seeds``.
    """
    drawer = InputDrawer(source, model)
    return [drawer.draw(seed) for seed in seeds] + [drawer.draw(len(seeds) + k, valuation) for k, valuation in enumerate(sizes)]


def check_sizes(graph) -> list[dict[str, int]]:
    """Where the output check runs besides the measurement sizes: valuations of the size symbols, best first.

    Empty for a static graph. The check uses the first valuation the original model runs at:
    every symbol at another size than it is measured at, with the fewest elements that still
    show a rewrite that held only at the measurement sizes. A batch-like symbol (the first dim
    of an input) goes to 2 (3 when measured at 2): past 1, where broadcasting hides errors. Any
    other symbol goes one past its size (a slice or reshape pinned to the measured size stops
    being whole there, which a smaller size would hide by clamping; ALBERT-xxlarge's check at
    twice its sequence took 85 s); where the model does not run at that size (strides that want
    even sizes), to twice, then to half its size.
    """
    measured = dict(graph.meta.sizes)
    if not measured:
        return []
    batch_like = {bare_symbol(t.shape[0]) for t in graph.inputs.values() if t.shape} - {None}
    batch = {name: (3 if size == 2 else 2) for name, size in measured.items() if name in batch_like}
    other = {name: size for name, size in measured.items() if name not in batch_like}
    choices = []
    for grow in (lambda n: n + 1, lambda n: 2 * n, lambda n: n // 2 if n > 1 else 2):
        valuation = {**batch, **{name: grow(size) for name, size in other.items()}}
        if valuation not in choices:
            choices.append(valuation)
    return choices


def describe_sizes(valuations: Sequence[Mapping[str, int]]) -> str:
    """``batch=1,2; seq=128,256``: the sizes each symbol was checked at."""
    names = sorted({n for v in valuations for n in v})
    return "; ".join(f"{n}={','.join(str(s) for s in sorted({v[n] for v in valuations}))}" for n in names)


def _draw(types: Mapping[str, TensorType], ranges: Mapping[str, tuple[int, int]], choices: Mapping[str, tuple[int, ...]],
          rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for name, t in types.items():
        if isinstance(t, OpaqueType):
            feeds[name] = random_value(t, rng)
        elif t.dtype.startswith(("int", "uint")) and choices.get(name):
            feeds[name] = np.asarray(rng.choice(np.asarray(choices[name]), t.shape)).astype(t.dtype)
        elif t.dtype.startswith(("int", "uint")):
            low, high = ranges.get(name, _DEFAULT_INT_RANGE)
            feeds[name] = rng.integers(low, max(high, low + 1), t.shape).astype(t.dtype)
        else:
            feeds[name] = random_array(t, rng)
    return feeds


def _model_input_types(model: onnx.ModelProto) -> dict[str, TensorType]:
    """The types of a model's real inputs (initializers listed as inputs left out); every dim must be static."""
    initializers = {t.name for t in model.graph.initializer}
    types = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        if vi.type.WhichOneof("value") != "tensor_type":
            types[vi.name] = OpaqueType((), "opaque", vi.type.SerializeToString(deterministic=True))
            continue
        tt = vi.type.tensor_type
        shape = tuple(d.dim_value for d in tt.shape.dim)
        if any(d <= 0 for d in shape):
            raise TasoError(f"input {vi.name!r} has a dynamic dimension: give its shape")
        types[vi.name] = TensorType(shape, onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name)
    return types


def load_inputs(path: str, types: Mapping[str, TensorType]) -> dict[str, np.ndarray]:
    """User inputs from an .npz file, checked against the model's inputs.

    Raises:
        TasoError: unreadable file, missing or extra arrays, wrong shapes or dtypes.
    """
    try:
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise TasoError(f"--inputs {path}: no such file") from None
    except Exception as e:  # noqa: BLE001 - np.load raises many types for bad files
        raise TasoError(f"--inputs {path}: not a readable .npz file ({type(e).__name__})") from None
    if set(arrays) != set(types):
        raise TasoError(f"--inputs {path}: has arrays {sorted(arrays)}, the model's inputs are {sorted(types)}")
    for name, t in types.items():
        if not _fits(arrays[name], t):
            raise TasoError(f"--inputs {path}: {name!r} is {TensorType.of(arrays[name])}, the model expects {t}")
    return arrays


def _fits(array: np.ndarray, t: TensorType) -> bool:
    """An array the model takes for an input of type ``t``: its dtype, its rank, its static dims (a symbolic one takes any size)."""
    from .ir.dims import Dim

    return (array.dtype.name == t.dtype and array.ndim == t.rank
            and all(isinstance(d, Dim) or int(d) == n for d, n in zip(t.shape, array.shape)))


class ReferenceFailure(Exception):
    """ONNX Runtime cannot load the reference model (``position`` -1) or run it on input set ``position``."""

    def __init__(self, position: int, reason: str):
        super().__init__(reason)
        self.position, self.reason = position, reason


@dataclass
class ReferenceRun:
    """The original model's outputs on each input set of the check, run once.

    Every candidate is compared with these, so the original runs once per input set however
    many candidates are checked, and its session is closed before any candidate's opens: one
    model's weights in ONNX Runtime at a time.
    """

    names: list[str]
    input_sets: list[dict[str, np.ndarray]]
    outputs: list[list[np.ndarray]]

    def select(self, positions: Sequence[int]) -> ReferenceRun:
        """The same run restricted to some input sets (those at the measurement sizes, say)."""
        return ReferenceRun(self.names, [self.input_sets[k] for k in positions], [self.outputs[k] for k in positions])

    def __add__(self, other: ReferenceRun) -> ReferenceRun:
        return ReferenceRun(self.names, self.input_sets + other.input_sets, self.outputs + other.outputs)


class Reference:
    """The original model open in ONNX Runtime, to run on the check's input sets (close it by dropping it)."""

    def __init__(self, model: onnx.ModelProto | str | bytes, threads: int = 1):
        """Raises ReferenceFailure (position -1): ONNX Runtime cannot load the model."""
        try:
            self._session = _session(model, threads)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise ReferenceFailure(-1, first_line(e)) from None
        self._names = [o.name for o in self._session.get_outputs()]
        self._inputs = {i.name for i in self._session.get_inputs()}

    def run(self, input_sets: Sequence[Mapping[str, np.ndarray]]) -> ReferenceRun:
        """Its outputs on every set.

        Raises:
            ReferenceFailure: it cannot run on one of them (``position`` says which).
        """
        quiet = _quiet()
        outputs = []
        for position, feeds in enumerate(input_sets):
            try:
                outputs.append(self._session.run(None, {k: v for k, v in feeds.items() if k in self._inputs}, quiet))
            except Exception as e:  # noqa: BLE001
                raise ReferenceFailure(position, first_line(e)) from None
        return ReferenceRun(self._names, [dict(feeds) for feeds in input_sets], outputs)


def run_reference(model: onnx.ModelProto | str | bytes, input_sets: Sequence[Mapping[str, np.ndarray]], threads: int = 1) -> ReferenceRun:
    """Runs the original model (a model, a file or its bytes) on every input set.

    Raises:
        ReferenceFailure: ONNX Runtime cannot load it, or cannot run it on one of the sets.
    """
    return Reference(model, threads).run(input_sets)


def _quiet() -> ort.RunOptions:
    """A run that logs nothing: the caller reports a failure in one line; ONNX Runtime's log would repeat it in red
    (an optimized BERT export failing the check at batch 2 printed two such lines before taso's own)."""
    options = ort.RunOptions()
    options.log_severity_level = 4
    return options


def compare_with(reference: ReferenceRun, candidate: onnx.ModelProto | str | bytes | ort.InferenceSession, threads: int = 1) -> Comparison:
    """Runs the candidate (a model, a file, its bytes or a session) on the reference's input sets and compares every output.

    ONNX Runtime's own exceptions (it cannot load or run the candidate) pass through.
    """
    session = _session(candidate, threads)
    if reference.names != [o.name for o in session.get_outputs()]:
        return Comparison(False, worst_output="(output names differ)", worst_abs=float("inf"), worst_rel=float("inf"))
    inputs = {i.name for i in session.get_inputs()}
    result = Comparison(True, input_sets=len(reference.input_sets))
    quiet = _quiet()
    for feeds, want_all in zip(reference.input_sets, reference.outputs):
        got_all = session.run(None, {k: v for k, v in feeds.items() if k in inputs}, quiet)
        for name, want, got in zip(reference.names, want_all, got_all):
            if not _agree_into(result, name, want, got):
                return result
    return result


def _agree_into(result: Comparison, name: str, want, got) -> bool:
    """Folds one output's disagreement into ``result``; False when it rules the candidate out at once
    (a different shape, different integers or strings, a sequence or map that differs in length or keys)."""
    if isinstance(want, (list, dict)) or want is None or isinstance(got, (list, dict)) or got is None:
        return _agree_values_into(result, name, want, got)
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape or (want.dtype.kind not in "fc" and not np.array_equal(want, got)):
        result.ok, result.worst_output, result.worst_abs, result.worst_rel = False, name, float("inf"), float("inf")
        return False
    if want.dtype.kind not in "fc":
        return True
    want64, got64 = want.astype(np.float64), got.astype(np.float64)
    agree = (want64 == got64) | (np.isnan(want64) & np.isnan(got64))  # equal infinities agree too
    finite = want64[np.isfinite(want64)]
    scale = max(1.0, float(np.max(np.abs(finite))) if finite.size else 1.0)
    with np.errstate(invalid="ignore"):
        diff = np.where(agree, 0.0, np.abs(got64 - want64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    worst = float(np.max(diff)) if diff.size else 0.0
    if worst > result.worst_abs:
        result.worst_output, result.worst_abs, result.worst_rel = name, worst, worst / scale
    if not np.all(diff <= ATOL_SCALE * scale + RTOL * np.abs(np.nan_to_num(want64))):
        result.ok = False
    return True


def _agree_values_into(result: Comparison, name: str, want, got) -> bool:
    """:func:`_agree_into` for a value that is not a tensor, element by element."""
    same_kind = type(want) is type(got) or (want is not None and got is not None and not isinstance(want, (list, dict)) and not isinstance(got, (list, dict)))
    if want is None and got is None:
        return True
    if not same_kind or (isinstance(want, (list, dict)) and len(want) != len(got)) or (isinstance(want, dict) and set(want) != set(got)):
        result.ok, result.worst_output, result.worst_abs, result.worst_rel = False, name, float("inf"), float("inf")
        return False
    pairs = [(want[k], got[k]) for k in want] if isinstance(want, dict) else zip(want, got) if isinstance(want, list) else [(want, got)]
    return all(_agree_into(result, name, w, g) for w, g in pairs)


def compare_outputs(want: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> Comparison:
    """Two runs' outputs (by name, ``want``'s order), compared as :func:`compare_with` compares a model's: one input set."""
    result = Comparison(True, input_sets=1)
    for name, array in want.items():
        if not _agree_into(result, name, array, got[name]):
            break
    return result


def compare_models(original: onnx.ModelProto | str | bytes, optimized: onnx.ModelProto | str | bytes,
                   input_sets: Sequence[Mapping[str, np.ndarray]], threads: int = 1) -> Comparison:
    """Runs both models on every input set and compares every output."""
    return compare_with(run_reference(original, input_sets, threads), optimized, threads)
