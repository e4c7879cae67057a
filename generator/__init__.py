"""taso.generator: discover graph substitutions by enumerating small operator graphs.

TASO's first half (Jia et al., SOSP 2019, section 3). The stages, one module each:

* :mod:`~taso.generator.pool` — the input tensors, by shape class;
* :mod:`~taso.generator.opset` — the operator variants and argument policies;
* :mod:`~taso.generator.fingerprint` — exact (modular) evaluation and hashing;
* :mod:`~taso.generator.enumerate` — depth-first enumeration of graphs;
* :mod:`~taso.generator.parallel` — worker processes, and the passes over all graphs;
* :mod:`~taso.generator.graphs` — enumerated graphs as expressions;
* :mod:`~taso.generator.pairing` — equal fingerprints to candidate pairs, float re-check;
* :mod:`~taso.generator.prune` — input renaming, common subgraphs, instances;
* :mod:`~taso.generator.generalize` — shape expressions and constraints;
* :mod:`~taso.generator.emit` — candidates to :class:`taso.rules.Rule`;
* :mod:`~taso.generator.pipeline` — all of it, with counts; :mod:`~taso.cli.generate` — ``taso generate``.

Example::

    from taso.generator import Settings, generate, parse_ops
    result = generate(Settings(max_ops=2, ops=parse_ops("matmul,concat,split")))
    result.library.save("candidates.json")
"""

from .opset import DEFAULT_OPS, GENERATOR_OPS, TASO_OPS, parse_ops
from .pipeline import STAGES, Progress, Result, generate
from .pool import DEFAULT_CLASSES, ShapeClass
from .settings import Settings

__all__ = ["generate", "Settings", "Result", "Progress", "STAGES", "parse_ops", "ShapeClass",
           "DEFAULT_CLASSES", "DEFAULT_OPS", "TASO_OPS", "GENERATOR_OPS"]
