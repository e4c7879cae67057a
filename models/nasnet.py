"""NASNet-A mobile (Zoph et al. 2018), the 4 @ 1056 ImageNet network.

The network is two kinds of searched cell stacked in three stages. Each cell takes the
outputs of the two cells before it, adjusts them to its width (Relu, 1x1 conv, BN; or
a "factorized reduction" when the older input has twice the resolution), combines
pairs of branches with Add and concatenates the sums on channels. Branches are
separable convolutions (Relu, depthwise conv with group = channels, pointwise 1x1
conv, BN, twice), 3x3 average or max pools, or the identity. The layout and names
follow the widely used PyTorch port (Cadene's ``pretrainedmodels.nasnetamobile``):

    conv0 (3x3/2, 32) -> cell_stem_0 -> cell_stem_1
    -> N normal cells (F) -> reduction -> N normal cells (2F) -> reduction
    -> N normal cells (4F) -> Relu, GlobalAveragePool, Flatten, Gemm

with N = 4 and F = 1056 / 24 = 44 for the mobile network. Unlike the port, every
padding here is symmetric (``k // 2``): the port pads and crops by one pixel to copy
TensorFlow's "SAME" padding, which changes no shape, parameter or operator count that
matters to graph optimisation.
"""

from __future__ import annotations

import numpy as np

from ._builder import GraphBuilder, Value

_EPS = 1e-3  # the Keras/TF batch-norm epsilon kept by the port
_INT64_MAX = 2**63 - 1

# NOTE: every cell sums pairs of branches (and pools, whose inputs are correlated) and
# concatenates the sums, so with unit BN gains the activations grow ~1.3x per cell.
# Damping the BN gains of the adjusted inputs and of each separable branch, as trained
# statistics would, keeps the cell outputs O(1) through all 20 cells.
_ADJUST_SCALE = 0.7
_BRANCH_SCALE = 0.7


def _separable_unit(
    b: GraphBuilder, x: Value, out_channels: int, kernel: int, stride: int, index: int
) -> Value:
    """Relu, depthwise k x k conv (group = channels), pointwise 1x1 conv, BN."""
    y = b.relu(x)
    with b.scope(f"separable_{index}"):
        y = b.conv(
            y,
            y.channels,
            kernel,
            stride=stride,
            padding=kernel // 2,
            group=y.channels,
            name="depthwise_conv2d",
        )
        # No Relu between depthwise and pointwise, hence the LeCun gain.
        y = b.conv(y, out_channels, 1, gain=1.0, name="pointwise_conv2d")
    scale = _BRANCH_SCALE if index == 2 else 1.0
    return b.batch_norm(y, eps=_EPS, scale=scale, name=f"bn_sep_{index}")


def _separable(
    b: GraphBuilder, x: Value, out_channels: int, kernel: int, stride: int, name: str
) -> Value:
    """``BranchSeparables``: two separable units, the first one strided."""
    with b.scope(name):
        y = _separable_unit(b, x, out_channels, kernel, stride, 1)
        return _separable_unit(b, y, out_channels, kernel, 1, 2)


def _adjust(b: GraphBuilder, x: Value, channels: int, name: str) -> Value:
    """Relu, 1x1 conv, BN: brings a cell input to the cell's width."""
    with b.scope(name):
        y = b.conv(b.relu(x), channels, 1, name="conv")
        return b.batch_norm(y, eps=_EPS, scale=_ADJUST_SCALE, name="bn")


def _factorized_reduction(b: GraphBuilder, x: Value, channels: int) -> Value:
    """Halves the resolution of an older cell input without losing every other pixel.

    Two strided 1x1 convolutions see the even and the odd pixel grid (the second after
    a one-pixel shift: Pad right/bottom, Slice off the first row and column), and their
    outputs are concatenated and batch-normalised.
    """
    if channels % 2:
        raise ValueError(f"nasnet_a: a factorized reduction needs an even width, got {channels}")
    x = b.relu(x)
    with b.scope("path_1"):
        path_1 = b.conv(b.avg_pool(x, 1, 2), channels // 2, 1)
    with b.scope("path_2"):
        shifted = b.op("Pad", x, b.const([0, 0, 0, 0, 0, 0, 1, 1], dtype=np.int64), mode="constant")
        shifted = b.op(
            "Slice",
            shifted,
            b.const([1, 1], dtype=np.int64),
            b.const([_INT64_MAX, _INT64_MAX], dtype=np.int64),
            b.const([2, 3], dtype=np.int64),
        )
        path_2 = b.conv(b.avg_pool(shifted, 1, 2), channels // 2, 1)
    paths = b.concat([path_1, path_2])
    return b.batch_norm(paths, eps=_EPS, scale=_ADJUST_SCALE, name="final_path_bn")


def _normal_cell(b: GraphBuilder, prev: Value, cur: Value, filters: int) -> Value:
    """The NASNet-A normal cell: five sums of two branches, concatenated with ``left``."""
    right = _adjust(b, cur, filters, "conv_1x1")
    if prev.shape[2:] != right.shape[2:]:
        left = _factorized_reduction(b, prev, filters)
    else:
        left = _adjust(b, prev, filters, "conv_prev_1x1")

    def avg(v: Value) -> Value:
        return b.avg_pool(v, 3, 1, 1)

    sums = [
        (_separable(b, right, filters, 5, 1, "comb_iter_0_left"),
         _separable(b, left, filters, 3, 1, "comb_iter_0_right")),
        (_separable(b, left, filters, 5, 1, "comb_iter_1_left"),
         _separable(b, left, filters, 3, 1, "comb_iter_1_right")),
        (avg(right), left),
        (avg(left), avg(left)),
        (_separable(b, right, filters, 3, 1, "comb_iter_4_left"), right),
    ]  # fmt: skip
    return b.concat([left, *(b.op("Add", u, v) for u, v in sums)])


def _reduction_cell(b: GraphBuilder, left: Value, right: Value, filters: int) -> Value:
    """The NASNet-A reduction cell on already adjusted inputs: halves the resolution.

    Args:
        b: The builder.
        left: The adjusted older input (or the raw stem output in ``cell_stem_0``).
        right: The adjusted newer input.
        filters: The width of every branch.
    """

    def max3(v: Value) -> Value:
        return b.max_pool(v, 3, 2, 1)

    comb_0 = b.op(
        "Add",
        _separable(b, right, filters, 5, 2, "comb_iter_0_left"),
        _separable(b, left, filters, 7, 2, "comb_iter_0_right"),
    )
    comb_1 = b.op("Add", max3(right), _separable(b, left, filters, 7, 2, "comb_iter_1_right"))
    comb_2 = b.op(
        "Add",
        b.avg_pool(right, 3, 2, 1),
        _separable(b, left, filters, 5, 2, "comb_iter_2_right"),
    )
    comb_3 = b.op("Add", b.avg_pool(comb_0, 3, 1, 1), comb_1)
    comb_4 = b.op("Add", _separable(b, comb_0, filters, 3, 1, "comb_iter_4_left"), max3(right))
    return b.concat([comb_1, comb_2, comb_3, comb_4])


def nasnet_a(
    b: GraphBuilder,
    *,
    batch: int = 1,
    image_size: int = 224,
    cells: int = 4,
    penultimate_filters: int = 1056,
    stem_filters: int = 32,
    num_classes: int = 1000,
) -> None:
    """NASNet-A; the defaults are the mobile network "4 @ 1056".

    Args:
        b: The builder receiving the graph.
        batch: Images per inference.
        image_size: Height and width of the input (224 in the paper).
        cells: Normal cells per stage (N).
        penultimate_filters: Channels of the last cell, 24 x the first stage's width F;
            F must be a multiple of 4.
        stem_filters: Channels of the first convolution.
        num_classes: Outputs of the classifier.

    Raises:
        ValueError: If ``penultimate_filters`` is not 24 x a multiple of 4.
    """
    filters, rest = divmod(penultimate_filters, 24)
    if rest or filters % 4 or filters == 0:
        raise ValueError(
            f"nasnet_a: penultimate_filters must be a positive multiple of 96, got {penultimate_filters}"
        )
    x = b.input("input", (batch, 3, image_size, image_size))
    with b.scope("conv0"):
        conv0 = b.batch_norm(b.conv(x, stem_filters, 3, stride=2, gain=1.0), eps=_EPS)
    with b.scope("cell_stem_0"):
        stem_0 = _reduction_cell(b, conv0, _adjust(b, conv0, filters // 4, "conv_1x1"), filters // 4)
    with b.scope("cell_stem_1"):
        right = _adjust(b, stem_0, filters // 2, "conv_1x1")
        left = _factorized_reduction(b, conv0, filters // 2)
        stem_1 = _reduction_cell(b, left, right, filters // 2)
    prev, cur = stem_0, stem_1
    index = 0
    for stage in range(3):
        width = filters * 2**stage
        if stage:
            with b.scope(f"reduction_cell_{stage - 1}"):
                left = _adjust(b, prev, width, "conv_prev_1x1")
                right = _adjust(b, cur, width, "conv_1x1")
                prev, cur = cur, _reduction_cell(b, left, right, width)
        for _ in range(cells):
            with b.scope(f"cell_{index}"):
                prev, cur = cur, _normal_cell(b, prev, cur, width)
            index += 1
    b.output(b.classifier(b.relu(cur), num_classes, name="last_linear"), "output")
