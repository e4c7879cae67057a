"""Costs: what a graph takes to run on the target, priced node by node.

| module | job |
|---|---|
| :mod:`~taso.cost.model` | the interface (:class:`CostModel`), the cache key of a node, the roofline (:class:`AnalyticCost`) |
| :mod:`~taso.cost.cache` | measured entries on disk per hardware fingerprint, with noise bands and spot-checks |
| :mod:`~taso.cost.ort_cpu` | costs measured on ONNX Runtime's CPU provider (profiled, load-normalized) |
| :mod:`~taso.cost.copies` | a node timed by the wall clock as copies of it: its warm price, a cold read's penalty |
| :mod:`~taso.cost.in_place` | a measured node's large weights handed to ONNX Runtime where they are, not copied |
| :mod:`~taso.cost.residency` | where a node's weight lives when it runs: cache sizes, ONNX Runtime's run order, reuse distances |
| :mod:`~taso.cost.region` | ort-cpu plus the fusions a rewrite breaks or makes, timed as small regions |
| :mod:`~taso.cost.cupy_gpu` | costs measured on the GPU through CuPy (CUDA events) |
| :mod:`~taso.cost.registry` | the models by name (``--cost``), each back end imported only when chosen |

Dependencies point one way: back ends import the interface and the cache, never each other's
callers; the registry is the only module that names them all.
"""

from .cache import SPOT_CHECK_OFF, CostCache, CostEntry, SpotCheck, SpotCheckPolicy, Verdict, format_cost_report, noise_band
from .model import AnalyticCost, CostModel, Neighbourhood, flops, node_key
from .registry import COST_MODELS, make_cost_model

__all__ = ["CostModel", "Neighbourhood", "AnalyticCost", "CostCache", "CostEntry", "SpotCheck", "SpotCheckPolicy", "SPOT_CHECK_OFF", "Verdict",
           "node_key", "flops", "make_cost_model", "noise_band", "format_cost_report", "COST_MODELS"]
