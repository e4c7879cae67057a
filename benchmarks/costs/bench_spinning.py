"""Why taso's workers spin within a run only, with more than one thread: one model timed against itself, side by side.

ONNX Runtime's intra-op workers spin between operators by default and go on spinning after a run. taso
decides between two graphs by timing them interleaved (``taso.measure.timing``), and on a small machine the
spinning of one session's workers lands in the next measurement. Workers that never spin must be woken
for every kernel split over them. taso's sessions spin within a run and stop when it returns
(``session.force_spinning_stop``). Here the same model is opened twice and timed A, B, A, B, ... (each the
fastest of >= 3 runs and 10 ms) in each setting; A/B should be 1. Printed per setting: A/B's median,
10th-90th percentile and range over the rounds, and the latency over that of one session alone with ONNX
Runtime's default (a deployment that runs one model back to back).

Run: python benchmarks/costs/bench_spinning.py [--model chain|nasrnn|...] [--threads 2] [--rounds 100]
(``chain``: 16 products ``[1, 256] x [256, 768]``, an unrolled cell's per-step product, each sliced back to 256)
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from taso.models import build

from taso.measure.timing import fastest_run, session_options

SETTINGS = {  # name: (allow_spinning, force_spinning_stop)
    "spinning always (ONNX Runtime's default)": ("1", "0"),
    "spinning never": ("0", "0"),
    "spinning within runs (taso)": ("1", "1"),
}


def product_chain(steps: int = 16, hidden: int = 256, gates: int = 768) -> bytes:
    """``steps`` products by one [hidden, gates] weight, each sliced back to [1, hidden] for the next."""
    weight = numpy_helper.from_array((np.random.default_rng(0).standard_normal((hidden, gates)) * 0.01).astype(np.float32), "W")
    bounds = [numpy_helper.from_array(np.array([v]), n) for n, v in (("lo", 0), ("hi", hidden), ("axis", 1))]
    nodes, previous = [], "x"
    for i in range(steps):
        nodes += [helper.make_node("MatMul", [previous, "W"], [f"m{i}"]), helper.make_node("Slice", [f"m{i}", "lo", "hi", "axis"], [f"y{i}"])]
        previous = f"y{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, hidden])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, hidden])], [weight, *bounds])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _session(model: bytes, threads: int, spinning: str, stop: str, feeds) -> ort.InferenceSession:
    """taso's session options (:func:`taso.measure.timing.session_options`), spinning as asked."""
    options = session_options(1)  # one thread's carry no spinning entries to overwrite
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
    options.add_session_config_entry("session.force_spinning_stop", stop)
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, feeds)
    return session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="chain", help="chain, or a zoo model (taso models list)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    model = product_chain() if args.model == "chain" else build(args.model).SerializeToString()
    probe = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32) for i in probe.get_inputs()}
    lone = _session(model, args.threads, "1", "0", feeds)  # a deployment: one session, ONNX Runtime's default
    deployed = statistics.median(fastest_run(lone, feeds) for _ in range(args.rounds))
    del lone
    print(f"{args.model}, {args.threads} threads, {args.rounds} rounds: the same model timed against itself (A/B should be 1.00); "
          f"latency over a lone session's with ONNX Runtime's default ({deployed * 1e6:.0f} us)")
    for name, (spinning, stop) in SETTINGS.items():
        a, b = (_session(model, args.threads, spinning, stop, feeds) for _ in range(2))
        ratios, times = [], []
        for _ in range(args.rounds):
            ta, tb = fastest_run(a, feeds), fastest_run(b, feeds)
            ratios.append(ta / tb)
            times += [ta, tb]
        low, high = np.percentile(ratios, [10, 90])
        print(f"  {name:42s} A/B median {statistics.median(ratios):.2f}, 10th-90th percentile {low:.2f}-{high:.2f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}; latency {statistics.median(times) / deployed:.2f}")


if __name__ == "__main__":
    main()
