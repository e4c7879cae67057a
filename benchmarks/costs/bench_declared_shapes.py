"""What do the shapes a file declares in value_info cost on ONNX Runtime, and does taso's price of them hold?

ONNX Runtime plans a value whose shape it knows before the run into a reused buffer, and one it cannot size from
the memory pattern of its first run; here the first is the slower (``taso.onnx.sizing``). The dynamo exporter
declares every value's shape, and taso's output declares none, so part of what taso's output gains over a dynamo
file is the file's own. The cost model prices it as the values only the declarations size
(``taso.onnx.sizing.declared_only``) times what a declared shape costs a value, measured once per cost table on a
chain of Add and Tanh (``taso.cost.declared``).

For each file, the file and a copy without its value_info are timed side by side in fresh-session series (batch 1,
random inputs, any other symbolic dim at 16), and the table prints the measured ratio (file / copy: above 1, the declarations cost) beside the
predicted one, (copy's time + values x price) / copy's time. The chain the price is measured on comes first.
With no files, the dynamo exports in tests/data/symbolic and, where ``bench_cell_ceiling.py`` left them, its
dynamo inputs are timed.

Run: python benchmarks/costs/bench_declared_shapes.py [FILE ...] [--threads 1] [--series 5] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the common helpers and the sibling subjects
from taso.models import corpus

from taso.cost.copies import WallReference  # noqa: E402
from taso.cost.declared import STATE_CHAIN_VALUES, declared_shape_seconds
from taso.measure.inputs import random_input_sets
from taso.measure.timing import fresh_session_series  # noqa: E402
from taso.onnx import read_model  # noqa: E402
from taso.onnx.probes import state_chain
from taso.onnx.sizing import declared_only  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CEILING = Path.home() / ".cache" / "taso-ceiling"


def undeclared(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.value_info[:]
    return copy


def pinned_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Each input's shape with a symbolic batch at 1 and any other symbolic dim (a sequence) at 16."""
    return {v.name: [d.dim_value if d.HasField("dim_value") else (1 if d.dim_param == "batch" else 16)
                     for d in v.type.tensor_type.shape.dim] for v in model.graph.input}


def default_files() -> list[Path]:
    files = sorted((ROOT / "tests" / "data" / "symbolic").glob("*.dynamo.onnx"))
    return files + sorted(p for p in CEILING.glob("*_s*.dynamo.onnx") if "ceiling" not in p.name)


def measured_and_predicted(model: onnx.ModelProto, price: float, threads: int, rounds: int, series: int) -> tuple[int, float, float, float, float]:
    """(declared-only values, the copy's seconds, the measured ratio's median, smallest and largest over the series)."""
    feeds = random_input_sets(corpus.with_static_inputs(model, pinned_shapes(model)), (0,))[0]
    timed = fresh_session_series([model.SerializeToString(), undeclared(model).SerializeToString()], feeds, threads, rounds, series)
    ratios = [t[0] / t[1] for t in timed]
    return declared_only(model), statistics.median(t[1] for t in timed), statistics.median(ratios), min(ratios), max(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--series", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    price = declared_shape_seconds(args.threads, WallReference(args.threads))
    print(f"a declared shape costs a value {price * 1e6:+.3f} us ({STATE_CHAIN_VALUES}-value chain, {args.threads} thread(s))")
    print(f"{'file':44s} {'values':>6s} {'copy ms':>8s} {'measured':>8s} {'range':>13s} {'predicted':>9s}")
    files = args.files or default_files()
    rows = [("state chain (the price's own)", state_chain(STATE_CHAIN_VALUES, declared=True))]
    rows += [(path.name, read_model(str(path), external_data=False)) for path in files]
    within = 0
    for name, model in rows:
        values, seconds, ratio, low, high = measured_and_predicted(model, price, args.threads, args.rounds, args.series)
        predicted = (seconds + values * price) / seconds
        within += low <= predicted <= high
        print(f"{name[:44]:44s} {values:6d} {seconds * 1e3:8.3f} {ratio:8.3f} {low:6.3f}-{high:6.3f} {predicted:9.3f}")
    print(f"{within}/{len(rows)} predictions within their series' range")


if __name__ == "__main__":
    main()
