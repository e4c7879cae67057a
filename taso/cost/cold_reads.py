"""What a weight costs when it is read cold: a node's model run right after an eviction (products over 4 MB weights that
push its weight out of the caches) against the same node warm, the difference its penalty.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..onnx.probes import COLD, EVICT, EVICT_ROWS, after_eviction
from .in_place import InPlaceWeights
from .profiling import FULL_SECONDS, WARM_UP_RUNS, profiled_runs, role_times

__all__ = ["profile_cold_penalty"]








# A read penalty's cost-table name: "cold-after" and "evicted-each-run" named the penalties two earlier probes measured
# (a fraction of what a graph pays), "after-products" this probe's on one pair of sessions; a new name so that none of
# them is read again, while the tables' warm prices stay.
_PENALTY_KEY = "after-products-pairs"


_PENALTY_PAIRS = 3  # pairs of sessions a penalty is the median of


# A penalty measured on copies of the node cycling over weights of its own (CacheSizes.cycle of them): a name of its own.
_CYCLE_PENALTY_KEY = "after-own-weights"


def profile_cold_penalty(model: bytes, feeds: dict, threads: int, evict_bytes: int, min_total: float = FULL_SECONDS,
                         in_place: InPlaceWeights | None = None) -> list[float]:
    """Per run, how much longer the kernels of ``model`` take when products over ``evict_bytes`` of weights of their
    own run before them in every run than when none do: in one session, against the median in another.

    The eviction is what a graph does between two reads of a weight: other products read their (pre-packed) weights,
    run after run. Two probes measured before it read far less than a graph pays: a copy run right after an evicting
    read of a buffer against a copy right after it (the cache kept neither the weight just read nor the one before:
    an 8 MB weight's product took 970 us cold and 870 us right after), and then runs that each read the buffer
    (18-70 us where a graph among 16-32 MB of others paid 80-460 us, on a quiet machine). With products it measured
    70-380 us there (docs/measured.md, session 22). Empty when the model has no computed input to order the eviction
    before its kernels by.
    """
    proto = onnx.load_model_from_string(model)
    evicting, resting = after_eviction(proto, evict_bytes), after_eviction(proto, 0)
    if evicting is None or resting is None:
        return []
    feeds = {**feeds, f"{EVICT}_x": np.ones((1, EVICT_ROWS), np.float32)}
    rested, evicted = (role_times(profiled_runs(m, feeds, threads, min_total / 2, min_runs=15, max_runs=40, in_place=in_place),
                                   WARM_UP_RUNS, roles=(COLD,))[COLD] for m in (resting, evicting))
    if not rested or not evicted:
        return []
    baseline = float(np.median(rested))
    return [seconds - baseline for seconds in evicted]














