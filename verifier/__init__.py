"""taso.verifier: proves candidate rules with Z3 against the operator specifications.

For each rule: the NumPy pre-check (:mod:`.numeric`) refutes wrong candidates cheaply; the
encoder (:mod:`.encode`) maps both sides to Z3 terms over the specs' uninterpreted
functions, with ground facts about their shapes; the prover (:mod:`.prove`) asserts the
relevant axioms and source ≠ target and expects unsat. :mod:`.verify` orchestrates one rule
or many in parallel; :mod:`.cli` is ``taso verify``; :mod:`.axiom_check` validates the
axioms themselves against the NumPy semantics; :mod:`.build_library` rebuilds the shipped
library.

Soundness rests on one property, tested for every axiom: it holds in the NumPy model where
ill-typed applications are a bottom value (see :mod:`taso.specs.terms`).
"""

from __future__ import annotations

__all__ = ["Settings", "verify_rule", "verify_rules", "relevant_axioms", "DEFAULT_TIMEOUT_S"]

DEFAULT_TIMEOUT_S = 10.0  # Z3's default budget per rule, in seconds


def __getattr__(name: str):
    # NOTE: lazy, so that `taso --help` (which registers `taso verify`) does not load Z3.
    if name in ("Settings", "verify_rule", "verify_rules", "relevant_axioms"):
        from . import verify

        return getattr(verify, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
