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

from .verify import Settings, relevant_axioms, verify_rule, verify_rules

__all__ = ["Settings", "verify_rule", "verify_rules", "relevant_axioms"]
