"""ResNet-50 and ResNeXt-50 (32x4d), laid out as torchvision builds them.

Both are the same bottleneck network (He et al. 2016; Xie et al. 2017): a 7x7 stride-2
stem and a max pool, four stages of [3, 4, 6, 3] bottleneck blocks, global average
pooling and a 1000-way Gemm. ResNeXt only widens the 3x3 convolution and splits it
into 32 groups. Downsampling sits in the 3x3 convolution ("ResNet v1.5"), as in
torchvision.
"""

from __future__ import annotations

from ._builder import GraphBuilder, Value

_STAGES = (3, 4, 6, 3)
_EXPANSION = 4

# NOTE: scaling the last BatchNormalization of each residual branch keeps the sum
# x + f(x) near unit scale over 16 blocks, as trained weights do (cf. "zero-init
# residual"); with unit gain the activations grow about 1.5x per block.
_RESIDUAL_SCALE = 0.3


def _bottleneck(
    b: GraphBuilder, x: Value, planes: int, stride: int, groups: int, width_per_group: int
) -> Value:
    """One bottleneck block: 1x1 reduce, 3x3 (grouped, strided), 1x1 expand, + shortcut."""
    width = planes * width_per_group // 64 * groups
    out_channels = planes * _EXPANSION
    y = b.relu(b.batch_norm(b.conv(x, width, 1, name="conv1"), name="bn1"))
    y = b.conv(y, width, 3, stride=stride, padding=1, group=groups, name="conv2")
    y = b.relu(b.batch_norm(y, name="bn2"))
    y = b.conv(y, out_channels, 1, name="conv3")
    y = b.batch_norm(y, scale=_RESIDUAL_SCALE, name="bn3")
    shortcut = x
    if stride != 1 or x.channels != out_channels:
        with b.scope("downsample"):
            shortcut = b.conv(x, out_channels, 1, stride=stride, name="0")
            shortcut = b.batch_norm(shortcut, name="1")
    return b.relu(b.op("Add", y, shortcut))


def _resnet(
    b: GraphBuilder,
    *,
    batch: int,
    image_size: int,
    num_classes: int,
    groups: int,
    width_per_group: int,
) -> None:
    x = b.input("input", (batch, 3, image_size, image_size))
    x = b.conv(x, 64, 7, stride=2, padding=3, gain=1.0, name="conv1")
    x = b.relu(b.batch_norm(x, name="bn1"))
    x = b.max_pool(x, 3, 2, 1)
    for stage, blocks in enumerate(_STAGES):
        planes = 64 * 2**stage
        with b.scope(f"layer{stage + 1}"):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                with b.scope(block):
                    x = _bottleneck(b, x, planes, stride, groups, width_per_group)
    b.output(b.classifier(x, num_classes), "output")


def resnet50(
    b: GraphBuilder, *, batch: int = 1, image_size: int = 224, num_classes: int = 1000
) -> None:
    """ResNet-50: bottleneck blocks [3, 4, 6, 3], widths 64..512, expansion 4.

    Args:
        b: The builder receiving the graph.
        batch: Images per inference.
        image_size: Height and width of the input (224 in the paper).
        num_classes: Outputs of the classifier.
    """
    _resnet(
        b, batch=batch, image_size=image_size, num_classes=num_classes, groups=1, width_per_group=64
    )


def resnext50(
    b: GraphBuilder, *, batch: int = 1, image_size: int = 224, num_classes: int = 1000
) -> None:
    """ResNeXt-50 32x4d: ResNet-50 with 32-group 3x3 convolutions twice as wide.

    Args:
        b: The builder receiving the graph.
        batch: Images per inference.
        image_size: Height and width of the input (224 in the paper).
        num_classes: Outputs of the classifier.
    """
    _resnet(
        b, batch=batch, image_size=image_size, num_classes=num_classes, groups=32, width_per_group=4
    )
