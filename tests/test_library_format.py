"""Rule format version 2: gzip'd JSON Lines with one digest over the rule lines, rules parsed and compiled only when needed."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest
from rule_examples import all_rules

import taso.search.core as search_module
from taso.cost import make_cost_model
from taso.errors import TasoError
from taso.pipeline.library import DEFAULT_LIBRARY, load_rules
from taso.rules import VERSION, Library, LibraryFile, Rule, RuleFormatError, usable_reverse
from taso.search import SearchConfig, search
from taso.search.core import RuleIndex


def _proved_library() -> Library:
    return Library([r.with_status("proved", {"prover": "z3"}) for r in all_rules()], {"generator": {"max_ops": 3}})


def _lines(path) -> list[bytes]:
    return gzip.decompress(path.read_bytes()).split(b"\n")


def _write_lines(path, lines: list[bytes]) -> None:
    path.write_bytes(gzip.compress(b"\n".join(lines)))


# ---- the file --------------------------------------------------------------------------------------------


def test_a_jsonl_gz_library_round_trips_with_the_digest_of_its_version_1_form(tmp_path):
    library = _proved_library()
    library.save(tmp_path / "lib.jsonl.gz")
    library.save(tmp_path / "lib.json")
    head = json.loads(_lines(tmp_path / "lib.jsonl.gz")[0])
    assert head["format"] == "taso-rules" and head["version"] == VERSION == 2 and len(head["index"]) == len(library)
    again = Library.load(tmp_path / "lib.jsonl.gz")
    assert again.rules == library.rules and [r.id for r in again] == [r.id for r in library]
    assert again.header["digest"] == library.digest() == Library.load(tmp_path / "lib.json").header["digest"]
    assert json.loads((tmp_path / "lib.json").read_text())["version"] == 1  # a .json name still gets the version-1 document


def test_an_uncompressed_jsonl_library_and_a_gzipped_version_1_document_read_the_same(tmp_path):
    library = _proved_library()
    library.save(tmp_path / "lib.jsonl")
    assert Library.load(tmp_path / "lib.jsonl").rules == library.rules
    (tmp_path / "lib.json.gz").write_bytes(gzip.compress(library.dumps().encode()))
    assert Library.load(tmp_path / "lib.json.gz").rules == library.rules


def test_the_digest_is_a_hash_of_the_raw_rule_lines(tmp_path):
    _proved_library().save(tmp_path / "lib.jsonl.gz")
    raw = gzip.decompress((tmp_path / "lib.jsonl.gz").read_bytes())
    head, _, body = raw.partition(b"\n")
    assert json.loads(head)["header"]["digest"] == "blake2b-128:" + hashlib.blake2b(body, digest_size=16).hexdigest()


def test_saving_is_reproducible_byte_for_byte(tmp_path):
    _proved_library().save(tmp_path / "a.jsonl.gz")
    _proved_library().save(tmp_path / "b.jsonl.gz")
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


# ---- integrity ----------------------------------------------------------------------------------------------


def test_a_status_flipped_by_hand_in_a_rule_line_is_refused(tmp_path):
    path = tmp_path / "lib.jsonl.gz"
    Library([r.with_status("candidate") for r in all_rules()]).save(path)
    lines = _lines(path)
    lines[1] = lines[1].replace(b'"status":"candidate"', b'"status":"proved"')
    head = json.loads(lines[0])
    head["index"][0][1] = "proved"
    lines[0] = json.dumps(head).encode()
    _write_lines(path, lines)
    with pytest.raises(TasoError, match="digest"):
        load_rules(str(path))
    assert len(Library.load(path, check_digest=False)) == len(all_rules())  # taso verify may still re-prove it


def test_without_the_digest_check_every_id_is_checked(tmp_path):
    path = tmp_path / "lib.jsonl.gz"
    _proved_library().save(path)
    lines = _lines(path)
    data = json.loads(lines[1])
    data["inputs"][0]["class"] = "edited"  # part of the id, not of the index
    lines[1] = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    _write_lines(path, lines)
    with pytest.raises(RuleFormatError, match="id does not match"):
        Library.load(path, check_digest=False)
    with pytest.raises(TasoError, match="digest"):
        Library.load(path)


def test_a_library_without_a_digest_is_not_trusted(tmp_path):
    path = tmp_path / "lib.jsonl.gz"
    _proved_library().save(path)
    lines = _lines(path)
    head = json.loads(lines[0])
    del head["header"]["digest"]
    lines[0] = json.dumps(head).encode()
    _write_lines(path, lines)
    with pytest.raises(TasoError, match="no integrity digest"):
        load_rules(str(path))


def test_stored_ids_are_trusted_only_when_the_digest_matched(tmp_path, monkeypatch):
    path = tmp_path / "lib.jsonl.gz"
    library = _proved_library()
    library.save(path)
    monkeypatch.setattr(Rule, "canonical", lambda self: pytest.fail("an id was recomputed"))
    assert [r.id for r in Library.load(path)] == [r.id for r in library]
    monkeypatch.undo()
    recomputed = Library.load(path, check_digest=False)
    assert [r.id for r in recomputed] == [r.id for r in library]


def test_an_index_that_lies_about_a_rule_is_caught_when_the_rule_is_read(tmp_path):
    path = tmp_path / "lib.jsonl.gz"
    _proved_library().save(path)
    lines = _lines(path)
    head = json.loads(lines[0])
    head["index"][0][2] = "tanh"
    lines[0] = json.dumps(head).encode()
    _write_lines(path, lines)
    with pytest.raises(RuleFormatError, match="index entry"):
        Library.load(path)


@pytest.mark.parametrize("damage, message", [
    (lambda raw: raw[: len(raw) // 2], "damaged gzip"),
    (lambda raw: gzip.compress(gzip.decompress(raw).rsplit(b"\n", 2)[0] + b"\n"), "index lists"),
    (lambda raw: gzip.compress(b'{"format":"taso-rules","version":%d,"header":{},"index":[]}\n' % (VERSION + 1)), "newer.*upgrade"),
    (lambda raw: gzip.compress(b"not json\n"), "not valid JSON"),
    (lambda raw: gzip.compress(b'{"format":"taso-rules","version":2,"header":[],"index":[]}\n'), "header must be"),
])
def test_a_damaged_or_newer_file_gives_a_clear_error(tmp_path, damage, message):
    path = tmp_path / "lib.jsonl.gz"
    _proved_library().save(path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(TasoError, match=message):
        Library.load(path)


# ---- the shipped library and its conversion ---------------------------------------------------------------------


def test_the_shipped_library_is_version_2_and_its_stored_ids_are_right():
    assert DEFAULT_LIBRARY.endswith(".jsonl.gz")
    library = LibraryFile.read(DEFAULT_LIBRARY)
    assert library.version == 2 and library.trusted
    for position in range(len(library)):  # every stored id and reverse id is what the content hashes to
        rule, reverse = library.rule(position), library.reverse(position)
        assert rule.id == "r-" + hashlib.blake2b(rule.canonical().encode(), digest_size=5).hexdigest()
        if reverse is not None:
            assert reverse.id == "r-" + hashlib.blake2b(reverse.canonical().encode(), digest_size=5).hexdigest()


def test_convert_keeps_rules_proofs_and_digest(tmp_path):
    from taso.verifier.build_library import main as build_main

    _proved_library().save(tmp_path / "old.json")
    assert build_main(["--convert", str(tmp_path / "old.json"), "-o", str(tmp_path / "new.jsonl.gz")]) == 0
    old, new = Library.load(tmp_path / "old.json"), Library.load(tmp_path / "new.jsonl.gz")
    assert new.rules == old.rules and [r.proof for r in new] == [r.proof for r in old]
    assert new.header["digest"] == old.header["digest"]


def test_taso_info_lists_a_jsonl_gz_library_with_rule_text(tmp_path, capsys):
    from taso.cli import main

    _proved_library().save(tmp_path / "lib.jsonl.gz")
    assert main(["info", str(tmp_path / "lib.jsonl.gz")]) == 0
    out = capsys.readouterr().out
    assert f"{len(all_rules())} rules" in out and "⇒" in out


# ---- lazy compilation ---------------------------------------------------------------------------------------------


def _rnn():
    import taso.models

    return taso.load_onnx(taso.models.build("nasrnn", steps=2, hidden=64))


def test_only_rules_whose_operators_occur_in_the_model_are_compiled():
    graph = _rnn()
    rules = load_rules()
    index = RuleIndex(rules)
    index.admit(graph)
    present = index.present
    assert index.compiled and all(search_module.side_variants(c.rule.source) <= present for c in index.compiled)
    assert len(index.compiled) < len(rules.slots) / 4
    assert not any(c.rule.source[0].op == "conv2d" for c in index.compiled)


def test_load_rules_is_cached_by_digest_with_its_compiled_rules():
    first, again = load_rules(), load_rules()
    assert first is again
    a, b = RuleIndex(first), RuleIndex(again)
    a.admit(_rnn())
    b.admit(_rnn())
    assert all(x is y for x, y in zip(a.compiled, b.compiled))


def test_lazy_admission_finds_exactly_what_compiling_every_rule_finds(monkeypatch):
    graph, rules = _rnn(), load_rules()
    config = SearchConfig(budget=12, time_limit=600)
    _, lazy = search(graph, rules, make_cost_model("analytic"), config)
    everything = {v for slot in rules.slots for v in slot.source_ops}
    monkeypatch.setattr(RuleIndex, "admit", lambda self, g: self.admit_variants(everything))
    _, eager = search(graph, rules, make_cost_model("analytic"), config)
    assert lazy.trace and lazy.trace == eager.trace and lazy.fired == eager.fired
    assert (lazy.best_cost, lazy.generated, lazy.accepted) == (eager.best_cost, eager.generated, eager.accepted)


def test_the_directed_rules_as_a_list_hold_each_rule_and_its_usable_reverse():
    library = Library.load(DEFAULT_LIBRARY)
    directed = load_rules()
    sample = library.rules[:: 200]
    ids = {r.id for r in directed}
    assert all(r.id in ids for r in sample)
    assert all(rev.id in ids for r in sample if (rev := usable_reverse(r)) is not None)
    assert len(directed) == len(ids)


def test_the_number_of_directed_rules_comes_from_the_index_without_parsing():
    from taso.pipeline.library import _LOADED

    _LOADED.clear()
    rules = load_rules()
    assert len(rules) == 2 * 14945 and rules._all is None
    assert len(list(rules)) == len(rules)


def test_a_version_2_library_over_an_unknown_operator_is_refused_at_load(tmp_path):
    import dataclasses

    rule = next(r for r in all_rules() if r.name == "fuse-matmul-relu")
    source = tuple(dataclasses.replace(n, op="frobnicate") if n.op == "relu" else n for n in rule.source)
    path = tmp_path / "unknown-op.jsonl.gz"
    Library([dataclasses.replace(rule, source=source, status="proved")]).save(path)
    with pytest.raises(TasoError, match="unknown operator 'frobnicate'"):
        load_rules(str(path))
