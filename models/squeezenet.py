"""SqueezeNet 1.1 (Iandola et al. 2016), laid out as torchvision's ``squeezenet1_1``.

A 3x3 stride-2 stem, then eight Fire modules between ceil-mode max pools. A Fire
module squeezes the channels with a 1x1 convolution and expands them again with a 1x1
and a 3x3 convolution side by side, concatenated on channels: the wide-and-shallow
pattern TASO merges into single convolutions. The classifier is a 1x1 convolution to
the classes, global average pooling and a Flatten; dropout is omitted (eval mode).
"""

from __future__ import annotations

from ._builder import GraphBuilder, Value

# (squeeze, expand) channels of each Fire module; None marks a max pool.
_LAYOUT: tuple[tuple[int, int] | None, ...] = (
    (16, 64),
    (16, 64),
    None,
    (32, 128),
    (32, 128),
    None,
    (48, 192),
    (48, 192),
    (64, 256),
    (64, 256),
)


def _fire(b: GraphBuilder, x: Value, squeeze: int, expand: int) -> Value:
    """A Fire module: squeeze 1x1 + Relu, then expand 1x1 and 3x3 (+ Relu) concatenated."""
    s = b.relu(b.conv(x, squeeze, 1, bias=True, name="squeeze"))
    e1 = b.relu(b.conv(s, expand, 1, bias=True, name="expand1x1"))
    e3 = b.relu(b.conv(s, expand, 3, padding=1, bias=True, name="expand3x3"))
    return b.concat([e1, e3])


def squeezenet(
    b: GraphBuilder, *, batch: int = 1, image_size: int = 224, num_classes: int = 1000
) -> None:
    """SqueezeNet 1.1.

    Args:
        b: The builder receiving the graph.
        batch: Images per inference.
        image_size: Height and width of the input (224 in the paper).
        num_classes: Outputs of the final 1x1 convolution.
    """
    x = b.input("input", (batch, 3, image_size, image_size))
    with b.scope("features"):
        x = b.relu(b.conv(x, 64, 3, stride=2, bias=True, name="0"))
        x = b.max_pool(x, 3, 2, ceil=True)
        for index, fire in enumerate(_LAYOUT, start=3):
            if fire is None:
                x = b.max_pool(x, 3, 2, ceil=True)
                continue
            with b.scope(index):
                x = _fire(b, x, *fire)
    with b.scope("classifier"):
        x = b.relu(b.conv(x, num_classes, 1, bias=True, name="1"))
        x = b.op("GlobalAveragePool", x)
    b.output(b.op("Flatten", x, axis=1), "output")
