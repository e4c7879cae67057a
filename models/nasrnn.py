"""NasRNN: the recurrent cell found by neural architecture search (Zoph and Le 2017).

The cell is unrolled over a fixed number of time steps, as a framework exports a
recurrent network for a static sequence length. Each step forms eight gates
``x_t @ W_i + h @ U_i`` (MatMul, MatMul, Add) and combines them in a fixed tree of
Sigmoid, Tanh and Relu activations joined by Add and Mul. The combination tree follows
TASO's benchmark (``examples/nasrnn.py`` in jiazhihao/TASO). The sixteen weight
matrices are shared by every step, so the sixteen MatMuls of a step, and the same
MatMul across steps, are the merge opportunities a graph optimiser looks for.

Inputs are one tensor per step, ``x_0 .. x_{steps-1}`` of shape [batch, hidden]; the
initial state is a learned initializer ``h0`` of shape [1, hidden], as in TASO,
broadcast over the batch by the first step's Add; the output ``hidden`` is the state
after the last step.
"""

from __future__ import annotations

import math

from ._builder import GraphBuilder, Value

_GATES = 8


def _cell(b: GraphBuilder, x: Value, h: Value, weights: list[tuple[Value, Value]]) -> Value:
    """One step of the NAS cell: eight gates, then the searched combination tree."""
    t = [b.op("Add", b.op("MatMul", x, w), b.op("MatMul", h, u)) for w, u in weights]

    def act(kind: str, v: Value) -> Value:
        return b.op(kind, v)

    m0 = b.op("Add", act("Relu", t[0]), act("Sigmoid", t[3]))
    m1 = b.op("Add", act("Sigmoid", t[1]), act("Tanh", t[2]))
    m2 = b.op("Mul", act("Sigmoid", t[4]), act("Tanh", t[5]))
    m3 = b.op("Mul", act("Sigmoid", t[6]), act("Relu", t[7]))
    m4 = b.op("Add", act("Sigmoid", m1), act("Tanh", m2))
    m5 = b.op("Mul", act("Tanh", m0), act("Tanh", m3))
    m6 = b.op("Mul", act("Tanh", m4), act("Tanh", m5))
    return act("Tanh", m6)


def nasrnn(b: GraphBuilder, *, batch: int = 1, steps: int = 5, hidden: int = 512) -> None:
    """NasRNN unrolled over ``steps`` time steps with shared weights.

    Args:
        b: The builder receiving the graph.
        batch: Sequences per inference.
        steps: Time steps to unroll (5 in TASO).
        hidden: Width of the input and of the hidden state (512 in TASO).
    """
    std = 1.0 / math.sqrt(hidden)  # LeCun: each gate sums two unit-variance products
    weights = []
    for gate in range(_GATES):
        with b.scope(f"gate_{gate}"):
            weights.append(
                (b.param("W", (hidden, hidden), std), b.param("U", (hidden, hidden), std))
            )
    h = b.param_uniform("h0", (1, hidden), -1.0, 1.0)
    xs = [b.input(f"x_{step}", (batch, hidden)) for step in range(steps)]
    for step, x in enumerate(xs):
        with b.scope(f"step_{step}"):
            h = _cell(b, x, h, weights)
    b.output(h, "hidden")
