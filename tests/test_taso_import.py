"""`taso import-taso`: TASO's published rule file (protobuf) decoded, imported, and verified.

The sample file (tests/data/taso_rules_sample.pb, made by tests/data/taso_make_sample.py)
holds TASO-shaped rules, among them TASO's #99 pattern: two convolutions side by side as
one grouped convolution, true only when the two kernels have equal output widths. The
verifier must prove it only under that constraint and refute it, with a counterexample,
where the widths differ.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from taso.verifier import taso_export as te
from taso.verifier import taso_import as ti
from taso.verifier.verify import Settings, verify_rule

from taso.cli import main as taso_main
from taso.rules import Library

DATA = os.path.join(os.path.dirname(__file__), "data")
SAMPLE_PB = os.path.join(DATA, "taso_rules_sample.pb")
GROUPED_CONV = "taso#8"  # the sample's concat-of-two-convolutions -> grouped convolution rule
EQUAL_WIDTHS = {"eq": [{"dim": ["k1", 0]}, {"dim": ["k2", 0]}]}
NEEDS_EQUAL_WIDTHS = {GROUPED_CONV: EQUAL_WIDTHS, "taso#12": {"eq": [{"dim": ["kh1", 0]}, {"dim": ["kh2", 0]}]}}  # 12: 1x3 kernels, fused relu


@pytest.fixture(scope="module")
def sample_rules() -> list[ti.TasoRule]:
    return ti.read_file(SAMPLE_PB)


@pytest.fixture(scope="module")
def imported(sample_rules) -> ti.ImportResult:
    return ti.import_rules(sample_rules)


def _by_name(library: Library, name: str):
    return next(r for r in library if r.name == name)


# ---- the schema and the wire format ------------------------------------------------------------------


def test_schema_has_tasos_field_numbers_and_labels():
    fields = {f.name: (f.number, f.is_required) for f in ti.message_classes()["MapOutput"].DESCRIPTOR.fields}
    assert fields == {"srcOpId": (1, True), "dstOpId": (2, True), "srcTsId": (3, True), "dstTsId": (4, True)}
    operator = {f.name: f.number for f in ti.message_classes()["Operator"].DESCRIPTOR.fields}
    assert operator == {"type": 1, "input": 2, "para": 3}
    assert ti.message_classes()["RuleCollection"].DESCRIPTOR.full_name == "GraphSubst.RuleCollection"


def test_tasos_enum_numbers():
    ops = (ti.OP["conv2d"], ti.OP["concat"], ti.OP["split"], ti.OP["matmul"], ti.OP["mul"], ti.OP["constant_pool"])
    assert ops == (3, 12, 13, 18, 19, 25)
    assert (ti.PM["kernel_h"], ti.PM["pad"], ti.PM["acti"], ti.PM["axis"], ti.PM["perm"]) == (4, 8, 9, 11, 12)


def test_committed_sample_is_what_the_script_writes(sample_rules):
    import importlib.util

    spec = importlib.util.spec_from_file_location("taso_make_sample", os.path.join(DATA, "taso_make_sample.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    SAMPLE = script.SAMPLE
    assert sample_rules == SAMPLE
    with open(SAMPLE_PB, "rb") as f:
        assert f.read() == ti.encode(SAMPLE)


def test_decode_inverts_encode(sample_rules):
    assert ti.decode(ti.encode(sample_rules)) == sample_rules


@pytest.mark.parametrize("data, message", [
    (b"garbage that is not protobuf", "not a TASO rule collection"),
    (b"", "holds no TASO rules"),
    (b"\x0a\x02\x0a\x00", "required fields are missing"),  # a rule with one operator lacking its type
])
def test_malformed_bytes_are_one_clear_error(data, message):
    with pytest.raises(ti.TasoImportError, match=message):
        ti.decode(data)


# ---- import -------------------------------------------------------------------------------------------------


def test_import_converts_every_rule_it_can_and_reports_the_others(imported):
    assert imported.total == 13 and len(imported.library) == 12
    assert imported.skipped == [(9, "TASO operator merge_gconv has no counterpart in taso")]
    assert "skipped 1: TASO operator merge_gconv has no counterpart in taso (#9)" in imported.summary()
    assert imported.library.header["import"]["skipped"] == [{"index": 9, "reason": "TASO operator merge_gconv has no counterpart in taso"}]
    assert all(r.status == "candidate" for r in imported.library)


def test_imported_rules_are_at_tasos_pool_shapes_with_shape_expressions(imported):
    qkv = _by_name(imported.library, "taso#1")
    assert {i.name: i.type.shape for i in qkv.inputs} == {"x1": (2, 4), "w1": (4, 4), "w2": (4, 4)}
    assert str(qkv).endswith("axis=1, sizes=(4,4))[1]]")
    assert {"side": "target", "node": 2, "param": "sizes", "value": [{"dim": ["w1", 1]}, {"dim": ["w2", 1]}]} in qkv.params
    pool = _by_name(imported.library, "taso#3")
    assert str(pool) == ("avg_pool2d(i1, count_include_pad=1, kernel=(3,3), pads=(1,1,1,1), strides=(1,1)) ⇒ "
                         "conv2d(i1, pool_kernel(channels=4, kernel=(3,3)), groups=4, pads=(1,1,1,1), strides=(1,1))")
    assert {p["param"] for p in pool.params} == {"channels", "groups"}
    grouped = _by_name(imported.library, GROUPED_CONV)
    assert str(grouped) == ("concat(conv2d(i1, k1, pads=(1,1,1,1), strides=(1,1)), conv2d(i2, k2, pads=(1,1,1,1), strides=(1,1)), axis=1) ⇒ "
                            "conv2d(concat(i1, i2, axis=1), concat(k1, k2, axis=0), groups=2, pads=(1,1,1,1), strides=(1,1))")
    assert EQUAL_WIDTHS not in grouped.constraints, "the importer must leave the width question to the verifier"


def test_transpose_permutation_and_activations_are_decoded(imported):
    transposed = "transpose(matmul(w1, w2), perm=(1,0)) ⇒ matmul(transpose(w2, perm=(1,0)), transpose(w1, perm=(1,0)))"
    assert str(_by_name(imported.library, "taso#5")) == transposed
    assert "activation=relu" in str(_by_name(imported.library, "taso#4"))


def test_unknown_operator_type_is_reported_by_number():
    rule = ti.TasoRule((ti.TasoOp(99, ((-1, 0),)),), (ti.TasoOp(ti.OP["relu"], ((-1, 0),)),), ((0, 0, 0, 0),))
    result = ti.import_rules([rule])
    assert result.skipped == [(0, "TASO operator type 99 has no counterpart in taso")]


def test_random_garbage_rules_are_skipped_with_a_reason_never_a_crash():
    rng = random.Random(1)

    def random_op(count: int) -> ti.TasoOp:
        refs = tuple((rng.choice([rng.randint(-22, -1), rng.randint(0, count)]), rng.randint(0, 1)) for _ in range(rng.randint(0, 3)))
        params = tuple((rng.randint(0, 16), rng.randint(-2, 5)) for _ in range(rng.randint(0, 5)))
        return ti.TasoOp(rng.randint(0, 30), refs, params)

    rules = [ti.TasoRule(tuple(random_op(k) for k in range(rng.randint(1, 3))), tuple(random_op(k) for k in range(rng.randint(1, 3))),
                         ((rng.randint(-2, 2), 0, rng.randint(-2, 2), 0),)) for _ in range(300)]
    result = ti.import_rules(ti.decode(ti.encode(rules)))
    assert len(result.library) + len(result.skipped) == 300
    for rule in result.library:
        rule.validate()


# ---- verification ---------------------------------------------------------------------------------------------


def test_sound_rules_are_proved_and_the_grouped_convolution_only_under_equal_widths(imported):
    for rule in imported.library:
        verified = verify_rule(rule, Settings(timeout_s=10))
        assert verified.status == "proved", (rule.name, verified.proof)
        added = [c for c in verified.proof.get("constraints_added", []) if all(isinstance(e, dict) for e in c["eq"])]  # dim = dim
        assert added == ([NEEDS_EQUAL_WIDTHS[rule.name]] if rule.name in NEEDS_EQUAL_WIDTHS else []), rule.name
    proved = verify_rule(_by_name(imported.library, GROUPED_CONV), Settings(timeout_s=10))
    equal = {"i1": (2, 4, 5, 5), "i2": (2, 4, 5, 5), "k1": (4, 4, 3, 3), "k2": (4, 4, 3, 3)}
    assert proved.constraints_hold(equal) and not proved.constraints_hold({**equal, "k2": (6, 4, 3, 3)})


@pytest.mark.parametrize("how", [{"shapes": {"k2": (6, 4, 3, 3)}}, {"generic": True}], ids=["given-widths", "generic-shapes"])
def test_grouped_convolution_with_unequal_widths_is_refuted_with_a_counterexample(sample_rules, how):
    result = ti.import_rules(sample_rules, **how)
    rule = _by_name(result.library, GROUPED_CONV)
    shapes = {i.name: i.type.shape for i in rule.inputs}
    assert shapes["k1"][0] != shapes["k2"][0]
    verified = verify_rule(rule, Settings(timeout_s=10))
    assert verified.status == "refuted"
    assert verified.proof["counterexample"]["max_abs_diff"] > 1e-2
    assert verify_rule(rule, Settings(timeout_s=5, precheck=False)).status != "proved", "Z3 alone must not prove it either"


def test_at_generic_shapes_exactly_the_rules_needing_equal_widths_are_refuted(sample_rules):
    statuses = {r.name: verify_rule(r, Settings(timeout_s=10)).status for r in ti.import_rules(sample_rules, generic=True).library}
    assert {name for name, status in statuses.items() if status != "proved"} == set(NEEDS_EQUAL_WIDTHS)
    assert all(statuses[name] == "refuted" for name in NEEDS_EQUAL_WIDTHS)


def test_generic_shapes_give_each_free_dimension_its_own_size(sample_rules):
    rule = _by_name(ti.import_rules(sample_rules, generic=True).library, "taso#1")
    x1, w1, w2 = (i.type.shape for i in rule.inputs)
    assert x1[1] == w1[0] == w2[0] and len({x1[0], x1[1], w1[1], w2[1]}) == 4
    assert rule.side_graph("target").nodes[-1].params["sizes"] == (w1[1], w2[1])


# ---- the encoder ------------------------------------------------------------------------------------------------


def test_export_then_import_gives_the_same_rules(imported):
    data, skipped = te.export_rules(imported.library.rules)
    assert skipped == []
    again = ti.import_rules(ti.decode(data))
    assert [r.id for r in again.library] == [r.id for r in imported.library]


def test_shipped_library_round_trips_through_tasos_format():
    """A sample of the shipped library: what TASO can express comes back the same, up to constraints the generator found numerically."""
    library = Library.load(os.path.join(os.path.dirname(ti.__file__), "..", "taso", "data", "library.jsonl.gz"))
    generated = [r for r in library.rules if not r.extra.get("lifted_from")]  # rank-lifted rules have no TASO form (test_lift.py)
    rules = random.Random(0).sample(generated, 300)
    data, skipped = te.export_rules(rules)
    # skipped: rules over inputs TASO's pool lacks (bias and channel vectors, 1x1 kernels, batch norm statistics)
    assert skipped and all(reason.startswith("input ") and reason.endswith(" is not in TASO's input pool") for _, reason in skipped)
    exported = [r for r in rules if r.id not in {rule_id for rule_id, _ in skipped}]
    back = ti.import_rules(ti.decode(data))
    assert back.skipped == [] and len(back.library) == len(exported)
    for original, imported_rule in zip(exported, back.library):
        a, b = json.loads(original.canonical()), json.loads(imported_rule.canonical())
        assert {k for k in a if a[k] != b[k]} <= {"constraints"}, original


def test_encoder_refuses_what_taso_cannot_express(imported):
    from dataclasses import replace

    library = Library.load(os.path.join(os.path.dirname(ti.__file__), "..", "taso", "data", "library.jsonl.gz"))
    with pytest.raises(ti.Unconvertible, match="input b1 is not in TASO's input pool"):
        te.from_rule(next(r for r in library if any(i.name == "b1" for i in r.inputs)))
    conv = _by_name(imported.library, "taso#4")
    dilated = replace(conv, target=(replace(conv.target[0], params={**conv.target[0].params, "pads": (0, 0, 0, 0), "dilations": (2, 2)}),))
    with pytest.raises(ti.Unconvertible, match="dilations"):
        te.from_rule(dilated)


# ---- the command line -----------------------------------------------------------------------------------------------


def test_cli_imports_and_verify_proves(tmp_path, capsys):
    out, library = tmp_path / "taso.json", tmp_path / "library.json"
    assert taso_main(["import-taso", SAMPLE_PB, "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "read 13 TASO rules: imported 12, skipped 1" in printed and "merge_gconv" in printed
    assert len(Library.load(out)) == 12
    assert taso_main(["verify", str(out), "-o", str(library), "--quiet"]) == 0
    assert "12 proved (2 with added shape constraints), 0 refuted, 0 unknown" in capsys.readouterr().out
    assert all(r.status == "proved" for r in Library.load(library)) and len(Library.load(library)) == 12


def test_cli_input_shape_gives_the_unequal_width_instance(tmp_path, capsys):
    out = tmp_path / "taso.json"
    assert taso_main(["import-taso", SAMPLE_PB, "-o", str(out), "--input-shape", "k2=6,4,3,3"]) == 0
    assert taso_main(["verify", str(out), "-o", str(tmp_path / "lib.json")]) == 0
    printed = capsys.readouterr().out
    assert "11 proved (1 with added shape constraints), 1 refuted, 0 unknown" in printed  # taso#12 keeps equal widths
    everything = {r.name for r in ti.import_rules(ti.read_file(SAMPLE_PB)).library}
    assert {r.name for r in Library.load(tmp_path / "lib.json")} == everything - {GROUPED_CONV}


def test_cli_unknown_input_name_is_an_error(tmp_path, capsys):
    assert taso_main(["import-taso", SAMPLE_PB, "-o", str(tmp_path / "out.json"), "--input-shape", "k9=4,4,3,3"]) == 2
    assert "--input-shape k9: no TASO input has that name" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (b"not protobuf at all", "not a TASO rule collection"), (None, "no such file"), (b"", "holds no TASO rules"),
])
def test_cli_bad_file_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "graph_subst.pb"
    if content is not None:
        path.write_bytes(content)
    assert taso_main(["import-taso", str(path), "-o", str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("taso: error: ") and message in err
    assert not (tmp_path / "out.json").exists()
