"""How much is there to win on an unrolled LSTMCell export, and how much of it can TASO-style rules reach?

Hand-made rewrites of the corpus's ``nn.LSTMCell`` unrolled over T steps (one Gemm of the step's
input, one of the hidden state, per step), timed against the file on ONNX Runtime ENABLE_ALL,
interleaved in one run:

- ``pairwise``: what T-1 applications of the shipped merge rule
  ``[matmul(x1, w1), matmul(x2, w1)] => split(matmul(concat(x1, x2), w1))`` produce: a chain of
  two-input Concats, one MatMul, a chain of two-output Splits, and the bias Adds left per step;
- ``n-ary``: the same with the chains flattened into one Concat and one Split;
- ``reshape``: the input projections of all steps as one Gemm of the whole input (``xs``
  reshaped, bias included), each step gathering its row: what no shipped rule gives, since
  it needs "a concat of all gathers of ``xs`` is ``xs``";
- ``reshape+C``: also each step's recurrent Gemm takes the gathered row as its C input.

Run: python benchmarks/end_to_end/bench_lstm_ceiling.py [MODEL.onnx] (default: the corpus's torch-script/lstm_cell_unrolled16)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from taso.measure.timing import interleaved_times


def _steps(model: onnx.ModelProto) -> tuple[dict[int, str], dict[str, onnx.NodeProto]]:
    """Step t's input (the Gather of xs at t) and the Gemm that projects it, by its output."""
    constants = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node if n.op_type == "Constant"}
    inputs = {int(constants[n.input[1]]): n.output[0] for n in model.graph.node if n.op_type == "Gather" and n.input[0] == "xs"}
    step_of = {v: t for t, v in inputs.items()}
    projections = {n.output[0]: n for n in model.graph.node if n.op_type == "Gemm" and n.input[0] in step_of}
    return inputs, projections


def _rewritten(model: onnx.ModelProto, variant: str) -> bytes:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inputs, projections = _steps(out)
    steps = len(inputs)
    weight, bias = next(iter(projections.values())).input[1:3]
    row = {}  # step -> the value holding its projected row
    new: list[onnx.NodeProto] = []
    if variant in ("pairwise", "n-ary"):
        if variant == "pairwise":
            current = inputs[0]
            for t in range(1, steps):
                new.append(helper.make_node("Concat", [current, inputs[t]], [f"cat{t}"], axis=0))
                current = f"cat{t}"
        else:
            new.append(helper.make_node("Concat", [inputs[t] for t in range(steps)], ["cat"], axis=0))
            current = "cat"
        new.append(helper.make_node("Gemm", [current, weight], ["merged"], transB=1))
        if variant == "pairwise":
            current = "merged"
            for t in range(steps - 1, 0, -1):
                graph.initializer.append(numpy_helper.from_array(np.array([t, 1], np.int64), f"sizes{t}"))
                new.append(helper.make_node("Split", [current, f"sizes{t}"], [f"head{t}", f"row{t}"], axis=0))
                current = f"head{t}"
            row = {t: f"row{t}" for t in range(1, steps)} | {0: current}
        else:
            graph.initializer.append(numpy_helper.from_array(np.ones(steps, np.int64), "sizes"))
            new.append(helper.make_node("Split", ["merged", "sizes"], [f"row{t}" for t in range(steps)], axis=0))
            row = {t: f"row{t}" for t in range(steps)}
        with_bias = {t: helper.make_node("Add", [row[t], bias], [f"biased{t}"]) for t in range(steps)}
        new += with_bias.values()
        row = {t: f"biased{t}" for t in range(steps)}
    else:
        graph.initializer.append(numpy_helper.from_array(np.array([steps, -1], np.int64), "flat"))
        new += [helper.make_node("Reshape", ["xs", "flat"], ["xs2d"]), helper.make_node("Gemm", ["xs2d", weight, bias], ["merged"], transB=1)]
        for t in range(steps):
            graph.initializer.append(numpy_helper.from_array(np.array([t], np.int64), f"at{t}"))
            new.append(helper.make_node("Gather", ["merged", f"at{t}"], [f"row{t}"], axis=0))
        row = {t: f"row{t}" for t in range(steps)}
    step_of = {v: t for t, v in inputs.items()}
    renamed = {out_name: row[step_of[gemm.input[0]]] for out_name, gemm in projections.items()}
    producers = {n.output[0]: n for n in graph.node}
    kept = []
    for node in graph.node:
        if node.output[0] in projections:
            continue
        if variant == "reshape+C" and node.op_type == "Add" and any(v in renamed for v in node.input):
            # Add(recurrent Gemm, projected row) -> one Gemm with the row as C
            other = next(v for v in node.input if v not in renamed)
            gemm, projected = producers[other], renamed[next(v for v in node.input if v in renamed)]
            kept.append(helper.make_node("Gemm", [gemm.input[0], gemm.input[1], projected], list(node.output), transB=1))
            kept = [n for n in kept if n.output[0] != other]
            continue
        node.input[:] = [renamed.get(v, v) for v in node.input]
        kept.append(node)
    if variant == "reshape+C":  # the merged Gemm adds both biases; the recurrent Gemms add the row as C
        weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        hh_bias = next(n.input[2] for n in model.graph.node if n.op_type == "Gemm" and n.output[0] not in projections)
        graph.initializer.append(numpy_helper.from_array(weights[bias] + weights[hh_bias], "both_biases"))
        new[1].input[2] = "both_biases"
    first = [n for n in kept if n.op_type in ("Constant", "Gather") and n.input[:1] != ["merged"]]
    rest = [n for n in kept if n not in first]
    del graph.node[:]
    graph.node.extend(first + new + rest)
    onnx.checker.check_model(out)
    return out.SerializeToString()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=Path.home() / ".cache" / "taso-corpus" / "torch-script" / "lstm_cell_unrolled16.onnx",
                        help="the unrolled LSTMCell export (default: the corpus's)")
    path = parser.parse_args(argv).model
    if not path.exists():
        raise SystemExit(f"{path} is missing: python -m taso.models.corpus build --only torch-script/lstm_cell_unrolled16")
    model = onnx.load(str(path))
    variants = ("pairwise", "n-ary", "reshape", "reshape+C")
    models = [model.SerializeToString()] + [_rewritten(model, v) for v in variants]
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32) for i in model.graph.input}
    import onnxruntime as ort

    reference = ort.InferenceSession(models[0], providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, candidate in zip(variants, models[1:]):
        got = ort.InferenceSession(candidate, providers=["CPUExecutionProvider"]).run(None, feeds)
        assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(got, reference)), f"{name} does not match the file"
    print(f"{path.name}: speedup over the file on ONNX Runtime ENABLE_ALL (interleaved, 11 rounds)")
    for threads in (1, 2):
        seconds = interleaved_times(models, feeds, threads, rounds=11)
        print(f"  {threads} thread(s): " + ", ".join(f"{v} {seconds[0] / s:.2f}x" for v, s in zip(variants, seconds[1:])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
