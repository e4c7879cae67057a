"""ONNX Runtime's fused kernels against the standard operators they replace, on this CPU (issue 56).

For each size, two one-node-pattern models are timed side by side in alternating rounds (1 thread, ENABLE_ALL):

* ``Add`` then ``LayerNormalization`` with the sum also an output (the residual the next block reads, so ONNX Runtime's
  own SkipLayerNormFusion leaves it alone), against ``com.microsoft.SkipLayerNormalization`` writing that sum too;
* the plain pair without the sum output, which ONNX Runtime fuses into SkipLayerNormalization at load, run with that
  fusion (SkipLayerNormFusion) disabled against run as ONNX Runtime runs it.

* a bias Add then an exact GELU as exporters write it (x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5), which ONNX
  Runtime makes one BiasGelu at load, run with that fusion (BiasGeluFusion) disabled (an Add and a Gelu) against
  run as ONNX Runtime runs it;
* a tanh GELU as transformers' GPT-2 writes it (8 nodes), which ONNX Runtime makes one FastGelu at load, against
  ONNX's Gelu (opset 20, approximate="tanh"), which taso's proved gelu-tanh rules write, and against the lone Tanh
  the lone Tanh (each followed by a Neg: FastGeluFusion does not take a GELU whose result is a graph output).

It prints plain time / fused time per case (above 1: the fused kernel is faster), the median of the rounds. This is
what taso's measured costs see, and why `taso optimize --target ort` writes SkipLayerNormalization only where a
measurement says it pays, and why taso writes a residual Add as a Sum (which ONNX Runtime's fusion does not take)
where it would otherwise run as a SkipLayerNormalization.

Run: python benchmarks/costs/bench_fused_kernels.py [--sizes 1x64x256 1x128x768] [--rounds 9] [--runs 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def _session(fused: bool, with_sum: bool, hidden: int, disabled: tuple[str, ...] = ()) -> ort.InferenceSession:
    weights = [numpy_helper.from_array(np.ones(hidden, np.float32), "g"), numpy_helper.from_array(np.zeros(hidden, np.float32), "b")]
    outputs = ["y", "r"] if with_sum else ["y"]
    if fused:
        nodes = [helper.make_node("SkipLayerNormalization", ["x", "s", "g", "b"], ["y", "", "", "r"] if with_sum else ["y"],
                                  domain="com.microsoft", epsilon=1e-5)]
    else:
        nodes = [helper.make_node("Add", ["x", "s"], ["r"]), helper.make_node("LayerNormalization", ["r", "g", "b"], ["y"], axis=-1, epsilon=1e-5)]
    typed = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", hidden]) for n in ("x", "s", *outputs)]
    graph = helper.make_graph(nodes, "residual_norm", typed[:2], typed[2:], initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled))


def _bias_gelu_session(hidden: int, disabled: tuple[str, ...] = ()) -> ort.InferenceSession:
    """A bias Add and an exact GELU in the exporters' five nodes, which ONNX Runtime fuses into one BiasGelu."""
    constants = {"bias": np.linspace(-1, 1, hidden, dtype=np.float32), "root2": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    weights = [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()]
    nodes = [helper.make_node("Add", ["x", "bias"], ["h"]), helper.make_node("Div", ["h", "root2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"]), helper.make_node("Mul", ["h", "p"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    typed = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", hidden]) for n in ("x", "y")]
    model = helper.make_model(helper.make_graph(nodes, "bias_gelu", typed[:1], typed[1:], initializer=weights), opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled))


def _tanh_gelu_session(hidden: int, form: str) -> ort.InferenceSession:
    """``form``: "exported" (GPT-2's eight nodes), "gelu" (ONNX's Gelu-20) or "tanh" (the Tanh alone)."""
    constants = {"three": 3.0, "c": 0.044715, "k": float(np.sqrt(2 / np.pi)), "one": 1.0, "half": 0.5}
    weights = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in constants.items()]
    if form == "exported":
        nodes = [helper.make_node("Pow", ["x", "three"], ["p"]), helper.make_node("Mul", ["p", "c"], ["q"]), helper.make_node("Add", ["x", "q"], ["r"]),
                 helper.make_node("Mul", ["r", "k"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]), helper.make_node("Add", ["t", "one"], ["u"]),
                 helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["h", "u"], ["g"])]
    elif form == "gelu":
        nodes, weights = [helper.make_node("Gelu", ["x"], ["g"], approximate="tanh")], []
    else:
        nodes, weights = [helper.make_node("Tanh", ["x"], ["g"])], []
    # A Neg after it: FastGeluFusion leaves a GELU whose result is a graph output alone (GeluFusion does not).
    nodes.append(helper.make_node("Neg", ["g"], ["y"]))
    typed = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "seq", hidden]) for n in ("x", "y")]
    model = helper.make_model(helper.make_graph(nodes, "tanh_gelu", typed[:1], typed[1:], initializer=weights), opset_imports=[helper.make_opsetid("", 20)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _median_ratio(plain: ort.InferenceSession, fused: ort.InferenceSession, feeds: dict, rounds: int, runs: int, check: bool = True) -> str:
    """plain / fused time, the median of ``rounds`` alternating rounds, once their outputs agree (``check``)."""
    for a, b in zip(plain.run(None, feeds), fused.run(None, feeds)):
        if check:
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    return f"{statistics.median(_seconds(plain, feeds, runs) / _seconds(fused, feeds, runs) for _ in range(rounds)):.2f}x"


def _seconds(session: ort.InferenceSession, feeds: dict, runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        session.run(None, feeds)
    return (time.perf_counter() - start) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["1x64x256", "1x128x768", "8x128x768"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    print(f"onnxruntime {ort.__version__}, 1 thread; plain / fused time, median of {args.rounds} alternating rounds\n")
    print("| batch x seq x hidden | with the sum output: plain / SkipLayerNormalization | without: unfused / ONNX Runtime's own fusion |")
    print("|---|---|---|")
    rng = np.random.default_rng(0)
    for size in args.sizes:
        batch, seq, hidden = (int(d) for d in size.split("x"))
        feeds = {n: rng.standard_normal((batch, seq, hidden)).astype(np.float32) for n in ("x", "s")}
        with_sum = _median_ratio(_session(False, True, hidden), _session(True, True, hidden), feeds, args.rounds, args.runs)
        without = _median_ratio(_session(False, False, hidden, ("SkipLayerNormFusion",)), _session(False, False, hidden), feeds, args.rounds, args.runs)
        print(f"| {size} | {with_sum} | {without} |", flush=True)
    print("\n| batch x seq x 4 hidden | bias Add + GELU: BiasGeluFusion off / ONNX Runtime's BiasGelu |")
    print("|---|---|")
    for size in args.sizes:
        batch, seq, hidden = (int(d) for d in size.split("x"))
        feeds = {"x": rng.standard_normal((batch, seq, 4 * hidden)).astype(np.float32)}
        ratio = _median_ratio(_bias_gelu_session(4 * hidden, ("BiasGeluFusion",)), _bias_gelu_session(4 * hidden), feeds, args.rounds, args.runs)
        print(f"| {batch}x{seq}x{4 * hidden} | {ratio} |", flush=True)
    print("\n| batch x seq x 4 hidden | GPT-2's tanh GELU (FastGelu at load) / ONNX's Gelu | FastGelu at load / the Tanh alone |")
    print("|---|---|---|")
    for size in args.sizes:
        batch, seq, hidden = (int(d) for d in size.split("x"))
        feeds = {"x": rng.standard_normal((batch, seq, 4 * hidden)).astype(np.float32)}
        exported = _tanh_gelu_session(4 * hidden, "exported")
        ratio = _median_ratio(exported, _tanh_gelu_session(4 * hidden, "gelu"), feeds, args.rounds, args.runs)
        alone = _median_ratio(exported, _tanh_gelu_session(4 * hidden, "tanh"), feeds, args.rounds, args.runs, check=False)
        print(f"| {batch}x{seq}x{4 * hidden} | {ratio} | {alone} |", flush=True)


if __name__ == "__main__":
    main()
