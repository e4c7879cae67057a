"""`taso info`: describe a model (inputs, outputs, op histogram, opaque ops, parameters)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from .dims import Dim
from .ir import Graph


def describe_graph(graph: Graph) -> dict[str, Any]:
    """A JSON-ready summary of a graph."""
    opaque = Counter(
        (n.params["domain"] + "::" if n.params["domain"] else "") + n.params["op_type"] for n in graph.nodes if n.op.name == "opaque"
    )
    names = graph.meta.output_names or graph.outputs
    return {
        "opset": graph.meta.opset,
        "inputs": [{"name": n, "shape": _dims(t.shape), "dtype": t.dtype} for n, t in graph.inputs.items()],
        "outputs": [{"name": n, "shape": _dims(graph.type(v).shape), "dtype": graph.type(v).dtype} for n, v in zip(names, graph.outputs)],
        "measurement_sizes": dict(graph.meta.sizes),
        "nodes": len(graph),
        "ops": dict(sorted(graph.op_histogram().items(), key=lambda kv: (-kv[1], kv[0]))),
        "opaque": dict(sorted(opaque.items())),
        "parameters": graph.parameter_count(),
        "weights": len(graph.weights),
    }


def _dims(shape) -> list:
    """A shape for people and JSON: a symbolic dim by its name or expression."""
    return [str(d) if isinstance(d, Dim) else int(d) for d in shape]


def is_rule_file(path: str) -> bool:
    """Whether ``taso info`` reads ``path`` as a rule file (version 1 ``.json``, version 2 ``.jsonl.gz`` or ``.jsonl``)."""
    from .rules import is_lines_path

    return path.endswith(".json") or is_lines_path(path)


def describe_library(library) -> dict[str, Any]:
    """A JSON-ready summary of a rule library: header and one line per rule, in text form beside its id, and the
    clean-ups ``taso optimize`` applies with every library (:mod:`taso.cleanup`), each with what proves it."""
    from .cleanup import CLEANUPS
    from .rules import format_rule

    return {
        "header": library.header,
        "rules": [{"id": r.id, "name": r.name, "status": r.status, "size": list(r.size), "text": format_rule(r)} for r in library.rules],
        "cleanups": [{"name": c.name, "equality": c.equality, "proof": c.proof} for c in CLEANUPS],
    }


def format_library(summary: dict[str, Any], title: str) -> str:
    """The human-readable form of :func:`describe_library`'s summary."""
    lines = [f"{title}: {len(summary['rules'])} rules"] + [f"  {r['id']}  [{r['status']}]  {r['text']}" for r in summary["rules"]]
    lines.append(f"clean-ups (applied with every library, before and after the search): {len(summary['cleanups'])}")
    width = max(len(c["name"]) for c in summary["cleanups"])
    lines += [f"  {c['name']:<{width}}  {c['equality']}  [{c['proof']}]" for c in summary["cleanups"]]
    return "\n".join(lines)


def format_description(summary: dict[str, Any], title: str) -> str:
    """The human-readable form of :func:`describe_graph`'s summary."""
    lines = [f"{title}  (opset {summary['opset']}, {summary['nodes']} nodes, {summary['parameters']:,} parameters in {summary['weights']} weights)"]
    lines.append("inputs:")
    lines += [f"  {i['name']}: {i['dtype']}[{','.join(map(str, i['shape']))}]" for i in summary["inputs"]]
    lines.append("outputs:")
    lines += [f"  {o['name']}: {o['dtype']}[{','.join(map(str, o['shape']))}]" for o in summary["outputs"]]
    if summary["measurement_sizes"]:
        sizes = ", ".join(f"{k}={v}" for k, v in summary["measurement_sizes"].items())
        lines.append(f"symbolic dims (kept in an optimized file), measured at: {sizes}")
    lines.append("operators:")
    width = max((len(k) for k in summary["ops"]), default=0)
    lines += [f"  {k:<{width}}  {v}" for k, v in summary["ops"].items()]
    if summary["opaque"]:
        lines.append("opaque (kept verbatim, not optimized):")
        lines += [f"  {k}  {v}" for k, v in summary["opaque"].items()]
    else:
        lines.append("opaque: none (every operator is modelled)")
    return "\n".join(lines)


def to_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, indent=2)
