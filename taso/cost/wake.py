"""What a run pays to wake its sleeping workers: once, at the run's first kernel split over the threads.

taso's sessions let the workers spin between the kernels of a run and stop them when it returns
(``taso.measure.timing.session_options``). So each run starts with the workers asleep, and its first kernel that ONNX Runtime
splits over them waits for one to wake: 12-15 us on a 2-vCPU cloud machine, where the kernel itself takes 10-11 us.
A graph pays it once per run if any of its kernels splits, and not at all otherwise. At 2 threads the per-step
products of an unrolled GRU h128 run on one thread each; merging their input projections into one ``[16, 128] x
[128, 384]`` product, which splits, made each run of a 220 us graph pay it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..onnx.probes import negation_after, split_product
from .copies import WallReference, per_round_differences, spin_up_feeds, wall_clock_marginal

__all__ = ["SPLITS", "splits_over_threads", "wake_seconds"]

SPLITS = "@splits-over-threads"  # a table entry beside a node's price: 1.0 when its kernel splits over the threads
_INPUT = "__taso_wake"


def splits_over_threads(events: list[dict], own: Callable[[str], bool]) -> bool:
    """Whether a kernel of the profiled node (``own`` of its profile event's name) handed work to the thread pool: ONNX
    Runtime's profiler lists the blocks a kernel split its work into, none for a kernel that ran on its thread alone."""
    for event in events:
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time") or not own(event["name"]):
            continue
        stats = event.get("args", {}).get("thread_scheduling_stats")
        if isinstance(stats, dict) and stats.get("main_thread", {}).get("block_size"):
            return True
    return False


def wake_seconds(threads: int, reference: WallReference | None = None) -> float:
    """What a run's first split kernel costs beyond its price inside a running graph: a run of a split product less a
    run of one Neg on the same input (what that kernel adds to a run), less what one more copy of it adds after it."""
    product = split_product(_INPUT)
    nothing = negation_after(product)
    feeds = spin_up_feeds({}, _INPUT)
    first = float(np.median(per_round_differences(nothing, product, 1, feeds, threads, None, reference, spin_up=False)))
    in_flight, _ = wall_clock_marginal(product.SerializeToString(), feeds, threads, None, reference)
    return max(first - in_flight, 0.0)


