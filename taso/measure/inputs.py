"""The inputs taso runs models on: drawn where the model's own operators say what is valid, or the user's own.

Seeded random inputs: standard normal floats, random booleans, short words for strings, integers in the range the
model can index with (never all zeros: zeros hid a wrong rewrite behind a Cast), divisors above zero, or drawn from
the constants an If's condition compares them with; sequences, maps and optionals of those. The output check
(:mod:`taso.measure.outputs`), the timing and the bench all draw here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from ..errors import TasoError
from ..ir import OpaqueType, TensorType
from ..ir.dims import bare_symbol
from ..onnx.values import WORDS, random_value

__all__ = ["random_array", "InputDrawer", "random_inputs", "random_input_sets", "integer_ranges", "integer_choices", "load_inputs",
           "check_sizes", "describe_sizes"]


def random_array(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """Random values of a tensor type: standard normal floats, random booleans, short random words for strings, zeros
    for integers (a caller that knows their range draws them itself).

    Raises:
        TasoError: the value is not a tensor (:class:`~taso.ir.OpaqueType`).
    """
    if isinstance(t, OpaqueType):
        raise TasoError(f"{t} is not a tensor: no random array of it")
    if t.dtype.startswith("float"):
        return rng.standard_normal(t.shape).astype(t.dtype)
    if t.dtype == "bool":
        return rng.integers(0, 2, t.shape).astype(bool)
    if t.dtype == "object":
        return rng.choice(np.asarray(WORDS, dtype=object), t.shape)
    return np.zeros(t.shape, t.dtype)


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
        from ..ir import Graph

        if isinstance(source, (onnx.ModelProto, Graph)):
            if isinstance(source, onnx.ModelProto):
                self.types, model = _model_input_types(source), source
            else:
                from ..onnx import to_onnx_model

                self.types, model = source.inputs, model if model is not None else to_onnx_model(source)
            from ..onnx import weightless

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
    even sizes), to twice, then to half its size; never past the largest size the file runs at
    (``meta.size_bounds``: a table sliced up to the symbol).
    """
    measured = dict(graph.meta.sizes)
    if not measured:
        return []
    largest = {name: size for name, size, _ in graph.meta.size_bounds}
    batch_like = {bare_symbol(t.shape[0]) for t in graph.inputs.values() if t.shape} - {None}
    batch = {name: (3 if size == 2 else 2) for name, size in measured.items() if name in batch_like}
    other = {name: size for name, size in measured.items() if name not in batch_like}
    choices = []
    for grow in (lambda n: n + 1, lambda n: 2 * n, lambda n: n // 2 if n > 1 else 2):
        valuation = {**batch, **{name: grow(size) for name, size in other.items()}}
        if valuation not in choices and all(size <= largest.get(name, size) for name, size in valuation.items()):
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
    from ..ir.dims import Dim

    return (array.dtype.name == t.dtype and array.ndim == t.rank
            and all(isinstance(d, Dim) or int(d) == n for d, n in zip(t.shape, array.shape)))


