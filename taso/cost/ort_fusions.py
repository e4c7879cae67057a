"""ONNX Runtime's CPU fusions at ENABLE_ALL, as the ort-cpu cost model knows them: which node runs inside another's kernel
(Conv + BatchNormalization, Conv + activation, MatMul + bias as a Gemm, the five nodes of an exact GELU, a layer or
RMS norm written out), which
Gathers ONNX Runtime runs as one Split, and which residual Adds it makes one SkipLayerNormalization with the
LayerNormalization after them; so that a rewrite does not pay for a fusion the runtime would make anyway, and a
fusion that makes the graph slower is priced as it runs.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx

from ..ir import Graph, Node
from ..onnx.exporter import gemm_pairs
from ..ops import ACTIVATION_OPS
from .model import Neighbourhood
from .residency import graph_run_order, main_weight

__all__ = ["ort_absorbs", "split_gathers", "gather_siblings", "fusion_pass", "gelu_parts", "gelu_anchors_near", "GELU_OPS", "skip_norm_parts", "skip_norm_of", "norms_near",
           "NormParts", "norm_parts", "norm_anchors_near", "NORM_OPS"]


def ort_absorbs(node: Node, around: Neighbourhood) -> bool:
    """ONNX Runtime's CPU fusions at ENABLE_ALL that a per-node price would miss.

    * a BatchNormalization of constant parameters after a Conv of constant weights without an
      activation: ConvBNFusion folds it into the Conv's weights;
    * an activation (Relu, Sigmoid, Tanh) after a Conv without one, or after a BatchNormalization
      folded so: FusedConv;
    * a bias Add after a MatMul of 2-D operands, the bias a constant row (shape ``[N]`` or
      ``[1, N]``): MatMulAddFusion makes them one Gemm;
    * the nodes of a layer norm or an RMS norm written out around its Sqrt: LayerNormFusion and
      SimplifiedLayerNormFusion make them one kernel, priced as the Sqrt (:func:`norm_parts`);
    * the Div, Add and two Muls of an exact GELU around its Erf: GeluFusion makes them one
      Gelu kernel, priced as the Erf; the Pow, Adds and Muls of a tanh GELU around its Tanh:
      FastGeluFusion makes them one FastGelu kernel, the Tanh's price (:func:`gelu_parts`,
      ``OrtCpuCost.shared_price``).

    Each only when the producer's output has no other reader and is not a graph output.
    A rewrite that gives the producer a second reader, or puts a Split between the two,
    pays for the absorbed node again: the +2.7 us per merged step that kept unrolled
    LSTM exports' merges from paying, priced as zero before.
    """
    name = node.op.name
    if name == "batch_norm":
        return _folded_into_conv(node, around)
    if name in GELU_OPS and name not in _GELU_ANCHORS and _in_gelu(node, around):
        return True
    if name in NORM_OPS and name != "sqrt" and _in_norm(node, around):
        return True
    if name in ACTIVATION_OPS:
        data = node.inputs[0]
        producer = around.producer(data)
        if producer is None or not _sole_reader(node, data, around):
            return False
        if producer.op.name == "batch_norm":
            return _folded_into_conv(producer, around)
        return producer.op.name == "conv2d" and producer.params["activation"] == "none"
    if name == "add" and len(node.inputs) == 2:
        for data, bias in (node.inputs, node.inputs[::-1]):
            producer = around.producer(data)
            if (producer is not None and producer.op.name == "matmul" and producer.params["activation"] == "none"
                    and bias in around.consts and _bias_row(around.type(bias).shape, around.type(data).shape)
                    and all(around.type(v).rank == 2 for v in producer.inputs) and _sole_reader(node, data, around)):
                return True
    return False


def split_gathers(gather: Node, around: Neighbourhood) -> list[Node] | None:
    """The Gathers ONNX Runtime's GatherToSplitFusion runs as one Split with ``gather`` (then a Squeeze of each part where
    the indices are scalars), or None: Gathers of one value along one axis, each at a constant single index, one per
    position of that axis (which must be static), whatever else reads the value. Checked on ONNX Runtime 1.32: 3
    Gathers of a 4-long axis stay Gathers; 4 fuse, with another reader of the value or without, from a graph input or a
    node's output; an exporter's unrolled ``x[:, t]`` over all steps fuses so."""
    data = gather.inputs[0]
    rank = around.type(data).rank
    axis = gather.params["axis"] % rank if rank else 0
    size = around.type(data).shape[axis] if rank else None
    if type(size) is not int or size < 2:  # a symbolic size (a Dim) is not static: the fusion needs a fixed count
        return None
    group, seen = [], set()
    for reader in around.readers(data):
        if reader.op.name != "gather" or reader.inputs[0] != data or reader.params["axis"] % rank != axis:
            continue
        index = _single_index(reader, around)
        if index is None:
            return None
        seen.add(index % size)
        group.append(reader)
    return group if len(group) == size and len(seen) == size else None


def gather_siblings(parent: Graph, removed, added) -> dict[int, Node]:
    """The parent's Gathers, not removed, that read what a Gather a rewrite removes or adds reads: whether they run as
    one Split (:func:`split_gathers`) may change with it."""
    gone = {id(n) for n in removed}
    return {id(sibling): sibling for node in (*removed, *added) if node.op.name == "gather"
            for sibling, _ in parent.uses(node.inputs[0]) if sibling.op.name == "gather" and id(sibling) not in gone}


def skip_norm_parts(norm: Node, around: Neighbourhood) -> tuple[Node, ...] | None:
    """The Adds that ONNX Runtime's SkipLayerNormFusion makes one SkipLayerNormalization with ``norm`` (a layer_norm), or
    None: the residual Add it reads, and the bias Add before that one where there is one.

    As ONNX Runtime 1.32 matches them: a LayerNormalization (opset 17) over the last axis of a 3-D float tensor whose
    input is an Add; the Add's two inputs 3-D of one shape (each dimension the same number, the first also the same
    symbol), the LayerNormalization its only reader and its sum no graph output. Where one of the Add's inputs is
    itself an Add of a constant vector as long as the last axis, read only there, that Add is taken in as the
    kernel's bias. An ONNX Sum is not an Add: ``sum`` is how a rewrite keeps the two apart (taso.ops.elementwise).
    """
    if (norm.op.name != "layer_norm" or norm.params["stats"] or around.graph.meta.opset < 17
            or around.type(norm.inputs[0]).rank != 3 or norm.params["axis"] % 3 != 2 or around.type(norm.inputs[0]).dtype not in _SKIP_NORM_DTYPES):
        return None
    residual = around.producer(norm.inputs[0])
    if residual is None or not _plain_add_read_by(residual, norm, around):
        return None
    shapes = [around.type(v).shape for v in residual.inputs]
    if any(len(shape) != 3 for shape in shapes) or shapes[0] != shapes[1] or any(type(d) is not int for d in shapes[0][1:]):
        return None
    for side in residual.inputs:
        bias = around.producer(side)
        if bias is not None and _plain_add_read_by(bias, residual, around) and bias.inputs[1] in around.consts and (
                around.type(bias.inputs[1]).shape == shapes[0][-1:] and around.type(bias.inputs[0]).rank == 3):
            return residual, bias
    return (residual,)


_SKIP_NORM_DTYPES = frozenset(("float32", "float16", "bfloat16"))


def _plain_add_read_by(add: Node, reader: Node, around: Neighbourhood) -> bool:
    return add.op.name == "add" and len(add.inputs) == 2 and _sole_reader(reader, add.outputs[0], around)


def skip_norm_of(add: Node, around: Neighbourhood) -> Node | None:
    """The layer_norm whose SkipLayerNormalization takes ``add`` in (:func:`skip_norm_parts`), or None."""
    reader = _sole_reader_of(add.outputs[0], around) if add.op.name == "add" else None
    for _ in range(2):  # the residual Add, then the bias Add before it
        if reader is None:
            return None
        if reader.op.name == "layer_norm":
            return reader if add in (skip_norm_parts(reader, around) or ()) else None
        reader = _sole_reader_of(reader.outputs[0], around) if reader.op.name == "add" else None
    return None


def norms_near(node: Node, around: Neighbourhood) -> list[Node]:
    """The layer_norms whose SkipLayerNormFusion a change at ``node`` may make or break: ``node`` itself, and those
    reading, directly or through one or two Adds, a value ``node`` reads or writes."""
    found, frontier = [], [r for v in (*node.inputs, *node.outputs) for r in around.readers(v)] + [node]
    for _ in range(3):
        found += [n for n in frontier if n.op.name == "layer_norm"]
        frontier = [r for n in frontier if n.op.name in ("add", "sum") for r in around.readers(n.outputs[0])]
    return list({id(n): n for n in found}.values())


def _single_index(gather: Node, around: Neighbourhood) -> int | None:
    """A Gather's index where it is one constant int64 (a scalar or a one-element vector), else None."""
    index = gather.inputs[1]
    value = around.graph.weights.get(index) if index in around.consts else None
    if value is None or value.size != 1 or value.ndim > 1 or value.dtype != np.int64:  # the fusion takes int64 indices only
        return None
    return int(value.reshape(()))


def fusion_pass(graph: Graph) -> Callable[[Node], tuple[int, int]]:
    """For each node of ``graph``, which of ONNX Runtime's fusion passes replaces it by a new node (0: none), and the
    new node's place among those that pass makes (:func:`taso.cost.residency.run_order`).

    A product and its bias export writes as one Gemm stay where the file has them
    (:func:`taso.onnx.exporter.gemm_pairs`). Pass 1, MatMulAddFusion: another MatMul of 2-D operands and the Add
    that alone reads it become a Gemm (the addend any row or matrix of the product's shape); of two products an
    Add sums, the one ONNX Runtime's order reaches first. Pass 2: a Gemm, or a Conv (a BatchNormalization after it
    folded into its weights), and the activation that alone reads it become a FusedGemm or FusedConv. Each pass
    visits the nodes in the run order of the graph the pass before left. A new node is numbered after every node
    of the file and every node an earlier pass made, which changes the run order: in a recurrent cell, a step's
    recurrent product added to its input product runs before the input product that the file lists first."""
    around = Neighbourhood.of(graph)
    passes: dict[int, tuple[int, int]] = {}
    products: dict[int, Node] = gemm_pairs(graph, graph.meta.opset)  # an Add -> the MatMul it is one Gemm with
    for place, node in enumerate(graph_run_order(graph)):
        if node.op.name != "matmul" or node.params["activation"] != "none" or any(around.type(v).rank != 2 for v in node.inputs):
            continue
        readers = around.readers(node.outputs[0])
        add = readers[0] if len(readers) == 1 else None
        if add is None or add.op.name != "add" or len(add.inputs) != 2 or id(add) in products or not _sole_reader(add, node.outputs[0], around):
            continue
        addend = add.inputs[1] if add.inputs[0] == node.outputs[0] else add.inputs[0]
        if _broadcasts_to(around.type(addend).shape, around.type(node.outputs[0]).shape):
            passes[id(node)] = passes[id(add)] = (1, place)
            products[id(add)] = node
    after_first = graph_run_order(graph, lambda n: passes.get(id(n), (0, 0)))
    place_of = {id(n): i for i, n in enumerate(after_first)}
    for node in after_first:
        if node.op.name not in ACTIVATION_OPS:
            continue
        producer = around.producer(node.inputs[0])
        if producer is None or not _sole_reader(node, node.inputs[0], around):
            continue
        fused = [producer]
        if producer.op.name == "batch_norm" and _folded_into_conv(producer, around):
            fused.append(around.producer(producer.inputs[0]))
        if id(producer) in products:
            fused.append(products[id(producer)])
        elif fused[-1].op.name != "conv2d" or fused[-1].params["activation"] != "none":
            continue
        for n in (node, *fused):
            passes[id(n)] = (2, place_of[id(producer)])
    return lambda node: passes.get(id(node), (0, 0))


def _broadcasts_to(addend: tuple, shape: tuple) -> bool:
    """Whether a Gemm's C input of shape ``addend`` broadcasts to its output's ``shape`` (rank 2)."""
    return len(addend) <= 2 and all(a in (1, b) for a, b in zip(reversed(addend), reversed(shape)))


GELU_OPS = frozenset(("div", "erf", "add", "mul", "scalar_mul", "pow", "tanh"))
_GELU_ANCHORS = frozenset(("erf", "tanh"))  # the node a fused GELU is found from, and priced as


def gelu_parts(anchor: Node, around: Neighbourhood) -> tuple[Node, ...] | None:
    """The nodes ONNX Runtime fuses into one GELU kernel around ``anchor``, an Erf (:func:`_exact_gelu_parts`) or a
    Tanh (:func:`_fast_gelu_parts`); None when they are not all there as the fusion needs them."""
    if anchor.op.name == "erf":
        return _exact_gelu_parts(anchor, around)
    if anchor.op.name == "tanh":
        return _fast_gelu_parts(anchor, around)
    return None


def _exact_gelu_parts(erf: Node, around: Neighbourhood) -> tuple[Node, ...] | None:
    """The five nodes of an exact GELU, ``x * 0.5 * (1 + erf(x / sqrt(2)))``, that ONNX Runtime's GeluFusion makes one
    Gelu kernel of, found from its Erf; None when they are not all there as the fusion needs them.

    Exporters write it x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5, or with x * 0.5 first; each intermediate value has
    one reader and is not a graph output. (Where the bias Add before it is not part of a Gemm, BiasGeluFusion takes it
    in too; that Add is still priced.) Priced node by node, the scale by 0.5 was a kernel
    a rule could save by moving it into the next product's weight: on BERT that broke all twelve fusions and the
    file measured 0.98x where 1.004x was predicted.
    """
    scale = around.producer(erf.inputs[0])
    if scale is None or not _sole_reader(erf, erf.inputs[0], around):
        return None
    if scale.op.name != "div" or not _constant_near(around, scale.inputs[1], math.sqrt(2.0)):
        return None  # x * (1 / sqrt(2)) is not fused (ONNX Runtime 1.2x's optimized graph keeps its five nodes)
    tail = _gelu_tail(erf, scale.inputs[0], around, result_read_anywhere=True)
    return None if tail is None else (scale, erf, *tail)


def _gelu_tail(anchor: Node, x: str, around: Neighbourhood, result_read_anywhere: bool) -> tuple[Node, ...] | None:
    """The + 1 after a GELU's Erf or Tanh, and the products by x and 0.5 after it (in either order, the scale a Mul or
    a scale node), each value read only by the next; ``result_read_anywhere``: the result may be a graph output."""
    add = _sole_reader_of(anchor.outputs[0], around)
    if add is None or add.op.name != "add" or _other_than_constant(around, add, 1.0) != anchor.outputs[0]:
        return None
    product = _sole_reader_of(add.outputs[0], around)
    if product is None or product.op.name != "mul" or add.outputs[0] not in product.inputs:
        return None
    other = product.inputs[1] if product.inputs[0] == add.outputs[0] else product.inputs[0]
    if other == x:  # x * (1 + phi) * 0.5
        half = _sole_reader_of(product.outputs[0], around)
        if (half is not None and half.op.name in ("mul", "scalar_mul") and _other_than_constant(around, half, 0.5) == product.outputs[0]
                and (result_read_anywhere or not around.is_output(half.outputs[0]))):
            return add, product, half
        return None
    half = around.producer(other)  # (x * 0.5) * (1 + phi)
    if (half is not None and half.op.name in ("mul", "scalar_mul") and _other_than_constant(around, half, 0.5) == x
            and _sole_reader(product, other, around) and (result_read_anywhere or not around.is_output(product.outputs[0]))):
        return add, half, product
    return None


def _fast_gelu_parts(tanh: Node, around: Neighbourhood) -> tuple[Node, ...] | None:
    """The eight nodes of a tanh GELU, ``x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``, that ONNX
    Runtime's FastGeluFusion makes one FastGelu kernel of, found from its Tanh (checked on ONNX Runtime 1.32 with
    transformers' GPT-2 from both exporters: three FastGelu in the optimized graph). Each intermediate value has one
    reader and is not a graph output, and nor is the result (unlike GeluFusion, FastGeluFusion leaves a GELU whose
    result is a graph output alone); the multiplications by constants may be Mul or a scale."""
    def through(value: str, reader: Node) -> Node | None:
        node = around.producer(value)
        return node if node is not None and _sole_reader(reader, value, around) else None

    inner = through(tanh.inputs[0], tanh)
    if inner is None or inner.op.name not in ("mul", "scalar_mul"):
        return None
    total = _other_than_constant(around, inner, math.sqrt(2 / math.pi))
    sum_ = through(total, inner) if total is not None else None
    if sum_ is None or sum_.op.name != "add" or len(sum_.inputs) != 2:
        return None
    for x, cubic_term in (sum_.inputs, sum_.inputs[::-1]):
        scaled = through(cubic_term, sum_)
        if scaled is None or scaled.op.name not in ("mul", "scalar_mul"):
            continue
        cube_value = _other_than_constant(around, scaled, 0.044715)
        cube = through(cube_value, scaled) if cube_value is not None else None
        if cube is not None and cube.op.name == "pow" and cube.inputs[0] == x and _constant_near(around, cube.inputs[1], 3.0):
            break
    else:
        return None
    tail = _gelu_tail(tanh, x, around, result_read_anywhere=False)
    return None if tail is None else (cube, scaled, sum_, inner, tanh, *tail)


def _in_gelu(node: Node, around: Neighbourhood) -> bool:
    """Whether ``node`` is one of the GELU parts around an Erf or a Tanh near it (:func:`gelu_parts`)."""
    return any(node in parts for anchor in gelu_anchors_near(node, around) if (parts := gelu_parts(anchor, around)) is not None)


def _in_norm(node: Node, around: Neighbourhood) -> bool:
    """Whether ``node`` is one of the parts of a normalization around a Sqrt near it (:func:`norm_parts`)."""
    return any(node in parts.nodes for anchor in norm_anchors_near(node, around) if (parts := norm_parts(anchor, around)) is not None)


def gelu_anchors_near(node: Node, around: Neighbourhood) -> list[Node]:
    """The Erf and Tanh nodes within the four steps a GELU part can be from its anchor, up or down the graph."""
    return _anchors_near(node, around, GELU_OPS, _GELU_ANCHORS, 4)


NORM_OPS = frozenset(("reduce_mean", "sub", "pow", "add", "sqrt", "div", "mul"))


class NormParts(NamedTuple):
    """A normalization written out that ONNX Runtime runs as one kernel: which kernel (``layer_norm``, LayerNormFusion's
    LayerNormalization, or ``rms_norm``, SimplifiedLayerNormFusion's SimplifiedLayerNormalization), the value it
    normalizes, its epsilon, its scale (and shift), and the nodes it takes in, its Sqrt among them."""

    kernel: str
    data: str
    epsilon: float
    affine: tuple[str, ...]
    nodes: tuple[Node, ...]


def norm_parts(sqrt: Node, around: Neighbourhood) -> NormParts | None:
    """The normalization ONNX Runtime's LayerNormFusion or SimplifiedLayerNormFusion makes one kernel of around ``sqrt``,
    or None. Checked on ONNX Runtime 1.32 (tests/test_norm_forms.py): t^2 -> mean over the trailing axes -> + eps ->
    Sqrt, then t / it or t * (1 / it), then a product by a constant scale, fuse into SimplifiedLayerNormalization of t;
    where t is x - mean(x) and a constant shift is added after the scale, all of it into LayerNormalization of x. Not
    fused: a Reciprocal in place of the 1 / (the dynamo exporter's torch.rsqrt), no + eps, no scale. Each intermediate
    value has one reader and is not a graph output; t may have other readers (then, as where it is a graph output, the
    layer norm's x - mean(x) stays and SimplifiedLayerNormalization takes it)."""
    def through(value: str, reader: Node, op: str) -> Node | None:
        node = around.producer(value)
        return node if node is not None and node.op.name == op and _sole_reader(reader, value, around) else None

    plus_eps = through(sqrt.inputs[0], sqrt, "add")
    variance_value = _other_than_small_constant(around, plus_eps) if plus_eps is not None else None
    variance = through(variance_value[0], plus_eps, "reduce_mean") if variance_value else None
    square = through(variance.inputs[0], variance, "pow") if variance is not None else None
    if square is None or not _constant_near(around, square.inputs[1], 2.0) or not _trailing(variance, around):
        return None
    t = square.inputs[0]
    divided = _sole_reader_of(sqrt.outputs[0], around)
    if divided is None or divided.op.name != "div" or divided.inputs[1] != sqrt.outputs[0]:
        return None
    taken = [square, variance, plus_eps, sqrt, divided]
    if divided.inputs[0] != t:  # t * (1 / sqrt)
        times = _sole_reader_of(divided.outputs[0], around)
        if not _constant_near(around, divided.inputs[0], 1.0) or times is None or times.op.name != "mul" or set(times.inputs) != {t, divided.outputs[0]}:
            return None
        taken.append(times)
    readers, reads_t = {id(r) for r in around.readers(t)}, {id(square), id(taken[-1])}  # (the square, the division)
    if not reads_t <= readers:
        return None
    scaled = _sole_reader_of(taken[-1].outputs[0], around)
    scale = _other_input(scaled, taken[-1].outputs[0]) if scaled is not None and scaled.op.name == "mul" else None
    if scale is None or not _vector_of(around, scale, t):
        return None
    taken.append(scaled)
    centred = around.producer(t) if readers == reads_t and not around.is_output(t) else None
    mean = around.producer(centred.inputs[1]) if centred is not None and centred.op.name == "sub" else None
    shifted = _sole_reader_of(scaled.outputs[0], around)
    shift = _other_input(shifted, scaled.outputs[0]) if shifted is not None and shifted.op.name == "add" else None
    if (mean is not None and mean.op.name == "reduce_mean" and mean.inputs[0] == centred.inputs[0] and mean.params == variance.params
            and _sole_reader(centred, mean.outputs[0], around) and shift is not None and _vector_of(around, shift, t)):
        return NormParts("layer_norm", centred.inputs[0], variance_value[1], (scale, shift), (mean, centred, *taken, shifted))
    return NormParts("rms_norm", t, variance_value[1], (scale,), tuple(taken))


def norm_anchors_near(node: Node, around: Neighbourhood) -> list[Node]:
    """The Sqrt nodes within the six steps a normalization's part can be from its Sqrt, up or down the graph."""
    return _anchors_near(node, around, NORM_OPS, frozenset(("sqrt",)), 6)


def _trailing(reduce: Node, around: Neighbourhood) -> bool:
    """A mean over the trailing axes, the reduced ones kept."""
    rank = around.type(reduce.inputs[0]).rank
    axes = reduce.params["axes"]
    return bool(reduce.params["keepdims"]) and tuple(axes) == tuple(range(rank - len(axes), rank))


def _other_than_small_constant(around: Neighbourhood, node: Node) -> tuple[str, float] | None:
    """The input of an Add other than a one-element constant in [0, 0.01), an epsilon, and its value."""
    if len(node.inputs) != 2:
        return None
    for constant, other in (node.inputs[::-1], node.inputs):
        number = _one_element(around, constant)
        if number is not None and 0 <= number < 0.01:
            return other, float(str(np.float32(number)))
    return None


def _other_input(node: Node, value: str) -> str | None:
    """The input of a binary node other than ``value``."""
    if len(node.inputs) != 2 or value not in node.inputs:
        return None
    return node.inputs[1] if node.inputs[0] == value else node.inputs[0]


def _vector_of(around: Neighbourhood, value: str, data: str) -> bool:
    """A constant vector as long as the last axis of ``data``."""
    return value in around.consts and around.type(value).shape == around.type(data).shape[-1:]


def _anchors_near(node: Node, around: Neighbourhood, part_ops: frozenset, anchor_ops: frozenset, steps: int) -> list[Node]:
    """The nodes of ``anchor_ops`` within ``steps`` steps of ``node`` through nodes of ``part_ops``, up or down the graph."""
    found, frontier, seen = [], [node], {id(node)}
    for _ in range(steps):
        step = []
        for n in frontier:
            near = [around.producer(v) for v in n.inputs] + [r for v in n.outputs for r in around.readers(v)]
            for m in near:
                if m is not None and id(m) not in seen and m.op.name in part_ops:
                    seen.add(id(m))
                    step.append(m)
        found += [m for m in step if m.op.name in anchor_ops]
        frontier = step
    return found + ([node] if node.op.name in anchor_ops else [])


def _sole_reader_of(value: str, around: Neighbourhood) -> Node | None:
    readers = around.readers(value)
    return readers[0] if len(readers) == 1 and not around.is_output(value) else None


def _other_than_constant(around: Neighbourhood, node: Node, value: float) -> str | None:
    """The input of a binary node other than a one-element constant close to ``value``; None when neither is that."""
    if len(node.inputs) != 2:
        return None
    for constant, other in (node.inputs[::-1], node.inputs):
        if _constant_near(around, constant, value):
            return other
    return None


def _constant_near(around: Neighbourhood, value: str, target: float) -> bool:
    """Whether ``value`` is a one-element weight within 1e-4 of ``target`` (GeluFusion's own tolerance)."""
    number = _one_element(around, value)
    return number is not None and abs(number - target) <= 1e-4


def _one_element(around: Neighbourhood, value: str) -> float | None:
    """The number a one-element weight holds (the graph's, or the rewrite's being priced), else None."""
    for source in (around.graph, around.pricing):
        array = getattr(source, "weights", {}).get(value)
        if array is not None:
            return float(np.asarray(array).ravel()[0]) if array.size == 1 else None
    return None


def _folded_into_conv(batch_norm: Node, around: Neighbourhood) -> bool:
    """ONNX Runtime's ConvBNFusion: a BatchNormalization of constant parameters, the sole reader of a Conv without an
    activation whose weights are constant, is folded into the Conv's weights."""
    data = batch_norm.inputs[0]
    conv = around.producer(data)
    return (conv is not None and conv.op.name == "conv2d" and conv.params["activation"] == "none"
            and all(v in around.consts for v in (*batch_norm.inputs[1:], *conv.inputs[1:])) and _sole_reader(batch_norm, data, around))


def _sole_reader(node: Node, value: str, around: Neighbourhood) -> bool:
    readers = around.readers(value)
    return len(readers) == 1 and readers[0] is node and not around.is_output(value)


def _bias_row(bias: tuple[int, ...], data: tuple[int, ...]) -> bool:
    """A bias Gemm takes as C: one value per output column, broadcast over the rows."""
    return bias in ((data[-1],), (1, data[-1]))


# The run order, checked against ONNX Runtime's (tests/test_cost_residency.py, benchmarks/costs/run_order_check.py).


def onnx_runtime_weight_order(model: onnx.ModelProto, smallest: int) -> list[str]:
    """The weights ONNX Runtime's nodes read, in the order it runs them: its optimized model is written in that order."""
    import onnxruntime as ort  # noqa: PLC0415 - only this check opens a session here

    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        ran = onnx.load(options.optimized_model_filepath)
    sizes = {t.name: int(np.prod(t.dims)) * 4 for t in ran.graph.initializer if len(t.dims) >= 2}
    order = []
    for node in ran.graph.node:
        weights = [v for v in node.input if sizes.get(v, 0) >= smallest]
        if weights:
            order.append(max(weights, key=sizes.get))
    return order


def weight_order(graph: Graph, smallest: int) -> list[str]:
    """The weights taso's model of ONNX Runtime's run order (:func:`graph_run_order` after the fusions) reads, by the same rule (rank 2 or more, at least ``smallest`` bytes, the largest per node)."""
    consts = graph.constant_values()
    order = []
    for node in graph_run_order(graph, fusion_pass(graph)):
        weight = main_weight(node, lambda v: v in consts and graph.type(v).rank >= 2, lambda v: graph.type(v).concrete().nbytes, smallest)
        if weight:
            order.append(weight)
    return order


def first_seen(names: list[str]) -> list[int]:
    """The sequence with each name replaced by the order it first appears in (ONNX Runtime renames what it rewrites)."""
    seen: dict[str, int] = {}
    return [seen.setdefault(name, len(seen)) for name in names]
