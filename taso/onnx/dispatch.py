"""One ONNX model that chooses among equivalent models by the size of one input dimension at run time.

The graph that runs fastest for small batches is often not the one that runs fastest for large ones. Instead of
shipping two files and choosing in the caller, :func:`size_dispatch` writes them as one model: it reads the size of
one dimension of an input (``Shape`` then ``Gather``), compares it with thresholds, and runs the matching branch
through nested ``If`` nodes, which ONNX Runtime executes at no measurable cost. Weights the branches share are
stored once, in the main graph.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from numbers import Integral
from typing import Any

import onnx
from onnx import helper

from ..errors import TasoError
from .files import graph_tensors, subgraphs

__all__ = ["size_dispatch"]

_DEFAULT_DOMAINS = ("", "ai.onnx")
_MIN_OPSET = 9  # Less accepts int64 from opset 9 on


@dataclass(frozen=True)
class _Plan:
    """What every ``If`` of the dispatch needs: the branches, their name prefixes and the names they keep."""

    branches: Sequence[onnx.ModelProto]
    prefixes: Sequence[str]
    conditions: Sequence[str]
    stem: str
    inputs: frozenset[str]
    hoisted: frozenset[str]


def size_dispatch(branches: Sequence[onnx.ModelProto], input_name: str, axis: int, thresholds: Sequence[int]) -> onnx.ModelProto:
    """One model that runs branches[k] when thresholds[k-1] < dim <= thresholds[k] (branch 0 for every dim up to
    thresholds[0], the last branch for every size above the last threshold), where dim is the size of axis ``axis`` of
    graph input ``input_name`` at run time. The branches must have the same graph inputs and outputs."""
    branches, thresholds = list(branches), list(thresholds)
    _check_branches(branches)
    _check_thresholds(thresholds, len(branches))
    axis = _normalized_axis(branches[0].graph, input_name, axis)
    branches = _at_one_opset(branches)
    opsets = _merged_opsets(branches)
    inputs = [value.name for value in branches[0].graph.input]
    outputs = [value.name for value in branches[0].graph.output]
    hoisted = _shared_initializers(branches, set(inputs), set(outputs))
    kept = set(inputs) | set(hoisted) | set(outputs)
    branch_stem = _free_stem("b", [f"{k}/" for k in range(len(branches))], kept)
    stem = _free_stem("dispatch", ["/"], kept) + "/"
    plan = _Plan(branches, [f"{branch_stem}{k}/" for k in range(len(branches))], [f"{stem}le{k}" for k in range(len(thresholds))],
                 stem, frozenset(inputs), frozenset(hoisted))

    model = onnx.ModelProto()
    model.ir_version = max(branch.ir_version for branch in branches)
    model.producer_name = "taso"
    model.opset_import.extend(opsets)
    model.doc_string = _describe(input_name, axis, thresholds)
    graph = model.graph
    graph.name = "size_dispatch"
    graph.input.extend(branches[0].graph.input)
    graph.output.extend(branches[0].graph.output)
    graph.initializer.extend(tensor for tensor in branches[0].graph.initializer if tensor.name in plan.hoisted)
    _add_size_test(graph, input_name, axis, thresholds, plan)
    _fill_if(graph.node.add(), 0, outputs, plan)
    return model


def _check_branches(branches: Sequence[onnx.ModelProto]) -> None:
    """Raises TasoError unless the branches can be dispatched among: two or more, same inputs and outputs."""
    if len(branches) < 2:
        raise TasoError(f"size_dispatch needs at least 2 branches, got {len(branches)}")
    for k, branch in enumerate(branches):
        if not isinstance(branch, onnx.ModelProto):
            raise TasoError(f"branch {k} is a {type(branch).__name__}, not an onnx.ModelProto")
        if branch.functions:
            raise TasoError(f"branch {k} has local functions: not supported")
        if any(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in graph_tensors(branch.graph)):
            raise TasoError(f"branch {k} has external-data initializers: not supported")
    first = branches[0].graph
    for k, branch in enumerate(branches[1:], start=1):
        for role in ("input", "output"):
            expected, got = _names(getattr(first, role)), _names(getattr(branch.graph, role))
            if got != expected:
                raise TasoError(f"branch {k} has graph {role}s {got}, branch 0 has {expected}")
    passing = sorted(set(_names(first.input)) & set(_names(first.output)))
    if passing:
        raise TasoError(f"graph output {passing[0]!r} is also a graph input: not supported")


def _check_thresholds(thresholds: Sequence[int], count: int) -> None:
    """Raises TasoError unless there is one threshold fewer than branches, positive ints, strictly increasing."""
    if len(thresholds) != count - 1:
        raise TasoError(f"{count} branches need {count - 1} thresholds, got {len(thresholds)}")
    for threshold in thresholds:
        if isinstance(threshold, bool) or not isinstance(threshold, Integral) or threshold <= 0:
            raise TasoError(f"thresholds must be positive ints, got {threshold!r}")
    if any(a >= b for a, b in pairwise(thresholds)):
        raise TasoError(f"thresholds must be strictly increasing, got {list(thresholds)}")


def _normalized_axis(graph: onnx.GraphProto, input_name: str, axis: int) -> int:
    """``axis`` as an index into the dims of graph input ``input_name`` (negative axes count from the end)."""
    value = next((value for value in graph.input if value.name == input_name), None)
    if value is None:
        raise TasoError(f"no graph input named {input_name!r} (inputs: {_names(graph.input)})")
    if not (value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape")):
        raise TasoError(f"graph input {input_name!r} is not a tensor of known rank")
    rank = len(value.type.tensor_type.shape.dim)
    if isinstance(axis, bool) or not isinstance(axis, Integral) or not -rank <= axis < rank:
        raise TasoError(f"axis {axis!r} is out of range for input {input_name!r} of rank {rank}")
    return int(axis) % rank


def _at_one_opset(branches: Sequence[onnx.ModelProto]) -> list[onnx.ModelProto]:
    """The branches, each below the newest default-domain opset among them converted up to it.

    Raises:
        TasoError: a branch ONNX's version converter cannot convert.
    """
    from onnx import version_converter

    defaults = [_default_opset(branch) for branch in branches]
    known = [version for version in defaults if version is not None]
    newest = max(known, default=None)
    if newest is None or newest < _MIN_OPSET:
        return list(branches)
    converted = []
    for k, (branch, version) in enumerate(zip(branches, defaults)):
        if version is None or version == newest:
            converted.append(branch)
            continue
        try:
            converted.append(version_converter.convert_version(branch, newest))
        except Exception as e:  # the converter raises RuntimeError, ValueError or its C++ errors by kind of node
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TasoError(f"branch {k} imports opset {version} and cannot be converted to opset {newest}: {reason}") from None
    return converted


def _merged_opsets(branches: Sequence[onnx.ModelProto]) -> list[onnx.OperatorSetIdProto]:
    """The union of the branches' opset imports: the default domain's version (which must agree), the max for others."""
    defaults = [_default_opset(branch) for branch in branches]
    if len(set(defaults)) != 1:
        raise TasoError(f"branches import different default-domain opsets: {', '.join(map(str, defaults))}")
    if defaults[0] is None or defaults[0] < _MIN_OPSET:
        raise TasoError(f"size_dispatch needs default-domain opset {_MIN_OPSET} or newer, got {defaults[0]}")
    others: dict[str, int] = {}
    for branch in branches:
        for opset in branch.opset_import:
            if opset.domain not in _DEFAULT_DOMAINS:
                others[opset.domain] = max(others.get(opset.domain, 0), opset.version)
    return [helper.make_opsetid("", defaults[0])] + [helper.make_opsetid(domain, others[domain]) for domain in sorted(others)]


def _default_opset(model: onnx.ModelProto) -> int | None:
    """The version of the default ONNX domain a model imports, or None."""
    versions = [opset.version for opset in model.opset_import if opset.domain in _DEFAULT_DOMAINS]
    return max(versions) if versions else None


def _shared_initializers(branches: Sequence[onnx.ModelProto], inputs: set[str], outputs: set[str]) -> list[str]:
    """Names of the initializers every branch has with identical contents (stored once in the main graph), in branch
    0's order. Graph outputs are never hoisted; an input's default value must be the same in every branch."""
    tables = [{tensor.name: tensor for tensor in branch.graph.initializer} for branch in branches]
    shared = []
    for name, tensor in tables[0].items():
        if name in outputs:
            continue
        contents = tensor.SerializeToString()
        if all(name in table and table[name].SerializeToString() == contents for table in tables[1:]):
            shared.append(name)
    differing = sorted(set().union(*(inputs.intersection(table) for table in tables)) - set(shared))
    if differing:
        raise TasoError(f"graph input {differing[0]!r} has a default value (initializer) that differs between branches: not supported")
    return shared


def _free_stem(base: str, tags: Sequence[str], names: Collection[str]) -> str:
    """``base``, with underscores added until no name in ``names`` starts with ``base + tag`` for any tag."""
    stem = base
    while any(name.startswith(tuple(stem + tag for tag in tags)) for name in names):
        stem += "_"
    return stem


def _describe(input_name: str, axis: int, thresholds: Sequence[int]) -> str:
    """The model's doc string: which branch runs for which size."""
    bounds = [f"branch 0 for size <= {thresholds[0]}"]
    bounds += [f"branch {k} for {low} < size <= {high}" for k, (low, high) in enumerate(pairwise(thresholds), start=1)]
    bounds.append(f"branch {len(thresholds)} for size > {thresholds[-1]}")
    return f"taso size dispatch on axis {axis} of input {input_name!r}: " + ", ".join(bounds)


def _add_size_test(graph: onnx.GraphProto, input_name: str, axis: int, thresholds: Sequence[int], plan: _Plan) -> None:
    """Adds Shape -> Gather(axis) -> Less(dim, threshold + 1) for every threshold: plan.conditions[k] is dim <= thresholds[k]."""
    stem = plan.stem
    graph.initializer.append(helper.make_tensor(f"{stem}axis", onnx.TensorProto.INT64, [], [axis]))
    graph.node.append(helper.make_node("Shape", [input_name], [f"{stem}shape"], name=f"{stem}shape"))
    graph.node.append(helper.make_node("Gather", [f"{stem}shape", f"{stem}axis"], [f"{stem}dim"], name=f"{stem}dim", axis=0))
    for k, (threshold, condition) in enumerate(zip(thresholds, plan.conditions)):
        limit = f"{stem}limit{k}"
        graph.initializer.append(helper.make_tensor(limit, onnx.TensorProto.INT64, [], [int(threshold) + 1]))
        graph.node.append(helper.make_node("Less", [f"{stem}dim", limit], [condition], name=condition))


def _fill_if(node: onnx.NodeProto, k: int, outputs: Sequence[str], plan: _Plan) -> None:
    """Makes ``node`` the If that runs branch k when plan.conditions[k] holds and the dispatch over the later branches
    otherwise, writing ``outputs``. Builds the subgraphs in place so each branch's weights are copied once."""
    node.op_type, node.name = "If", f"{plan.stem}if{k}"
    node.input.append(plan.conditions[k])
    node.output.extend(outputs)
    _branch_subgraph(_graph_attribute(node, "then_branch"), k, plan)
    otherwise = _graph_attribute(node, "else_branch")
    if k + 2 == len(plan.branches):
        _branch_subgraph(otherwise, k + 1, plan)
        return
    otherwise.name = f"{plan.stem}else{k}"
    inner = [f"{plan.stem}else{k}/{name}" for name in outputs]
    for value, name in zip(plan.branches[k + 1].graph.output, inner):
        otherwise.output.add().CopyFrom(value)
        otherwise.output[-1].name = name
    _fill_if(otherwise.node.add(), k + 1, inner, plan)


def _graph_attribute(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    """A new empty GRAPH attribute of ``node``, to fill in place."""
    attribute = node.attribute.add()
    attribute.name, attribute.type = name, onnx.AttributeProto.GRAPH
    return attribute.g


def _branch_subgraph(graph: onnx.GraphProto, k: int, plan: _Plan) -> None:
    """Fills ``graph`` with branch k as an If subgraph: no inputs, every other name prefixed, shared weights read from
    the main graph."""
    graph.CopyFrom(plan.branches[k].graph)
    keep = plan.inputs | plan.hoisted
    _rename_graph(graph, {}, plan.prefixes[k], keep)
    del graph.input[:]
    _delete_where(graph.initializer, lambda tensor: tensor.name in keep)
    _delete_where(graph.value_info, lambda value: value.name in keep)


def _rename_graph(graph: onnx.GraphProto, outer: dict[str, str], prefix: str, keep: Collection[str] = ()) -> None:
    """Prefixes every name ``graph`` defines (but those in ``keep``) and its node names, and renames references to
    them and to the outer scope's renamed names, nested graphs included."""
    scope = dict(outer)
    for name in _local_names(graph):
        scope[name] = name if name in keep else prefix + name
    for node in graph.node:
        _rename_node(node, scope, prefix)
    for value in (*graph.input, *graph.output, *graph.value_info):
        value.name = scope.get(value.name, value.name)
    for tensor in graph.initializer:
        tensor.name = scope.get(tensor.name, tensor.name)
    for sparse in graph.sparse_initializer:
        sparse.values.name = scope.get(sparse.values.name, sparse.values.name)
    if graph.name:
        graph.name = prefix + graph.name


def _rename_node(node: onnx.NodeProto, scope: dict[str, str], prefix: str) -> None:
    """Renames a node's inputs and outputs through ``scope``, prefixes its name, and renames its graph attributes."""
    for field in (node.input, node.output):
        for i, name in enumerate(field):
            field[i] = scope.get(name, name)
    if node.name:
        node.name = prefix + node.name
    for graph in subgraphs(node):
        _rename_graph(graph, scope, prefix)


def _local_names(graph: onnx.GraphProto) -> Iterator[str]:
    """The names of the values ``graph`` itself defines: inputs, initializers, node outputs."""
    yield from (value.name for value in graph.input)
    yield from (tensor.name for tensor in graph.initializer)
    yield from (sparse.values.name for sparse in graph.sparse_initializer)
    for node in graph.node:
        yield from (name for name in node.output if name)


def _delete_where(field: Any, doomed: Callable[[Any], bool]) -> None:
    """Deletes the entries of a repeated protobuf field for which ``doomed(entry)`` holds, in place."""
    for i in reversed(range(len(field))):
        if doomed(field[i]):
            del field[i]


def _names(values: Iterable[onnx.ValueInfoProto]) -> list[str]:
    """The names of a list of ValueInfoProtos."""
    return [value.name for value in values]
