"""Pruning: from every pair of equal graphs to the substitutions worth verifying.

Stages, each a pure function of the candidates (TASO, section 3.2, plus one of ours):

* **Input renaming.** Renaming pool tensors of one class consistently (x1 <-> x2), or
  swapping the two sides, gives the same substitution. Each candidate is brought to a
  canonical form — the smallest (output expressions of one side, of the other) over all
  renamings and both orientations — and one candidate per form is kept.
* **Trivial.** Both sides identical (the enumerator's canonical order makes this rare).
* **Common subgraph** (TASO's rule). If both sides contain the same operator over the same
  pool tensors, the substitution is a larger context around a smaller one: drop it. Also
  dropped, as TASO does: pairs whose outputs come from the same operator with all but one
  argument equal pool tensors (the smaller pair of that one argument implies it).
* **Instances.** A candidate that is a specialisation of another kept candidate — two of
  its inputs unified (``x1, x2 -> x1``) — adds nothing once the general one is proved;
  neither does a candidate whose outputs split into independent smaller candidates.
  (Specialisation by substituting a subgraph for an input puts that subgraph on both
  sides, which the common-subgraph stage already drops.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import permutations, product

from .enumerate import GraphSpec
from .graphs import Decoded, Expr
from .pairing import Candidate, Decoder
from .parallel import current_context

__all__ = ["Canonical", "Found", "canonicalize", "first_per_form", "dedupe_renamings", "summarize", "is_trivial", "shares_subgraph",
           "no_common_subgraph", "drop_instances", "unified_forms", "instance_facts", "select_non_instances"]

Form = tuple[tuple[Expr, Expr], ...]


@dataclass(frozen=True, eq=False)
class Canonical:
    """A candidate with its canonical form.

    Attributes:
        form: a 128-bit digest of the canonical form, the sorted (side-one expression,
            side-two expression) output pairs. Two candidates are renamings of each other
            exactly when their digests are equal (up to a digest collision).
        candidate: the candidate.
        rename: pool tensor -> canonical pool tensor, for every tensor the candidate reads.
        swapped: the canonical orientation has ``candidate.b`` first.
        trivial: both sides compute their outputs with the same expressions.
    """

    form: bytes
    candidate: Candidate
    rename: Mapping[int, int]
    swapped: bool
    trivial: bool = False


@dataclass(frozen=True)
class Found:
    """A candidate as its graph specs with its canonical form: :class:`Canonical` in a form that pickles.

    Decoded graphs hold the operators' functions, which do not pickle, so the stages after
    renaming hand these to worker processes or Ray tasks, which decode them (:meth:`decode`).

    Attributes:
        pair: (key, first graph, second graph), as :func:`~taso.generator.pairing.pair_specs` made it.
        form, swapped, trivial: as in :class:`Canonical`.
        rename: the renaming's items, sorted.
    """

    pair: tuple[int, GraphSpec, GraphSpec]
    form: bytes
    rename: tuple[tuple[int, int], ...]
    swapped: bool
    trivial: bool

    def decode(self, decode: Decoder) -> Canonical:
        return Canonical(self.form, decode.candidate(*self.pair), dict(self.rename), self.swapped, self.trivial)


def _renamings(used: Iterable[int], context) -> Iterator[dict[int, int]]:
    """Every bijection of the used pool tensors onto the first tensors of their classes."""
    pool = context.pool
    by_class: dict[int, list[int]] = {}
    for t in sorted(set(used)):
        by_class.setdefault(pool.class_of[t], []).append(t)
    choices = []
    for cls, members in by_class.items():
        start = pool.class_spans[cls][0]
        targets = range(start, start + len(members))
        choices.append([dict(zip(members, perm)) for perm in permutations(targets)])
    for combo in product(*choices):
        merged: dict[int, int] = {}
        for part in combo:
            merged.update(part)
        yield merged


def canonicalize(candidate: Candidate, base: Mapping[int, int] | None = None) -> Canonical:
    """The canonical form of a candidate, after first renaming its inputs by ``base``.

    ``base`` may map two tensors to one (a unification); the canonical renaming then
    applies on top of it.
    """
    a, b = candidate.a, candidate.b
    base = dict(base) if base else {}
    used = {base.get(t, t) for t in a.inputs + b.inputs}
    best = None
    for rename in _renamings(used, a.context):
        full = {t: rename[base.get(t, t)] for t in a.inputs + b.inputs}
        ea, eb = a.output_exprs(full), b.output_exprs(full)
        for swapped, pairs in ((False, zip(ea, eb)), (True, zip(eb, ea))):
            form = tuple(sorted(pairs))
            if best is None or form < best[0]:
                best = (form, full, swapped)
    form, full, swapped = best
    return Canonical(_digest(form), candidate, full, swapped, all(x == y for x, y in form))


def _digest(form: Form) -> bytes:
    return hashlib.blake2b(repr(form).encode(), digest_size=16).digest()


def first_per_form(forms: Iterable[bytes]) -> list[int]:
    """Positions of the first candidate of each canonical form, ordered by form."""
    first: dict[bytes, int] = {}
    for i, form in enumerate(forms):
        first.setdefault(form, i)
    return [first[form] for form in sorted(first)]


def dedupe_renamings(candidates: Iterable[Candidate]) -> list[Canonical]:
    """One candidate per canonical form (the first met), ordered by form, in this process."""
    canonical = [canonicalize(c) for c in candidates]
    return [canonical[i] for i in first_per_form(c.form for c in canonical)]


def summarize(pairs: list[tuple[int, GraphSpec, GraphSpec]]) -> list[tuple[bytes, tuple, bool, bool]]:
    """Canonical forms of candidate pairs, for a worker process: (form, rename items, swapped, trivial).

    The parent keeps one pair per form, as a :class:`Found` (``Found(pair, *summary)``).
    """
    decode = Decoder(current_context())
    out = []
    for key, first, second in pairs:
        c = canonicalize(decode.candidate(key, first, second))
        out.append((c.form, tuple(sorted(c.rename.items())), c.swapped, c.trivial))
    return out


def is_trivial(canonical: Canonical) -> bool:
    """Both sides compute their outputs with the same expressions."""
    return canonical.trivial


def shares_subgraph(candidate: Candidate) -> bool:
    """TASO's common-subgraph rule: a shared operator over pool tensors, or a shared output operator context."""
    a, b = candidate.a, candidate.b
    if a.leaf_ops() & b.leaf_ops():
        return True
    return all(_same_context(a, x, b, y) for x, y in zip(a.outputs, b.outputs))


def no_common_subgraph(pairs: list[tuple[int, GraphSpec, GraphSpec]]) -> list[bool]:
    """For a worker process: whether each pair of specs is clear of :func:`shares_subgraph`."""
    decode = Decoder(current_context())
    return [not shares_subgraph(decode.candidate(*pair)) for pair in pairs]


def _same_context(a: Decoded, x: int, b: Decoded, y: int) -> bool:
    """Outputs x and y come from the same operator, whose arguments differ in at most one place (pool tensors equal elsewhere)."""
    (i, k), (j, m) = a.producer[x], b.producer[y]
    left, right = a.nodes[i], b.nodes[j]
    if left.label != right.label or k != m:
        return False
    differing = sum(1 for p, q in zip(left.args, right.args) if p != q or not a.is_input(p))
    return differing <= 1


def _is_union(candidate: Candidate) -> bool:
    """The outputs split into groups computed by disjoint operators on both sides."""
    groups = list(range(len(candidate.a.outputs)))

    def find(i: int) -> int:
        while groups[i] != i:
            i = groups[i]
        return i

    for components in (candidate.a.components(), candidate.b.components()):
        first: dict[int, int] = {}
        for i, comp in enumerate(components):
            if comp in first:
                groups[find(i)] = find(first[comp])
            else:
                first[comp] = i
    return len({find(i) for i in range(len(groups))}) > 1


def _set_partitions(items: list[int]) -> Iterator[list[list[int]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in _set_partitions(rest):
        yield [[first], *partition]
        for i in range(len(partition)):
            yield [*partition[:i], [first, *partition[i]], *partition[i + 1 :]]


def _unifications(canonical: Canonical) -> Iterator[dict[int, int]]:
    """Maps (candidate pool tensor -> pool tensor) that merge some inputs of one class."""
    pool = canonical.candidate.a.context.pool
    by_class: dict[int, list[int]] = {}
    for t in sorted(set(canonical.rename.values())):
        by_class.setdefault(pool.class_of[t], []).append(t)
    choices = []
    for members in by_class.values():
        merges = []
        for partition in _set_partitions(members):
            merges.append({t: block[0] for block in partition for t in block})
        choices.append(merges)
    for combo in product(*choices):
        merge = {t: u for part in combo for t, u in part.items()}
        if any(t != u for t, u in merge.items()):
            yield {t: merge[c] for t, c in canonical.rename.items()}


def unified_forms(canonical: Canonical) -> tuple[bytes, ...]:
    """The canonical forms of the candidate with some inputs of a class unified, its own form left out, sorted."""
    forms = {canonicalize(canonical.candidate, unify).form for unify in _unifications(canonical)}
    forms.discard(canonical.form)
    return tuple(sorted(forms))


def instance_facts(items: list[Found]) -> list[tuple[tuple[bytes, ...], bool]]:
    """For a worker process: each candidate's :func:`unified_forms`, and whether it is a union of independent candidates.

    :func:`select_non_instances` decides from these and every kept form, in the parent.
    """
    decode = Decoder(current_context())
    facts = []
    for item in items:
        canonical = item.decode(decode)
        facts.append((unified_forms(canonical), _is_union(canonical.candidate)))
    return facts


def select_non_instances(forms: list[bytes], facts: list[tuple[tuple[bytes, ...], bool]]) -> tuple[list[int], int, int]:
    """Which candidates are neither a specialisation of another nor a union, from :func:`instance_facts`.

    Args:
        forms: every kept candidate's canonical form.
        facts: :func:`instance_facts` of the same candidates, in the same order.

    Returns:
        (positions of the remaining candidates, in order; how many forms were specialisations; how many unions).
    """
    known = set(forms)
    special = {form for unified, _ in facts for form in unified if form in known}
    remaining, unions = [], 0
    for i, (form, (_, union)) in enumerate(zip(forms, facts)):
        if form in special:
            continue
        if union:
            unions += 1
            continue
        remaining.append(i)
    return remaining, len(special), unions


def drop_instances(kept: list[Canonical]) -> tuple[list[Canonical], int, int]:
    """Drops specialisations of other kept candidates, and unions of independent candidates, in this process.

    Returns:
        (the remaining candidates, how many were specialisations, how many were unions).
    """
    facts = [(unified_forms(k), _is_union(k.candidate)) for k in kept]
    remaining, special, unions = select_non_instances([k.form for k in kept], facts)
    return [kept[i] for i in remaining], special, unions
