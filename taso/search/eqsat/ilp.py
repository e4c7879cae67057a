"""The exact extraction: an integer program over the e-nodes (HiGHS, via highspy), solved again with each cycle a
solution closes cut off. x_n in {0, 1} per e-node, at most one per class; each output's class has a chosen e-node; a
chosen e-node's every child class has one; z_n in [0, 1] per e-node the runtime fuses into its producer.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

__all__ = ["ENode", "exact_choice", "fused_in", "post_order"]


@dataclass(frozen=True)
class ENode:
    """One e-node: an application (``key`` names op and parameters), a tuple's output, or a graph input/weight."""

    cls: int
    kind: str  # "app", "out" or "leaf"
    key: str  # the op key of an application, the leaf key of a leaf
    children: tuple[int, ...]
    index: int = 0  # which output of the tuple, for "out"


def exact_choice(enodes: list[ENode], costs: list[float], roots: list[int], start: dict[int, int], fusions: dict[int, list[int]],
         seconds: float) -> tuple[dict[int, int] | None, str]:
    """The exact choice by HiGHS (class -> e-node index), or None when it found no acyclic one in ``seconds``.

    Acyclicity by cuts: each cycle of two or three classes in the e-graph is cut off up front (at
    most k-1 of the k classes on it choose an e-node reading the next one; a split of a concat
    makes three: x, the concat, the split's output joined with x); each longer cycle a choice
    closes is cut the same way and the program solved again, until the choice has no cycle.
    Order variables on every class of the e-graph's cycles (t_c >= t_d + 1 - big * (1 - x_n))
    made the relaxation weak: Inception-v3's and BERT's programs ran out of time with them
    (``benchmarks/search/bench_extract.py``). The greedy choice is the starting solution whenever it is
    acyclic.
    """
    deadline = time.perf_counter() + seconds
    program = _Program(enodes, costs, roots, fusions)
    short = _short_cycles(enodes, program.usable)
    for cycle in short:
        program.forbid(cycle)
    cuts = len(short)
    while True:
        program.highs.setOptionValue("time_limit", max(deadline - time.perf_counter(), 0.05))
        program.start_from(start, roots)
        chosen, exact = program.solve()
        cut = f" with {cuts} cycle cut{'s' if cuts != 1 else ''}" if cuts else ""
        if chosen is None:
            return None, f"ilp{cut} (time limit)"
        cycles = _cycles(enodes, chosen, roots)
        if not cycles:
            return chosen, f"ilp{cut}" if exact else f"ilp{cut} (time limit)"
        if not exact or time.perf_counter() >= deadline:
            return None, f"ilp{cut} (time limit)"
        for cycle in cycles:
            program.forbid(cycle)
            cuts += 1


class _Program:
    """The extraction integer program: x_n per usable e-node, at most one per class, the roots chosen, a chosen e-node's
    children covered; z_n per fused e-node (its price back where the runtime fuses it, see ``_Choice._input_fusions``);
    and the cycle cuts :meth:`forbid` adds."""

    def __init__(self, enodes: list[ENode], costs: list[float], roots: list[int], fusions: dict[int, list[int]]):
        import highspy

        self.enodes = enodes
        self.usable = [i for i, c in enumerate(costs) if not math.isinf(c) and enodes[i].cls not in enodes[i].children]
        self.x = {i: k for k, i in enumerate(self.usable)}
        self.by_class: dict[int, list[int]] = {}
        self.readers: dict[int, list[int]] = {}  # class -> the usable e-nodes reading it
        for i in self.usable:
            self.by_class.setdefault(enodes[i].cls, []).append(i)
            for d in dict.fromkeys(enodes[i].children):
                self.readers.setdefault(d, []).append(i)
        self.fusions = {i: found for i, producers in fusions.items() if i in self.x and (found := [p for p in producers if p in self.x])}
        self.z = {i: len(self.usable) + k for k, i in enumerate(self.fusions)}
        rows = _Rows()
        inf = highspy.kHighsInf
        for r in roots:
            rows.add([(self.x[i], 1.0) for i in self.by_class.get(r, [])], 1.0, inf)
        for members in self.by_class.values():
            rows.add([(self.x[i], 1.0) for i in members], -inf, 1.0)
        for i in self.usable:
            for d in dict.fromkeys(enodes[i].children):
                rows.add([(self.x[m], 1.0) for m in self.by_class.get(d, [])] + [(self.x[i], -1.0)], 0.0, inf)
        for i, producers in self.fusions.items():
            # z_i <= x_i; z_i <= the sum of x_p over its absorbing producers, one class's (or z_p, for a producer itself
            # fused); no other reader of their class chosen
            rows.add([(self.z[i], 1.0), (self.x[i], -1.0)], -inf, 0.0)
            rows.add([(self.z[i], 1.0)] + [(self.z[p] if p in self.z else self.x[p], -1.0) for p in producers], -inf, 0.0)
            for m in self.readers.get(enodes[producers[0]].cls, []):
                if m != i:
                    rows.add([(self.z[i], 1.0), (self.x[m], 1.0)], -inf, 1.0)
        self.highs = _quiet_highs()
        self.highs.setOptionValue("output_flag", False)
        self.highs.setOptionValue("threads", 1)
        # Prices in microseconds, and optimal to a nanosecond: in seconds a whole graph of small nodes is
        # within HiGHS's default absolute gap (1e-6) of any bound, and the solver stopped 3% from the optimum.
        self.highs.setOptionValue("mip_abs_gap", 1e-3)
        n, k = len(self.usable), len(self.fusions)
        micro = [c * 1e6 for c in costs]
        self.objective = np.array([micro[i] for i in self.usable] + [-micro[i] for i in self.fusions])
        self.highs.passModel(_lp(self.objective.tolist(), [1.0] * (n + k), rows, [highspy.HighsVarType.kInteger] * n + [highspy.HighsVarType.kContinuous] * k))

    def start_from(self, pick: dict[int, int], roots: list[int]) -> None:
        """A choice (class -> e-node) as the solver's starting solution, when it is acyclic and every pick usable."""
        import highspy

        def children(c: int) -> tuple[int, ...]:
            if pick.get(c) not in self.x:
                raise ValueError("no usable pick")
            return self.enodes[pick[c]].children

        try:
            order = post_order(roots, children)  # acyclic: then every cycle cut holds too
        except ValueError:
            return
        values = [0.0] * self.highs.getNumCol()
        for c in order:
            values[self.x[pick[c]]] = 1.0
        for i in fused_in(self.enodes, {pick[c] for c in order}, self.fusions):
            values[self.z[i]] = 1.0
        solution = highspy.HighsSolution()
        solution.col_value = values
        solution.value_valid = True
        self.highs.setSolution(solution)

    def solve(self) -> tuple[dict[int, int] | None, bool]:
        import highspy

        self.highs.run()
        solution = self.highs.getSolution()
        if solution.value_valid and not self._consistent(solution.col_value):
            # NOTE: HiGHS 1.16 given a starting solution once reported an optimum of 4.42 and returned the
            # starting solution itself (6.73; the optimum was 6.73 but for a fusion: 6.7296). Solved again
            # without the start it is right: a returned solution is checked against the reported objective.
            self.highs.clearSolver()
            self.highs.run()
            solution = self.highs.getSolution()
        if not solution.value_valid or not self._consistent(solution.col_value):
            return None, False
        values = solution.col_value
        chosen = {}
        for c, members in self.by_class.items():
            picked = [i for i in members if values[self.x[i]] > 0.5]
            if picked:
                chosen[c] = picked[0]
        return chosen, self.highs.getModelStatus() == highspy.HighsModelStatus.kOptimal

    def _consistent(self, values) -> bool:
        """Whether a returned solution's objective is the one the solver reports (within its gaps)."""
        objective = float(np.dot(self.objective, values))
        reported = self.highs.getInfo().objective_function_value
        return abs(objective - reported) <= 1e-6 * max(1.0, abs(reported)) + 1e-3

    def forbid(self, cycle: list[int]) -> None:
        """The cut for a cycle of classes c_1 -> .. -> c_k -> c_1 (c_i reads c_i+1): at most k-1 of them choose an
        e-node reading the next. With one e-node per class, k of them would be the cycle itself."""
        import highspy

        cols = [self.x[m] for j, c in enumerate(cycle) for m in self.by_class.get(c, [])
                if cycle[(j + 1) % len(cycle)] in self.enodes[m].children]
        self.highs.addRow(-highspy.kHighsInf, float(len(cycle) - 1), len(cols), np.array(cols, dtype=np.int32), np.ones(len(cols)))


def _lp(costs: list[float], upper: list[float], rows: _Rows, integrality):
    """A HiGHS model of these columns (lower bounds 0) and rows."""
    import highspy

    lp = highspy.HighsLp()
    lp.num_col_ = len(costs)
    lp.num_row_ = len(rows.lower)
    lp.col_cost_ = np.array(costs, dtype=np.float64)
    lp.col_lower_ = np.zeros(len(costs))
    lp.col_upper_ = np.array(upper, dtype=np.float64)
    lp.row_lower_ = np.array(rows.lower, dtype=np.float64)
    lp.row_upper_ = np.array(rows.upper, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(rows.start, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(rows.index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(rows.value, dtype=np.float64)
    lp.integrality_ = integrality
    return lp


class _Rows:
    """A sparse matrix built row by row (HiGHS's row-wise format), with each row's bounds."""

    def __init__(self):
        self.start, self.index, self.value, self.lower, self.upper = [0], [], [], [], []

    def add(self, entries, lower: float, upper: float) -> None:
        for col, val in entries:
            self.index.append(col)
            self.value.append(val)
        self.start.append(len(self.index))
        self.lower.append(lower)
        self.upper.append(upper)


def _cycles(enodes: list[ENode], chosen: dict[int, int], roots: list[int]) -> list[list[int]]:
    """Cycles of the classes a choice needs (each as c_1 -> .. -> c_k, c_i reading c_i+1): a few per strongly connected
    component, none when the choice is acyclic."""
    import itertools

    import networkx as nx

    g = nx.DiGraph()
    stack, seen = list(roots), set(roots)
    while stack:
        c = stack.pop()
        g.add_node(c)
        for d in enodes[chosen[c]].children if c in chosen else ():
            g.add_edge(c, d)
            if d not in seen:
                seen.add(d)
                stack.append(d)
    found = []
    for component in nx.strongly_connected_components(g):
        if len(component) > 1:
            found += itertools.islice(nx.simple_cycles(g.subgraph(component)), _CUTS_PER_COMPONENT)
    return found


_CUTS_PER_COMPONENT = 8


def _short_cycles(enodes: list[ENode], usable: list[int]) -> list[list[int]]:
    """The cycles of two and three classes in the e-graph's class graph (c -> d when an e-node of c reads d), each once."""
    reads: dict[int, set[int]] = {}
    for i in usable:
        reads.setdefault(enodes[i].cls, set()).update(enodes[i].children)
    found = []
    for c, ds in reads.items():
        for d in ds:
            if d <= c:
                continue  # each cycle from its smallest class
            back = reads.get(d, ())
            if c in back:
                found.append([c, d])
            found += [[c, d, e] for e in back if e > c and c in reads.get(e, ())]
    return found


def fused_in(enodes: list[ENode], picked: set[int], fusions: dict[int, list[int]]) -> set[int]:
    """The fused e-nodes that a choice (the e-nodes picked) runs inside their producer: an absorbing producer picked
    (or, itself fused, run so) and no other picked e-node reading its class."""
    readers: dict[int, list[int]] = {}
    for m in picked:
        for d in set(enodes[m].children):
            readers.setdefault(d, []).append(m)
    found: dict[int, bool] = {}

    def fused(i: int) -> bool:
        if i not in found:
            found[i] = False  # while its producers are looked at
            producers = fusions[i]
            found[i] = (i in picked and any(fused(p) if p in fusions else p in picked for p in producers)
                        and not any(m != i for m in readers.get(enodes[producers[0]].cls, [])))
        return found[i]

    return {i for i in fusions if fused(i)}


def _quiet_highs():
    """A HiGHS instance; the banner the library prints on first use goes to /dev/null, not to taso's output."""
    import highspy

    if not _BANNER_SHOWN:
        import os
        import sys

        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 1)
                h = highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _BANNER_SHOWN.append(True)
        return h
    return highspy.Highs()


def post_order(roots: list[int], children) -> list[int]:
    """The classes the roots need, each after the classes it reads (``children(c)``: the classes c's chosen e-node reads).

    Raises:
        ValueError: the choice reads a class it is computed from (a cycle).
    """
    order: list[int] = []
    done: set[int] = set()
    on_path: set[int] = set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            c, expanded = stack.pop()
            if expanded:
                on_path.discard(c)
                done.add(c)
                order.append(c)
                continue
            if c in done:
                continue
            if c in on_path:
                raise ValueError("the choice has a cycle")
            on_path.add(c)
            stack.append((c, True))
            stack.extend((d, False) for d in reversed(children(c)) if d not in done)
    return order


_BANNER_SHOWN: list[bool] = []
