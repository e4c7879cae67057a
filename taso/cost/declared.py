"""What a shape the file declares costs a value on ONNX Runtime's CPU, by the wall clock.

ONNX Runtime plans a value it can size before the run into a reused buffer, and allocates one it cannot size from the
memory pattern of the first run; the two differ by a fraction of a microsecond a value (why: :mod:`taso.onnx.sizing`).
Every price in the cost table is measured on models whose shapes ONNX Runtime knows, so a graph's price is what it
costs with its shapes known. What differs between a file and taso's re-export of it is the values only the file's
``value_info`` sizes: their count (:func:`taso.onnx.sizing.declared_only`) times the figure measured here.
"""

from __future__ import annotations

import numpy as np

from ..onnx.probes import STATE_WIDTH, state_chain
from .copies import WallReference, per_round_differences

__all__ = ["STATE_CHAIN_VALUES", "state_chain", "declared_shape_seconds"]

STATE_CHAIN_VALUES = 400  # Add and Tanh in turns: 14 us of difference in 150 us, a round's noise well under it




def declared_shape_seconds(threads: int, reference: WallReference | None = None) -> float:
    """What declaring a value's shape adds to it in a running session (seconds; negative where planned reuse is the
    faster): the declared chain against the same chain undeclared, per value, the median over interleaved rounds."""
    feeds = {"x": np.random.default_rng(0).standard_normal((1, STATE_WIDTH)).astype(np.float32)}
    undeclared, declared = (state_chain(STATE_CHAIN_VALUES, d) for d in (False, True))
    return float(np.median(per_round_differences(undeclared, declared, STATE_CHAIN_VALUES, feeds, threads, None, reference)))
