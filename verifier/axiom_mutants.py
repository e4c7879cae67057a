"""Axiom mutants: the adversarial validation must catch a wrong axiom, or it shows nothing.

Each axiom is mutated in the ways a specification goes wrong: a guard dropped, the operands
of an application on the right side swapped, an integer parameter on the right side moved
by one (an axis, a stride, a pad). A mutant the fuzzer cannot tell from the real axiom is
either an equivalent mutant (the guard was implied by the others, the op commutes) or a
hole in the validation: the survivors of a quick and a strong round are printed for review,
and :data:`EQUIVALENT` keeps the reviewed ones with the reason.

    python -m taso.verifier.axiom_mutants
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from taso.specs import AXIOMS, Axiom
from taso.specs.norm import EPSILONS
from taso.specs.terms import App, Lit

from taso.ops import COMMUTATIVE

from .axiom_fuzz import fuzz_axiom

__all__ = ["EQUIVALENT", "mutants", "surviving", "main"]


def _edits(term: Any, path: tuple = ()) -> Iterator[tuple[str, Any]]:
    """(description, mutated term) for every swap of two distinct operands and every integer literal moved by one."""
    if not isinstance(term, App):
        return
    if len(term.args) >= 2 and term.args[0] != term.args[1] and term.op not in COMMUTATIVE:  # swapping add's operands changes nothing
        swapped = (term.args[1], term.args[0], *term.args[2:])
        yield f"swap operands of {term.op}{list(path)}", replace(term, args=swapped)
    for k, (name, value) in enumerate(term.params):
        if isinstance(value, int) and not isinstance(value, bool) or isinstance(value, Lit) and isinstance(value.value, int):
            v = value.value if isinstance(value, Lit) else value
            params = list(term.params)
            params[k] = (name, v + 1)
            yield f"{term.op}{list(path)}.{name} {v} -> {v + 1}", replace(term, params=tuple(params))
    for i, arg in enumerate(term.args):
        for text, new in _edits(arg, (*path, i)):
            args = list(term.args)
            args[i] = new
            yield text, replace(term, args=tuple(args))


def mutants(axiom: Axiom) -> Iterator[tuple[str, Axiom]]:
    """Every single-edit mutant of an axiom, with what was changed."""
    for i, guard in enumerate(axiom.when):
        yield f"drop guard {guard}", replace(axiom, name=f"{axiom.name}~drop{i}", when=axiom.when[:i] + axiom.when[i + 1:])
    for k, (text, rhs) in enumerate(_edits(axiom.rhs)):
        if rhs != axiom.rhs:
            yield f"rhs: {text}", replace(axiom, name=f"{axiom.name}~edit{k}", rhs=rhs)


_RANK_IMPLIED = "the guards on its dimensions (or the op's own typing) already force that rank"
_BATCHED = "the op works per sample and per channel, so broadcasting along that axis commutes with it"
_NEG_AXIS = "rank(x) - ax == rank(y) - bx with the other axis non-negative forces it (a negative dim() is -1 and equals no size)"
_BROADCAST_ROWS = "a row broadcast through a sum stays a broadcast row of the products, which the sum of products broadcasts the same way"
_EITHER_RANK = "with the other operand a matrix, a vector or batched operand leaves both sides ill typed"
_RANK_5 = ("not equivalent, but only an operand of rank 5 breaks it, beyond the fuzzer's ranks (0-4): "
           "a kernel scaled by a rank-5 tensor is no kernel, and the guard stays for models that hold one")
_POOLED_RANK_5 = ("not equivalent, but only operands of rank 5 break it, beyond the fuzzer's ranks (0-4): their sizes past "
                  "axis 3 are not guarded, and pooling hides them from the concatenation on the right")
_MASK_RANK_5 = ("not equivalent, but only a mask of rank 5 breaks it, beyond the fuzzer's ranks (0-4): one of "
                "[1, 1, 1, 1, 1] passes the guards on its first four sizes, and the sum on the right broadcasts the scores "
                "to rank 5 where attention refuses the mask")

_SQUARED = "the difference it swaps is squared: (m - x)^2 = (x - m)^2 (the variance in a layer norm's definition)"


def _squared_differences(term: Any, path: tuple = ()) -> Iterator[tuple]:
    """The paths of the subtractions that ``term`` squares, pow(sub(a, b), 2): swapping their operands changes nothing."""
    if not isinstance(term, App):
        return
    if term.op == "pow" and isinstance(term.args[0], App) and term.args[0].op == "sub":
        yield (*path, 0)
    for i, arg in enumerate(term.args):
        yield from _squared_differences(arg, (*path, i))


# Survivors reviewed by hand: (axiom, mutation) -> why the mutant states the same equation (or, for
# _RANK_5, why the fuzzer cannot reach the counterexample that keeps the guard).
EQUIVALENT: dict[tuple[str, str], str] = {
    ("transpose-matmul", "drop guard rank(x) == 2"): _EITHER_RANK,
    ("transpose-matmul", "drop guard rank(y) == 2"): _EITHER_RANK,
    ("add-concat-seams", "drop guard ax >= 0"): _NEG_AXIS,
    ("add-concat-seams", "drop guard bx >= 0"): _NEG_AXIS,
    ("mul-concat-seams", "drop guard ax >= 0"): _NEG_AXIS,
    ("mul-concat-seams", "drop guard bx >= 0"): _NEG_AXIS,
    ("avg_pool2d-add", "drop guard rank(x) == 4"): _RANK_IMPLIED,
    ("avg_pool2d-add", "drop guard rank(y) == 4"): _RANK_IMPLIED,
    ("avg_pool2d-add", "drop guard dim(x, 0) == dim(y, 0)"): _BATCHED,
    ("avg_pool2d-add", "drop guard dim(x, 1) == dim(y, 1)"): _BATCHED,
    ("mul-concat-4d", "drop guard rank(x) == 4"): _RANK_IMPLIED,
    ("mul-concat-4d", "drop guard rank(y) == 4"): _RANK_IMPLIED,
    ("mul-concat-4d", "drop guard rank(z) == 4"): _RANK_IMPLIED,
    ("mul-concat-4d", "drop guard rank(w) == 4"): _RANK_IMPLIED,
    ("conv2d-pool_kernel", "drop guard rank(x) == 4"): _RANK_IMPLIED,
    ("matmul-concat-rows-3d", "drop guard rank(x) == 3"): _RANK_IMPLIED,
    ("matmul-concat-rows-3d", "drop guard rank(y) == 3"): _RANK_IMPLIED,
    ("transpose-matmul-3d", "drop guard rank(x) == 3"): _RANK_IMPLIED,
    ("matmul-add-left-3d", "drop guard dim(x, 0) == dim(y, 0)"): _BATCHED,
    ("matmul-add-left-3d", "drop guard dim(x, 1) == dim(y, 1)"): _BROADCAST_ROWS,
    **{("mul-concat-3d", f"drop guard rank({v}) == 3"): _RANK_IMPLIED for v in "xyzw"},
    ("conv2d-add-inputs", "drop guard rank(x) == 4"): _RANK_IMPLIED,
    ("conv2d-add-inputs", "drop guard rank(y) == 4"): _RANK_IMPLIED,
    ("conv2d-add-inputs", "drop guard dim(x, 0) == dim(y, 0)"): _BATCHED,
    ("global_avg_pool-concat", "drop guard rank(x) == 4"): _POOLED_RANK_5,
    **{(f"bn_kernel-mul[{eps:g}]", "drop guard rank(v) == 4"): _RANK_5 for eps in EPSILONS},
    **{(f"bn_kernel-smul[{eps:g}]", "drop guard rank(s) <= rank(w)"): _RANK_5 for eps in EPSILONS},
    **{(a.name, "drop guard rank(m) == 4"): _MASK_RANK_5 for a in AXIOMS
       if a.name.startswith(("attention-definition-heads-mask", "attention-definition-heads-sdpa-mask")) and "mask-2d" not in a.name},
    **{(a.name, f"rhs: swap operands of sub{list(path)}"): _SQUARED for a in AXIOMS for path in _squared_differences(a.rhs)},
}


def surviving(axioms: Sequence[Axiom] = AXIOMS, count: int = 300, patience: int = 10) -> list[tuple[str, str]]:
    """The (axiom, mutation) pairs that ``count`` guarded adversarial valuations do not catch."""
    out = []
    for axiom in axioms:
        for text, mutant in mutants(axiom):
            if fuzz_axiom(mutant, count=count, seed=1, patience=patience, first_failure=True).ok:
                out.append((axiom.name, text))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Two tiers: every mutant against a quick fuzz, the survivors against a five times stronger one."""
    start = time.perf_counter()
    by_name = {a.name: a for a in AXIOMS}
    total = sum(1 for a in AXIOMS for _ in mutants(a))
    quick = surviving()
    strong = []
    for name, text in quick:
        mutant = dict(mutants(by_name[name]))[text]
        if fuzz_axiom(mutant, count=1500, seed=2, patience=20, first_failure=True).ok:
            strong.append((name, text))
    for name, text in strong:
        print(f"survives: {name}: {text}" + (f"  (reviewed: {EQUIVALENT[name, text]})" if (name, text) in EQUIVALENT else ""))
    print(f"{total} mutants of {len(AXIOMS)} axioms: {total - len(quick)} caught by 300 guarded valuations each, "
          f"{len(quick) - len(strong)} more by 1,500; {len(strong)} survive both (equivalent mutants: a guard implied by the others); "
          f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
