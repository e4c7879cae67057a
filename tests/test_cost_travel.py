"""Cost tables that travel (taso.cost.travel): `taso info --costs --export FILE` on one machine, `--import FILE` on
another of the same type; a table measured on another machine type is refused in one line."""

from __future__ import annotations

import json

import pytest

from taso.cli import main
from taso.cost import CostCache
from taso.cost.ort_cpu import fingerprint


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    def use(name: str):
        monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / name))
        return tmp_path / name
    return use


def _measured_here(entries: dict[str, float], threads: int = 1) -> None:
    cache = CostCache()
    for key, seconds in entries.items():
        cache.record(fingerprint(threads), key, seconds, band=0.05)  # a relative noise band
    cache.save()


def test_a_table_exported_here_imports_on_a_machine_of_the_same_type(cache_dir, tmp_path, capsys):
    cache_dir("measured")
    _measured_here({"relu|f32[1,64]": 1e-6, "matmul|f32[1,64]x[64,64]": 4e-6}, threads=1)
    _measured_here({"relu|f32[1,64]": 2e-6}, threads=2)
    shipped = tmp_path / "table.json"
    assert main(["info", "--costs", "--export", str(shipped)]) == 0
    assert "exported 3 cost entries of 2 table(s)" in capsys.readouterr().out
    cache_dir("elsewhere")
    assert main(["info", "--costs", "--import", str(shipped)]) == 0
    assert "imported 3 cost entries into 2 table(s)" in capsys.readouterr().out
    cache = CostCache()
    assert cache.table(fingerprint(1)) == {"relu|f32[1,64]": 1e-6, "matmul|f32[1,64]x[64,64]": 4e-6}
    assert cache.entry(fingerprint(1), "relu|f32[1,64]").band == pytest.approx(0.05), "the noise band travels with the seconds"
    assert main(["info", "--costs", "--import", str(shipped)]) == 0
    assert "0 cost entries" in capsys.readouterr().out and CostCache().table(fingerprint(2)) == {"relu|f32[1,64]": 2e-6}


def test_entries_the_cache_holds_are_kept_over_imported_ones(cache_dir, tmp_path):
    cache_dir("a")
    _measured_here({"relu|f32[1,64]": 1e-6})
    shipped = tmp_path / "table.json"
    assert main(["info", "--costs", "--export", str(shipped)]) == 0
    cache_dir("b")
    _measured_here({"relu|f32[1,64]": 3e-6})
    assert main(["info", "--costs", "--import", str(shipped)]) == 0
    assert CostCache().table(fingerprint(1)) == {"relu|f32[1,64]": 3e-6}


def test_a_table_from_another_machine_type_is_refused_in_one_line(cache_dir, tmp_path, capsys):
    cache_dir("here")
    other = fingerprint(1).replace("|onnxruntime ", "|onnxruntime 0.0.0-not-this-one ")
    shipped = tmp_path / "other.json"
    shipped.write_text(json.dumps({"taso-cost-tables": 1, "tables": {other: {"relu|f32[1,64]": 1e-6}}}))
    assert main(["info", "--costs", "--import", str(shipped)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "refused the table measured on" in err[0] and "this machine measures" in err[0]
    assert "no table of this machine's type" in err[1] and other not in CostCache().tables()


@pytest.mark.parametrize("content, message", [("not json", "not JSON"), ('{"a": 1}', "not a cost table written by"),
                                              ('{"taso-cost-tables": 1, "tables": {"x": 3}}', "damaged")])
def test_a_bad_table_file_is_one_line_and_exit_2(content, message, cache_dir, tmp_path, capsys):
    cache_dir("here")
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["info", "--costs", "--import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_exporting_an_empty_cache_or_without_costs_is_one_line(cache_dir, tmp_path, capsys):
    cache_dir("empty")
    assert main(["info", "--costs", "--export", str(tmp_path / "t.json")]) == 2
    assert "no table of this machine's" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
    assert main(["info", "--export", str(tmp_path / "t.json")]) == 2
    assert "give them with --costs" in capsys.readouterr().err
