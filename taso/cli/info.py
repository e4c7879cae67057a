"""`taso info`: describe a model (inputs, outputs, op histogram, opaque ops, parameters)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from ..errors import TasoError
from ..ir import Graph
from ..ir.dims import Dim
from .main import add_input_shape_option, parse_input_shapes


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
    from ..rules import is_lines_path

    return path.endswith(".json") or is_lines_path(path)


def describe_library(library) -> dict[str, Any]:
    """A JSON-ready summary of a rule library: header and one line per rule, in text form beside its id; the
    clean-ups ``taso optimize`` applies with every library (:mod:`taso.search.cleanup`), each with what proves it; and the
    group merges it offers with every library (:mod:`taso.search.groups`), each arity with its proof."""
    from ..rules import format_rule
    from ..search.cleanup import CLEANUPS

    return {
        "header": library.header,
        "rules": [{"id": r.id, "name": r.name, "status": r.status, "size": list(r.size), "text": format_rule(r),
                   "axioms": list((r.proof or {}).get("axioms", ()))} for r in library.rules],
        "cleanups": [{"name": c.name, "equality": c.equality, "proof": c.proof} for c in CLEANUPS],
        "groups": describe_groups(),
    }


def describe_groups() -> list[dict[str, Any]]:
    """Each group family with its proved arities: the rule id, the axioms its proof used and Z3's time."""
    from ..search.groups import FAMILIES, MIN_GROUP, GroupLibrary

    shipped = GroupLibrary.shipped()
    families = []
    for family in FAMILIES:
        proved = []
        for k in range(MIN_GROUP, family.max_arity + 1):
            rule = shipped.proved(family, k)
            if rule is not None:
                proof = rule.proof or {}
                proved.append({"k": k, "id": rule.id, "axioms": list(proof.get("axioms", ())), "seconds": proof.get("seconds")})
        families.append({"name": family.name, "doc": family.doc, "proved": proved})
    return families


def format_library(summary: dict[str, Any], title: str) -> str:
    """The human-readable form of :func:`describe_library`'s summary."""
    lines = [f"{title}: {len(summary['rules'])} rules"] + [_rule_line(r) for r in summary["rules"]]
    lines.append(f"clean-ups (applied with every library, before and after the search): {len(summary['cleanups'])}")
    width = max(len(c["name"]) for c in summary["cleanups"])
    lines += [f"  {c['name']:<{width}}  {c['equality']}  [{c['proof']}]" for c in summary["cleanups"]]
    lines.append(f"group merges (offered with every library; python -m taso.verifier.build_groups proves them): {len(summary['groups'])}")
    for family in summary["groups"]:
        proved = family["proved"]
        arities = f"k = {proved[0]['k']}..{proved[-1]['k']}" if proved else "no arity proved"
        lines.append(f"  {family['name']}: {family['doc']}  [Z3, {arities}]")
        for p in proved[:1] + proved[-1:] if len(proved) > 1 else proved:
            laws = sorted({a.rsplit("-", 1)[0] if a.startswith(("split-concat-", "add-split-", "mul-split-")) else a for a in p["axioms"]})
            lines.append(f"    k={p['k']}: {p['id']}, {len(p['axioms'])} axioms ({', '.join(laws)}), {p['seconds']:.2f} s")
    return "\n".join(lines)


def _rule_line(rule: dict[str, Any]) -> str:
    """A rule's line: a named (hand-written) rule also says its name and the axioms its proof used."""
    if not rule["name"]:
        return f"  {rule['id']}  [{rule['status']}]  {rule['text']}"
    proof = f"{rule['status']} by {', '.join(rule['axioms'])}" if rule["axioms"] else rule["status"]
    return f"  {rule['id']}  {rule['name']}  [{proof}]  {rule['text']}"


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
    if summary.get("sizes"):
        lines.append("sizes taso optimize searches and times at:")
        lines += [f"  {line}" for line in summary["sizes"]]
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


def add_parser(sub) -> None:
    info = sub.add_parser("info", help="describe an ONNX model or a rule file")
    info.add_argument("file", nargs="?", help="an .onnx model, or a .json or .jsonl.gz rule file (candidates or library)")
    info.add_argument("--costs", action="store_true",
                      help="show the measured-cost cache: entries per hardware fingerprint, how many were spot-checked, are suspect or stale, "
                           "and the worst disagreements")
    info.add_argument("--check", type=int, metavar="N",
                      help="with --costs: re-measure N entries of this machine's cost table now and report them (before quoting figures)")
    info.add_argument("--export", metavar="FILE", help="with --costs: write this machine's cost tables to FILE, to ship with a model "
                      "(a container image, a CI cache) for machines of the same type")
    info.add_argument("--import", dest="import_from", metavar="FILE",
                      help="with --costs: add the cost tables in FILE (from --export) to this machine's cache; tables measured on "
                           "another machine type are refused, one line each")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_input_shape_option(info)
    info.set_defaults(func=run)



def run(args: argparse.Namespace) -> int:
    from ..onnx import load_onnx

    if (args.export or args.import_from) and not args.costs:
        raise TasoError("--export and --import move cost tables: give them with --costs")
    if args.costs and (args.export or args.import_from):
        _move_cost_tables(args.export, args.import_from)
        if args.file is None:
            return 0
    elif args.costs or args.check is not None:
        _print_costs(args.check, args.json, to_json)
        if args.file is None:
            return 0
    if args.file is None:
        raise TasoError("taso info needs a FILE (an .onnx model or a .json / .jsonl.gz rule file), or --costs")
    if is_rule_file(args.file):
        from ..rules import Library

        summary = describe_library(Library.load(args.file))
        print(to_json(summary) if args.json else format_library(summary, args.file))
        return 0
    from ..onnx import read_model

    model, shapes = read_model(args.file), parse_input_shapes(args.input_shape)
    graph = load_onnx(model, shapes)
    summary = describe_graph(graph)
    from ..pipeline.sizes import SizeRange

    summary["sizes"] = SizeRange.of(graph, shapes).explain()
    print(to_json(summary) if args.json else format_description(summary, args.file))
    return 0


def _move_cost_tables(export: str | None, import_from: str | None) -> None:
    """`taso info --costs --import FILE` and `--export FILE`: cost tables in and out of this machine's cache."""
    from ..cost import CostCache
    from ..cost.travel import export_tables, import_tables

    cache = CostCache()
    if import_from:
        done = import_tables(cache, import_from)
        for fingerprint, local in done.refused:
            print(f"taso: note: {import_from}: refused the table measured on {fingerprint!r}: "
                  f"{'this machine cannot measure there' if local is None else f'this machine measures {local!r}'}", file=sys.stderr)
        if not done.added and done.refused and not done.kept:
            raise TasoError(f"{import_from}: no table of this machine's type to import ({len(done.refused)} refused)")
        cache.save()
        print(f"imported {sum(done.added.values())} cost entries into {len(done.added)} table(s) of {cache.path}"
              + (f" ({done.kept} the cache already held, kept)" if done.kept else ""))
    if export:
        tables, entries = export_tables(cache, export)
        print(f"exported {entries} cost entries of {tables} table(s) to {export}")


def _print_costs(check: int | None, as_json: bool, to_json) -> None:
    """`taso info --costs [--check N]`: the cost cache's tables and their health, after spot-checking N entries of this machine's now."""
    from ..cost import CostCache, format_cost_report

    cache = CostCache()
    checks = None
    if check is not None:
        if check < 1:
            raise TasoError(f"--check {check}: the number of entries to re-measure must be at least 1")
        from ..cost.ort_cpu import fingerprint
        from ..cost.spot_checks import check_cached_costs

        checks = check_cached_costs(cache, check)
        cache.save()
    report = cache.report()
    if checks is not None:
        report["checked_now"] = {c.fingerprint: {"entries": [v.to_json() for v in c.verdicts], "marked_stale": c.marked_stale} for c in checks}
    if as_json:
        print(to_json(report))
        return
    print(format_cost_report(report))
    if checks is not None and not checks:
        print(f"no cost table of this machine to check ({fingerprint(1).replace('threads=1', 'threads=N')})")
    for c in checks or ():
        print(f"checked now, {c.fingerprint}:")
        print("\n".join(f"  {line}" for line in c.describe()) or "  (no entry whose key can be re-measured)")
