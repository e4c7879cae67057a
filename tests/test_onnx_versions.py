"""The version table: which versions of each ONNX operator taso reads and writes, checked against the installed onnx."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import pytest
from helpers import model_from_text, run_ort

import taso
from taso.ops import onnx_importers
from taso.ops.onnx_versions import OLDEST_OPSET, REVIEWED_THROUGH, VERSIONS, understood, version_in_force

NEWEST = min(onnx.defs.onnx_opset_version(), REVIEWED_THROUGH)
MODELLED_FROM = 9  # the opsets taso read before the table: the versions in force there are the importers' own

# Changes between listed versions, besides new element types, that the table's review found harmless: the attribute
# is read by the importer, or only applies to element types taso does not read; the optional last input is one the
# importer declines (Attention-24's nonpad_kv_seqlen, Attention-25's window sizes, whose defaults are no window: a
# node given them stays opaque).
REVIEWED_CHANGES = {("Cast", 24): {"round_mode"}, ("Attention", 24): {"nonpad_kv_seqlen"}, ("Attention", 25): {"left_window_size", "right_window_size"}}


def _schema(op_type: str, version: int):
    return onnx.defs.get_schema(op_type, version, "")


def _interface(schema) -> tuple:
    """What a version of an operator is besides its element types: attributes, inputs and outputs."""
    return ({name: (a.type, a.required) for name, a in schema.attributes.items()},
            [(i.name, i.option) for i in schema.inputs], [(o.name, o.option) for o in schema.outputs])


@pytest.mark.parametrize("op_type", sorted(VERSIONS))
def test_every_listed_version_exists_and_every_version_in_force_from_opset_7_is_listed(op_type):
    versions = {version_in_force(op_type, opset) for opset in range(OLDEST_OPSET, NEWEST + 1)} - {None}
    assert set(VERSIONS[op_type]) == versions, f"{op_type}: in force from opset {OLDEST_OPSET} to {NEWEST}: {sorted(versions)}"


@pytest.mark.parametrize("op_type", sorted(VERSIONS))
def test_versions_after_21_change_element_types_only(op_type):
    """Versions 22 to 28 were reviewed as type-list changes: an attribute, input or output added since fails here until
    someone reads what it means and lists it."""
    listed = sorted(VERSIONS[op_type])
    for before, after in zip(listed, listed[1:]):
        if after <= 21:
            continue
        old, new = _interface(_schema(op_type, before)), _interface(_schema(op_type, after))
        added = set(new[0]) - set(old[0])
        assert added <= REVIEWED_CHANGES.get((op_type, after), set()), f"{op_type}-{after} adds attributes {sorted(added)}"
        assert {k: v for k, v in new[0].items() if k in old[0]} == old[0], f"{op_type}-{after} changes attributes"
        reviewed = REVIEWED_CHANGES.get((op_type, after), set())
        inputs = [i for i in new[1] if i[0] not in reviewed]
        assert (inputs, new[2]) == old[1:], f"{op_type}-{after} changes its inputs or outputs"


def test_every_importer_has_a_version_entry():
    assert set(onnx_importers()) <= set(VERSIONS)


def test_no_version_is_understood_below_opset_7():
    assert not any(understood(op, opset) for op in VERSIONS for opset in range(1, OLDEST_OPSET))


def test_the_versions_the_importers_were_written_for_are_understood():
    for op_type in VERSIONS:
        for opset in range(MODELLED_FROM, 22):
            if version_in_force(op_type, opset) is not None:
                assert understood(op_type, opset), (op_type, opset)


RELU_ADD = """
    <ir_version: {ir}, opset_import: ["" : {opset}]>
    g (float[2, 3] x) => (float[2, 3] y) <float[3] b = {{1.0, -2.0, 0.5}}> {{ s = Add (x, b)  y = Relu (s) }}
"""


@pytest.mark.parametrize("opset", [7, 13, 21, 22, 25, 28])
def test_a_model_at_each_opset_is_read_modelled_and_written_at_that_opset(opset):
    model = model_from_text(RELU_ADD.format(ir=min(onnx.IR_VERSION, 13), opset=opset))
    graph = taso.load_onnx(model)
    assert [n.op.name for n in graph.nodes] == ["add", "relu"], "both modelled at every opset from 7"
    exported = taso.export_onnx(graph)
    assert [(o.domain, o.version) for o in exported.opset_import] == [("", opset)]
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    np.testing.assert_array_equal(run_ort(exported, {"x": x})[0], run_ort(model, {"x": x})[0])


def test_an_operator_version_taso_does_not_model_stays_opaque():
    """At opset 6 Add is Add-6 (broadcast only with broadcast=1): the node is kept verbatim, never read as NumPy's Add."""
    model = model_from_text(RELU_ADD.format(ir=4, opset=6))
    graph = taso.load_onnx(model)
    assert [n.op.name for n in graph.nodes] == ["opaque", "opaque"]
