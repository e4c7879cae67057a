"""What another target would add: the rewrites into ONNX Runtime's contrib operators that a default run
(``--target onnx``) may not make, priced on the graph it kept, so the report can say when ``--target ort`` leaves
a gain on the table."""

from __future__ import annotations

from typing import NamedTuple

from ..cost.model import CostModel
from ..ir import Graph
from ..rules import Library
from ..search.rewrite import CompiledRule, plans
from .library import ORT_FUSIONS

__all__ = ["TargetGain", "ort_gain"]

# Past this share of the graph's cost a gain is worth a line in the report (below it, the measuring's own noise).
_WORTH_SAYING = 0.01


class TargetGain(NamedTuple):
    places: int  # where a fusion's rewrite would lower the price, each priced alone
    seconds: float  # the sum of those places' gains
    cost: float  # the kept graph's price

    def note(self) -> str | None:
        """The report's line, or None when there is nothing worth saying."""
        if not self.places or self.seconds < _WORTH_SAYING * self.cost:
            return None
        return (f"--target ort (ONNX Runtime's contrib operators) could rewrite {self.places} place(s) more, predicted "
                f"{self.seconds / self.cost:.1%} of the cost faster")


def ort_gain(graph: Graph, cost_model: CostModel) -> TargetGain:
    """The fusions' rewrites of ``graph`` that the cost model prices as gains, each priced alone from ``graph`` (their
    sum is an estimate: two near one another may share a neighbour). Measures the fused nodes it meets without the
    search's deadline, as the search would have."""
    deadline, cost_model.deadline = cost_model.deadline, float("inf")
    try:
        cost = cost_model.graph_cost(graph)
        present = {n.op.name for n in graph.nodes}
        places, gain = 0, 0.0
        for rule in Library.load(ORT_FUSIONS).rules:
            if rule.status != "proved" or not {n.op for n in rule.source} <= present:
                continue
            for plan in plans(graph, CompiledRule(rule)):
                delta = cost - cost_model.rewrite_cost(graph, cost, plan.removed, plan.added, plan)
                if delta > 0:
                    places, gain = places + 1, gain + delta
        return TargetGain(places, gain, cost)
    finally:
        cost_model.deadline = deadline
