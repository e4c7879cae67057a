"""VGG-19 (Simonyan and Zisserman 2015), configuration "E", as torchvision's ``vgg19``.

Sixteen 3x3 convolutions with bias and Relu in five stacks, each closed by a 2x2 max
pool, then three fully connected layers (4096, 4096, classes) with Relu between them.
Dropout is omitted (eval mode), and so is the adaptive 7x7 average pool, which is the
identity on the 7x7 map of a 224x224 input.
"""

from __future__ import annotations

from ._builder import GraphBuilder

# Output channels of each convolution; 0 marks a max pool.
_CONFIG_E = (64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0,
             512, 512, 512, 512, 0, 512, 512, 512, 512, 0)  # fmt: skip


def vgg19(
    b: GraphBuilder, *, batch: int = 1, image_size: int = 224, num_classes: int = 1000
) -> None:
    """VGG-19 without batch normalisation.

    Args:
        b: The builder receiving the graph.
        batch: Images per inference.
        image_size: Height and width of the input, a multiple of 32 (224 in the
            paper); the first Gemm takes the flattened ``512 x (image_size/32)^2`` map.
        num_classes: Outputs of the last Gemm.

    Raises:
        ValueError: If ``image_size`` is not a multiple of 32.
    """
    if image_size % 32:
        raise ValueError(f"vgg19: image_size must be a multiple of 32, got {image_size}")
    x = b.input("input", (batch, 3, image_size, image_size))
    with b.scope("features"):
        for index, channels in enumerate(_CONFIG_E):
            if channels:
                x = b.relu(b.conv(x, channels, 3, padding=1, bias=True, name=str(index)))
            else:
                x = b.max_pool(x, 2, 2)
    x = b.op("Flatten", x, axis=1)
    with b.scope("classifier"):
        x = b.relu(b.linear(x, 4096, gain=2.0, name="0"))
        x = b.relu(b.linear(x, 4096, gain=2.0, name="3"))
        x = b.linear(x, num_classes, gain=2.0, name="6")
    b.output(x, "output")
