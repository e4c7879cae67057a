"""Library ready time: the version-1 JSON loaded and compiled eagerly vs the version-2 file loaded and compiled lazily, side by side.

"Ready" is what a search needs before its first expansion: the rule file read and checked,
the rules in both directions, and the compiled rules it will match (and their seed index).

- old: ``Library.load`` of the version-1 JSON (every id recomputed, the digest recomputed by
  re-serialising), ``both_directions`` by canonical JSON, every directed rule compiled;
- new: ``load_rules`` of the version-2 file (one hash of its rule lines, stored ids trusted),
  then the search's rule index admitting the rules whose operator variants occur in the model.

Each measurement runs in a fresh process (no warm caches), the two paths alternate, and the
median of ``--repeat`` runs is printed with the ratio. The version-1 file is written from the
shipped library (``Library.save`` to a ``.json`` name): the same rules, byte for byte the old
file. Also printed: the new path run again for the same model in the same process, as
``taso bench`` does per thread count (the library is cached by digest with its compiled rules).
Run: python benchmarks/search/bench_library.py [--models nasrnn,squeezenet,...] [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _graph(name: str):
    import taso.models

    import taso

    return taso.load_onnx(taso.models.build(name))


def _old_ready(v1_path: str, graph) -> tuple[float, int]:
    """The path before version 2: parse and check everything, reverse by canonical JSON, compile every rule."""
    from taso.rules import Library
    from taso.search.core import SeedIndex
    from taso.search.rewrite import CompiledRule

    start = time.perf_counter()
    library = Library.load(v1_path)
    proved = [r for r in library.rules if r.status == "proved"]
    seen, directed = set(), []
    for rule in proved:
        for candidate in (rule, rule.reversed()):
            read = {v for n in candidate.source for v in n.inputs}
            key = candidate.canonical()
            if {i.name for i in candidate.inputs} <= read and key not in seen:
                seen.add(key)
                directed.append(candidate)
    gc.disable()  # the search compiled its rules with the cyclic GC off, as it does now
    compiled = [CompiledRule(r) for r in directed]
    SeedIndex(compiled)
    seconds = time.perf_counter() - start
    gc.enable()
    return seconds, len(compiled)


def _new_ready(graph) -> tuple[float, int]:
    """load_rules (version 2) and the search's rule index admitting the model's rules."""
    from taso.pipeline.library import load_rules
    from taso.search.core import RuleIndex

    start = time.perf_counter()
    rules = load_rules()
    gc.disable()  # admission runs inside the search, with the cyclic GC off
    index = RuleIndex(rules)
    index.admit(graph)
    seconds = time.perf_counter() - start
    gc.enable()
    return seconds, len(index.compiled)


def _one(path: str, model: str, second: str | None) -> None:
    """Child process: one measurement, printed as JSON."""
    graph = _graph(model)
    if path == "old":
        seconds, compiled = _old_ready(os.environ["BENCH_LIBRARY_V1"], graph)
        print(json.dumps({"seconds": seconds, "compiled": compiled}))
        return
    seconds, compiled = _new_ready(graph)
    result = {"seconds": seconds, "compiled": compiled}
    if second:
        result["second_seconds"], result["second_compiled"] = _new_ready(_graph(second))
    print(json.dumps(result))


def _run_child(path: str, model: str, second: str | None, env: dict) -> dict:
    command = [sys.executable, __file__, "--one", path, "--models", model] + (["--second", second] if second else [])
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="nasrnn,squeezenet,bert_base,inception_v3")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one", choices=("old", "new"), help=argparse.SUPPRESS)
    parser.add_argument("--second", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _one(args.one, args.models, args.second)
        return
    from taso.pipeline.library import DEFAULT_LIBRARY
    from taso.rules import Library

    with tempfile.TemporaryDirectory() as tmp:
        v1_path = os.path.join(tmp, "library.json")
        Library.load(DEFAULT_LIBRARY).save(v1_path)
        env = {**os.environ, "BENCH_LIBRARY_V1": v1_path}
        print(f"version 1: {os.path.getsize(v1_path) / 1e6:.1f} MB JSON; version 2: {os.path.getsize(DEFAULT_LIBRARY) / 1e6:.2f} MB "
              f"({os.path.basename(DEFAULT_LIBRARY)}); median of {args.repeat} fresh processes each")
        models = args.models.split(",")
        for model in models:
            old, new = [], []
            for _ in range(args.repeat):
                old.append(_run_child("old", model, None, env))
                new.append(_run_child("new", model, model, env))
            t_old = statistics.median(r["seconds"] for r in old)
            t_new = statistics.median(r["seconds"] for r in new)
            line = (f"{model:<13} old {t_old:6.2f} s ({old[0]['compiled']} rules compiled)   new {t_new:5.3f} s ({new[0]['compiled']} compiled)"
                    f"   {t_old / t_new:5.1f}x")
            print(line + f"   again in the same process: {statistics.median(r['second_seconds'] for r in new):.3f} s", flush=True)


if __name__ == "__main__":
    main()
