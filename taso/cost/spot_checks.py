"""Cached costs re-measured from their keys alone (``taso info --costs --check N``): a sample of this machine's entries,
rebuilt as single nodes and timed now, each entry's verdict against its noise band.
"""

from __future__ import annotations

import ast
import functools
import math
import random
import re

import numpy as np

from ..errors import TasoError
from ..ir import Graph, Node, Params, TensorType
from ..measure.inputs import random_array
from ..ops import get
from .cache import CALIBRATION, STALE, SUSPECT, CostCache, SpotCheck, SpotCheckPolicy
from .model import node_key
from .ort_cpu import OrtCpuCost, fingerprint

__all__ = ["check_cached_costs"]


def check_cached_costs(cache: CostCache, entries: int, seed: int | None = None) -> list[SpotCheck]:
    """Spot-checks ``entries`` entries of each of this machine's ort-cpu tables now (``taso info --costs --check N``).

    Unlike a search's spot-check, no time bound: a big Conv is checked too. Entries the
    cache already doubts (suspect, stale, without a noise band) come first, the rest in random
    order. Each is re-measured from its key alone (op, parameters, input types and
    constness), constant float inputs filled at random like any computed constant; an entry whose
    key cannot be rebuilt (an opaque operator, a constant input whose value may pick the kernel:
    an integer operand, a one-element one like Pow's exponent) is passed over. The cache is updated as a search's check would; save it after.
    """
    checks = []
    for table, threads in _machine_tables(cache):
        model = OrtCpuCost(threads=threads, cache=cache)
        check = SpotCheck(cache, table, SpotCheckPolicy(entries=entries, seconds=math.inf, rate=1.0, seed=seed))
        for key in _checking_order(cache, table, random.Random(seed)):
            if len(check.verdicts) >= entries:
                break
            rebuilt = _single_node(key)
            if rebuilt is not None:
                node, graph = rebuilt
                check.verify(key, cache.table(table)[key], functools.partial(model.fresh, node, graph, graph.constant_values()))
        checks.append(check)
    return checks


def _machine_tables(cache: CostCache) -> list[tuple[str, int]]:
    """This machine's ort-cpu tables (its CPU and ONNX Runtime build), with their thread counts."""
    pattern = re.escape(fingerprint(0)).replace("threads=0", r"threads=(\d+)")
    return [(table, int(m.group(1))) for table in cache.summary() if (m := re.fullmatch(pattern, table))]


def _checking_order(cache: CostCache, table: str, rng: random.Random) -> list[str]:
    """The table's entries, those the cache doubts first, each group in random order."""
    keys = [key for key in cache.table(table) if not key.startswith(CALIBRATION)]
    rng.shuffle(keys)

    def doubted(key: str) -> bool:
        entry = cache.entry(table, key)
        return entry is None or entry.band is None or entry.state in (SUSPECT, STALE)

    return sorted(keys, key=lambda key: not doubted(key))


_INPUT_TYPE = re.compile(r"(\w+)\[([\d,]*)\](c?)")


def _single_node(key: str) -> tuple[Node, Graph] | None:
    """The one-node graph a cache key describes (``node_key``: op, parameters, input types, constness); None when the key cannot rebuild it."""
    op_name, _, rest = key.partition("|")
    params_text, _, inputs_text = rest.rpartition("|")
    try:
        op = get(op_name)
        params = Params(dict(ast.literal_eval(params_text)))
        op.check_params(params)  # an opaque node's model is in the key only as a digest: it fails here
    except (KeyError, ValueError, SyntaxError, TypeError, TasoError):
        return None
    inputs, weights, names = {}, {}, []
    rng = np.random.default_rng(0)
    for i, text in enumerate(inputs_text.split(";") if inputs_text else ()):
        match = _INPUT_TYPE.fullmatch(text)
        if match is None:
            return None
        dtype, dims, constant = match.groups()
        t = TensorType(tuple(int(d) for d in dims.split(",") if d), dtype)
        if constant and (not dtype.startswith("float") or t.size <= 1):
            return None  # its value may pick the kernel (a shape, sizes, Pow's exponent) and is not in the key
        names.append(f"in{i}")
        if constant:
            weights[names[-1]] = random_array(t, rng)
        else:
            inputs[names[-1]] = t
    try:
        types = [inputs[v] if v in inputs else TensorType.of(weights[v]) for v in names]
        outputs = tuple(f"out{i}" for i in range(len(op.infer(types, params))))
        node = Node(op, params, tuple(names), outputs, "checked")
        graph = Graph(inputs, weights, [node], list(outputs))
    except (TasoError, ValueError, TypeError):
        return None
    return (node, graph) if node_key(node, graph) == key else None
