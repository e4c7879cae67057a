"""Inception-v3 (Szegedy et al. 2016), laid out as torchvision's ``inception_v3``.

Every convolution is a ``BasicConv2d`` unit (Conv without bias, BatchNormalization with
eps 1e-3, Relu). After a five-convolution stem come the Mixed blocks: three InceptionA
(5b-5d, 35x35), the grid reduction InceptionB (6a), four InceptionC with factorised 1x7
and 7x1 convolutions (6b-6e, 17x17), the reduction InceptionD (7a) and two InceptionE
with split 1x3/3x1 branches (7b-7c, 8x8). Branches meet in a channel Concat. The
auxiliary classifier only runs in training and is left out, as in an eval-mode export.
"""

from __future__ import annotations

from ._builder import GraphBuilder, IntPair, Value


def _unit(
    b: GraphBuilder,
    x: Value,
    out_channels: int,
    kernel: IntPair,
    *,
    stride: IntPair = 1,
    padding: IntPair = 0,
    name: str,
) -> Value:
    """torchvision's ``BasicConv2d``: Conv, BatchNormalization (eps 1e-3), Relu."""
    with b.scope(name):
        y = b.conv(x, out_channels, kernel, stride=stride, padding=padding)
        return b.relu(b.batch_norm(y, eps=1e-3))


def _pool_branch(b: GraphBuilder, x: Value, out_channels: int) -> Value:
    """3x3 average pool (stride 1, zeros counted, as F.avg_pool2d) then a 1x1 unit."""
    pooled = b.avg_pool(x, 3, 1, 1, count_include_pad=True)
    return _unit(b, pooled, out_channels, 1, name="branch_pool")


def _inception_a(b: GraphBuilder, x: Value, pool_features: int) -> Value:
    branch1x1 = _unit(b, x, 64, 1, name="branch1x1")
    branch5x5 = _unit(b, x, 48, 1, name="branch5x5_1")
    branch5x5 = _unit(b, branch5x5, 64, 5, padding=2, name="branch5x5_2")
    branch3x3dbl = _unit(b, x, 64, 1, name="branch3x3dbl_1")
    branch3x3dbl = _unit(b, branch3x3dbl, 96, 3, padding=1, name="branch3x3dbl_2")
    branch3x3dbl = _unit(b, branch3x3dbl, 96, 3, padding=1, name="branch3x3dbl_3")
    branch_pool = _pool_branch(b, x, pool_features)
    return b.concat([branch1x1, branch5x5, branch3x3dbl, branch_pool])


def _inception_b(b: GraphBuilder, x: Value) -> Value:
    branch3x3 = _unit(b, x, 384, 3, stride=2, name="branch3x3")
    branch3x3dbl = _unit(b, x, 64, 1, name="branch3x3dbl_1")
    branch3x3dbl = _unit(b, branch3x3dbl, 96, 3, padding=1, name="branch3x3dbl_2")
    branch3x3dbl = _unit(b, branch3x3dbl, 96, 3, stride=2, name="branch3x3dbl_3")
    branch_pool = b.max_pool(x, 3, 2)
    return b.concat([branch3x3, branch3x3dbl, branch_pool])


def _inception_c(b: GraphBuilder, x: Value, channels_7x7: int) -> Value:
    c7 = channels_7x7
    branch1x1 = _unit(b, x, 192, 1, name="branch1x1")
    branch7x7 = _unit(b, x, c7, 1, name="branch7x7_1")
    branch7x7 = _unit(b, branch7x7, c7, (1, 7), padding=(0, 3), name="branch7x7_2")
    branch7x7 = _unit(b, branch7x7, 192, (7, 1), padding=(3, 0), name="branch7x7_3")
    dbl = _unit(b, x, c7, 1, name="branch7x7dbl_1")
    dbl = _unit(b, dbl, c7, (7, 1), padding=(3, 0), name="branch7x7dbl_2")
    dbl = _unit(b, dbl, c7, (1, 7), padding=(0, 3), name="branch7x7dbl_3")
    dbl = _unit(b, dbl, c7, (7, 1), padding=(3, 0), name="branch7x7dbl_4")
    dbl = _unit(b, dbl, 192, (1, 7), padding=(0, 3), name="branch7x7dbl_5")
    branch_pool = _pool_branch(b, x, 192)
    return b.concat([branch1x1, branch7x7, dbl, branch_pool])


def _inception_d(b: GraphBuilder, x: Value) -> Value:
    branch3x3 = _unit(b, x, 192, 1, name="branch3x3_1")
    branch3x3 = _unit(b, branch3x3, 320, 3, stride=2, name="branch3x3_2")
    branch7x7x3 = _unit(b, x, 192, 1, name="branch7x7x3_1")
    branch7x7x3 = _unit(b, branch7x7x3, 192, (1, 7), padding=(0, 3), name="branch7x7x3_2")
    branch7x7x3 = _unit(b, branch7x7x3, 192, (7, 1), padding=(3, 0), name="branch7x7x3_3")
    branch7x7x3 = _unit(b, branch7x7x3, 192, 3, stride=2, name="branch7x7x3_4")
    branch_pool = b.max_pool(x, 3, 2)
    return b.concat([branch3x3, branch7x7x3, branch_pool])


def _inception_e(b: GraphBuilder, x: Value) -> Value:
    branch1x1 = _unit(b, x, 320, 1, name="branch1x1")
    branch3x3 = _unit(b, x, 384, 1, name="branch3x3_1")
    branch3x3 = b.concat(
        [
            _unit(b, branch3x3, 384, (1, 3), padding=(0, 1), name="branch3x3_2a"),
            _unit(b, branch3x3, 384, (3, 1), padding=(1, 0), name="branch3x3_2b"),
        ]
    )
    dbl = _unit(b, x, 448, 1, name="branch3x3dbl_1")
    dbl = _unit(b, dbl, 384, 3, padding=1, name="branch3x3dbl_2")
    dbl = b.concat(
        [
            _unit(b, dbl, 384, (1, 3), padding=(0, 1), name="branch3x3dbl_3a"),
            _unit(b, dbl, 384, (3, 1), padding=(1, 0), name="branch3x3dbl_3b"),
        ]
    )
    branch_pool = _pool_branch(b, x, 192)
    return b.concat([branch1x1, branch3x3, dbl, branch_pool])


def inception_v3(
    b: GraphBuilder, *, batch: int = 1, image_size: int = 299, num_classes: int = 1000
) -> None:
    """Inception-v3 without the auxiliary classifier.

    Args:
        b: The builder receiving the graph.
        batch: Images per inference.
        image_size: Height and width of the input (299 in the paper).
        num_classes: Outputs of the classifier.
    """
    x = b.input("input", (batch, 3, image_size, image_size))
    x = _unit(b, x, 32, 3, stride=2, name="Conv2d_1a_3x3")
    x = _unit(b, x, 32, 3, name="Conv2d_2a_3x3")
    x = _unit(b, x, 64, 3, padding=1, name="Conv2d_2b_3x3")
    x = b.max_pool(x, 3, 2)
    x = _unit(b, x, 80, 1, name="Conv2d_3b_1x1")
    x = _unit(b, x, 192, 3, name="Conv2d_4a_3x3")
    x = b.max_pool(x, 3, 2)
    blocks = [
        ("Mixed_5b", lambda v: _inception_a(b, v, 32)),
        ("Mixed_5c", lambda v: _inception_a(b, v, 64)),
        ("Mixed_5d", lambda v: _inception_a(b, v, 64)),
        ("Mixed_6a", lambda v: _inception_b(b, v)),
        ("Mixed_6b", lambda v: _inception_c(b, v, 128)),
        ("Mixed_6c", lambda v: _inception_c(b, v, 160)),
        ("Mixed_6d", lambda v: _inception_c(b, v, 160)),
        ("Mixed_6e", lambda v: _inception_c(b, v, 192)),
        ("Mixed_7a", lambda v: _inception_d(b, v)),
        ("Mixed_7b", lambda v: _inception_e(b, v)),
        ("Mixed_7c", lambda v: _inception_e(b, v)),
    ]
    for name, block in blocks:
        with b.scope(name):
            x = block(x)
    b.output(b.classifier(x, num_classes), "output")
