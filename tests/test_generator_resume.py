"""A generator run in a run directory: spilled shards, key ranges, and resuming after a kill.

A long run (depth 4) must survive being killed: every finished shard and stage is kept in
the run directory, and a resumed run must write the very same rule file while redoing only
what did not finish. The settings are small (depth 3 over three operators, a few seconds).
"""

from __future__ import annotations

import numpy as np
import pytest
from taso.generator import Settings, generate, parallel, parse_ops, pipeline
from taso.generator.parallel import RepeatedGraphs, Workers

from taso.cli import main
from taso.errors import TasoError

SETTINGS = Settings(max_ops=3, ops=parse_ops("matmul,add,transpose"))


def _bytes(tmp_path, name: str, **workers) -> bytes:
    result = generate(SETTINGS, make_workers=lambda s: Workers(s, **workers))
    path = tmp_path / name
    result.library.save(str(path))
    return path.read_bytes()


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> bytes:
    """The rule file of an uninterrupted run with a temporary run directory."""
    return _bytes(tmp_path_factory.mktemp("fresh"), "fresh.json")


class _Kill:
    """Wraps a worker function; raises KeyboardInterrupt (as Ctrl-C or a kill would end the run) on call ``at``."""

    def __init__(self, fn, at: int):
        self.fn, self.at, self.calls = fn, at, 0
        self.__name__ = fn.__name__

    def __call__(self, *args):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return self.fn(*args)


def _all(source: RepeatedGraphs) -> list:
    return [g for r in range(source.ranges) for g in source.graphs(r)]


def test_repeated_graphs_are_the_same_whatever_the_number_of_key_ranges():
    with Workers(SETTINGS) as workers:
        stored, _ = workers.spill()
        whole = RepeatedGraphs(stored, workers.packer, range_keys=1 << 40)
        cut = RepeatedGraphs(stored, workers.packer, range_keys=97)  # hundreds of ranges
        assert whole.ranges == 1 and cut.ranges > 100
        everything = _all(whole)
        by_range = [cut.graphs(r) for r in range(cut.ranges)]
    keys = [k for k, _ in everything]
    assert len(everything) > 100 and sorted(g for part in by_range for g in part) == sorted(everything)
    assert all(keys.count(k) > 1 for k in set(keys))
    tops = [max(k for k, _ in part) for part in by_range if part]
    bottoms = [min(k for k, _ in part) for part in by_range if part]
    assert all(top < bottom for top, bottom in zip(tops, bottoms[1:])), "ranges come in key order"


def test_a_run_killed_during_the_enumeration_resumes_with_the_unfinished_shards_only(tmp_path, monkeypatch, fresh):
    run_dir = str(tmp_path / "run")
    monkeypatch.setattr(parallel, "_spill_shard", _Kill(parallel._spill_shard, at=6))
    with pytest.raises(KeyboardInterrupt):
        _bytes(tmp_path, "killed.json", run_dir=run_dir)
    monkeypatch.undo()
    resumed = generate(SETTINGS, make_workers=lambda s: Workers(s, run_dir=run_dir, resume=True))
    resumed.library.save(str(tmp_path / "resumed.json"))
    assert (tmp_path / "resumed.json").read_bytes() == fresh
    assert resumed.resumed == {"shards": 5}


def test_a_run_killed_during_a_stage_keeps_its_finished_chunks_and_earlier_stages(tmp_path, monkeypatch, fresh):
    run_dir = str(tmp_path / "run")
    monkeypatch.setattr(parallel, "CHECKPOINT_SECONDS", 0.0)  # keep every finished chunk
    monkeypatch.setattr(pipeline, "CHUNKS", {**pipeline.CHUNKS, "rules": 5})
    monkeypatch.setattr(pipeline, "generalized_rules", _Kill(pipeline.generalized_rules, at=4))
    with pytest.raises(KeyboardInterrupt):
        _bytes(tmp_path, "killed.json", run_dir=run_dir)
    counting = _Kill(pipeline.generalized_rules.fn, at=0)
    monkeypatch.setattr(pipeline, "generalized_rules", counting)
    resumed = generate(SETTINGS, make_workers=lambda s: Workers(s, run_dir=run_dir, resume=True))
    resumed.library.save(str(tmp_path / "resumed.json"))
    assert (tmp_path / "resumed.json").read_bytes() == fresh
    assert set(resumed.resumed) == {"shards", "range-0000", "float_checked", "instances"}
    chunks = -(-resumed.counts["instances"] // 5)
    assert counting.calls == chunks - 3, "the three chunks that finished before the kill are not redone"


def test_a_corrupt_stage_file_is_redone_not_loaded(tmp_path, fresh):
    run_dir = tmp_path / "run"
    assert _bytes(tmp_path, "first.json", run_dir=str(run_dir)) == fresh
    stage = run_dir / "float_checked.stage"
    data = bytearray(stage.read_bytes())
    data[-3] ^= 0x10
    stage.write_bytes(bytes(data))
    resumed = generate(SETTINGS, make_workers=lambda s: Workers(s, run_dir=str(run_dir), resume=True))
    resumed.library.save(str(tmp_path / "resumed.json"))
    assert (tmp_path / "resumed.json").read_bytes() == fresh
    assert "float_checked" not in resumed.resumed and "rules" in resumed.resumed


def test_resume_refuses_a_run_directory_of_other_settings(tmp_path):
    run_dir = str(tmp_path / "run")
    generate(Settings(max_ops=2, ops=parse_ops("matmul,add")), make_workers=lambda s: Workers(s, run_dir=run_dir))
    with pytest.raises(TasoError, match="other settings"):
        Workers(SETTINGS, run_dir=run_dir, resume=True)


def test_cli_run_dir_then_resume_writes_the_same_file(tmp_path, capsys, fresh):
    out, run_dir = tmp_path / "c.json", tmp_path / "run"
    argv = ["generate", "--max-ops", "3", "--ops", "matmul,add,transpose", "--quiet", "-o", str(out), "-j", "2"]
    assert main([*argv, "--run-dir", str(run_dir), "--shards", "20"]) == 0
    assert out.read_bytes() == fresh and (run_dir / "manifest.json").exists()
    out.unlink()
    assert main([*argv, "--resume", str(run_dir), "--shards", "20"]) == 0
    assert out.read_bytes() == fresh
    assert "resumed:" in capsys.readouterr().out


def test_cli_refuses_a_run_dir_that_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["generate", "--max-ops", "2", "-o", str(tmp_path / "c.json"), "--run-dir", str(tmp_path / "f")]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_the_spilled_keys_are_sorted_and_their_positions_a_permutation():
    with Workers(SETTINGS) as workers:
        stored, per_depth = workers.spill()
        for shard in stored:
            keys, order = shard.array("keys", np.int64), shard.array("order", np.int32)
            assert np.all(keys[1:] >= keys[:-1])
            assert np.array_equal(np.sort(order), np.arange(len(order)))
        assert sum(len(s.array("keys", np.int64)) for s in stored) == sum(per_depth)


def test_streamed_candidates_equal_pairing_every_graph_then_dropping_common_subgraphs_and_renamings():
    """generator/candidates.py against the definition: pair_specs over all graphs, first per form, then shares_subgraph."""
    from taso.generator.candidates import clear_summaries, range_candidates
    from taso.generator.pairing import Decoder, pair_specs
    from taso.generator.prune import canonicalize, first_per_form, shares_subgraph

    with Workers(SETTINGS) as workers:
        stored, _ = workers.spill()
        source = RepeatedGraphs(stored, workers.packer, range_keys=1000)
        pool_size = len(workers.context.pool)
        streamed: dict = {}
        for r in range(source.ranges):
            for found in range_candidates(*source.rows(r), workers.packer, pool_size, clear_summaries).kept:
                streamed.setdefault(found.form, found.pair)
        decode = Decoder(workers.context)
        canonical = [canonicalize(decode.candidate(*pair)) for pair in pair_specs(_all(source))]
        expected = [c for c in (canonical[i] for i in first_per_form(c.form for c in canonical)) if not shares_subgraph(c.candidate)]
    assert source.ranges > 3 and len(expected) > 50
    assert [streamed[form] for form in sorted(streamed)] == [(c.candidate.key, c.candidate.a.spec, c.candidate.b.spec) for c in expected]


def test_graphs_gathered_in_memory_are_cut_into_key_ranges_like_the_spilled_ones():
    """The Ray back end's repeated graphs (InMemoryGraphs) stream by key range too, with the same graphs."""
    from taso.generator.parallel import InMemoryGraphs

    with Workers(SETTINGS) as workers:
        stored, _ = workers.spill()
        spilled = RepeatedGraphs(stored, workers.packer, range_keys=1 << 40)
        keys, rows = spilled.rows(0)
        gathered = InMemoryGraphs(keys, rows, workers.packer, range_graphs=50)
        by_range = [gathered.graphs(r) for r in range(gathered.ranges)]
        everything = spilled.graphs(0)
    assert gathered.ranges > 5 and sorted(g for part in by_range for g in part) == sorted(everything)
    tops = [max(k for k, _ in part) for part in by_range if part]
    bottoms = [min(k for k, _ in part) for part in by_range if part]
    assert all(top < bottom for top, bottom in zip(tops, bottoms[1:])), "ranges come in key order"
