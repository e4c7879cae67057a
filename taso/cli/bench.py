"""`taso bench MODEL...`: end-to-end speedups of taso optimize's output on the target runtime (:mod:`taso.bench`)."""

from __future__ import annotations

import argparse
import os
import sys
import time

import onnxruntime as ort

from ..bench import bench_model, bench_model_gpu, bench_model_torch, load_model, write_results
from ..errors import TasoError

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    from ..cost import COST_MODELS
    from ..pipeline.library import TARGETS
    from ..search import SearchConfig

    p = sub.add_parser("bench", help="measure end-to-end speedups against ONNX Runtime's optimizer")
    p.add_argument("models", nargs="+", metavar="MODEL", help="zoo model names (see `taso models list`) or .onnx files")
    p.add_argument("--threads", default="1", help="comma-separated intra-op thread counts (default 1)")
    p.add_argument("--out", default="bench-results", help="directory for bench.json, bench.md and bench.png (default %(default)s)")
    p.add_argument("--library", help="a verified rule library (default: the shipped one)")
    p.add_argument("--target", choices=TARGETS, default="onnx",
                   help="the runtime taso's output is for, as in taso optimize: onnx (default) or ort (ONNX Runtime's contrib operators too)")
    p.add_argument("--cost", choices=COST_MODELS, default="ort-cpu")
    p.add_argument("--alpha", type=float, default=SearchConfig.alpha)
    p.add_argument("--budget", type=int, default=SearchConfig.budget)
    p.add_argument("--time-limit", type=float, default=SearchConfig.time_limit)
    p.add_argument("--rounds", type=int, default=10, help="interleaved timing rounds per variant (default %(default)s)")
    p.add_argument("--batch", type=int, default=1, help="batch size for zoo models (default 1)")
    p.add_argument("--peers", metavar="LIST",
                   help="comma-separated optimizers to time beside taso, each on the input model (ONNX Runtime on the CPU): "
                        "onnxslim, onnxsim, ort-transformers, onnxscript, or all; one not installed is noted and left out")
    p.add_argument("--runtime", choices=("ort-cpu", "torch", "cupy"), default="ort-cpu",
                   help="ort-cpu: ONNX Runtime on the CPU vs its own optimizer; torch: the torch runtime, device time in CUDA graphs on a GPU "
                        "(torch's CPU kernels without one; costs from --cost, default torch); cupy: the CuPy executor on the GPU")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..cost.ort_cpu import cpu_name

    try:
        threads = [int(t) for t in str(args.threads).split(",") if t.strip()]
    except ValueError:
        threads = []
    if not threads or any(t < 1 for t in threads):
        raise TasoError(f"--threads {args.threads!r}: expected comma-separated positive integers, e.g. 1,2")
    _check_settings(args)
    from ..bench.peers import parse_peers

    args.peers = parse_peers(args.peers)
    if args.peers and args.runtime != "ort-cpu":
        raise TasoError(f"--peers times on ONNX Runtime's CPU (--runtime ort-cpu), not --runtime {args.runtime}")
    _make_out_dir(args.out)
    facts, device = None, None
    if args.runtime == "cupy":
        from ..measure.cupy_runtime import gpu_fingerprint, require_cupy

        hardware = gpu_fingerprint(require_cupy())
    elif args.runtime == "torch":
        from ..bench.torch_device import runtime_facts
        from ..measure.torch_runtime import default_device

        device = default_device()
        facts = runtime_facts(device)
        hardware = facts["fingerprint"]
    else:
        hardware = f"{cpu_name()}, onnxruntime {ort.__version__}"
    rows = []
    for name in args.models:
        label, model, path = load_model(name, args.batch)
        if args.runtime == "torch":
            started = time.perf_counter()
            row = bench_model_torch(label, model, args, path, device, out=args.out)
            rows.append(row)
            print(f"{label:<16} torch ({row.timing}) {row.ms['torch_original']:.3f} ms -> {row.ms['torch_taso']:.3f} ms  "
                  f"{row.speedup_vs_ortall:.2f}x  ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
            continue
        if args.runtime == "cupy":
            row = bench_model_gpu(label, model, args, path)
            rows.append(row)
            print(f"{label:<16} CuPy {row.ms['cupy_original']:.3f} ms -> {row.ms['cupy_taso']:.3f} ms  {row.speedup_vs_ortall:.2f}x", file=sys.stderr)
            continue
        for t in threads:
            started = time.perf_counter()
            row = bench_model(label, model, t, args, path)
            rows.append(row)
            print(f"{label:<16} threads={t}  ORT all {row.ms['original_ortall']:.3f} ms  taso {row.ms['taso_ortall']:.3f} ms  "
                  f"{row.speedup_vs_ortall:.2f}x  ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    print(write_results(rows, hardware, args.out, facts))
    return 0


def _check_settings(args: argparse.Namespace) -> None:
    """Settings the timing or the search cannot honour are refused before any model is built."""
    from ..pipeline.run import validate_search_settings

    if args.rounds < 1 or args.batch < 1:
        raise TasoError(f"--rounds and --batch must be at least 1, got {args.rounds} and {args.batch}")
    validate_search_settings(args.alpha, args.budget, args.time_limit)


def _make_out_dir(path: str) -> None:
    """Creates --out up front: a bench that ran for an hour must not fail at its last step."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise TasoError(f"--out {path}: cannot create the directory ({e.strerror or e})") from None
    if not os.access(path, os.W_OK):
        raise TasoError(f"--out {path}: not writable")
