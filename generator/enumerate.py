"""Enumeration: every graph of up to ``max_ops`` operators over the input pool, depth first.

A graph grows one operator at a time; each step evaluates only the new operator's outputs
(exactly, memoised by :class:`~taso.generator.fingerprint.ExactEvaluator`). Four rules keep
the search small:

* **No duplicate tensors.** A step whose output equals (by fingerprint) a tensor already
  present is dropped: the graph would compute something twice, or compute an input.
* **Canonical operator order.** A set of operators can be added in many orders. Only the
  greedy order is kept, the one that always adds the smallest available operator (by
  ``(variant, sizes, argument indices)``). Appending ``op`` after ``s1..sk`` keeps the
  order greedy exactly when ``op`` is larger than every ``sj`` placed after the last
  operator it reads from. So every graph is visited once.
* **No unread constants.** A graph that leaves a constant (identity matrix, all-ones...)
  unread pairs only with a graph holding the same constant, a pair the common-subgraph
  stage drops; such graphs are not recorded (but still grown: a later operator may read it).
* **Inputs in class order.** Tensors of one class are interchangeable, so only graphs
  whose inputs of each class form a prefix (x1; x1 and x2; ...) are recorded: any other
  graph, and any pair it belongs to, is a renaming of a recorded one (both graphs of a
  pair read the same inputs). Input renaming is undone later anyway
  (:mod:`~taso.generator.prune`); this rule avoids enumerating the renamings. While a
  graph grows, its inputs may leave gaps (x2 without x1) as long as the remaining
  operators can still fill them.

A graph's outputs are its operators' outputs that no operator reads; its key is a digest of
their fingerprints (:func:`~taso.generator.fingerprint.graph_key`). The graphs under each
first operator (:meth:`Enumerator.roots`) form a disjoint subtree, the unit of parallel
work (:mod:`~taso.generator.parallel`).

The last operator, which makes nearly all graphs, takes a faster path that finds the same
graphs in the same order: its steps come from a table per kind of graph, filtered by the
rules above with array operations (:mod:`~taso.generator.steps`), and the steps of sibling
parents are evaluated together (:mod:`~taso.generator.leaves`). docs/generator-speed.md
records the profile that led there and the measurements.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property, partial

import numpy as np

from .fingerprint import ExactEvaluator, graph_key, tensor_fingerprint
from .leaves import LeafEvaluations, Leaves, Parent
from .opset import Variant, build_variants
from .pool import InputPool
from .settings import Settings
from .steps import OrderCode, StepTable

__all__ = ["OpRef", "Visitor", "GraphSpec", "Leaves", "Context", "Enumerator"]  # Leaves: from .leaves

# The step tables kept (their rows, all tables together) before they are dropped and built again as needed: about 300
# bytes a row, so a worker keeps at most a few hundred MB of them.
TABLE_ROWS_LIMIT = 1_000_000

# One operator of an enumerated graph: (variant index, split sizes or (), argument tensor
# indices). Tensor indices count the pool first, then operator outputs in creation order.
OpRef = tuple[int, tuple[int, ...], tuple[int, ...]]

# visit(key, ops, last, outputs): one enumerated graph — its key, its operators (``ops``,
# plus ``last`` when not None), and its output tensor indices sorted by fingerprint. The
# lists are the enumerator's own: copy what you keep.
Visitor = Callable[[int, list, "OpRef | None", list], None]


@dataclass(frozen=True, order=True)
class GraphSpec:
    """An enumerated graph, compactly: its operators and its outputs in fingerprint order.

    Attributes:
        ops: the operators in canonical order.
        outputs: tensor indices of the outputs, sorted by fingerprint, so the i-th output
            of two graphs with the same key are equal tensors.
    """

    ops: tuple[OpRef, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class Context:
    """The pool and variant table that graph specs refer to.

    :meth:`bind` memoises :meth:`Variant.bind`: decoding thousands of graphs binds the same
    few (variant, shapes) again and again.
    """

    pool: InputPool
    variants: tuple[Variant, ...]
    _bound: dict = field(default_factory=dict, repr=False, compare=False)

    def bind(self, variant: Variant, shapes: tuple, sizes: tuple = ()):
        key = (variant.index, shapes, sizes)
        if key not in self._bound:
            self._bound[key] = variant.bind(shapes, sizes)
        return self._bound[key]


class Enumerator:
    """The depth-first enumeration state over one pool and variant table.

    Args:
        settings: what to enumerate.
        cache_limit: see :class:`~taso.generator.fingerprint.ExactEvaluator` (0: no memo).
        prefilter_shapes: try only the shapes each argument could take (see :meth:`_possible_shapes`).

    Attributes:
        pool: the input pool.
        variants: the variant table.
    """

    # Record only graphs whose inputs form prefixes of their classes (off: every renaming, for tests).
    inputs_in_class_order = True

    def __init__(self, settings: Settings, cache_limit: int = 200_000, prefilter_shapes: bool = True):
        self.settings = settings
        self.prefilter_shapes = prefilter_shapes  # False: bind every shape tuple, as before (benchmarks/generator/bench_enumerate.py)
        self.pool = InputPool(settings.classes)
        self.variants: tuple[Variant, ...] = build_variants(settings.ops, self.pool)
        self.evaluator = ExactEvaluator(cache_limit)
        self._split_variants = [v for v in self.variants if v.splits]
        self._combo_cache: dict[tuple, list] = {}
        self._pool_shape_memo: dict = {}
        residues = self.pool.residues(settings.seed)
        n = self.pool_size = len(self.pool)  # read on every step: InputPool.__len__ was 2 % of the time
        # Per-tensor state (the pool first, then operator outputs).
        self.fps: list[int] = [tensor_fingerprint(r) for r in residues]
        self.arrays: list[np.ndarray] = residues
        self.shapes: list[tuple[int, ...]] = [t.shape for t in self.pool.types]
        self.producer: list[int] = [-1] * n
        self.roles: list[str] = list(self.pool.roles)
        self.constant: list[bool] = [False] * n  # produced by a constant operator (no inputs)
        self.uses: list[int] = [0] * n
        self.by_shape: dict[tuple[int, ...], list[int]] = {}
        for t, shape in enumerate(self.shapes):
            self.by_shape.setdefault(shape, []).append(t)
        self.fpset: set[int] = set(self.fps)
        self._pool_fps = frozenset(self.fps)
        # Per-operator state.
        self.ops: list[OpRef] = []
        self.boundaries: list[tuple[int, int]] = []
        self.outputs: set[int] = set()  # operator outputs nothing reads yet
        self.used = 0  # bit mask of pool tensors read
        self._used_stack: list[int] = []
        self._max_arity = max((v.arity for v in self.variants), default=0)
        self._gap_memo: dict[int, int] = {}
        # Step tables (see :mod:`~taso.generator.steps`), one per kind of graph, and what filters them.
        self._tables: dict[tuple, StepTable] = {}
        self._table_rows = 0
        largest_dim = max((max(c.shape, default=1) for c in self.pool.classes), default=1)
        self._order_code = OrderCode(len(self.variants), n + 4 * settings.max_ops + 1, (settings.max_ops + 1) * largest_dim + 1,
                                     self._max_arity)
        self._class_starts = sum(1 << start for start, _ in self.pool.class_spans)
        self._leaf_memo: dict[tuple, tuple[int, ...]] = {}
        self._leaf_memo_limit = cache_limit

    @cached_property
    def context(self) -> Context:
        """The pool and variant table, with a memo of bindings shared by everything that decodes graphs."""
        return Context(self.pool, self.variants)

    # ---- candidate steps ---------------------------------------------------------------------
    def _combos(self) -> list:
        """(variant, argument shapes, params, output shapes) valid for the shapes now present."""
        signature = tuple(sorted(s for s, ts in self.by_shape.items() if ts))
        combos = self._combo_cache.get(signature)
        if combos is None:
            combos = []
            for v in self.variants:
                if v.splits:
                    continue
                for shapes in _shape_tuples(signature, [self._possible_shapes(v, k, signature) for k in range(v.arity)], v.commutative):
                    bound = self.context.bind(v, shapes)
                    if bound is not None:
                        combos.append((v, shapes, bound[0], bound[1]))
            self._combo_cache[signature] = combos
        return combos

    def _possible_shapes(self, v: Variant, position: int, signature: tuple) -> tuple:
        """The shapes present that argument ``position`` of ``v`` could take, in signature order: of a rank its policy
        accepts, and, for a rule that takes pool tensors only, of a pool tensor it accepts. A shape tuple outside
        these either binds to nothing or finds no tensor, so leaving it out changes no step (the default op set's
        3-operator run bound 1.9 M shape tuples, nearly all refused)."""
        if not self.prefilter_shapes:
            return signature
        rule = v.args[position]
        ranks = v.ranks[position] if v.ranks is not None else None
        pool_shapes = self._pool_shapes(rule) if rule.origin == "pool" else None
        return tuple(s for s in signature if (ranks is None or len(s) in ranks) and (pool_shapes is None or s in pool_shapes))

    def _pool_shapes(self, rule) -> frozenset:
        shapes = self._pool_shape_memo.get(rule)
        if shapes is None:
            shapes = self._pool_shape_memo[rule] = frozenset(self.shapes[t] for t in range(self.pool_size) if rule.accepts(self.roles[t], True))
        return shapes

    def steps(self, prefilter: bool = True) -> Iterator[tuple[Variant, tuple, tuple, object, tuple]]:
        """Every operator application the policies allow on the current graph.

        Two cheap filters run before the exact checks of :meth:`admissible`: pool tensors
        that would leave more gaps in their class than the remaining operators can fill are
        skipped, and so are steps that cannot keep the canonical order by their variant
        alone (see :meth:`_must_read`).

        Args:
            prefilter: apply those two filters; without them the steps depend only on the
                shapes and roles of the tensors present (what a :class:`StepTable` lists).

        Yields:
            (variant, split sizes, argument tensor indices, params, output shapes).
        """
        n_pool, roles, by_shape = self.pool_size, self.roles, self.by_shape
        reachable = self._reachable_pool() if prefilter else range(n_pool)
        must_read = self._must_read() if prefilter else lambda vi: None
        lists: dict[tuple, list[int]] = {}

        def candidates(shape, rule) -> list[int]:
            got = lists.get((shape, rule))
            if got is None:
                got = lists[(shape, rule)] = [t for t in by_shape.get(shape, ()) if (t >= n_pool or t in reachable)
                                              and rule.accepts(roles[t], t < n_pool)]
            return got

        for v, shapes, params, out_shapes in self._combos():
            arg_lists = [candidates(shape, rule) for shape, rule in zip(shapes, v.args)]
            for args in _arg_tuples(arg_lists, v.commutative and shapes[0] == shapes[1], must_read(v.index)):
                yield v, (), args, params, out_shapes
        for sizes in sorted(set(self.boundaries)):
            for v in self._split_variants:
                for shape in list(by_shape):
                    bound = self.context.bind(v, (shape,), sizes)
                    if bound is None:
                        continue
                    for (t,) in _arg_tuples([candidates(shape, v.args[0])], False, must_read(v.index)):
                        yield v, sizes, (t,), bound[0], bound[1]

    def _gaps(self, used: int) -> int:
        """How many unused tensors lie before a used one of the same class (0: inputs form prefixes)."""
        if not self.inputs_in_class_order:
            return 0
        gaps = self._gap_memo.get(used)
        if gaps is None:
            gaps = 0
            for start, count in self.pool.class_spans:
                m = used >> start & ((1 << count) - 1)
                gaps += m.bit_length() - bin(m).count("1")
            self._gap_memo[used] = gaps
        return gaps

    def _gap_budget(self) -> int:
        """The gaps a step may leave: what the operators after it can still fill."""
        return (self.settings.max_ops - len(self.ops) - 1) * self._max_arity

    def _must_read(self) -> Callable[[int], frozenset[int] | None]:
        """For a variant index, the tensors a step of that variant must read one of (None: no need).

        A step whose last dependency is operator d must come after every later operator in
        the canonical order, so its variant index must be at least theirs. Hence a variant
        smaller than some operator's must read an output of that operator or a later one.
        """
        later_max = [-1] * (len(self.ops) + 1)  # later_max[j]: the largest variant index of ops j..
        for j in range(len(self.ops) - 1, -1, -1):
            later_max[j] = max(later_max[j + 1], self.ops[j][0])
        if later_max[0] < 0:
            return lambda vi: None
        outputs_from = [frozenset(t for t in range(self.pool_size, len(self.fps)) if self.producer[t] >= j) for j in range(len(self.ops))]
        memo: dict[int, frozenset[int] | None] = {}

        def must_read(vi: int) -> frozenset[int] | None:
            if vi not in memo:
                # the first op j with nothing larger than vi after it: a step reading an output of op j-1 or later may pass
                first = next(j for j in range(len(self.ops) + 1) if later_max[j] <= vi)
                memo[vi] = None if first == 0 else outputs_from[first - 1]
            return memo[vi]

        return must_read

    def _reachable_pool(self) -> frozenset[int]:
        """Pool tensors a step may read without leaving more gaps than the remaining operators can fill.

        The step's other arguments may fill up to ``arity - 1`` gaps themselves.
        """
        budget = self._gap_budget() + self._max_arity - 1
        return frozenset(t for t in range(self.pool_size) if self.used >> t & 1 or self._gaps(self.used | 1 << t) <= budget)

    def admissible(self, key: OpRef) -> int | None:
        """The usage mask after adding this operator, or None when the step breaks canonical order or class order."""
        _, _, args = key
        producer, ops = self.producer, self.ops
        last_dep = -1
        for t in args:
            if producer[t] > last_dep:
                last_dep = producer[t]
        for j in range(last_dep + 1, len(ops)):
            if ops[j] >= key:
                return None
        used, n_pool = self.used, self.pool_size
        for t in args:
            if t < n_pool:
                used |= 1 << t
        if used != self.used and self._gaps(used) > self._gap_budget():
            return None
        return used

    def evaluate(self, v: Variant, sizes: tuple, args: tuple, params) -> list[tuple[int, np.ndarray]] | None:
        """The new tensors of a step, or None when one duplicates a tensor already present."""
        outs = self.evaluator.apply(v, sizes, params, [self.fps[t] for t in args], [self.arrays[t] for t in args])
        fpset = self.fpset
        if any(f in fpset for f, _ in outs) or (len(outs) > 1 and len({f for f, _ in outs}) < len(outs)):
            return None
        return outs

    # ---- state changes ------------------------------------------------------------------------
    def push(self, v: Variant, sizes: tuple, args: tuple, outs, out_shapes, used: int) -> None:
        """Adds an operator and its output tensors (undo with :meth:`pop`)."""
        op_index = len(self.ops)
        self.ops.append((v.index, sizes, args))
        role = "data" if any(self.roles[t] == "data" for t in args) else "weight"
        for t in args:
            if self.uses[t] == 0 and self.producer[t] >= 0:
                self.outputs.discard(t)
            self.uses[t] += 1
        for (fp, arr), shape in zip(outs, out_shapes):
            t = len(self.fps)
            self.fps.append(fp)
            self.arrays.append(arr)
            self.shapes.append(shape)
            self.producer.append(op_index)
            self.roles.append(role)
            self.constant.append(not args)
            self.uses.append(0)
            self.by_shape.setdefault(shape, []).append(t)
            self.fpset.add(fp)
            self.outputs.add(t)
        if v.op.name == "concat":
            axis = v.params["axis"]
            self.boundaries.append((self.shapes[args[0]][axis], self.shapes[args[1]][axis]))
        self._used_stack.append(self.used)
        self.used = used

    def pop(self) -> None:
        """Undoes the last :meth:`push`."""
        vi, sizes, args = self.ops.pop()
        op_index = len(self.ops)
        while self.producer and self.producer[-1] == op_index:
            t = len(self.fps) - 1
            self.fpset.discard(self.fps.pop())
            self.arrays.pop()
            self.by_shape[self.shapes.pop()].pop()
            self.producer.pop()
            self.roles.pop()
            self.constant.pop()
            self.uses.pop()
            self.outputs.discard(t)
        for t in args:
            self.uses[t] -= 1
            if self.uses[t] == 0 and self.producer[t] >= 0:
                self.outputs.add(t)
        if self.variants[vi].op.name == "concat":
            self.boundaries.pop()
        self.used = self._used_stack.pop()

    # ---- traversal ------------------------------------------------------------------------------
    def roots(self) -> list[OpRef]:
        """The first operators of all graphs, in canonical order (the units of parallel work)."""
        return [(v.index, sizes, args) for v, sizes, args, *_ in self._admissible_steps()]

    def _admissible_steps(self):
        for v, sizes, args, params, out_shapes in self.steps():
            used = self.admissible((v.index, sizes, args))
            if used is None:
                continue
            outs = self.evaluate(v, sizes, args, params)
            if outs is not None:
                yield v, sizes, args, params, out_shapes, outs, used

    def push_root(self, root: OpRef) -> None:
        """Pushes a first operator from :meth:`roots` (what :meth:`walk` starts from; shards start there too)."""
        vi, sizes, args = root
        v = self.variants[vi]
        params, out_shapes = self.context.bind(v, tuple(self.shapes[t] for t in args), sizes)
        used = self.admissible(root)
        outs = self.evaluate(v, sizes, args, params)
        assert used is not None and outs is not None, "not a root operator"
        self.push(v, sizes, args, outs, out_shapes, used)

    def walk(self, root: OpRef, visit: Visitor, leaves: Callable[[Leaves], None] | None = None) -> None:
        """Enumerates every graph whose first operator is ``root``.

        Args:
            root: a first operator from :meth:`roots`.
            visit: called once per graph whose inputs form prefixes (see :data:`Visitor`).
            leaves: when given, called instead of ``visit`` with the graphs of ``max_ops``
                operators, a parent's at a time (nearly all graphs: one call per graph costs
                more than finding it).
        """
        if leaves is None:
            leaves = partial(_visit_each, visit)
        self.push_root(root)
        try:
            self._record(visit)
            self._grow(visit, leaves)
        finally:
            self.pop()

    def _record(self, visit: Visitor) -> None:
        if self._gaps(self.used) or any(self.constant[t] for t in self.outputs):
            return
        fps = self.fps
        pairs = sorted((fps[t], t) for t in self.outputs)
        visit(graph_key([f for f, _ in pairs]), self.ops, None, [t for _, t in pairs])

    def _grow(self, visit: Visitor, leaves: Callable[[Leaves], None] | None = None) -> None:
        if leaves is None:
            leaves = partial(_visit_each, visit)
        if len(self.ops) >= self.settings.max_ops:  # a root alone already fills --max-ops 1
            return
        if len(self.ops) + 1 == self.settings.max_ops:
            self._grow_last(leaves)
            return
        if len(self.ops) + 2 == self.settings.max_ops:
            self._grow_parents(visit, leaves)
            return
        # NOTE: materialised, because pushing a step changes the state the steps are drawn from.
        for v, sizes, args, _params, out_shapes, outs, used in list(self._admissible_steps()):
            self.push(v, sizes, args, outs, out_shapes, used)
            self._record(visit)
            self._grow(visit, leaves)
            self.pop()

    def _table(self) -> StepTable:
        """The step table of the current kind of graph: its operator outputs' shapes, roles and producers, and its concat boundaries.

        The pool is the same in every graph, so shapes, roles and boundaries decide every step
        :meth:`steps` lists without its prefilters, and in which order (for splits, the order
        ``by_shape`` first saw the shapes, which never changes once seen); the producers decide
        each step's last dependency.
        """
        n_pool = self.pool_size
        kind = (tuple(zip(self.shapes[n_pool:], self.roles[n_pool:], self.producer[n_pool:])), tuple(sorted(set(self.boundaries))))
        table = self._tables.get(kind)
        if table is None:
            if self._table_rows >= TABLE_ROWS_LIMIT:
                self._tables.clear()
                self._table_rows = 0
            table = self._tables[kind] = StepTable.build(self._step_blocks(), self.producer, n_pool, self._max_arity,
                                                         self._order_code, self._class_starts)
            self._table_rows += len(table)
        return table

    def _step_blocks(self) -> list[tuple[tuple, list[tuple[int, ...]]]]:
        """The steps of :meth:`steps` without its prefilters, in its order, as the argument tuples of each
        (variant, sizes, params, output shapes): what a :class:`StepTable` is built from."""
        n_pool, roles, by_shape = self.pool_size, self.roles, self.by_shape
        lists: dict[tuple, list[int]] = {}

        def candidates(shape, rule) -> list[int]:
            got = lists.get((shape, rule))
            if got is None:
                got = lists[(shape, rule)] = [t for t in by_shape.get(shape, ()) if rule.accepts(roles[t], t < n_pool)]
            return got

        blocks = []
        for v, shapes, params, out_shapes in self._combos():
            args = list(_arg_tuples([candidates(shape, rule) for shape, rule in zip(shapes, v.args)], v.commutative and shapes[0] == shapes[1], None))
            if args:
                blocks.append(((v, (), params, out_shapes), args))
        for sizes in sorted(set(self.boundaries)):
            for v in self._split_variants:
                for shape in list(by_shape):
                    bound = self.context.bind(v, (shape,), sizes)
                    if bound is not None and candidates(shape, v.args[0]):
                        blocks.append(((v, sizes, *bound), [(t,) for t in candidates(shape, v.args[0])]))
        return blocks

    def _suffix_max(self) -> np.ndarray:
        """``[j]``: the largest order code among operators j, j+1, ... (-1 past the last one)."""
        codes = [self._order_code(op) for op in self.ops]
        suffix = [-1] * (len(codes) + 1)
        for j in range(len(codes) - 1, -1, -1):
            suffix[j] = max(suffix[j + 1], codes[j])
        return np.array(suffix, dtype=np.int64)

    def _last_rows(self, table: StepTable) -> np.ndarray:
        """The rows of ``table`` that :meth:`admissible` accepts as the last operator and that read every unread constant.

        No gap budget is left at the last operator: the pool tensors read must form prefixes
        of their classes. (Before issue 27 a last step that read no new pool tensor kept the
        gaps its parent left, and two graphs in three at depth 3 were such renamings.)
        """
        if self.inputs_in_class_order:
            keep = table.last_candidates(self.used) & table.in_order(self._suffix_max())
        else:
            keep = (table.arity > 0) & table.in_order(self._suffix_max())
        n_pool = self.pool_size
        unread = sum(1 << (t - n_pool) for t in self.outputs if self.constant[t])
        if unread:
            keep &= table.output_mask & unread == unread
        return np.flatnonzero(keep)

    def _parent(self, evaluations: LeafEvaluations) -> Parent:
        """The current graph as a parent of leaves, its steps' evaluations requested."""
        table, fps, arrays = self._table(), self.fps, self.arrays
        rows = self._last_rows(table)
        requests = evaluations.request_rows(table, rows, table.last_dependency[rows] == len(self.ops) - 1, fps, arrays)
        n_pool = self.pool_size
        return Parent(list(self.ops), table, rows.tolist(), requests.tolist(), [(fps[t], t) for t in self.outputs], frozenset(fps[n_pool:]),
                      len(fps), n_pool)

    def _evaluations(self) -> LeafEvaluations:
        return LeafEvaluations(self.evaluator, self._leaf_memo, self._leaf_memo_limit)

    def _grow_last(self, leaves: Callable[[Leaves], None]) -> None:
        """The last level under one parent (see :mod:`~taso.generator.leaves`)."""
        evaluations = self._evaluations()
        parent = self._parent(evaluations)
        evaluations.run()
        found = parent.leaves(evaluations.results, self._pool_fps)
        if found is not None:
            leaves(found)

    def _grow_parents(self, visit: Visitor, leaves: Callable[[Leaves], None] | None = None, children: slice = slice(None)) -> None:
        """The last two levels: each parent is recorded and its leaves found, the leaves' steps evaluated for all parents at once.

        Visits come in the order of the one-by-one enumeration: each parent, then its leaves.

        Args:
            visit: see :meth:`walk`.
            leaves: see :meth:`walk` (None: ``visit`` each graph).
            children: which of the parents, in order (a shard of the Ray backend takes a slice).
        """
        if leaves is None:
            leaves = partial(_visit_each, visit)
        evaluations = self._evaluations()
        found: list[tuple[list, Parent]] = []
        # NOTE: materialised, because pushing a step changes the state the steps are drawn from.
        for v, sizes, args, _params, out_shapes, outs, used in list(self._admissible_steps())[children]:
            self.push(v, sizes, args, outs, out_shapes, used)
            records: list[tuple] = []
            self._record(lambda key, ops, last, outputs: records.append((key, list(ops), last, list(outputs))))
            found.append((records, self._parent(evaluations)))
            self.pop()
        evaluations.run()
        for records, parent in found:
            for record in records:
                visit(*record)
            batch = parent.leaves(evaluations.results, self._pool_fps)
            if batch is not None:
                leaves(batch)


def _visit_each(visit: Visitor, leaves: Leaves) -> None:
    """Hands each graph of a batch to a one-graph visitor."""
    for key, last, outputs in zip(leaves.keys, leaves.last(), leaves.outputs):
        visit(key, leaves.ops, last, outputs)


def _shape_tuples(signature: tuple, per_position: list[tuple], commutative: bool) -> Iterator[tuple]:
    """Argument shape tuples from each position's possible shapes among the shapes present, in the order the product
    over all of them would give; a commutative binary op takes each pair once, its first shape not after its second in
    ``signature``."""
    if len(per_position) == 2 and commutative:
        first, second = (frozenset(p) for p in per_position)
        for i, a in enumerate(signature):
            if a in first:
                for b in signature[i:]:
                    if b in second:
                        yield (a, b)
    else:
        yield from itertools.product(*per_position)


def _arg_tuples(lists: list[list[int]], unordered: bool, touch: frozenset[int] | None) -> Iterator[tuple]:
    """Argument tuples drawn from per-position candidate lists.

    Args:
        lists: candidate tensors for each argument position.
        unordered: the two arguments form an unordered pair (commutative op, equal shapes).
        touch: when given, only tuples that read at least one of these tensors.
    """
    if not lists:
        yield ()
    elif len(lists) == 1:
        for t in lists[0]:
            if touch is None or t in touch:
                yield (t,)
    elif len(lists) == 2:
        first, second = lists
        touching = second if touch is None else [b for b in second if b in touch]
        for a in first:
            for b in second if touch is None or a in touch else touching:
                if a != b and (not unordered or a < b):
                    yield (a, b)
    else:
        for args in itertools.product(*lists):
            if len(set(args)) == len(args) and (touch is None or any(t in touch for t in args)):
                yield args
