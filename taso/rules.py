"""Substitution rules as data, and the versioned JSON format the generator, verifier and optimizer share.

A :class:`Rule` says: the values ``outputs[i][0]`` computed by the *source* operator list
equal the values ``outputs[i][1]`` computed by the *target* operator list, for all
tensors bound to the rule's named inputs. Both sides are written in the IR's own
vocabulary (canonical op names and parameters), so a rule converts to two ordinary
:class:`~taso.ir.Graph` objects over the inputs' example shapes.

Some parameters depend on the shapes a rule is applied to (the sizes of the split that
undoes a concatenation, the channel count of an identity kernel). Such a parameter is a
*shape expression* — an int or ``{"dim": [input, axis]}`` — recorded in ``Rule.params``
and resolved against the matched tensors; ``Rule.constraints`` lists shape equalities
the match must satisfy. The example graphs hold the values the expressions take on the
example shapes.

File format (``format: "taso-rules"``, ``version: 1``)::

    {"format": "taso-rules", "version": 1,
     "header": {"generator": {...settings...}, "ops": [...], "counts": {...}},
     "rules": [{"id": "r-1a2b3c4d5e", "inputs": [{"name": "x", "class": "mat", "shape": [4, 4], "dtype": "float32"}],
                "source": [{"op": "matmul", "params": {...}, "inputs": ["x", "y"], "outputs": ["s0"]}],
                "target": [...], "outputs": [["s0", "t0"]],
                "params": [{"side": "target", "node": 0, "param": "sizes", "value": [{"dim": ["x", 1]}, 4]}],
                "constraints": [{"eq": [{"dim": ["x", 1]}, {"dim": ["y", 0]}]}],
                "fingerprint": "…", "status": "candidate", "proof": null}]}

See docs/rules.md for the full description.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from .errors import TasoError
from .ir import Graph, GraphMeta, Node, TensorType
from .ops import get as get_op

__all__ = ["RuleNode", "RuleInput", "Rule", "Library", "FORMAT", "VERSION", "STATUSES", "RuleFormatError", "resolve_expr", "format_rule"]

FORMAT = "taso-rules"
VERSION = 1
STATUSES = ("candidate", "proved", "refuted", "unknown")


class RuleFormatError(TasoError):
    """A rule file or rule object is malformed."""


ShapeExpr = Any  # int | {"dim": [input_name, axis]} | list of those


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
            return int(shapes[name][axis])
        except (KeyError, IndexError):
            raise RuleFormatError(f"shape expression {expr!r} does not apply to shapes {dict(shapes)}") from None
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
    def side_graph(self, side: str, shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
        """One side as an IR graph over the inputs (example shapes unless ``shapes`` is given).

        Shape-dependent parameters are resolved against the shapes.

        Raises:
            RuleFormatError: unknown op, bad parameters, or the side does not type-check.
        """
        if side not in ("source", "target"):
            raise ValueError("side must be 'source' or 'target'")
        types = {i.name: (i.type if shapes is None or i.name not in shapes else TensorType(tuple(shapes[i.name]), i.type.dtype)) for i in self.inputs}
        dims = {k: t.shape for k, t in types.items()}
        overrides: dict[int, dict[str, Any]] = {}
        for p in self.params:
            if p["side"] == side:
                overrides.setdefault(int(p["node"]), {})[p["param"]] = resolve_expr(p["value"], dims)
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
    def from_json(cls, data: Mapping) -> Rule:
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
        if "id" in data and data["id"] != rule.id:
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
        "proved" by hand, or a proof edited, no longer matches and the file is refused.
        """
        h = hashlib.blake2b(digest_size=16)
        for rule in self.rules:
            h.update(json.dumps(rule.to_json(), sort_keys=True, separators=(",", ":")).encode())
            h.update(b"\n")
        return "blake2b-128:" + h.hexdigest()

    def to_json(self) -> dict:
        header = {k: v for k, v in self.header.items() if k != "digest"}
        return {"format": FORMAT, "version": VERSION, "header": {**header, "digest": self.digest()}, "rules": [r.to_json() for r in self.rules]}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, data: Any, where: str = "rule file", check_digest: bool = True) -> Library:
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise RuleFormatError(f"{where}: not a taso rule file (expected \"format\": \"{FORMAT}\")")
        version = data.get("version")
        if not isinstance(version, int):
            raise RuleFormatError(f"{where}: missing or malformed format version")
        if version > VERSION:
            raise RuleFormatError(f"{where}: format version {version} is newer than this taso reads ({VERSION}); upgrade taso")
        rules = data.get("rules")
        if not isinstance(rules, list):
            raise RuleFormatError(f"{where}: \"rules\" must be a list")
        library = cls([Rule.from_json(r) for r in rules], dict(data.get("header", {})))
        recorded = library.header.get("digest")
        if check_digest and recorded is not None and recorded != library.digest():
            raise RuleFormatError(f"{where}: its rules do not match the digest in its header (edited by hand?); "
                                  f"re-prove them with `taso verify {where} -o NEW.json`")
        return library

    @classmethod
    def load(cls, path: str | os.PathLike, check_digest: bool = True) -> Library:
        """Reads a rule file (``check_digest=False`` for a file about to be re-proved anyway).

        Raises:
            TasoError: missing file, not JSON, not a rule file, a newer format version, a malformed rule.
        """
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise TasoError(f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise TasoError(f"{path}: cannot read ({e})") from None
        except json.JSONDecodeError as e:
            raise RuleFormatError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
        return cls.from_json(data, path, check_digest)

    def save(self, path: str | os.PathLike) -> None:
        """Writes the library atomically."""
        path = os.fspath(path)
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(self.dumps())
            os.replace(tmp, path)
        except BaseException as e:  # Ctrl-C included: never leave the temporary file behind
            if os.path.exists(tmp):
                os.unlink(tmp)
            if isinstance(e, OSError):
                raise TasoError(f"{path}: cannot write ({e.strerror or e})") from None
            raise


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        raise RuleFormatError("rules cannot carry bytes parameters (opaque ops are not rule material)")
    return value


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


# ---- human-readable text --------------------------------------------------------------------------

_DEFAULTS_HIDDEN = {"activation": "none", "groups": 1, "dilations": (1, 1), "ceil_mode": 0, "count_include_pad": 0, "dtype": "float32"}


def _render_side(nodes: Iterable[RuleNode], value: str) -> str:
    producers = {}
    for n in nodes:
        for i, o in enumerate(n.outputs):
            producers[o] = (n, i)

    def render(v: str) -> str:
        if v not in producers:
            return v
        n, i = producers[v]
        shown = [f"{k}={_short(val)}" for k, val in sorted(n.params.items()) if _DEFAULTS_HIDDEN.get(k, object()) != val]
        call = f"{n.op}({', '.join([render(x) for x in n.inputs] + shown)})"
        return f"{call}[{i}]" if len(n.outputs) > 1 else call

    return render(value)


def _short(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_short(v) for v in value) + ")"
    if isinstance(value, Mapping) and "dim" in value:
        return f"{value['dim'][0]}.{value['dim'][1]}"
    return str(value)


def format_rule(rule: Rule) -> str:
    """``matmul(matmul(x, w1), w2) ⇒ matmul(x, matmul(w1, w2))``; several outputs are bracketed."""
    src = [_render_side(rule.source, s) for s, _ in rule.outputs]
    tgt = [_render_side(rule.target, t) for _, t in rule.outputs]
    if len(src) == 1:
        return f"{src[0]} ⇒ {tgt[0]}"
    return f"[{', '.join(src)}] ⇒ [{', '.join(tgt)}]"
