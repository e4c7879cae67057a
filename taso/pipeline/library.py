"""The proved rules an optimization uses: the shipped library (or the user's), both directions of each rule that
may run backwards, admitted lazily by the operators a search meets."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..errors import TasoError
from ..rules import SHIPPED_DATA, LibraryFile, Rule, usable_reverse
from ..search import LazyRules, RuleSlot

__all__ = ["DEFAULT_LIBRARY", "ORT_FUSIONS", "RUNTIME_FORMS", "EXPORTER_FORMS", "TARGETS", "load_rules", "for_target", "both_directions"]


DEFAULT_LIBRARY = os.path.join(SHIPPED_DATA, "library.jsonl.gz")
# Proved rules into ONNX Runtime's contrib operators (built by `taso verify specs/rules/ort_fusions.json -o ...`).
ORT_FUSIONS = os.path.join(SHIPPED_DATA, "ort_fusions.jsonl.gz")
# Proved rules between equal standard forms that a runtime's load-time fusions take differently (the residual Add
# before a LayerNormalization as a Sum, which ONNX Runtime does not fuse), for every target:
# `taso verify specs/rules/runtime_forms.json -o ...`.
RUNTIME_FORMS = os.path.join(SHIPPED_DATA, "runtime_forms.jsonl.gz")
# Proved rules from the forms exporters write into ONNX's fused operators (GELU), for every target:
# `python specs/rules/exporter_forms.py`, then `taso verify specs/rules/exporter_forms.json -o ...`.
EXPORTER_FORMS = os.path.join(SHIPPED_DATA, "exporter_forms.jsonl.gz")
# The runtimes a written model may be for: ONNX's standard operators, or ONNX Runtime (its contrib operators too).
TARGETS = ("onnx", "ort")


# The rules of each library read in this process, by digest: a second search (the bench, tests) parses none again.
_LOADED: dict[str, LazyRules] = {}


def load_rules(path: str | None = None, backward_only: bool = False) -> LazyRules:
    """The proved rules of a library file in both directions (default: the library shipped with taso); with
    ``backward_only``, only their reverses (what undoes each rule, and never does it).

    Only rules whose status is "proved" are used: soundness is the product, and an unproved
    candidate never rewrites a model. The file's digest is checked (one hash of its rule
    lines for a version-2 file); rules are parsed, reversed and compiled only when a search
    needs them, and a library already loaded in this process (same digest) is reused with
    the rules its searches compiled.

    Raises:
        TasoError: a missing or malformed file, one with no digest, one with no proved rule,
            or a rule naming an operator taso does not know.
    """
    path = path or DEFAULT_LIBRARY
    if path == DEFAULT_LIBRARY and not os.path.exists(path):
        raise TasoError(f"the shipped rule library is missing ({path}); build it with: python -m taso.verifier.build_library")
    library = LibraryFile.read(path)
    if library.digest is None:
        raise TasoError(f"{path}: has no integrity digest, so nothing says its rules were proved; re-prove them with `taso verify {path} -o NEW.jsonl.gz`")
    loaded = f"{library.digest}|backward" if backward_only else library.digest
    cached = _LOADED.get(loaded)
    if cached is not None:
        return cached
    proved = [k for k, entry in enumerate(library.index) if entry.status == "proved"]
    if not proved:
        raise TasoError(f"{path}: holds no proved rule ({len(library)} rules, none proved); run `taso verify` on it first")
    _require_known_operators(library, proved, path)
    if backward_only:
        rules = _LOADED[loaded] = LazyRules([_directed_slots(library, k)[1] for k in proved])
        return rules
    slots = [slot for k in proved for slot in _directed_slots(library, k)]
    rules = _LOADED[loaded] = LazyRules(slots, library.directed_count(proved) if library.trusted else None)
    return rules


def _require_known_operators(library: LibraryFile, positions: Sequence[int], path: str) -> None:
    """A rule naming an unknown operator is a bad file (or one from a newer taso), not a crash later in the search.

    Checked on the index; a parsed rule must agree with its index entry, so no rule escapes it.
    """
    from ..ops import OPS

    variants = set().union(*(library.index[k].source_ops | library.index[k].target_ops for k in positions))
    if {v.partition("+")[0] for v in variants} <= OPS.keys():
        return
    for k in positions:
        unknown = sorted(library.index[k].op_names - OPS.keys())
        if unknown:
            raise TasoError(f"{path}: rule {library.rule(k).id} uses the unknown operator {unknown[0]!r}; "
                            "was the library made by a newer taso or edited by hand?")


def _directed_slots(library: LibraryFile, position: int) -> tuple[RuleSlot, RuleSlot]:
    """The rule at ``position`` as proved and reversed, each parsed only when a search admits it."""
    entry = library.index[position]

    def forward() -> Rule | None:
        rule = library.rule(position)
        return rule if rule.status == "proved" else None  # the index is a hint: the parsed status decides

    def backward() -> Rule | None:
        return None if forward() is None else library.reverse(position)

    return RuleSlot(entry.source_ops, forward), RuleSlot(entry.target_ops, backward)


def both_directions(rules: Sequence[Rule]) -> list[Rule]:
    """Each rule and its reverse (a proof of source = target proves target = source).

    The reverse is kept only when its new source reads every input (otherwise matching
    could not bind them); duplicates by content (by id) are dropped.
    """
    seen: set[str] = set()
    out: list[Rule] = []
    for rule in rules:
        for candidate in (rule, usable_reverse(rule)):
            if candidate is not None and candidate.id not in seen:
                seen.add(candidate.id)
                out.append(candidate)
    return out


def for_target(rules: Sequence[Rule], target: str) -> Sequence[Rule]:
    """The rules a model written for ``target`` may use: ``rules``, the shipped runtime and exporter forms (standard operators),
    each in both directions, so a form that does not pay is undone like any other rewrite; and the shipped rules into
    ONNX Runtime's contrib operators, for ONNX Runtime (``ort``) both ways, for any ONNX runtime (``onnx``) only
    backwards: a SkipLayerNormalization a file holds may be taken apart into standard operators, never made.

    Raises:
        TasoError: an unknown target.
    """
    if target not in TARGETS:
        raise TasoError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
    extra = [load_rules(RUNTIME_FORMS), load_rules(EXPORTER_FORMS), load_rules(ORT_FUSIONS) if target == "ort" else load_rules(ORT_FUSIONS, backward_only=True)]
    if isinstance(rules, LazyRules):
        return LazyRules(rules.slots + [slot for more in extra for slot in more.slots])
    return [*rules, *(rule for more in extra for rule in more)]
