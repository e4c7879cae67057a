"""Cost models by name: what ``--cost`` chooses from.

Each back end is imported only when it is asked for, so the interface (:mod:`taso.cost.model`) never
imports a runtime and a back end imports only the interface: no import circle, and no torch, CuPy or
profiler loaded for a search priced analytically.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import TasoError
from .cache import CostCache
from .model import AnalyticCost, CostModel

__all__ = ["COST_MODELS", "make_cost_model"]


def _analytic(threads: int, cache: CostCache | None) -> CostModel:
    return AnalyticCost()


def _ort_cpu(threads: int, cache: CostCache | None) -> CostModel:
    from .ort_cpu import OrtCpuCost

    return OrtCpuCost(threads=threads, cache=cache)


def _ort_cpu_region(threads: int, cache: CostCache | None) -> CostModel:
    from .region import RegionCost

    return RegionCost(_ort_cpu(threads, cache))


def _cupy(threads: int, cache: CostCache | None) -> CostModel:
    try:
        from .cupy_gpu import CupyCost
    except ImportError as e:
        raise TasoError(f"the cupy cost model needs a GPU and CuPy (pip install 'taso[gpu]' for CUDA 13, 'taso[gpu-cuda12]' for CUDA 12): {e}") from None
    return CupyCost(cache=cache)


def _torch(threads: int, cache: CostCache | None) -> CostModel:
    from .torch_device import TorchCost

    return TorchCost(cache=cache)


# name -> factory(threads, cache); the order is the order --help lists them in.
_REGISTRY: dict[str, Callable[[int, CostCache | None], CostModel]] = {
    "ort-cpu": _ort_cpu,
    "ort-cpu-region": _ort_cpu_region,
    "analytic": _analytic,
    "torch": _torch,
    "cupy": _cupy,
}
COST_MODELS = tuple(_REGISTRY)


def make_cost_model(name: str, threads: int = 1, cache: CostCache | None = None) -> CostModel:
    """The cost model called ``name`` (one of :data:`COST_MODELS`), measuring with ``threads`` intra-op threads.

    Raises:
        TasoError: an unknown name, or a model whose runtime is not available here.
    """
    factory = _REGISTRY.get(name)
    if factory is None:
        raise TasoError(f"unknown cost model {name!r}; choose one of {', '.join(COST_MODELS)}")
    return factory(threads, cache)
