"""The torch runtime on files nobody here made: every corpus model run on it and compared with ONNX Runtime.

    python -m taso.models.corpus build && python benchmarks/gpu/torch_corpus_check.py [--only NAME ...]

Each built corpus model (PyTorch exports from both exporters, the ONNX zoo, files PyPI wheels ship) is loaded as
`taso optimize` loads it, run on the torch runtime (the GPU when torch sees one, else torch's CPU kernels;
``TASO_TORCH_DEVICE`` chooses) and on ONNX Runtime on the same random inputs, and the outputs are compared with the
output check's tolerance. Prints one line per model (equal or not, the nodes run on the host, whether the graph
was captured), then the counts. Exit 1 when any model differs or fails on the runtime.
"""

from __future__ import annotations

import argparse
import sys

import onnx
from taso.models import corpus

import taso
from taso.errors import TasoError, first_line
from taso.measure.inputs import random_inputs
from taso.measure.outputs import compare_outputs, run_reference
from taso.measure.torch_runtime import Replay, TorchGraph, default_device


def check(entry, device) -> tuple[str, str]:
    """(outcome, detail) of one corpus model: "equal", "differs", "failed" or "not loaded" (taso refuses it)."""
    model = onnx.load(str(entry.path()))
    try:
        graph = taso.load_onnx(model, entry.input_shapes or None)
    except TasoError as e:
        return "not loaded", first_line(e)
    feeds = random_inputs(corpus.with_static_inputs(model, entry.input_shapes))
    try:
        reference = run_reference(model, [feeds])
        want = dict(zip(reference.names, reference.outputs[0]))
    except Exception as e:  # noqa: BLE001 - ONNX Runtime cannot run it on these inputs: nothing to compare
        return "not loaded", f"ONNX Runtime: {first_line(e)[:100]}"
    try:
        runtime = TorchGraph(graph, device)
        got = runtime.run_host(feeds)
        timing = Replay(runtime, feeds).timing
    except Exception as e:  # noqa: BLE001 - a failure on the runtime is the finding
        return "failed", f"{type(e).__name__}: {first_line(e)[:140]}"
    comparison = compare_outputs(want, dict(zip(want, got.values())))
    host = f", on the host: {', '.join(sorted({n.op.name for n in graph.nodes if n.name in runtime.host_nodes}))}" if runtime.host_nodes else ""
    return ("equal" if comparison.ok else "differs"), f"{comparison.describe()}; {timing}{host}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="only the corpus models whose name contains one of these")
    args = parser.parse_args(argv)
    device = default_device()
    counts: dict[str, int] = {}
    for entry in corpus.all_entries():
        if not entry.path().exists() or (args.only and not any(o in entry.name for o in args.only)):
            continue
        outcome, detail = check(entry, device)
        counts[outcome] = counts.get(outcome, 0) + 1
        print(f"{outcome:<10} {entry.name}: {detail}", flush=True)
    print(f"\non {device.fingerprint()}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    return 1 if counts.get("differs") or counts.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
