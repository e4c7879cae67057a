"""The search on a model with symbolic dims against the same model frozen (``--static``), side by side.

Symbolic dims cost the search something: shape rules compute with polynomials, and every
node type with a symbolic dim is re-checked at other sizes once (:mod:`taso.ops.base`). This
runs the same search (analytic costs, a fixed budget, so both expand the same graphs) on the
model imported symbolic and imported static, interleaved over rounds, and prints rewrites
per second of each and their ratio; both must find the same predicted speedup.

    python benchmarks/search/bench_symbolic_search.py [MODEL.onnx] [--budget 30] [--rounds 3]

Default model: the LSTMCell loop exported with a symbolic batch in tests/data/symbolic.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import taso
from taso.cost import make_cost_model
from taso.pipeline.library import load_rules
from taso.search import SearchConfig, search

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(HERE, "..", "tests", "data", "symbolic", "lstm_cell_loop.torchscript.onnx")


def run_once(path: str, static: bool, rules, budget: int) -> tuple[float, int, float]:
    """(seconds, rewrites tried, predicted speedup) of one search."""
    graph = taso.load_onnx(path, static=static)
    start = time.perf_counter()
    _, report = search(graph, rules, make_cost_model("analytic"), SearchConfig(budget=budget, time_limit=600))
    return time.perf_counter() - start, report.generated, report.predicted_speedup


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rules = load_rules()
    run_once(args.model, True, rules, 2)  # warm: rules parsed and compiled once for both
    rates: dict[bool, list[float]] = {True: [], False: []}
    found: dict[bool, float] = {}
    for _ in range(args.rounds):
        for static in (True, False):
            seconds, tried, speedup = run_once(args.model, static, rules, args.budget)
            rates[static].append(tried / seconds)
            found[static] = speedup
    static, symbolic = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"model {os.path.basename(args.model)}, budget {args.budget}, {args.rounds} interleaved rounds (median)")
    print(f"  static    {static:9.0f} rewrites/s   predicted {found[True]:.3f}x")
    print(f"  symbolic  {symbolic:9.0f} rewrites/s   predicted {found[False]:.3f}x")
    print(f"  symbolic / static: {symbolic / static:.2f}x the rewrite rate; same best graph: {abs(found[True] - found[False]) < 1e-9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
