"""A tiny ONNX graph builder shared by every model in the zoo.

Each benchmark model is written against :class:`GraphBuilder`, so naming, weight
initialisation and shape bookkeeping live in one place and the model files read like
the PyTorch modules they imitate. The builder emits what ``torch.onnx.export`` emits
for an eval-mode network: node names are module paths (``/layer1/0/conv1/Conv``),
weights are initializers named like state-dict keys (``layer1.0.conv1.weight``),
BatchNormalization is kept as its own node, and every shape is static.

Shapes come from ONNX's own per-node shape inference
(:func:`onnx.shape_inference.infer_node_outputs`), so the builder never restates an
operator's shape rule; it only remembers the result for the next node.

A builder made with ``materialize=False`` draws no random weights and cannot produce a
model; it still records every node, parameter shape and FLOP, which is how
:func:`taso.models.describe` counts a 140M-parameter network in well under a second.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import _stats

OPSET = 17
"""ONNX opset every model is written in (LayerNormalization needs 17)."""

IR_VERSION = 8
"""IR version of the emitted models; ONNX Runtime 1.31 loads it."""

_OPSET_IMPORTS = [helper.make_opsetid("", OPSET)]

IntPair = int | tuple[int, int]


@dataclass(frozen=True)
class Value:
    """A tensor of the graph under construction.

    Attributes:
        name: The ONNX tensor name.
        shape: The static shape, as inferred when the tensor was created.
        dtype: The ONNX element type (``TensorProto.FLOAT`` unless a constant says so).
    """

    name: str
    shape: tuple[int, ...]
    dtype: int = TensorProto.FLOAT

    @property
    def channels(self) -> int:
        """The size of axis 1 (channels in NCHW, features in [batch, features])."""
        return self.shape[1]


def _pair(value: IntPair) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


class GraphBuilder:
    """Builds one ONNX model node by node, with seeded weights and static shapes.

    Weights are drawn from ``numpy.random.default_rng(seed)`` in creation order, so a
    model function called twice with the same seed yields byte-identical models.

    Args:
        name: The graph name.
        seed: Seed of the weight generator.
        materialize: When False, record shapes and statistics only (no weights, no model).
    """

    def __init__(self, name: str, seed: int = 0, *, materialize: bool = True) -> None:
        self.name = name
        self.materialize = materialize
        self.parameters = 0
        self.flops = 0
        self.op_counts: Counter[str] = Counter()
        self._rng = np.random.default_rng(seed)
        self._scope: list[str] = []
        self._nodes: list[onnx.NodeProto] = []
        self._inputs: list[Value] = []
        self._outputs: list[Value] = []
        self._initializers: list[onnx.TensorProto] = []
        self._types: dict[str, onnx.TypeProto] = {}
        self._const_data: dict[str, onnx.TensorProto] = {}
        self._const_cache: dict[tuple[int, tuple[int, ...], bytes], Value] = {}
        self._producer: dict[str, onnx.NodeProto] = {}
        self._uses: Counter[str] = Counter()
        self._names: set[str] = set()

    # ------------------------------------------------------------------ naming

    @contextlib.contextmanager
    def scope(self, name: str | int) -> Iterator[None]:
        """Nests the names of the nodes and weights created inside, like a submodule."""
        self._scope.append(str(name))
        try:
            yield
        finally:
            self._scope.pop()

    def _unique(self, name: str) -> str:
        candidate, suffix = name, 0
        while candidate in self._names:
            suffix += 1
            candidate = f"{name}_{suffix}"
        self._names.add(candidate)
        return candidate

    # ------------------------------------------------------------ graph boundary

    def input(self, name: str, shape: Sequence[int]) -> Value:
        """Declares a float32 graph input of a static shape."""
        value = self._declare(name, tuple(int(d) for d in shape), TensorProto.FLOAT)
        self._inputs.append(value)
        return value

    def output(self, value: Value, name: str) -> None:
        """Declares ``value`` a graph output and renames it ``name``, as exporters do.

        Raises:
            ValueError: If the value already has consumers or is not a node output.
        """
        node = self._producer.get(value.name)
        if node is None or self._uses[value.name] or name in self._names:
            raise ValueError(f"cannot rename {value.name!r} to graph output {name!r}")
        self._names.add(name)
        node.output[list(node.output).index(value.name)] = name
        self._types[name] = self._types.pop(value.name)
        self._producer[name] = self._producer.pop(value.name)
        self._outputs.append(Value(name, value.shape, value.dtype))

    def _declare(self, name: str, shape: tuple[int, ...], dtype: int) -> Value:
        if name in self._names:
            raise ValueError(f"tensor name {name!r} is already used")
        self._names.add(name)
        self._types[name] = helper.make_tensor_type_proto(dtype, shape)
        return Value(name, shape, dtype)

    # -------------------------------------------------------------- initializers

    def param(self, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> Value:
        """Creates a float32 weight with the given mean and standard deviation.

        The weight is uniform on ``mean ± sqrt(3) * std`` (PyTorch's default layers
        initialise uniformly too), which is cheaper to draw than a normal.
        """
        half_width = math.sqrt(3.0) * std
        return self.param_uniform(name, shape, mean - half_width, mean + half_width)

    def param_uniform(self, name: str, shape: Sequence[int], low: float, high: float) -> Value:
        """Creates a float32 weight drawn uniformly from ``[low, high)``."""
        shape = tuple(int(d) for d in shape)
        full_name = ".".join([*self._scope, name])
        value = self._declare(full_name, shape, TensorProto.FLOAT)
        self.parameters += math.prod(shape)
        if self.materialize:
            data = self._rng.random(shape, dtype=np.float32)
            data *= np.float32(high - low)
            data += np.float32(low)
            self._initializers.append(numpy_helper.from_array(data, full_name))
        return value

    def const(self, values: object, dtype: type[np.generic] = np.float32) -> Value:
        """Returns an initializer holding exactly ``values``, shared by equal constants.

        Constants are not parameters: they are shapes, axes and scalars such as the
        ``sqrt(d)`` of attention, so they are not counted in :attr:`parameters`.
        """
        array = np.asarray(values, dtype=dtype)
        tensor_type = helper.np_dtype_to_tensor_dtype(array.dtype)
        key = (tensor_type, array.shape, array.tobytes())
        cached = self._const_cache.get(key)
        if cached is not None:
            return cached
        name = f"onnx::const_{len(self._const_cache)}"
        value = self._declare(name, array.shape, tensor_type)
        tensor = numpy_helper.from_array(array, name)
        self._initializers.append(tensor)
        self._const_data[name] = tensor
        self._const_cache[key] = value
        return value

    # --------------------------------------------------------------------- nodes

    def op(self, op_type: str, *inputs: Value, **attributes: object) -> Value:
        """Appends one single-output node and returns its output.

        Raises:
            ValueError: If ONNX shape inference rejects the node, e.g. because an
                image became too small for a kernel.
        """
        node_name = self._unique("/" + "/".join([*self._scope, op_type]))
        output_name = f"{node_name}_output_0"
        node = helper.make_node(
            op_type, [v.name for v in inputs], [output_name], name=node_name, **attributes
        )
        try:
            inferred = onnx.shape_inference.infer_node_outputs(
                onnx.defs.get_schema(op_type, OPSET),
                node,
                {v.name: self._types[v.name] for v in inputs},
                {v.name: self._const_data[v.name] for v in inputs if v.name in self._const_data},
                opset_imports=_OPSET_IMPORTS,
            )
        except onnx.shape_inference.InferenceError as error:
            raise ValueError(f"{node_name}: {error}") from None
        tensor_type = inferred[output_name].tensor_type
        shape = tuple(d.dim_value for d in tensor_type.shape.dim)
        if any(d <= 0 for d in shape):
            raise ValueError(
                f"{node_name} would produce the empty shape {shape}; the input is too small"
            )
        self._names.add(output_name)
        self._types[output_name] = inferred[output_name]
        self._producer[output_name] = node
        self._uses.update(v.name for v in inputs)
        self._nodes.append(node)
        self.op_counts[op_type] += 1
        self.flops += _stats.node_flops(op_type, [v.shape for v in inputs], shape, node)
        return Value(output_name, shape, tensor_type.elem_type)

    # ------------------------------------------------------------ layer helpers

    def conv(
        self,
        x: Value,
        out_channels: int,
        kernel: IntPair,
        *,
        stride: IntPair = 1,
        padding: IntPair = 0,
        group: int = 1,
        bias: bool = False,
        gain: float = 2.0,
        name: str = "conv",
    ) -> Value:
        """A 2-D convolution with symmetric padding, as ``nn.Conv2d`` exports it.

        The weight std is ``sqrt(gain / fan_in)``: gain 2 (He) keeps the second moment
        of a ReLU'd input, gain 1 (LeCun) that of an input with no ReLU before it.
        """
        kernel, stride, padding = _pair(kernel), _pair(stride), _pair(padding)
        if x.channels % group or out_channels % group:
            raise ValueError(
                f"conv {name}: channels {x.channels}->{out_channels} not divisible by {group=}"
            )
        fan_in = x.channels // group * kernel[0] * kernel[1]
        with self.scope(name):
            weight = self.param(
                "weight", (out_channels, x.channels // group, *kernel), math.sqrt(gain / fan_in)
            )
            inputs = [x, weight]
            if bias:
                inputs.append(self.param_uniform("bias", (out_channels,), -0.1, 0.1))
            return self.op(
                "Conv",
                *inputs,
                dilations=[1, 1],
                group=group,
                kernel_shape=list(kernel),
                pads=[padding[0], padding[1], padding[0], padding[1]],
                strides=list(stride),
            )

    def batch_norm(
        self, x: Value, *, eps: float = 1e-5, scale: float = 1.0, name: str = "bn"
    ) -> Value:
        """An inference-mode BatchNormalization with running statistics near (0, 1).

        Args:
            x: The NCHW input.
            eps: The epsilon of the framework layer (1e-5 in PyTorch, 1e-3 in Keras ports).
            scale: Multiplies the learned gain; below 1 on the last norm of a residual
                branch it keeps the sum of branches O(1), as trained networks do.
            name: The submodule name.
        """
        channels = x.channels
        with self.scope(name):
            gamma = self.param_uniform("weight", (channels,), 0.8 * scale, 1.2 * scale)
            beta = self.param_uniform("bias", (channels,), -0.1, 0.1)
            mean = self.param_uniform("running_mean", (channels,), -0.1, 0.1)
            var = self.param_uniform("running_var", (channels,), 0.8, 1.2)
            return self.op(
                "BatchNormalization", x, gamma, beta, mean, var, epsilon=eps, momentum=0.9
            )

    def relu(self, x: Value) -> Value:
        """Element-wise ``max(x, 0)``."""
        return self.op("Relu", x)

    def max_pool(
        self, x: Value, kernel: IntPair, stride: IntPair, padding: IntPair = 0, *, ceil: bool = False
    ) -> Value:
        """A 2-D max pooling with symmetric padding."""
        kernel, stride, padding = _pair(kernel), _pair(stride), _pair(padding)
        return self.op(
            "MaxPool",
            x,
            ceil_mode=int(ceil),
            dilations=[1, 1],
            kernel_shape=list(kernel),
            pads=[padding[0], padding[1], padding[0], padding[1]],
            strides=list(stride),
        )

    def avg_pool(
        self,
        x: Value,
        kernel: IntPair,
        stride: IntPair,
        padding: IntPair = 0,
        *,
        count_include_pad: bool = False,
    ) -> Value:
        """A 2-D average pooling with symmetric padding.

        ``count_include_pad`` follows the framework layer: torchvision's Inception
        divides by the full window (True), NASNet by the valid cells only (False).
        """
        kernel, stride, padding = _pair(kernel), _pair(stride), _pair(padding)
        return self.op(
            "AveragePool",
            x,
            ceil_mode=0,
            count_include_pad=int(count_include_pad),
            kernel_shape=list(kernel),
            pads=[padding[0], padding[1], padding[0], padding[1]],
            strides=list(stride),
        )

    def concat(self, values: Sequence[Value], axis: int = 1) -> Value:
        """Concatenates along ``axis`` (channels by default)."""
        return self.op("Concat", *values, axis=axis)

    def linear(self, x: Value, out_features: int, *, gain: float = 1.0, name: str) -> Value:
        """A fully connected layer on [batch, features], as ``nn.Linear`` exports: Gemm."""
        with self.scope(name):
            weight = self.param(
                "weight", (out_features, x.channels), math.sqrt(gain / x.channels)
            )
            bias = self.param_uniform("bias", (out_features,), -0.1, 0.1)
            return self.op("Gemm", x, weight, bias, alpha=1.0, beta=1.0, transB=1)

    def classifier(self, x: Value, num_classes: int, *, name: str = "fc") -> Value:
        """The usual image-classifier head: GlobalAveragePool, Flatten, Gemm."""
        pooled = self.op("GlobalAveragePool", x)
        flat = self.op("Flatten", pooled, axis=1)
        return self.linear(flat, num_classes, name=name)

    # ------------------------------------------------------------------- results

    @property
    def nodes(self) -> int:
        """The number of nodes emitted so far."""
        return len(self._nodes)

    @property
    def inputs(self) -> dict[str, tuple[int, ...]]:
        """The graph inputs and their shapes, in declaration order."""
        return {v.name: v.shape for v in self._inputs}

    def to_model(self, doc_string: str = "") -> onnx.ModelProto:
        """Packs the graph into an opset-17, IR-8 ``ModelProto``.

        Raises:
            RuntimeError: If the builder was created with ``materialize=False``.
        """
        if not self.materialize:
            raise RuntimeError("a builder made with materialize=False has no weights")
        if not self._outputs:
            raise RuntimeError(f"graph {self.name!r} declares no output")
        graph = helper.make_graph(
            self._nodes,
            self.name,
            [helper.make_tensor_value_info(v.name, v.dtype, v.shape) for v in self._inputs],
            [helper.make_tensor_value_info(v.name, v.dtype, v.shape) for v in self._outputs],
            initializer=self._initializers,
        )
        return helper.make_model(
            graph,
            opset_imports=_OPSET_IMPORTS,
            ir_version=IR_VERSION,
            producer_name="taso.models",
            doc_string=doc_string,
        )
