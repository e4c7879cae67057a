"""Tests of the benchmark model zoo (``models/``, imported as ``taso.models``).

Every model is built at a reduced "CI" size (same blocks, smaller images, fewer
layers), checked by the ONNX checker, run on ONNX Runtime and compared with the NumPy
reference executor. The full-size configurations are pinned without drawing weights,
through :func:`taso.models.describe`, whose counts are checked against real builds.
"""

from __future__ import annotations

import argparse
import doctest
import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import taso.models as zoo
from taso.models import _stats as zoo_stats

import taso
from taso.cli import models as zoo_cli


def _numpy_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs taso's NumPy reference executor and returns its outputs by name."""
    return taso.load_onnx(model).run(feeds)


# Reduced configurations: every block kind of the full model, seconds to run.
CI_OPTIONS: dict[str, dict[str, int]] = {
    "resnet50": {"image_size": 64},
    "resnext50": {"image_size": 64},
    "inception_v3": {"image_size": 75},
    "squeezenet": {"image_size": 64},
    "vgg19": {"image_size": 32},
    "nasnet_a": {"image_size": 64, "cells": 2},
    "nasrnn": {"steps": 2, "hidden": 64},
    "bert": {"layers": 1, "seq": 16},
    "bert_base": {"layers": 1, "seq": 16},
}

# Operator histograms of the CI configurations (regression table; recompute with
# ``zoo.describe(name, **CI_OPTIONS[name]).ops`` after an intended change).
_RESNET_OPS = {"Add": 16, "BatchNormalization": 53, "Conv": 53, "Flatten": 1, "Gemm": 1,
               "GlobalAveragePool": 1, "MaxPool": 1, "Relu": 49}  # fmt: skip
_BERT_LAYER_OPS = {"Add": 9, "Div": 2, "Erf": 1, "LayerNormalization": 2, "MatMul": 8,
                   "Mul": 2, "Reshape": 4, "Softmax": 1, "Transpose": 4}  # fmt: skip
CI_OPS: dict[str, dict[str, int]] = {
    "resnet50": _RESNET_OPS,
    "resnext50": _RESNET_OPS,
    "inception_v3": {"AveragePool": 9, "BatchNormalization": 94, "Concat": 15, "Conv": 94,
                     "Flatten": 1, "Gemm": 1, "GlobalAveragePool": 1, "MaxPool": 4,
                     "Relu": 94},
    "squeezenet": {"Concat": 8, "Conv": 26, "Flatten": 1, "GlobalAveragePool": 1,
                   "MaxPool": 3, "Relu": 26},
    "vgg19": {"Conv": 16, "Flatten": 1, "Gemm": 3, "MaxPool": 5, "Relu": 18},
    "nasnet_a": {"Add": 50, "AveragePool": 34, "BatchNormalization": 120, "Concat": 14,
                 "Conv": 224, "Flatten": 1, "Gemm": 1, "GlobalAveragePool": 1, "MaxPool": 8,
                 "Pad": 4, "Relu": 120, "Slice": 4},
    "nasrnn": {"Add": 22, "MatMul": 32, "Mul": 8, "Relu": 4, "Sigmoid": 10, "Tanh": 16},
    "bert": _BERT_LAYER_OPS,
    "bert_base": _BERT_LAYER_OPS,
}  # fmt: skip

# Full-size models: (nodes, parameters, FLOPs, operator histogram). Parameters include
# BatchNormalization running statistics; without them they equal the reference
# implementations' counts (torchvision, Cadene's NASNet-A mobile, BERT encoders).
FULL_SIZE: dict[str, tuple[int, int, int, dict[str, int]]] = {
    # torchvision 25,557,032 + 53,120 BN statistics
    "resnet50": (175, 25_610_152, 8_178_368_512, _RESNET_OPS),
    # torchvision 25,028,904 + 68,224 BN statistics
    "resnext50": (175, 25_097_128, 8_460_959_744, _RESNET_OPS),
    # torchvision without the auxiliary head 23,834,568 + 34,432 BN statistics
    "inception_v3": (313, 23_869_000, 11_426_432_192, CI_OPS["inception_v3"]),
    "squeezenet": (65, 1_235_496, 698_303_872, CI_OPS["squeezenet"]),
    "vgg19": (43, 143_667_240, 39_264_124_928, CI_OPS["vgg19"]),
    # pretrainedmodels nasnetamobile 5,289,978 + 36,738 BN statistics; 564M mult-adds
    "nasnet_a": (911, 5_326_716, 1_127_277_632,
                 {"Add": 80, "AveragePool": 52, "BatchNormalization": 192, "Concat": 20,
                  "Conv": 356, "Flatten": 1, "Gemm": 1, "GlobalAveragePool": 1,
                  "MaxPool": 8, "Pad": 4, "Relu": 192, "Slice": 4}),
    "nasrnn": (230, 4_194_816, 41_943_040,
               {"Add": 55, "MatMul": 80, "Mul": 20, "Relu": 10, "Sigmoid": 25, "Tanh": 40}),
    "bert": (264, 100_769_792, 13_019_119_616, {k: 8 * v for k, v in _BERT_LAYER_OPS.items()}),
    "bert_base": (396, 85_054_464, 22_347_251_712,
                  {k: 12 * v for k, v in _BERT_LAYER_OPS.items()}),
}  # fmt: skip

FULL_SIZE_OPTIONS = {
    "resnet50": {"batch": 1, "image_size": 224, "num_classes": 1000},
    "resnext50": {"batch": 1, "image_size": 224, "num_classes": 1000},
    "inception_v3": {"batch": 1, "image_size": 299, "num_classes": 1000},
    "squeezenet": {"batch": 1, "image_size": 224, "num_classes": 1000},
    "vgg19": {"batch": 1, "image_size": 224, "num_classes": 1000},
    "nasnet_a": {"batch": 1, "image_size": 224, "cells": 4, "penultimate_filters": 1056,
                 "stem_filters": 32, "num_classes": 1000},
    "nasrnn": {"batch": 1, "steps": 5, "hidden": 512},
    "bert": {"batch": 1, "seq": 64, "hidden": 1024, "heads": 16, "layers": 8},
    "bert_base": {"batch": 1, "seq": 128, "hidden": 768, "heads": 12, "layers": 12},
}  # fmt: skip

# Models cheap enough to build at full size in a test (well under a second each).
CHEAP_FULL_SIZE = ("squeezenet", "nasnet_a", "nasrnn")


@functools.cache
def _ci_model(name: str) -> onnx.ModelProto:
    return zoo.build(name, **CI_OPTIONS[name])


def _random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        graph_input.name: rng.standard_normal(
            [d.dim_value for d in graph_input.type.tensor_type.shape.dim], dtype=np.float32
        )
        for graph_input in model.graph.input
    }


def _run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


# ----------------------------------------------------------------------- registry


def test_names_lists_every_benchmark_model():
    assert zoo.names() == list(CI_OPTIONS)


def test_default_options_are_the_full_size_configurations():
    for name, options in FULL_SIZE_OPTIONS.items():
        defaults = zoo.default_options(name)
        assert defaults == {**options, "seed": 0}, name
        assert all(type(value) is int for value in defaults.values()), name


def test_build_raises_on_unknown_name_listing_valid_names():
    with pytest.raises(ValueError, match="unknown model 'resnet51'.*valid names: resnet50"):
        zoo.build("resnet51")


def test_build_raises_on_unknown_option_listing_valid_options():
    with pytest.raises(ValueError, match="unknown option.*layer\\b.*valid options: batch"):
        zoo.build("bert", layer=2)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("bert", {"layers": "2"}, "must be int"),
        ("bert", {"layers": 2.0}, "must be int"),
        ("bert", {"layers": True}, "must be int"),
        ("bert", {"layers": 0}, "must be >= 1"),
        ("nasrnn", {"seed": -1}, "must be >= 0"),
        ("bert", {"hidden": 100, "heads": 16}, "multiple of heads"),
        ("vgg19", {"image_size": 100}, "multiple of 32"),
        ("nasnet_a", {"penultimate_filters": 1000}, "multiple of 96"),
        ("inception_v3", {"image_size": 40}, "too small"),
    ],
)
def test_build_raises_value_error_on_invalid_option_value(name, options, message):
    with pytest.raises(ValueError, match=message):
        zoo.build(name, **options)


# -------------------------------------------------------------- CI-size models


@pytest.mark.parametrize("name", list(CI_OPTIONS))
def test_ci_model_passes_the_full_onnx_checker(name):
    model = _ci_model(name)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 8
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert {i.data_type for i in model.graph.initializer} <= {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.INT64,
    }
    for value in [*model.graph.input, *model.graph.output]:
        assert value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
        assert all(d.dim_value > 0 for d in value.type.tensor_type.shape.dim), value.name
    node_names = [node.name for node in model.graph.node]
    assert len(set(node_names)) == len(node_names)


@pytest.mark.parametrize("name", list(CI_OPTIONS))
def test_ci_model_on_onnxruntime_matches_numpy_reference(name):
    model = _ci_model(name)
    feeds = _random_feeds(model)
    got = _run_ort(model, feeds)
    expected = _numpy_reference(model, feeds)
    assert got.keys() == expected.keys()
    for output, want in expected.items():
        assert np.isfinite(want).all(), output
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got[output], want, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("name", list(CI_OPTIONS))
def test_ci_model_outputs_stay_order_one(name):
    model = _ci_model(name)
    (output,) = _run_ort(model, _random_feeds(model)).values()
    rms = float(np.sqrt(np.mean(np.square(output, dtype=np.float64))))
    assert 1e-2 < rms < 1e2, rms
    assert float(output.std()) > 1e-3  # not a constant output


@pytest.mark.parametrize("name", list(CI_OPTIONS))
def test_ci_model_operator_histogram_is_stable(name):
    model = _ci_model(name)
    assert zoo_stats.model_stats(model).ops == CI_OPS[name]


@pytest.mark.parametrize("name", list(CI_OPTIONS))
def test_describe_agrees_with_the_built_ci_model(name):
    info = zoo.describe(name, **CI_OPTIONS[name])
    stats = zoo_stats.model_stats(_ci_model(name))
    assert (info.nodes, info.parameters, info.flops, info.ops) == (
        stats.nodes,
        stats.parameters,
        stats.flops,
        stats.ops,
    )
    assert info.inputs == {
        i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
        for i in _ci_model(name).graph.input
    }


def test_bert_attention_is_neither_one_hot_nor_uniform():
    model = zoo.build("bert", **CI_OPTIONS["bert"])
    softmax = next(node for node in model.graph.node if node.op_type == "Softmax")
    model.graph.output.append(onnx.helper.make_empty_tensor_value_info(softmax.output[0]))
    probs = _run_ort(model, _random_feeds(model))[softmax.output[0]]
    seq = CI_OPTIONS["bert"]["seq"]
    peak = probs.max(axis=-1)
    assert 2.0 / seq < float(peak.mean()) < 0.9


def test_nasrnn_steps_share_their_sixteen_weight_matrices():
    steps = 3
    model = zoo.build("nasrnn", steps=steps, hidden=16)
    weights = [node.input[1] for node in model.graph.node if node.op_type == "MatMul"]
    assert len(set(weights)) == 16
    assert all(weights.count(w) == steps for w in set(weights))
    assert [i.name for i in model.graph.input] == [f"x_{t}" for t in range(steps)]


def test_bert_layers_option_adds_one_encoder_layer_of_33_nodes_each():
    for layers in (1, 2, 5):
        assert zoo.describe("bert", layers=layers, seq=8).nodes == 33 * layers


# ---------------------------------------------------------------- full size


@pytest.mark.parametrize("name", list(FULL_SIZE))
def test_full_size_model_counts_are_stable(name):
    info = zoo.describe(name)
    assert (info.nodes, info.parameters, info.flops, info.ops) == FULL_SIZE[name]
    assert info.options == FULL_SIZE_OPTIONS[name]


@pytest.mark.parametrize("name", CHEAP_FULL_SIZE)
def test_describe_agrees_with_the_built_full_size_model(name):
    model = zoo.build(name)
    stats = zoo_stats.model_stats(model)
    nodes, parameters, flops, ops = FULL_SIZE[name]
    assert (stats.nodes, stats.parameters, stats.flops, stats.ops) == (nodes, parameters, flops, ops)


def test_full_size_inputs_have_the_paper_shapes():
    inputs = {name: zoo.describe(name).inputs for name in zoo.names()}
    assert inputs["resnet50"] == {"input": (1, 3, 224, 224)}
    assert inputs["inception_v3"] == {"input": (1, 3, 299, 299)}
    assert inputs["nasnet_a"] == {"input": (1, 3, 224, 224)}
    assert inputs["nasrnn"] == {f"x_{t}": (1, 512) for t in range(5)}
    assert inputs["bert"] == {"hidden_states": (1, 64, 1024)}
    assert inputs["bert_base"] == {"hidden_states": (1, 128, 768)}


@pytest.mark.parametrize("name", list(CI_OPTIONS))
def test_batch_option_scales_inputs_and_flops_not_parameters(name):
    one = zoo.describe(name, **CI_OPTIONS[name])
    two = zoo.describe(name, **CI_OPTIONS[name], batch=2)
    assert all(shape[0] == 2 for shape in two.inputs.values())
    assert two.parameters == one.parameters
    if name == "nasrnn":  # the first step's h0 @ U is shared by the whole batch
        assert one.flops < two.flops < 2 * one.flops
    else:
        assert two.flops == 2 * one.flops


# ------------------------------------------------------------- determinism


def test_build_is_deterministic_for_a_seed():
    first = zoo.build("squeezenet", image_size=32, seed=7).SerializeToString()
    assert zoo.build("squeezenet", image_size=32, seed=7).SerializeToString() == first


def test_build_with_another_seed_changes_weights_not_structure():
    a = zoo.build("nasrnn", steps=2, hidden=16)
    b = zoo.build("nasrnn", steps=2, hidden=16, seed=1)
    assert a.SerializeToString() != b.SerializeToString()
    assert a.graph.node == b.graph.node
    assert [i.name for i in a.graph.initializer] == [i.name for i in b.graph.initializer]


# -------------------------------------------------------------------- CLI


def _run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="taso")
    zoo_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    code = zoo_cli.run(parser.parse_args(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_list_prints_one_row_per_model(capsys):
    code, out, err = _run_cli(["models", "list"], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["name", "parameters", "nodes", "GFLOPs"]
    assert [line.split()[0] for line in lines[1:]] == zoo.names()
    assert "25,610,152" in lines[1] and "175" in lines[1]


def test_cli_build_writes_the_model_with_options(tmp_path, capsys):
    path = tmp_path / "bert.onnx"
    argv = ["models", "build", "bert", "-o", str(path), "--batch", "2", "--seed", "3",
            "--option", "layers=1", "--option", "seq=8"]  # fmt: skip
    code, out, err = _run_cli(argv, capsys)
    assert code == 0 and err == ""
    expected = zoo.build("bert", batch=2, seed=3, layers=1, seq=8)
    assert onnx.load(path).SerializeToString() == expected.SerializeToString()
    assert [p.name for p in tmp_path.iterdir()] == ["bert.onnx"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["models", "build", "resnet51", "-o", "{tmp}/m.onnx"], "valid names: resnet50"),
        (["models", "build", "bert", "-o", "{tmp}/missing/m.onnx"], "not a writable directory"),
        (["models", "build", "bert", "-o", "{tmp}"], "is a directory"),
        (["models", "build", "bert", "-o", "{tmp}/m.onnx", "--option", "layers"], "KEY=VALUE"),
        (["models", "build", "bert", "-o", "{tmp}/m.onnx", "--option", "layers=x"], "must be int"),
        (["models", "build", "bert", "-o", "{tmp}/m.onnx", "--option", "lay=1"], "valid options"),
        (["models", "build", "bert", "-o", "{tmp}/m.onnx", "--batch", "0"], "must be >= 1"),
    ],
)
def test_cli_bad_input_prints_one_line_and_exits_2(argv, message, tmp_path, capsys):
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    code, out, err = _run_cli(argv, capsys)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("taso models: error: ")
    assert message in err
    assert list(tmp_path.iterdir()) == []


def test_package_docstring_example_runs():
    pytest.importorskip("taso.models")
    failures, _ = doctest.testmod(zoo, verbose=False)
    assert failures == 0
