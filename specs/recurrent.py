"""Recurrent cells over a sequence (``taso.ops.recurrent``): ONNX's LSTM and GRU as torch's cells define them.

Two laws define each, and every rule into them is proved from those two:

* one step: the op on one batch of rows (``rows == batch``) is the cell written out as ``nn.LSTMCell`` /
  ``nn.GRUCell``'s exporters write it (products, biases, the gate split, sigmoids and tanhs);
* a longer sequence: the op on ``concat(x, y, axis=0)`` (x's steps, then y's) is the op on y from the states the op
  on x leaves.

Between them they say the op is the loop: a rule that starts a sequence at a cell follows from the first, one that
extends a sequence by the next cell from both. Each law is checked against the NumPy semantics (the loop itself) like
every axiom; ``tests/test_recurrent.py`` checks the ops against ONNX Runtime's LSTM and GRU kernels.
"""

from __future__ import annotations

import numpy as np

from .base import Axiom, OpSpec, all_of
from .terms import dim, eq, ge, op, rank, tensors

__all__ = ["specs", "axioms", "definitions"]

GATES = {"lstm": 4, "gru": 3}
STATES = {"lstm": 2, "gru": 1}


def _cell_rule(kind: str):
    gates, states = GATES[kind], STATES[kind]

    def rule(dims, p):
        x, state, *rest = (list(d) for d in dims)
        others, (wi, bi, wh, bh) = rest[:states - 1], rest[states - 1:]
        if [len(x), len(state), len(wi), len(bi), len(wh), len(bh), *map(len, others)] != [2, 2, 2, 1, 2, 1] + [2] * (states - 1):
            return [[0]] * states, [False]
        batch, hidden = state
        width = gates * hidden
        return [[batch, hidden]] * states, all_of([
            batch >= 1, x[0] >= batch, x[0] % batch == 0, *[d == s for o in others for d, s in zip(o, state)],
            wi[0] == x[1], wi[1] == width, wh[0] == hidden, wh[1] == width, bi[0] == width, bh[0] == width])
    return rule


specs = [
    OpSpec("lstm", (), _cell_rule("lstm"), doc="nn.LSTMCell over the steps stacked in x's rows; the last (h, c)"),
    OpSpec("gru", (), _cell_rule("gru"), doc="nn.GRUCell over the steps stacked in x's rows; the last h"),
]
axioms: list[Axiom] = []  # (the laws are definitions: `definitions`, after every other family's axioms)

lstm, gru = op("lstm"), op("gru")
add, sub, mul, matmul, split, concat = op("add"), op("sub"), op("mul"), op("matmul"), op("split"), op("concat")
sigmoid, tanh = op("sigmoid"), op("tanh")
x, y, h, c, wi, bi, wh, bh = tensors("x y h c wi bi wh bh")
WEIGHTS = (wi, bi, wh, bh)


def _shapes(kind: str, sequence, state) -> tuple:
    """The guards that every input has the shape the op requires (of ``sequence``'s rows a whole number of steps)."""
    hidden, batch = dim(state, 1), dim(state, 0)
    width = hidden * GATES[kind]
    others = (c,) if kind == "lstm" else ()
    ranks = tuple(eq(rank(t), 2) for t in (sequence, state, *others, wi, wh)) + tuple(eq(rank(t), 1) for t in (bi, bh))
    return (*ranks, ge(batch, 1), ge(dim(sequence, 0), batch), eq(dim(sequence, 0) % batch, 0), *[eq(dim(o, k), dim(state, k)) for o in others for k in (0, 1)],
            eq(dim(wi, 0), dim(sequence, 1)), eq(dim(wi, 1), width), eq(dim(wh, 0), hidden), eq(dim(wh, 1), width),
            eq(dim(bi, 0), width), eq(dim(bh, 0), width))


def lstm_cell(step, state, cell) -> tuple:
    """(h', c') of nn.LSTMCell as both exporters write it: the two products and their biases, the gates split i, f, g, o."""
    hidden = dim(state, 1)
    gates = add(add(matmul(state, wh), bh), add(matmul(step, wi), bi))
    i, f, g, o = (split(gates, axis=1, sizes=(hidden,) * 4)[k] for k in range(4))
    new_cell = add(mul(sigmoid(f), cell), mul(sigmoid(i), tanh(g)))
    return mul(sigmoid(o), tanh(new_cell)), new_cell


def gru_cell(step, state):
    """h' of nn.GRUCell as both exporters write it: each product and its bias split r, z, n."""
    hidden = dim(state, 1)
    ir, iz, in_ = (split(add(matmul(step, wi), bi), axis=1, sizes=(hidden,) * 3)[k] for k in range(3))
    hr, hz, hn = (split(add(matmul(state, wh), bh), axis=1, sizes=(hidden,) * 3)[k] for k in range(3))
    r, z = sigmoid(add(hr, ir)), sigmoid(add(hz, iz))
    n = tanh(add(in_, mul(hn, r)))
    return add(mul(sub(state, n), z), n)


def _sample(kind: str, steps: tuple[int, ...]):
    """x (and y) of ``steps`` batches of rows each, states and weights of the op's shapes."""
    def sample(rng: np.random.Generator):
        batch, hidden, features = (int(d) for d in rng.integers(1, 4, size=3))
        width = GATES[kind] * hidden
        valuation = {"h": (batch, hidden), "wi": (features, width), "bi": (width,), "wh": (hidden, width), "bh": (width,)}
        if kind == "lstm":
            valuation["c"] = (batch, hidden)
        for name, count in zip("xy", steps):
            valuation[name] = (count * batch if count else int(rng.integers(1, 4)) * batch, features)
        return valuation
    return sample


def _laws(kind: str) -> list[Axiom]:
    states = (h, c) if kind == "lstm" else (h,)
    applied = lstm if kind == "lstm" else gru
    step = lstm_cell(x, h, c) if kind == "lstm" else (gru_cell(x, h),)
    laws = []
    for k in range(STATES[kind]):
        laws.append(Axiom(f"{kind}-one-step[{k}]", applied(x, *states, *WEIGHTS)[k], step[k], _sample(kind, (1,)),
                          when=(eq(dim(x, 0), dim(h, 0)), *_shapes(kind, x, h)), unfold=True,
                          doc=f"{kind} on one batch of rows is the cell written out"))
        first = applied(x, *states, *WEIGHTS)
        laws.append(Axiom(f"{kind}-sequence[{k}]", applied(concat(x, y, axis=0), *states, *WEIGHTS)[k],
                          applied(y, *[first[j] for j in range(STATES[kind])], *WEIGHTS)[k], _sample(kind, (0, 0)),
                          when=tuple(dict.fromkeys((*_shapes(kind, x, h), *_shapes(kind, y, h)))), trigger="lhs",
                          doc=f"{kind} over x's steps then y's is {kind} over y from the states x leaves"))
    return laws


# (after every other family's axioms in AXIOMS: specs/__init__.py)
definitions = [*_laws("lstm"), *_laws("gru")]
