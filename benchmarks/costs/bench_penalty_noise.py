"""How far a cached cold-read penalty is from the same penalty measured again: the noise the whole price carries.

A read penalty (``OrtCpuCost.read_penalty``, ``taso.cost.residency``) is one session's evicting runs against the median
of another session's resting runs, measured once per node and eviction size and cached. Two sessions of one model can
run several percent apart, which on a millisecond product is more than the penalty: on the zoo BERT the FFN output
product's penalty is cached at 442 us and measured 0-173 us four times after. For each node of a model whose read the
whole price charges, this prints the cached penalty and ``--repeats`` fresh measurements (each a new pair of sessions).

Run: python benchmarks/costs/bench_penalty_noise.py MODEL.onnx [MORE.onnx ...] [--repeats 4] [--input-shape x=1,16,256]
"""

from __future__ import annotations

import argparse
import statistics

from taso.cost import make_cost_model
from taso.pipeline.source import ModelSource
from taso.search.cleanup import clean_up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...")
    args = parser.parse_args()
    shapes = {name: [int(d) for d in dims.split(",")] for name, dims in (item.split("=", 1) for item in args.input_shape)}
    model = make_cost_model("ort-cpu", threads=args.threads)
    for path in args.models:
        graph, _ = clean_up(ModelSource.from_file(path, shapes or None).graph)
        whole = model.graph_cost(graph)
        charged = model.surcharges(graph)
        reads, _, _ = model.parent_reads(graph)
        consts = graph.constant_values()
        print(f"{path}: priced {whole * 1e3:.3f} ms, of which read penalties {sum(charged.values()) * 1e3:.3f} ms on {len(charged)} nodes")
        print("| node | weight | evicted MB | price us | cached penalty us | measured again us | median |")
        print("|---|---|---:|---:|---:|---|---:|")
        seen = set()
        for node, weight, between in zip(reads.nodes, reads.weights, reads.distances()):
            evicted = model.caches.eviction(reads.bytes[weight], between, model.threads)
            key = (node.op.name, tuple(graph.type(v).shape for v in node.inputs), evicted)
            if not evicted or key in seen:
                continue
            seen.add(key)
            cached = model.read_penalty(node, graph, consts, evicted)
            again = [model.cold_penalty(node, graph, consts, evicted)[0] for _ in range(args.repeats)]
            shape = " x ".join(str(list(graph.type(v).shape)) for v in node.inputs)
            print(f"| {node.op.name} {shape} | {weight} | {evicted / 1e6:.1f} | {model.node_cost(node, graph) * 1e6:.0f} | {cached * 1e6:.0f} | "
                  f"{', '.join(f'{a * 1e6:.0f}' for a in again)} | {statistics.median(again) * 1e6:.0f} |")
    model.close()


if __name__ == "__main__":
    main()
