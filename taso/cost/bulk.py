"""Measuring many distinct nodes at once on ONNX Runtime, with the fidelity of measuring each alone.

Measured alone (:meth:`taso.cost.ort_cpu.OrtCpuCost.fresh`), a node costs a session profiled for 20 ms beside the
reference kernel, then, below the wall clock's bound, two sessions of copies timed in seven rounds beside the wall
clock's reference: about 0.19 s for a microsecond node, most of it the fixed part of each step. In bulk:

* one profiled session holds every node: the reference kernel once, then per node the same cold copy, warm copy and
  floor as alone, chained so that ONNX Runtime runs them in that order; each node's warm kernels minus its own floor,
  over the run's reference, is the entry its profile alone would give;
* the nodes below the wall clock's bound are timed as alone (a copy against copies of it), every pair in the same
  rounds beside one wall-clock reference, not one per node.

The profiler alone would be faster still, and wrong: inside one session its figure for a sub-microsecond Sigmoid,
Add or Split came out 2-4x what the node adds to a running graph (its own overhead, a few microseconds a kernel,
moves with where the kernel runs), the error the wall clock's copies exist for (docs/measured.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..onnx.probes import REFERENCE, add_reference, append_copy, waiting_on, with_copies
from .cache import noise_band
from .copies import Pair, WallReference, interquartile_range, many_round_differences, median_and_band
from .in_place import InPlaceWeights
from .profiling import FULL_SECONDS, NOISY_BAND, WARM_UP_RUNS, _robust_mean, copies_for, profiled_runs, role_times
from .wake import splits_over_threads

__all__ = ["BULK_BYTES", "BULK_NODES", "Single", "bulk_model", "bulk_profile", "bulk_wall_clock"]

# A node with more bytes of tensors than this is measured alone. In bulk, SqueezeNet's convolutions (0.1-3 MB) came
# out 0.83-1.39x their figures alone, and products on one row 1.19-1.65x at 2-8 MB weights, and slower to measure
# than alone: a microsecond node's session is mostly fixed costs that bulk shares, a large node's is mostly its own
# runs, and sharing a session changes what the caches hold when its warm copy runs.
BULK_BYTES = 1 << 18
BULK_NODES = 24  # nodes per bulk session: a profiled run stays a few milliseconds, a session's model a few MB


@dataclass
class Single:
    """A node as its one-node ONNX model (:meth:`OrtCpuCost._single_model`) and the values fed to it."""

    model: bytes
    feeds: dict[str, np.ndarray]
    in_place: InPlaceWeights


def _warm(i: int) -> str:
    return f"__taso_bulk{i}/warm/"


def _starts_with(prefix: str):
    return lambda name: name.startswith(prefix)


def _floor(i: int) -> str:
    return f"__taso_bulk{i}/floor"


def _prefixed(proto: onnx.ModelProto, prefix: str) -> onnx.GraphProto:
    """The model's graph with every value named ``prefix`` + its name: nodes of many models in one graph keep apart."""
    graph = onnx.GraphProto()
    graph.CopyFrom(proto.graph)

    def named(value: str) -> str:
        return f"{prefix}{value}" if value else value

    for tensor in graph.initializer:
        tensor.name = named(tensor.name)
    for info in (*graph.input, *graph.output, *graph.value_info):
        info.name = named(info.name)
    for node in graph.node:
        node.input[:] = [named(v) for v in node.input]
        node.output[:] = [named(v) for v in node.output]
    return graph


def bulk_model(singles: Sequence[onnx.ModelProto]) -> tuple[onnx.ModelProto, list[str]] | None:
    """One model of every single one: the reference kernel, then per model a cold copy (waiting on what ran before),
    a warm copy (waiting on the cold one) and a floor (waiting on the warm one), as :func:`profile_kernels` runs one
    model alone; the prefix of each model's values, for its feeds. None when a model has no computed float-castable
    input to chain by (those are measured alone)."""
    graph = helper.make_graph([], "bulk", [], [])
    add_reference(graph)
    after, opset, prefixes = f"{REFERENCE}_y", 13, []
    for i, proto in enumerate(singles):
        prefix = f"b{i}/"
        own = _prefixed(proto, prefix)
        weights = {t.name for t in own.initializer}
        computed = {x.name: x.type.tensor_type.elem_type for x in own.input if x.name not in weights}
        if not computed or any(t in (TensorProto.BOOL, TensorProto.STRING, TensorProto.UNDEFINED) for t in computed.values()):
            return None
        opset = max(opset, *(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")))
        graph.initializer.extend(own.initializer)
        graph.input.extend(x for x in own.input if x.name not in weights)
        append_copy(graph, own.node, f"__taso_bulk{i}/cold/", {v: waiting_on(graph, v, t, after, f"cold{i}") for v, t in computed.items()}, "")
        first = own.output[0].name
        append_copy(graph, own.node, _warm(i), {v: waiting_on(graph, v, t, first, f"warm{i}") for v, t in computed.items()}, "~warm")
        for output in own.output:
            graph.output.append(output)
            warm = graph.output.add()
            warm.CopyFrom(output)
            warm.name = f"{output.name}~warm"
        graph.input.append(helper.make_tensor_value_info(f"{_floor(i)}_x", TensorProto.FLOAT, [1]))
        floor_x = waiting_on(graph, f"{_floor(i)}_x", TensorProto.FLOAT, f"{first}~warm", f"floor{i}")
        graph.node.append(helper.make_node("Neg", [floor_x], [f"{_floor(i)}_y"], name=_floor(i)))
        graph.output.append(helper.make_tensor_value_info(f"{_floor(i)}_y", TensorProto.FLOAT, [1]))
        after = f"{_floor(i)}_y"
        prefixes.append(prefix)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, prefixes


def bulk_profile(singles: Sequence[Single], threads: int, unit: float, dispatch: float) -> list[tuple[float, float, bool]] | None:
    """Each node's profiled price (seconds, noise band, whether its kernel split over the threads), from one session running them all: the figure
    :meth:`OrtCpuCost.fresh` profiles a node alone at, before its wall clock. None where they cannot share a session
    (a node without a computed input to chain by, a weight handed over in place)."""
    if any(s.in_place.arrays for s in singles):
        return None
    protos = [onnx.load_model_from_string(s.model) for s in singles]
    built = bulk_model(protos)
    if built is None:
        return None
    model, prefixes = built
    rng = np.random.default_rng(0)
    feeds = {f"{REFERENCE}_x": rng.standard_normal((128, 256)).astype(np.float32)}
    for i, (single, prefix) in enumerate(zip(singles, prefixes)):
        feeds.update({prefix + name: value for name, value in single.feeds.items()})
        feeds[f"{_floor(i)}_x"] = np.ones(1, np.float32)
    events = profiled_runs(model, feeds, threads, FULL_SECONDS, 7, 400)
    roles = (REFERENCE, *(role for i in range(len(singles)) for role in (_warm(i), _floor(i))))
    times = role_times(events, WARM_UP_RUNS, roles)
    priced = []
    for i in range(len(singles)):
        ratios = [(k - f) / r for k, f, r in zip(times[_warm(i)], times[_floor(i)], times[REFERENCE])]
        seconds = max(_robust_mean(ratios) * unit, 0.0) + dispatch
        splits = threads > 1 and splits_over_threads(events, _starts_with(_warm(i)))
        priced.append((seconds, noise_band(seconds, interquartile_range(ratios) * unit), splits))
    return priced


def bulk_wall_clock(singles: Sequence[Single], profiled: Sequence[float], threads: int,
                    reference: WallReference) -> list[tuple[float, float]]:
    """Each node's wall-clock price (seconds, noise band): :func:`taso.cost.copies.wall_clock_marginal` of every node,
    timed in the same rounds beside one reference; a node whose rounds spread past :data:`NOISY_BAND` is timed
    again with the others that did, and keeps the steadier of its two (as :func:`taso.cost.profiling.steadier`)."""
    def pairs(indices: list[int]) -> list[Pair]:
        made = []
        for i in indices:
            proto, copies = onnx.load_model_from_string(singles[i].model), copies_for(profiled[i])
            made.append(Pair(proto, with_copies(proto, copies), copies - 1, singles[i].feeds, singles[i].in_place))
        return made

    def timed(indices: list[int]) -> dict[int, tuple[float, float]]:
        deltas = many_round_differences(pairs(indices), threads, reference)
        return {i: median_and_band(d) for i, d in zip(indices, deltas)}

    result = timed(list(range(len(singles))))
    noisy = [i for i, (_, band) in result.items() if band > NOISY_BAND]
    if noisy:
        for i, again in timed(noisy).items():
            result[i] = min(result[i], again, key=lambda measured: measured[1])
    return [result[i] for i in range(len(singles))]

