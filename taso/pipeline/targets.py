"""What a target runtime allows beyond the file's own opset and operators.

``--target ort`` lets the export raise a file's opset to :data:`ORT_OPSET`, where ONNX's Attention is one node, when
nothing in the file means something else there (:func:`opset_limit`); and the report of a default run
(``--target onnx``) says when the rewrites into ONNX Runtime's contrib operators it may not make leave a gain on the
table (:func:`ort_gain`)."""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import onnx

from ..cost.model import CostModel
from ..ir import Graph
from ..rules import Library
from ..search.rewrite import CompiledRule, plans
from .library import EXPORTER_FORMS, ORT_FUSIONS

__all__ = ["TargetGain", "ort_gain", "ORT_OPSET", "opset_limit", "with_opset_limit"]

# The opset taso may raise a file to for ONNX Runtime (1.32 runs up to 26 at least): ONNX's Attention is one node there.
ORT_OPSET = 23

# Past this share of the graph's cost a gain is worth a line in the report (below it, the measuring's own noise).
_WORTH_SAYING = 0.01


class TargetGain(NamedTuple):
    places: int  # where a fusion's rewrite would lower the price, each priced alone
    seconds: float  # the sum of those places' gains
    cost: float  # the kept graph's price

    def note(self) -> str | None:
        """The report's line, or None when there is nothing worth saying."""
        if not self.places or self.seconds < _WORTH_SAYING * self.cost:
            return None
        return (f"--target ort (ONNX Runtime's contrib operators, ONNX's Attention at opset 23) could rewrite {self.places} "
                f"place(s) more, predicted {self.seconds / self.cost:.1%} of the cost faster")


def ort_gain(graph: Graph, cost_model: CostModel) -> TargetGain:
    """The rewrites of ``graph`` only ``--target ort`` makes that the cost model prices as gains, each priced alone from
    ``graph`` (their sum is an estimate: two near one another may share a neighbour): the fusions into ONNX Runtime's
    contrib operators, and the rules into ONNX's Attention where the file's opset could be raised to 23. Measures the
    fused nodes it meets without the search's deadline, as the search would have."""
    deadline, cost_model.deadline = cost_model.deadline, float("inf")
    try:
        cost = cost_model.graph_cost(graph)
        present = {n.op.name for n in graph.nodes}
        places, gain = 0, 0.0
        limit = opset_limit(graph, "ort")
        raised = with_opset_limit(graph, limit) if limit is not None and not graph.meta.writes_natively(ORT_OPSET) else None
        candidates = [(graph, rule) for rule in Library.load(ORT_FUSIONS).rules]
        if raised is not None:
            candidates += [(raised, rule) for rule in Library.load(EXPORTER_FORMS).rules if any(n.op == "attention" for n in rule.target)]
        for where, rule in candidates:
            if rule.status != "proved" or not {n.op for n in rule.source if n.op != "fill"} <= present:  # (constants: weights)
                continue
            for plan in plans(where, CompiledRule(rule)):
                delta = cost - cost_model.rewrite_cost(where, cost, plan.removed, plan.added, plan)
                if delta > 0:
                    places, gain = places + 1, gain + delta
        return TargetGain(places, gain, cost)
    finally:
        cost_model.deadline = deadline


def opset_limit(graph: Graph, target: str) -> int | None:
    """The newest opset the export may raise ``graph``'s to for ``target``: :data:`ORT_OPSET` for ONNX Runtime when
    every node taso does not model means the same there (the same version of its operator in force, no subgraph,
    ONNX's domain); else None, the file's own opset. taso's own ops mean the same at every opset it writes
    (:mod:`taso.ops.onnx_versions`)."""
    if target != "ort" or graph.meta.opset >= ORT_OPSET:
        return None
    for node in graph.nodes:
        if node.op.name == "opaque" and not _same_meaning(node.params, graph.meta.opset, ORT_OPSET):
            return None
    return ORT_OPSET


def _same_meaning(params, opset: int, raised: int) -> bool:
    proto = onnx.NodeProto()
    proto.ParseFromString(params["proto"])
    if proto.domain not in ("", "ai.onnx") or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in proto.attribute):
        return False
    try:
        if onnx.defs.get_schema(proto.op_type, opset).since_version == onnx.defs.get_schema(proto.op_type, raised).since_version:
            return True
    except onnx.defs.SchemaError:
        return False
    attributes = tuple(a.SerializeToString() for a in proto.attribute)
    return proto.op_type not in _SAME_FORM_NEW_MEANING and _converts_unchanged(proto.op_type, len(proto.input), len(proto.output),
                                                                               attributes, opset, raised)


# Operators whose newer version keeps the node's form and changes what it computes, where ONNX's version converter
# leaves the node as it is: GroupNormalization 21 reads its scale and bias per channel, 18 per group.
_SAME_FORM_NEW_MEANING = frozenset({"GroupNormalization"})


@functools.lru_cache(maxsize=1024)
def _converts_unchanged(op_type: str, inputs: int, outputs: int, attributes: tuple[bytes, ...], opset: int, raised: int) -> bool:
    """Whether ONNX's version converter takes the node (its ``attributes`` serialized) from ``opset`` to ``raised`` as
    it is: the versions between only widened its types (the converter's adapters rewrite a node whose meaning changed,
    and refuse where they cannot). Cached: a file holds many nodes alike (its Shape and Cast nodes)."""
    from onnx import version_converter

    names = [f"i{k}" for k in range(inputs)]
    node = onnx.helper.make_node(op_type, names, [f"o{k}" for k in range(outputs)])
    node.attribute.extend(onnx.AttributeProto.FromString(a) for a in attributes)
    graph = onnx.helper.make_graph([node], "one", [onnx.helper.make_value_info(n, onnx.TypeProto()) for n in names],
                                   [onnx.helper.make_value_info(f"o{k}", onnx.TypeProto()) for k in range(outputs)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    try:
        converted = version_converter.convert_version(model, raised).graph.node
    except Exception:  # noqa: BLE001 - the converter refuses in many ways; each means "not known to be the same"
        return False
    return len(converted) == 1 and converted[0].op_type == op_type and list(converted[0].input) == names and \
        sorted(a.SerializeToString() for a in converted[0].attribute) == sorted(attributes)


def with_opset_limit(graph: Graph, limit: int | None) -> Graph:
    """``graph`` with its target's opset limit (``GraphMeta.opset_limit``)."""
    if graph.meta.opset_limit == limit:
        return graph
    return Graph(graph.inputs, graph.weights, graph.nodes, graph.outputs, types=graph.types, meta=dataclasses.replace(graph.meta, opset_limit=limit))
