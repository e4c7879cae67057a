"""Substitution rules as data, and the versioned JSON format the generator, verifier and optimizer share.

A :class:`Rule` says: the values ``outputs[i][0]`` computed by the *source* operator list
equal the values ``outputs[i][1]`` computed by the *target* operator list, for all
tensors bound to the rule's named inputs. Both sides are written in the IR's own
vocabulary (canonical op names and parameters), so a rule converts to two ordinary
:class:`~taso.ir.Graph` objects over the inputs' example shapes.

Some parameters depend on the shapes a rule is applied to (the sizes of the split that
undoes a concatenation, the channel count of an identity kernel). Such a parameter is a
*shape expression* — an int, ``{"dim": [input, axis]}`` or the quotient ``{"div": [expression, int]}`` (a head count:
a width over a head size) — recorded in ``Rule.params``
and resolved against the matched tensors; ``Rule.constraints`` lists shape equalities
the match must satisfy. The example graphs hold the values the expressions take on the
example shapes.

File format, version 1 (``format: "taso-rules"``, one JSON document; still read)::

    {"format": "taso-rules", "version": 1,
     "header": {"generator": {...settings...}, "ops": [...], "counts": {...}},
     "rules": [{"id": "r-1a2b3c4d5e", "inputs": [{"name": "x", "class": "mat", "shape": [4, 4], "dtype": "float32"}],
                "source": [{"op": "matmul", "params": {...}, "inputs": ["x", "y"], "outputs": ["s0"]}],
                "target": [...], "outputs": [["s0", "t0"]],
                "params": [{"side": "target", "node": 0, "param": "sizes", "value": [{"dim": ["x", 1]}, 4]}],
                "constraints": [{"eq": [{"dim": ["x", 1]}, {"dim": ["y", 0]}]}],
                "fingerprint": "…", "status": "candidate", "proof": null}]}

Version 2 (what ``Library.save`` writes to a ``.jsonl.gz`` or ``.jsonl`` path) holds the
same rules as JSON Lines, gzip-compressed for ``.gz``: a first line with the format, version,
header and a per-rule index (status, source and target operators), then one compact rule
per line. The header's digest is a hash of those rule lines' raw bytes, so checking it costs
one hash, and when it matches, each rule's stored id is trusted instead of recomputed; rules
are parsed only when asked for (:class:`LibraryFile`), so the optimizer reads only the rules
whose operators occur in the model.

See docs/rules.md for the full description.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, NamedTuple

from .errors import TasoError
from .ir import Graph, GraphMeta, Node, TensorType
from .ir.dims import Dim
from .ops import get as get_op
from .rule_text import format_rule

__all__ = ["SHIPPED_DATA", "RuleNode", "RuleInput", "Rule", "Library", "LibraryFile", "IndexEntry", "FORMAT", "VERSION", "STATUSES", "RuleFormatError",
           "resolve_expr", "format_rule", "is_lines_path", "usable_reverse", "operator_variant", "side_variants"]

# Where the package keeps the rule files it ships (the library, the group rules).
SHIPPED_DATA = os.path.join(os.path.dirname(__file__), "data")

FORMAT = "taso-rules"
VERSION = 2  # 2: JSON Lines (gzip for .gz) with a per-rule index; 1: one JSON document (still read and written for .json)
LINES_SUFFIXES = (".jsonl.gz", ".jsonl", ".gz")
STATUSES = ("candidate", "proved", "refuted", "unknown")


class RuleFormatError(TasoError):
    """A rule file or rule object is malformed."""


ShapeExpr = Any  # int | {"dim": [input_name, axis]} | {"div": [ShapeExpr, int]} | list of those


def resolve_expr(expr: ShapeExpr, shapes: Mapping[str, Sequence[int]]) -> Any:
    """Evaluates a shape expression against the shapes bound to a rule's inputs."""
    if isinstance(expr, bool):
        return expr
    if isinstance(expr, int):
        return expr
    if isinstance(expr, (list, tuple)):
        return tuple(resolve_expr(e, shapes) for e in expr)
    if isinstance(expr, Mapping) and set(expr) == {"dim"}:
        name, axis = expr["dim"]
        try:
            dim = shapes[name][axis]
            return dim if isinstance(dim, Dim) else int(dim)  # a symbolic dim stays symbolic: a split of it holds at every size
        except (KeyError, IndexError):
            raise RuleFormatError(f"shape expression {expr!r} does not apply to shapes {dict(shapes)}") from None
    if isinstance(expr, Mapping) and set(expr) == {"div"}:
        numerator, divisor = expr["div"]
        value = resolve_expr(numerator, shapes)
        if isinstance(value, Dim) or not isinstance(divisor, int) or divisor <= 0:
            raise RuleFormatError(f"shape expression {expr!r}: a static size over a positive int, at shapes {dict(shapes)}")
        return value // divisor
    raise RuleFormatError(f"not a shape expression: {expr!r}")


@dataclass(frozen=True)
class RuleNode:
    """One operator application inside a rule side."""

    op: str
    params: Mapping[str, Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def to_json(self) -> dict:
        return {"op": self.op, "params": {k: _jsonable(v) for k, v in sorted(self.params.items())}, "inputs": list(self.inputs), "outputs": list(self.outputs)}

    @classmethod
    def from_json(cls, data: Mapping) -> RuleNode:
        return cls(str(data["op"]), {k: _tupled(v) for k, v in dict(data.get("params", {})).items()}, tuple(data["inputs"]), tuple(data["outputs"]))


@dataclass(frozen=True)
class RuleInput:
    """A named rule input: its shape class (for people and the matcher) and example type."""

    name: str
    shape_class: str
    type: TensorType

    def to_json(self) -> dict:
        return {"name": self.name, "class": self.shape_class, "shape": list(self.type.shape), "dtype": self.type.dtype}

    @classmethod
    def from_json(cls, data: Mapping) -> RuleInput:
        return cls(str(data["name"]), str(data.get("class", "")), TensorType(tuple(int(d) for d in data["shape"]), str(data.get("dtype", "float32"))))


@dataclass(frozen=True)
class Rule:
    """A substitution: source ≡ target on the mapped outputs.

    Attributes:
        inputs: the rule's variables.
        source, target: operator lists over the inputs (topologically ordered).
        outputs: (source value, target value) pairs that are equal.
        params: shape-dependent parameters: {"side", "node", "param", "value": shape expression}.
        constraints: shape equalities a match must satisfy: {"eq": [expr, expr]}.
        fingerprint: provenance from the generator.
        status: 'candidate', 'proved', 'refuted' or 'unknown'.
        proof: what the verifier recorded (time, axioms used, reason).
        name: a human name for hand-written rules; generated rules use ``id``.
    """

    inputs: tuple[RuleInput, ...]
    source: tuple[RuleNode, ...]
    target: tuple[RuleNode, ...]
    outputs: tuple[tuple[str, str], ...]
    params: tuple[Mapping[str, Any], ...] = ()
    constraints: tuple[Mapping[str, Any], ...] = ()
    fingerprint: str = ""
    status: str = "candidate"
    proof: Mapping[str, Any] | None = None
    name: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    # ---- identity -------------------------------------------------------------------------
    def canonical(self) -> str:
        """The structural content (everything but status, proof and provenance) as canonical JSON."""
        body = {
            "inputs": [i.to_json() for i in self.inputs],
            "source": [n.to_json() for n in self.source],
            "target": [n.to_json() for n in self.target],
            "outputs": [list(p) for p in self.outputs],
            "params": [dict(p) for p in self.params],
            "constraints": [dict(c) for c in self.constraints],
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @cached_property
    def id(self) -> str:
        """A stable id: a digest of the structural content (computed once: the search names rules often)."""
        return "r-" + hashlib.blake2b(self.canonical().encode(), digest_size=5).hexdigest()

    @property
    def size(self) -> tuple[int, int]:
        return len(self.source), len(self.target)

    def reversed(self) -> Rule:
        """The same equality read right to left (as sound as the rule: equality is symmetric)."""
        flip = {"source": "target", "target": "source"}
        return replace(
            self,
            source=self.target,
            target=self.source,
            outputs=tuple((t, s) for s, t in self.outputs),
            params=tuple({**p, "side": flip[p["side"]]} for p in self.params),
            name=f"{self.name}~reversed" if self.name else "",
            extra={**self.extra, "reversed_from": self.id},
        )

    def with_status(self, status: str, proof: Mapping[str, Any] | None = None) -> Rule:
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}")
        return replace(self, status=status, proof=proof)

    # ---- conversion to graphs -------------------------------------------------------------------
    def side_inputs(self, side: str, shapes: Mapping[str, Sequence[int]] | None = None) -> tuple[dict[str, TensorType], dict[int, dict[str, Any]]]:
        """The input types at ``shapes`` (example shapes elsewhere), and the side's shape-dependent parameters
        resolved against them: node index -> {param: value}."""
        types = {i.name: (i.type if shapes is None or i.name not in shapes else TensorType(tuple(shapes[i.name]), i.type.dtype)) for i in self.inputs}
        dims = {k: t.shape for k, t in types.items()}
        overrides: dict[int, dict[str, Any]] = {}
        for p in self.params:
            if p["side"] == side:
                overrides.setdefault(int(p["node"]), {})[p["param"]] = resolve_expr(p["value"], dims)
        return types, overrides

    def side_graph(self, side: str, shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
        """One side as an IR graph over the inputs (example shapes unless ``shapes`` is given).

        Shape-dependent parameters are resolved against the shapes.

        Raises:
            RuleFormatError: unknown op, bad parameters, or the side does not type-check.
        """
        if side not in ("source", "target"):
            raise ValueError("side must be 'source' or 'target'")
        types, overrides = self.side_inputs(side, shapes)
        nodes = []
        for index, rn in enumerate(getattr(self, side)):
            try:
                op = get_op(rn.op)
                params = op.make_params(**{**rn.params, **overrides.get(index, {})})
            except (KeyError, TasoError) as e:
                raise RuleFormatError(f"rule {self.id}: {side} node {index} ({rn.op}): {e}") from None
            nodes.append(Node(op, params, rn.inputs, rn.outputs, f"{side}{index}"))
        outs = [pair[0 if side == "source" else 1] for pair in self.outputs]
        try:
            return Graph(types, {}, nodes, outs, meta=GraphMeta(output_names=tuple(outs)))
        except TasoError as e:
            raise RuleFormatError(f"rule {self.id}: {side} does not type-check: {e}") from None

    def constraints_hold(self, shapes: Mapping[str, Sequence[int]]) -> bool:
        """Every shape equality of the rule holds, at every size when the shapes hold symbolic dims (:mod:`taso.ir.dims`)."""
        return all(resolve_expr(c["eq"][0], shapes) == resolve_expr(c["eq"][1], shapes) for c in self.constraints)

    def validate(self) -> None:
        """Checks that the rule is well formed (egg's Rewrite::new checks, plus shapes).

        Raises:
            RuleFormatError: unknown op or parameter, a side reading an unbound name, a
                mapped output missing, or outputs whose types differ between sides.
        """
        names = [i.name for i in self.inputs]
        if len(set(names)) != len(names):
            raise RuleFormatError(f"rule {self.id}: duplicate input names {names}")
        if not self.outputs:
            raise RuleFormatError(f"rule {self.id}: maps no outputs")
        if self.status not in STATUSES:
            raise RuleFormatError(f"rule {self.id}: unknown status {self.status!r}")
        src, tgt = self.side_graph("source"), self.side_graph("target")
        for s, t in self.outputs:
            if src.type(s) != tgt.type(t):
                raise RuleFormatError(f"rule {self.id}: output {s} is {src.type(s)} but {t} is {tgt.type(t)}")
        if not self.constraints_hold({i.name: i.type.shape for i in self.inputs}):
            raise RuleFormatError(f"rule {self.id}: its constraints do not hold on its own example shapes")

    # ---- JSON ---------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        data = {"id": self.id}
        if self.name:
            data["name"] = self.name
        data.update(json.loads(self.canonical()))
        data.update({"fingerprint": self.fingerprint, "status": self.status, "proof": self.proof})
        if self.extra:
            data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_json(cls, data: Mapping, trust_id: bool = False) -> Rule:
        """A rule from its JSON object; its ``id``, when present, must match the content.

        ``trust_id`` takes the stored id as is: only for a line of a file whose digest
        matched, which proves the line is byte for byte what ``Library.save`` wrote.
        """
        try:
            rule = cls(
                inputs=tuple(RuleInput.from_json(i) for i in data["inputs"]),
                source=tuple(RuleNode.from_json(n) for n in data["source"]),
                target=tuple(RuleNode.from_json(n) for n in data["target"]),
                outputs=tuple((str(a), str(b)) for a, b in data["outputs"]),
                params=tuple(dict(p) for p in data.get("params", ())),
                constraints=tuple(dict(c) for c in data.get("constraints", ())),
                fingerprint=str(data.get("fingerprint", "")),
                status=str(data.get("status", "candidate")),
                proof=data.get("proof"),
                name=str(data.get("name", "")),
                extra=dict(data.get("extra", {})),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise RuleFormatError(f"malformed rule {data.get('id', '?') if isinstance(data, Mapping) else '?'}: {type(e).__name__} {e}") from None
        if trust_id and isinstance(data.get("id"), str):
            rule.__dict__["id"] = data["id"]  # fills the cached property: the content hash is not recomputed
        elif "id" in data and data["id"] != rule.id:
            raise RuleFormatError(f"rule {data['id']}: its id does not match its content (expected {rule.id}); was it edited by hand?")
        return rule

    def __str__(self) -> str:
        return format_rule(self)


@dataclass
class Library:
    """A set of rules with the header that says where they came from."""

    rules: list[Rule]
    header: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rules)

    def __iter__(self):
        return iter(self.rules)

    def __add__(self, other: Library) -> Library:
        return Library(self.rules + [r for r in other.rules if r.id not in {x.id for x in self.rules}], {**self.header})

    def by_id(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id or (r.name and r.name == rule_id):
                return r
        raise TasoError(f"no rule {rule_id!r} in the library")

    def digest(self) -> str:
        """A digest over every rule with its status and proof, in order (the header is not covered).

        ``save`` records it and ``load`` checks it: a rule flipped from "candidate" to
        "proved" by hand, or a proof edited, no longer matches and the file is refused. It
        hashes each rule's compact line as a version-2 file stores it, so checking a
        version-2 file hashes its bytes and re-serialises nothing.
        """
        return _digest_bytes(b"".join(line + b"\n" for line in self._rule_lines()))

    def _rule_lines(self) -> list[bytes]:
        return [_rule_line(rule) for rule in self.rules]

    def to_json(self) -> dict:
        """The version-1 document (one JSON object)."""
        header = {k: v for k, v in self.header.items() if k != "digest"}
        return {"format": FORMAT, "version": 1, "header": {**header, "digest": self.digest()}, "rules": [r.to_json() for r in self.rules]}

    def dumps(self) -> str:
        """The version-1 document, indented."""
        return json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n"

    def dumps_lines(self) -> bytes:
        """The version-2 JSON Lines: a head line (format, version, header with the digest, index), then one rule per line."""
        lines = self._rule_lines()
        body = b"".join(line + b"\n" for line in lines)
        header = {**{k: v for k, v in self.header.items() if k != "digest"}, "digest": _digest_bytes(body)}
        head = {"format": FORMAT, "version": VERSION, "header": header, "index": [IndexEntry.of(r).to_json() for r in self.rules]}
        return json.dumps(head, separators=(",", ":")).encode() + b"\n" + body

    def encode(self, path: str) -> bytes:
        """The bytes ``save`` writes to ``path``: version 2 for a ``.jsonl`` or ``.jsonl.gz`` name (gzip for ``.gz``), version 1 otherwise."""
        if not is_lines_path(path):
            return self.dumps().encode("utf-8")
        data = self.dumps_lines()
        return gzip.compress(data, compresslevel=9, mtime=0) if path.endswith(".gz") else data

    @classmethod
    def from_json(cls, data: Any, where: str = "rule file", check_digest: bool = True) -> Library:
        """A library from a version-1 document (every rule's id checked, then the digest)."""
        _check_format(data, where)
        rules = data.get("rules")
        if not isinstance(rules, list):
            raise RuleFormatError(f"{where}: \"rules\" must be a list")
        library = cls([Rule.from_json(r) for r in rules], dict(data.get("header", {})))
        recorded = library.header.get("digest")
        if check_digest and recorded is not None and recorded != library.digest():
            raise _digest_error(where)
        return library

    @classmethod
    def load(cls, path: str | os.PathLike, check_digest: bool = True) -> Library:
        """Reads a rule file of any version (``check_digest=False`` for a file about to be re-proved anyway).

        Raises:
            TasoError: missing file, not JSON, not a rule file, a newer format version, a malformed rule.
        """
        return LibraryFile.read(path, check_digest).library()

    def save(self, path: str | os.PathLike) -> None:
        """Writes the library atomically (the format by the file name: see :meth:`encode`)."""
        from .onnx.files import write_bytes_atomically

        path = os.fspath(path)
        try:
            write_bytes_atomically(path, self.encode(path))
        except OSError as e:
            raise TasoError(f"{path}: cannot write ({e.strerror or e})") from None


class IndexEntry(NamedTuple):
    """What a version-2 file says about a rule before it is parsed: enough to skip it, and the ids of both its directions.

    The index sits in the head line, outside the digest, so it is a hint: a parsed rule is
    checked against its id, status and operators, and an entry that lies about them can
    only make a rule be skipped, never applied where it should not. ``reverse_id`` is
    trusted like stored ids when the digest matched ("" then means: no reverse is used), so
    a wrong one could only mislabel a reversed rule or leave it out.
    """

    rule_id: str
    status: str
    source_ops: frozenset[str]  # operator variants (see operator_variant) of the source
    target_ops: frozenset[str]
    reverse_id: str = ""  # the id of usable_reverse(rule), "" when the rule has no usable reverse

    @classmethod
    def of(cls, rule: Rule, with_reverse: bool = True) -> IndexEntry:
        reverse = usable_reverse(rule) if with_reverse else None
        return cls(rule.id, rule.status, side_variants(rule.source), side_variants(rule.target), reverse.id if reverse else "")

    @property
    def op_names(self) -> frozenset[str]:
        """The operators both sides apply (variants without their fused activation)."""
        return frozenset(v.partition("+")[0] for v in self.source_ops | self.target_ops)

    def agrees_with(self, rule: Rule) -> bool:
        """Id, status and operators match the parsed rule (the reverse id is not recomputed)."""
        return self[:4] == IndexEntry.of(rule, with_reverse=False)[:4]

    def to_json(self) -> list:
        return [self.rule_id, self.status, " ".join(sorted(self.source_ops)), " ".join(sorted(self.target_ops)), self.reverse_id]

    @classmethod
    def from_json(cls, data: Any) -> IndexEntry:
        rule_id, status, source, target, reverse_id = data
        # NOTE: tuple.__new__ directly: the generated NamedTuple constructor doubled the cost of reading an index.
        return tuple.__new__(cls, (str(rule_id), str(status), frozenset(source.split()), frozenset(target.split()), str(reverse_id)))


def operator_variant(op: str, params: Mapping[str, Any]) -> str:
    """``op``, or ``op+activation`` for a fused activation: a pattern node matches only graph nodes of its own variant.

    Rules are indexed by the variants of their sources, so a model without fused sigmoids
    never parses a rule about them.
    """
    activation = params.get("activation", "none")
    return op if activation == "none" or not isinstance(activation, str) else f"{op}+{activation}"


def side_variants(nodes: Iterable[RuleNode]) -> frozenset[str]:
    return frozenset(operator_variant(n.op, n.params) for n in nodes)


def usable_reverse(rule: Rule) -> Rule | None:
    """The rule read right to left, or None when its new source does not read every input (matching could not bind them)."""
    reverse = rule.reversed()
    read = {v for n in reverse.source for v in n.inputs}
    return reverse if {i.name for i in reverse.inputs} <= read else None


class LibraryFile:
    """A rule file as read: its header and index at once, each rule parsed on first use.

    ``trusted`` is true when the file recorded a digest and its rule lines hash to it: the
    lines are then what ``Library.save`` wrote, and stored ids are taken as they are.
    """

    def __init__(self, path: str, version: int, header: dict[str, Any], index: list[IndexEntry] | list[list],
                 lines: list[bytes] | None = None, rules: list[Rule] | None = None, trusted: bool = False):
        self.path, self.version, self.header, self.trusted = path, version, header, trusted
        self._index_json = index  # IndexEntry objects are built on first use: a cached library never needs them
        self._index: list[IndexEntry] | None = None
        self._lines = lines
        self._rules: list[Rule | None] = list(rules) if rules is not None else [None] * len(index)

    def __len__(self) -> int:
        return len(self._rules)

    @property
    def index(self) -> list[IndexEntry]:
        """One entry per rule, in order.

        Raises:
            RuleFormatError: a malformed index in the head line.
        """
        if self._index is None:
            try:
                self._index = [e if isinstance(e, IndexEntry) else IndexEntry.from_json(e) for e in self._index_json]
            except (TypeError, ValueError, AttributeError):
                raise RuleFormatError(f"{self.path}: malformed index in its header line") from None
        return self._index

    @property
    def digest(self) -> str | None:
        return self.header.get("digest")

    def rule(self, position: int) -> Rule:
        """The rule at ``position``, parsed now if it was not yet.

        Raises:
            RuleFormatError: the line is not a well-formed rule, its id does not match (when
                not trusted), or it disagrees with its index entry.
        """
        rule = self._rules[position]
        if rule is None:
            rule = self._rules[position] = self._parse(position)
        return rule

    def rules(self) -> list[Rule]:
        return [self.rule(i) for i in range(len(self))]

    def reverse(self, position: int) -> Rule | None:
        """The rule at ``position`` read right to left, or None when unusable.

        When the file is trusted, its index says which reverses are used and their ids.
        """
        stored = self.index[position].reverse_id
        if self.trusted and not stored:
            return None
        reverse = usable_reverse(self.rule(position))
        if reverse is not None and self.trusted:
            reverse.__dict__["id"] = stored  # fills the cached property, as for stored ids
        return reverse

    def directed_count(self, positions: Iterable[int]) -> int:
        """How many distinct rules the rules at ``positions`` give in both directions, by the index's ids."""
        entries = [self.index[k] for k in positions]
        return len({e.rule_id for e in entries} | {e.reverse_id for e in entries if e.reverse_id})

    def library(self) -> Library:
        return Library(self.rules(), dict(self.header))

    def _parse(self, position: int) -> Rule:
        assert self._lines is not None
        try:
            data = json.loads(self._lines[position])
        except ValueError:
            raise RuleFormatError(f"{self.path}: rule line {position + 1} is not valid JSON") from None
        if not isinstance(data, Mapping):
            raise RuleFormatError(f"{self.path}: rule line {position + 1} is not a JSON object")
        rule = Rule.from_json(data, trust_id=self.trusted)
        if not self.index[position].agrees_with(rule):
            raise RuleFormatError(f"{self.path}: rule {rule.id} does not match its index entry (edited by hand?)")
        return rule

    @classmethod
    def read(cls, path: str | os.PathLike, check_digest: bool = True) -> LibraryFile:
        """Reads a rule file of any version; a version-2 file's rules stay unparsed until asked for.

        Raises:
            TasoError: missing file, not JSON, not a rule file, a newer format version, a
                digest that does not match (with ``check_digest``), a malformed rule (version 1).
        """
        path = os.fspath(path)
        raw = _read_bytes(path)
        if raw[:2] == _GZIP_MAGIC:
            raw = _gunzip(raw, path)
        head, _, body = raw.partition(b"\n")
        first = _json_object_or_none(head)
        if first is not None and "rules" not in first:  # a head line: version 2
            return cls._from_lines(path, first, body, check_digest)
        data = first if first is not None else _parse_document(raw, path)  # one document (gzip'd or not): version 1
        library = Library.from_json(data, path, check_digest)
        return cls(path, data["version"], library.header, [IndexEntry.of(r, with_reverse=False) for r in library.rules], rules=library.rules)

    @classmethod
    def _from_lines(cls, path: str, first: Mapping, body: bytes, check_digest: bool) -> LibraryFile:
        version = _check_format(first, path)
        if version < 2:
            raise RuleFormatError(f"{path}: a version-{version} rule file is one JSON document, not lines")
        lines = body.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        index = first.get("index", [])
        if not isinstance(index, list):
            raise RuleFormatError(f"{path}: malformed index in its header line")
        if len(index) != len(lines):
            raise RuleFormatError(f"{path}: its index lists {len(index)} rules but it holds {len(lines)} rule lines (truncated?)")
        header = first.get("header", {})
        if not isinstance(header, Mapping):
            raise RuleFormatError(f"{path}: its header must be a JSON object")
        header = dict(header)
        recorded = header.get("digest")
        trusted = check_digest and recorded is not None
        if trusted and _digest_bytes(body) != recorded:
            raise _digest_error(path)
        return cls(path, version, header, index, lines=lines, trusted=trusted)


def is_lines_path(path: str | os.PathLike) -> bool:
    """Whether ``Library.save`` writes version 2 (JSON Lines) to this file name."""
    return os.fspath(path).endswith(LINES_SUFFIXES)


_GZIP_MAGIC = b"\x1f\x8b"


def _rule_line(rule: Rule) -> bytes:
    return json.dumps(rule.to_json(), sort_keys=True, separators=(",", ":")).encode()


def _digest_bytes(rule_lines: bytes) -> str:
    return "blake2b-128:" + hashlib.blake2b(rule_lines, digest_size=16).hexdigest()


def _digest_error(where: str) -> RuleFormatError:
    return RuleFormatError(f"{where}: its rules do not match the digest in its header (edited by hand?); "
                           f"re-prove them with `taso verify {where} -o NEW.jsonl.gz`")


def _check_format(data: Any, where: str) -> int:
    """The file's version, after checking it is a taso rule file this taso can read."""
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise RuleFormatError(f"{where}: not a taso rule file (expected \"format\": \"{FORMAT}\")")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise RuleFormatError(f"{where}: missing or malformed format version")
    if version > VERSION:
        raise RuleFormatError(f"{where}: format version {version} is newer than this taso reads ({VERSION}); upgrade taso")
    return version


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise TasoError(f"{path}: no such file") from None
    except OSError as e:
        raise TasoError(f"{path}: cannot read ({e})") from None


def _gunzip(raw: bytes, path: str) -> bytes:
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise RuleFormatError(f"{path}: a damaged gzip file ({e})") from None


def _json_object_or_none(line: bytes) -> dict | None:
    """The line as a JSON object, or None (an indented version-1 document's first line is a bare ``{``)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _parse_document(raw: bytes, path: str) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TasoError(f"{path}: cannot read ({e})") from None
    except json.JSONDecodeError as e:
        raise RuleFormatError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        raise RuleFormatError("rules cannot carry bytes parameters (opaque ops are not rule material)")
    return value


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value
