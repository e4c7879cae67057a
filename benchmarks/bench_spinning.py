"""Why taso's sessions do not spin with more than one thread: one model timed against itself, side by side.

ONNX Runtime's intra-op workers spin between operators by default, keeping their cores busy after a
run. taso decides between two graphs by timing them interleaved (``taso.timing``), and on a small
machine the spinning of one session's workers lands in the next measurement. Here the same model is
opened twice and timed A, B, A, B, ... (each the fastest of >= 3 runs and 10 ms), with spinning and
without; the ratio A/B should be 1. Printed per setting: the median and the range of A/B over the
rounds, and the latency without spinning over the latency with it (what not spinning costs).

Run: python benchmarks/bench_spinning.py [--model nasrnn] [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort

from taso.models import build
from taso.timing import session_options


def _session(model: bytes, threads: int, spinning: bool, feeds) -> ort.InferenceSession:
    """taso's session options (:func:`taso.timing.session_options`), spinning as asked."""
    options = ort.SessionOptions()
    reference = session_options(threads)
    options.intra_op_num_threads, options.inter_op_num_threads = reference.intra_op_num_threads, reference.inter_op_num_threads
    options.execution_mode, options.graph_optimization_level = reference.execution_mode, reference.graph_optimization_level
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, feeds)
    return session


def _fastest(session: ort.InferenceSession, feeds) -> float:
    best, started, runs = float("inf"), time.perf_counter(), 0
    while runs < 3 or time.perf_counter() - started < 0.01:
        t = time.perf_counter()
        session.run(None, feeds)
        best = min(best, time.perf_counter() - t)
        runs += 1
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="nasrnn", help="a zoo model (taso models list)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    model = build(args.model).SerializeToString()
    probe = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32) for i in probe.get_inputs()}
    latency = {}
    print(f"{args.model}, {args.threads} threads, {args.rounds} rounds: the same model timed against itself (A/B should be 1.00)")
    for spinning in (True, False):
        a, b = _session(model, args.threads, spinning, feeds), _session(model, args.threads, spinning, feeds)
        ratios, times = [], []
        for _ in range(args.rounds):
            ta, tb = _fastest(a, feeds), _fastest(b, feeds)
            ratios.append(ta / tb)
            times += [ta, tb]
        latency[spinning] = statistics.median(times)
        print(f"  spinning {'on ' if spinning else 'off'}: A/B median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")
    print(f"  latency without spinning / with: {latency[False] / latency[True]:.2f}")


if __name__ == "__main__":
    main()
