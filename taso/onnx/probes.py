"""The small ONNX models taso builds to measure with: one place where the cost models' protobufs are made.

* a chain of negations, the wall clock's reference (:func:`negations`);
* copies of a node's model side by side (:func:`with_copies`, :func:`cycled_copies` reading weights that change
  between copies), the same run after a product that splits over the threads (:func:`spun_up`, :func:`split_product`);
* a reference kernel and a floor added beside a node for the profiler (:func:`add_reference`, :func:`add_floor`);
* a node run cold after an eviction, then warm (:func:`after_eviction`, :func:`cold_then_warm`);
* a chain of states declared in ``value_info`` or not (:func:`state_chain`), a negation after a product
  (:func:`negation_after`).

What is timed, and how, is :mod:`taso.cost`'s; these only build the models.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["negations", "append_copy", "with_copies", "cycled_copies", "SPIN_UP", "spun_up", "split_product", "REFERENCE", "FLOOR",
           "add_reference", "add_floor", "COLD", "WARM", "EVICT", "without_nodes", "after_eviction", "cold_then_warm", "waiting_on",
           "state_chain", "negation_after", "EVICT_ROWS", "EVICT_COLUMNS", "SPIN_UP_SHAPE", "STATE_WIDTH"]


# ---- the wall clock's reference and copies of a node -----------------------------------------------------

def negations(n: int) -> bytes:
    """A chain of ``n`` Neg nodes on one float: nodes that cost nothing but being run."""
    names = ["x"] + [f"r{i}" for i in range(n)]
    nodes = [helper.make_node("Neg", [names[i]], [names[i + 1]]) for i in range(n)]
    graph = helper.make_graph(nodes, "negations", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def append_copy(into: onnx.GraphProto, nodes, prefix: str, renamed: dict[str, str], suffix: str) -> None:
    """Appends a copy of ``nodes`` to ``into``: named ``prefix`` and their index, reading the values ``renamed`` maps
    instead of the originals (the copy's own outputs included), writing their outputs with ``suffix`` appended."""
    for i, node in enumerate(nodes):
        twin = into.node.add()
        twin.CopyFrom(node)
        twin.name = f"{prefix}{i}"
        twin.input[:] = [renamed.get(v, v) for v in node.input]
        twin.output[:] = [f"{v}{suffix}" if v else v for v in node.output]
        renamed.update({v: f"{v}{suffix}" for v in node.output if v})


def with_copies(proto: onnx.ModelProto, copies: int, weights: list[str] | None = None) -> onnx.ModelProto:
    """The model with its nodes ``copies`` times over, each copy reading the same inputs; the graph outputs are the first's.

    With ``weights`` (the main weight's name, then other initializers of its shape), copy ``i`` reads
    ``weights[i % len(weights)]`` in place of the first."""
    many = onnx.ModelProto()
    many.CopyFrom(proto)
    for i in range(1, copies):
        renamed = {weights[0]: weights[i % len(weights)]} if weights else {}
        append_copy(many.graph, proto.graph.node, f"__taso_copy{i}/", renamed, f"~copy{i}")
    return many


def cycled_copies(proto: onnx.ModelProto, weight: str, cycle: int, copies: int) -> onnx.ModelProto | None:
    """``copies`` copies of the model whose copy ``i`` reads the ``i % cycle``-th of ``cycle`` weights shaped as
    ``weight`` (its own values shifted by the weight's number: ONNX Runtime reads equal weights once); None when
    ``weight`` is not one of the model's initializers."""
    found = [t for t in proto.graph.initializer if t.name == weight]
    if not found:
        return None
    values = numpy_helper.to_array(found[0])
    cycled = onnx.ModelProto()
    cycled.CopyFrom(proto)
    names = [weight] + [f"{weight}~cycle{j}" for j in range(1, cycle)]
    cycled.graph.initializer.extend(numpy_helper.from_array(values + values.dtype.type(j), name)
                                    for j, name in enumerate(names[1:], start=1))
    return with_copies(cycled, copies, names)


SPIN_UP = "__taso_spin_up"


SPIN_UP_SHAPE = (256, 1024)  # a per-step product of an LSTM h256: ONNX Runtime splits it over 2 threads


def spun_up(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model run after a product that ONNX Runtime splits over the threads, on an input of its own
    (:data:`SPIN_UP`, fed by :func:`spin_up_feeds`): the model's first float input is read through an Add of a zero
    computed from the product, so that every node reading it runs after the product.

    After a run's first split kernel the workers spin until the run ends (``taso.measure.timing.session_options``), and
    the nodes after it run beside them: at 2 threads a Tanh of 256 floats took 0.50-0.54 us after a product and
    0.42 us in a run with none. Nearly every node of a graph runs after one, so a node is timed so too. (Without the
    Add, ONNX Runtime ran the independent product after the copies.) The Add runs once in every model timed, and
    the differences taken between them cancel it.
    """
    spinning = onnx.ModelProto()
    spinning.CopyFrom(proto)
    graph = spinning.graph
    gated = next((x for x in graph.input if x.type.tensor_type.elem_type == TensorProto.FLOAT), None)
    split = split_product().graph
    product, weight = split.node[0], split.initializer[0]
    zero = numpy_helper.from_array(np.zeros((), np.float32), f"{SPIN_UP}_zero")
    added = [product]
    if gated is not None:
        through = f"{gated.name}{SPIN_UP}_gated"
        for node in graph.node:
            node.input[:] = [through if v == gated.name else v for v in node.input]
        added += [helper.make_node("ReduceMax", [product.output[0]], [f"{SPIN_UP}_max"], keepdims=0, name=f"{SPIN_UP}_max"),
                  helper.make_node("Mul", [f"{SPIN_UP}_max", zero.name], [f"{SPIN_UP}_nothing"], name=f"{SPIN_UP}_nothing"),
                  helper.make_node("Add", [gated.name, f"{SPIN_UP}_nothing"], [through], name=f"{SPIN_UP}_gate")]
    for i, node in enumerate(added):
        graph.node.insert(i, node)
    graph.initializer.extend([weight, zero])
    graph.input.extend(split.input)
    graph.output.extend(split.output)
    return spinning


def split_product(name: str = SPIN_UP) -> onnx.ModelProto:
    """A product that ONNX Runtime splits over 2 threads, ``[1, 256] x [256, 1024]`` on the input ``name``."""
    rows, columns = SPIN_UP_SHAPE
    weight = numpy_helper.from_array(np.full(SPIN_UP_SHAPE, 1.0 / rows, np.float32), f"{name}_weight")
    product = helper.make_node("MatMul", [name, weight.name], [f"{name}_out"], name=name)
    graph = helper.make_graph([product], "split_product", [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, rows])],
                              [helper.make_tensor_value_info(product.output[0], TensorProto.FLOAT, [1, columns])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


# ---- the profiler's reference kernel and floor ------------------------------------------------------------

REFERENCE = "__taso_reference"


FLOOR = "__taso_floor"


@functools.lru_cache(maxsize=1)
def _reference_weight() -> bytes:
    """The reference MatMul's weight, built once: as a list of floats it took 10 ms per measurement (a quarter of a small node's)."""
    values = np.random.default_rng(1).standard_normal(65536).astype(np.float32)
    return helper.make_tensor(f"{REFERENCE}_w", TensorProto.FLOAT, [256, 256], values.tobytes(), raw=True).SerializeToString()


def add_reference(graph: onnx.GraphProto) -> None:
    graph.initializer.add().ParseFromString(_reference_weight())
    graph.input.append(helper.make_tensor_value_info(f"{REFERENCE}_x", TensorProto.FLOAT, [128, 256]))
    graph.output.append(helper.make_tensor_value_info(f"{REFERENCE}_y", TensorProto.FLOAT, [128, 256]))
    graph.node.append(helper.make_node("MatMul", [f"{REFERENCE}_x", f"{REFERENCE}_w"], [f"{REFERENCE}_y"], name=REFERENCE))


def add_floor(graph: onnx.GraphProto, after: str | None = None) -> None:
    """A Neg of one float; run after the value ``after`` where given (the profiler's overhead in the first kernels of a run
    is larger: a floor that ran first took 6-7 us, a 384-float Sigmoid after it 5)."""
    graph.input.append(helper.make_tensor_value_info(f"{FLOOR}_x", TensorProto.FLOAT, [1]))
    graph.output.append(helper.make_tensor_value_info(f"{FLOOR}_y", TensorProto.FLOAT, [1]))
    x = f"{FLOOR}_x" if after is None else waiting_on(graph, f"{FLOOR}_x", TensorProto.FLOAT, after, "floor")
    graph.node.append(helper.make_node("Neg", [x], [f"{FLOOR}_y"], name=FLOOR))


# ---- cold reads: a node after an eviction, then warm ------------------------------------------------------

COLD = "__taso_cold/"


WARM = "__taso_warm/"


EVICT = "__taso_evict"


EVICT_ROWS = 1024  # the eviction's products: [1, 1024] x [1024, n], n up to EVICT_COLUMNS (4 MB weights)


EVICT_COLUMNS = 1024


@functools.lru_cache(maxsize=1)
def _eviction_weight() -> np.ndarray:
    """A 4 MB weight the eviction's products shift by their number (a weight of its own for each)."""
    return (np.random.default_rng(0).standard_normal((EVICT_ROWS, EVICT_COLUMNS)) / 32).astype(np.float32)


def without_nodes(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, int]] | None:
    """A copy of the model with no nodes (its inputs, weights and outputs kept), for copies of its nodes that wait on
    something to be added, and the element type of each computed input; None when it has none a copy can wait with."""
    initializers = {t.name for t in proto.graph.initializer}
    dynamic = {i.name: i.type.tensor_type.elem_type for i in proto.graph.input if i.name not in initializers}
    if not dynamic or any(t in (TensorProto.BOOL, TensorProto.STRING, TensorProto.UNDEFINED) for t in dynamic.values()):
        return None
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.node[:]
    return out, dynamic


def after_eviction(proto: onnx.ModelProto, evict_bytes: int) -> onnx.ModelProto | None:
    """The model's nodes (named ``COLD...``) after products ``EVICT_x @ E_i`` over ``evict_bytes`` of weights (none for
    0); each computed input waits on them (the input plus zero times one element of their result), so ONNX Runtime
    runs the eviction, then the model. None when the model has no computed input to wait with."""
    emptied = without_nodes(proto)
    if emptied is None:
        return None
    out, dynamic = emptied
    g = out.graph
    g.input.append(helper.make_tensor_value_info(f"{EVICT}_x", TensorProto.FLOAT, [1, EVICT_ROWS]))
    parts, left, weight = [], evict_bytes, _eviction_weight()
    while left >= 4 * EVICT_ROWS:
        columns = min(EVICT_COLUMNS, left // (4 * EVICT_ROWS))
        name = f"{EVICT}_w{len(parts)}"
        # Each product's weight holds values of its own: given the same bytes, ONNX Runtime's products read one
        # buffer (the eviction then measured 2-14 us where distinct weights measured 46-228).
        g.initializer.append(numpy_helper.from_array(weight[:, :columns] + np.float32(len(parts)), name))
        g.node.append(helper.make_node("MatMul", [f"{EVICT}_x", name], [f"{name}_y"], name=f"{EVICT}_product{len(parts)}"))
        parts.append(f"{name}_y")
        left -= 4 * EVICT_ROWS * columns
    if len(parts) > 1:
        g.node.append(helper.make_node("Concat", parts, [f"{EVICT}_all"], axis=1, name=f"{EVICT}_all"))
        read = f"{EVICT}_all"
    else:
        read = parts[0] if parts else f"{EVICT}_x"
    g.node.append(helper.make_node("ReduceMax", [read], [f"{EVICT}_streamed"], keepdims=0, name=f"{EVICT}_read"))
    append_copy(g, proto.graph.node, COLD, {v: waiting_on(g, v, dynamic[v], f"{EVICT}_streamed", "cold") for v in dynamic}, "")
    return out


def cold_then_warm(proto: onnx.ModelProto, after: str | None = None) -> onnx.ModelProto | None:
    """The model's nodes twice: after a ReduceMax reads a graph input ``EVICT_x`` (or the value ``after``) through
    the caches (named ``COLD...``), then again right after them (``WARM...``). Each copy's computed inputs wait on
    what must run before it (the input plus zero times one element of it), so ONNX Runtime runs: eviction, cold
    copy, warm copy."""
    emptied = without_nodes(proto)
    if emptied is None:
        return None
    out, dynamic = emptied
    g = out.graph
    if after is None:
        g.input.append(helper.make_tensor_value_info(f"{EVICT}_x", TensorProto.FLOAT, None))
    g.node.append(helper.make_node("ReduceMax", [after or f"{EVICT}_x"], [f"{EVICT}_streamed"], keepdims=0, name=f"{EVICT}_read"))

    append_copy(g, proto.graph.node, COLD, {v: waiting_on(g, v, dynamic[v], f"{EVICT}_streamed", "cold") for v in dynamic}, "")
    first_output = proto.graph.output[0].name
    append_copy(g, proto.graph.node, WARM, {v: waiting_on(g, v, dynamic[v], first_output, "warm") for v in dynamic}, "~warm")
    for output in proto.graph.output:
        twin = g.output.add()
        twin.CopyFrom(output)
        twin.name = f"{output.name}~warm"
    return out


def waiting_on(g: onnx.GraphProto, value: str, dtype: int, on: str, tag: str) -> str:
    """``value`` + 0 * (one element of ``on``): ``value`` again, computed only once ``on`` is."""
    if not any(t.name == f"{EVICT}_zero" for t in g.initializer):
        g.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), f"{EVICT}_start"),
                              numpy_helper.from_array(np.array([1], np.int64), f"{EVICT}_end"),
                              numpy_helper.from_array(np.array(0, np.float32), f"{EVICT}_zero")])
    names = [f"{EVICT}/{tag}/{value}/{i}" for i in range(6)]
    g.node.extend([
        helper.make_node("Cast", [on], [names[0]], to=TensorProto.FLOAT, name=names[0]),
        helper.make_node("Flatten", [names[0]], [names[1]], axis=0, name=names[1]),
        helper.make_node("Slice", [names[1], f"{EVICT}_start", f"{EVICT}_end", f"{EVICT}_end"], [names[2]], name=names[2]),
        helper.make_node("ReduceSum", [names[2]], [names[3]], keepdims=0, name=names[3]),
        helper.make_node("Mul", [names[3], f"{EVICT}_zero"], [names[4]], name=names[4]),
        helper.make_node("Cast", [names[4]], [names[5]], to=dtype, name=names[5]),
        helper.make_node("Add", [value, names[5]], [f"{value}~{tag}"], name=f"{EVICT}/{tag}/{value}/add"),
    ])
    return f"{value}~{tag}"


# ---- declared state shapes, the wake-up of split kernels --------------------------------------------------

STATE_WIDTH = 128


def state_chain(values: int, declared: bool, width: int = STATE_WIDTH) -> onnx.ModelProto:
    """A chain from zeros shaped as its input (``ConstantOfShape(Shape(x))``, the way an exported recurrent cell's
    state starts), adding ``x`` and taking the Tanh in turns, ``values`` nodes in all. The batch is symbolic, so ONNX
    Runtime sizes none of the chain's values, unless ``declared`` lists them all in ``value_info`` as the dynamo
    exporter does."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("ConstantOfShape", ["shape"], ["v0"])]
    for i in range(1, values + 1):
        op, inputs = ("Add", [f"v{i - 1}", "x"]) if i % 2 else ("Tanh", [f"v{i - 1}"])
        nodes.append(helper.make_node(op, inputs, [f"v{i}"]))
    row = ["batch", width]
    graph = helper.make_graph(nodes, "state_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, row)],
                              [helper.make_tensor_value_info(f"v{values}", TensorProto.FLOAT, row)])
    if declared:
        graph.value_info.extend(helper.make_tensor_value_info(f"v{i}", TensorProto.FLOAT, row) for i in range(values))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def negation_after(product: onnx.ModelProto) -> onnx.ModelProto:
    """A Neg of ``product``'s input: a run that splits nothing."""
    given = product.graph.input[0]
    taken = onnx.ValueInfoProto()
    taken.CopyFrom(given)
    taken.name = "nothing"
    graph = helper.make_graph([helper.make_node("Neg", [given.name], [taken.name])], "nothing", [given], [taken])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model
