"""ONNX Runtime's attention kernels against attention as the exporters write it, on this CPU (issue 56, the lead for
attention rules).

Per size (batch x seq x heads x head dim), three models over the same Q, K, V ``[batch, seq, heads * head_dim]`` and an
additive padding mask, timed side by side in alternating rounds (1 thread, ENABLE_ALL):

* written out, as torch's scaled_dot_product_attention exports (both exporters): each of Q, K, V reshaped to heads and
  transposed (K to ``[b, h, d, s]``), Q and K^T each scaled by ``d ** -0.25``, MatMul, + mask, Softmax, MatMul with V,
  transposed and reshaped back;
* ``com.microsoft.MultiHeadAttention`` (the mask as an attention bias);
* ONNX's ``Attention`` (opset 23).

It checks each against the written-out form, then prints written-out time / kernel time (above 1: the kernel is
faster), the median of the rounds. ``--no-mask`` drops the mask (ViT). ONNX's Attention needs the model at opset 23:
a rule into it needs the file's opset raised (taso writes at the model's own opset today).

Run: python benchmarks/costs/bench_attention_kernels.py [--sizes 1x128x12x64 1x64x12x64] [--rounds 15] [--runs 20] [--no-mask]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def _value(name: str, shape) -> object:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _written_out(b: int, s: int, h: int, d: int, masked: bool):
    weights = [numpy_helper.from_array(np.array(d ** -0.25, np.float32), "c"), numpy_helper.from_array(np.array([b, s, h, d], np.int64), "heads"),
               numpy_helper.from_array(np.array([b, s, h * d], np.int64), "merged")]
    nodes = [helper.make_node("Reshape", [n, "heads"], [n + "4"]) for n in "qkv"]
    nodes += [helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]), helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
              helper.make_node("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]), helper.make_node("Mul", ["qt", "c"], ["qs"]),
              helper.make_node("Mul", ["kt", "c"], ["ks"]), helper.make_node("MatMul", ["qs", "ks"], ["scores"])]
    if masked:
        nodes.append(helper.make_node("Add", ["scores", "mask"], ["masked"]))
    nodes += [helper.make_node("Softmax", ["masked" if masked else "scores"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "vt"], ["o4"]),
              helper.make_node("Transpose", ["o4"], ["o3"], perm=[0, 2, 1, 3]), helper.make_node("Reshape", ["o3", "merged"], ["y"])]
    inputs = [_value(n, [b, s, h * d]) for n in "qkv"] + ([_value("mask", [b, 1, 1, s])] if masked else [])
    return helper.make_model(helper.make_graph(nodes, "written_out", inputs, [_value("y", None)], weights), opset_imports=[helper.make_opsetid("", 20)])


def _multi_head(b: int, s: int, h: int, d: int, masked: bool):
    inputs = [_value(n, [b, s, h * d]) for n in "qkv"] + ([_value("bias", [b, h, s, s])] if masked else [])
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "bias"] if masked else ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=h)
    return helper.make_model(helper.make_graph([node], "mha", inputs, [_value("y", None)]),
                             opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)])


def _attention_23(b: int, s: int, h: int, d: int, masked: bool):
    inputs = [_value(n, [b, s, h * d]) for n in "qkv"] + ([_value("full_mask", [b, 1, s, s])] if masked else [])
    node = helper.make_node("Attention", ["q", "k", "v", "full_mask"] if masked else ["q", "k", "v"], ["y"], q_num_heads=h, kv_num_heads=h)
    return helper.make_model(helper.make_graph([node], "attention", inputs, [_value("y", None)]), opset_imports=[helper.make_opsetid("", 23)])


def _attention_23_heads(b: int, s: int, h: int, d: int, masked: bool):
    """ONNX's Attention over the heads ``[b, h, s, d]``: the written-out form with its scores, scale, mask and softmax
    as one node, its reshapes and transposes kept (what a rule from the core of the written-out form makes)."""
    weights = [numpy_helper.from_array(np.array([b, s, h, d], np.int64), "heads"), numpy_helper.from_array(np.array([b, s, h * d], np.int64), "merged")]
    nodes = [helper.make_node("Reshape", [n, "heads"], [n + "4"]) for n in "qkv"]
    nodes += [helper.make_node("Transpose", [n + "4"], [n + "t"], perm=[0, 2, 1, 3]) for n in "qkv"]
    nodes += [helper.make_node("Attention", ["qt", "kt", "vt", "mask"] if masked else ["qt", "kt", "vt"], ["o4"]),
              helper.make_node("Transpose", ["o4"], ["o3"], perm=[0, 2, 1, 3]), helper.make_node("Reshape", ["o3", "merged"], ["y"])]
    inputs = [_value(n, [b, s, h * d]) for n in "qkv"] + ([_value("mask", [b, 1, s, s])] if masked else [])
    return helper.make_model(helper.make_graph(nodes, "attention_heads", inputs, [_value("y", None)], weights), opset_imports=[helper.make_opsetid("", 23)])


def _session(model) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def measure(b: int, s: int, h: int, d: int, masked: bool, rounds: int, runs: int) -> dict[str, float]:
    """Written-out time / kernel time for each kernel (the median of ``rounds`` alternating rounds of ``runs`` runs)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((b, s, h * d)).astype(np.float32) for _ in range(3))
    mask = np.zeros((b, 1, 1, s), np.float32)
    mask[..., -max(s // 8, 1):] = np.finfo(np.float32).min  # the last eighth padding, as transformers' extended mask has it
    common = {"q": q, "k": k, "v": v}
    cases = {"written out": (_written_out, {"mask": mask}), "MultiHeadAttention": (_multi_head, {"bias": np.broadcast_to(mask, (b, h, s, s)).copy()}),
             "Attention-23": (_attention_23, {"full_mask": np.broadcast_to(mask, (b, 1, s, s)).copy()}),
             "Attention-23 on heads": (_attention_23_heads, {"mask": np.broadcast_to(mask, (b, 1, s, s)).copy()})}
    sessions = {name: (_session(build(b, s, h, d, masked)), {**common, **(extra if masked else {})}) for name, (build, extra) in cases.items()}
    reference = sessions["written out"][0].run(None, sessions["written out"][1])[0]
    for name, (session, feeds) in sessions.items():
        np.testing.assert_allclose(session.run(None, feeds)[0], reference, rtol=1e-4, atol=1e-5, err_msg=name)
    seconds: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(rounds):
        for name, (session, feeds) in sessions.items():
            start = time.perf_counter()
            for _ in range(runs):
                session.run(None, feeds)
            seconds[name].append((time.perf_counter() - start) / runs)
    plain = statistics.median(seconds["written out"])
    return {name: plain / statistics.median(times) for name, times in seconds.items() if name != "written out"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["1x64x12x64", "1x128x12x64", "1x256x12x64", "8x128x12x64"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--no-mask", action="store_true")
    args = parser.parse_args()
    print(f"onnxruntime {ort.__version__}, 1 thread, {'no mask' if args.no_mask else 'a padding mask'}")
    print("| batch x seq x heads x head dim | written out / MultiHeadAttention | written out / Attention-23 | written out / Attention-23 on heads |")
    print("|---|---|---|---|")
    for size in args.sizes:
        b, s, h, d = (int(v) for v in size.split("x"))
        ratios = measure(b, s, h, d, not args.no_mask, args.rounds, args.runs)
        print(f"| {size} | {ratios['MultiHeadAttention']:.2f}x | {ratios['Attention-23']:.2f}x | {ratios['Attention-23 on heads']:.2f}x |")


if __name__ == "__main__":
    main()
