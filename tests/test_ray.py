"""Scale-out on Ray (taso.generator.cluster): same bytes as the local run, faults, checkpoints, resume.

One local Ray cluster of 2 CPUs serves the whole module and is shut down at its end. The
settings are small (depth 2 over every operator; depth 3 over three) so that the module
runs in well under a minute on the 2-core CI machine.
"""

from __future__ import annotations

import os

import pytest
from taso.generator import Settings, generate, parallel, parse_ops
from taso.generator.cluster import RayBackend, Shard, plan_shards, ray_available, walk_shard
from taso.generator.enumerate import Enumerator

RAY_MISSING = ray_available()
needs_ray = pytest.mark.skipif(RAY_MISSING is not None, reason=RAY_MISSING or "")
# One local Ray cluster at a time: with pytest-xdist (``-n auto --dist loadgroup``) this module runs on one worker.
pytestmark = pytest.mark.xdist_group("ray")

DEPTH2 = Settings(max_ops=2)
DEPTH3 = Settings(max_ops=3, ops=parse_ops("matmul,add,transpose"))


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


_LOCAL: dict[Settings, bytes] = {}


def local_bytes(settings: Settings, tmp_path) -> bytes:
    """The rule file of the local run (one process), computed once per settings."""
    if settings not in _LOCAL:
        path = tmp_path / "local.json"
        generate(settings).library.save(path)
        _LOCAL[settings] = path.read_bytes()
    return _LOCAL[settings]


def ray_bytes(settings: Settings, backend: RayBackend, tmp_path) -> bytes:
    path = tmp_path / "ray.json"
    generate(settings, make_workers=backend.workers).library.save(path)
    return path.read_bytes()


def test_the_shards_of_a_root_visit_its_graphs_in_the_order_walk_does():
    enumerator = Enumerator(DEPTH3)
    roots = enumerator.roots()
    shards = plan_shards(enumerator, target=40)
    assert any(s.children for s in shards), "the plan should split some root at this target"

    def visits(run) -> list:
        seen = []
        run(lambda key, ops, last, outputs: seen.append((key, tuple(ops), last, tuple(outputs))))
        return seen

    for i, root in enumerate(roots):
        whole = visits(lambda visit: enumerator.walk(root, visit))
        parts = [v for s in shards if s.root == i for v in visits(lambda visit, s=s: walk_shard(enumerator, root, s, visit))]
        assert parts == whole


def test_with_two_operators_at_most_every_root_is_one_shard():
    enumerator = Enumerator(Settings(max_ops=2, ops=parse_ops("matmul,add")))
    assert plan_shards(enumerator, target=1000) == [Shard(f"r{i:05d}", i) for i in range(len(enumerator.roots()))]


def test_a_root_holding_most_of_the_work_is_split_into_shards_of_about_the_target_share(monkeypatch):
    from types import SimpleNamespace

    from taso.generator import shards as shards_module

    sizes = {"big": 900, "small": 50, "tiny": 50}  # second operators per root: the estimate of its work
    fake = SimpleNamespace(settings=Settings(max_ops=3), roots=lambda: list(sizes))
    monkeypatch.setattr(shards_module, "_children", lambda enumerator, root: [None] * sizes[root])
    shards = plan_shards(fake, target=10)
    big = [s for s in shards if s.root == 0]
    assert [s.id for s in shards[len(big):]] == ["r00001", "r00002"]
    assert len(big) == 9 and big[0].children[0] == 0 and big[-1].children[1] == 900
    assert all(a.children[1] == b.children[0] for a, b in zip(big, big[1:]))  # contiguous, in order
    assert max(s.children[1] - s.children[0] for s in big) <= 100


@needs_ray
@pytest.mark.parametrize("settings", [DEPTH2, DEPTH3], ids=["depth2-all-ops", "depth3-matmul-add-transpose"])
def test_ray_gives_the_local_rule_file_byte_for_byte(ray_cluster, settings, tmp_path):
    backend = RayBackend(run_dir=str(tmp_path / "run"), shards=40)
    assert ray_bytes(settings, backend, tmp_path) == local_bytes(settings, tmp_path)
    (report,) = backend.reports
    assert report.run == report.total and report.reused == 0
    assert sum(graphs for graphs, _ in report.cost.values()) == sum(generate_counts(settings))


# The stages after enumeration, each a worker function of generator/pipeline.py's generate().
AFTER_ENUMERATION = ["clear_summaries", "holds_in_float", "instance_facts", "generalized_rules"]


@needs_ray
def test_the_stages_after_enumeration_run_as_ray_tasks_not_on_the_driver(ray_cluster, tmp_path):
    import socket

    backend = RayBackend(shards=40)
    result = generate(DEPTH3, make_workers=backend.workers)
    assert [s.name for s in backend.stages] == AFTER_ENUMERATION
    counts = result.counts
    items = {s.name: s.items for s in backend.stages}
    # the pairs sharing an operator over pool tensors are dropped before any task (generator/candidates.py)
    assert counts["common_subgraph"] <= items.pop("clear_summaries") < counts["candidates"]
    assert items == {"holds_in_float": counts["nontrivial"], "instance_facts": counts["float_checked"],
                     "generalized_rules": counts["instances"]}
    driver = f"{socket.gethostname()}:{os.getpid()}"
    for stage in backend.stages:
        assert sum(stage.workers.values()) == stage.chunks > 0, stage.name
        assert driver not in stage.workers, f"{stage.name} ran on the driver"
    assert len({w for s in backend.stages for w in s.workers}) >= 2, "2 CPUs: both should take chunks"
    assert "holds_in_float: " in backend.summary() and "Ray tasks" in backend.summary()


def generate_counts(settings: Settings) -> list[int]:
    with parallel.Workers(settings) as workers:
        return workers.spill()[1]


@needs_ray
def test_the_two_pass_enumeration_on_ray_gives_the_same_file(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "KEEP_GRAPHS_MAX_OPS", 2)  # depth 3 now keeps keys only, then re-enumerates
    backend = RayBackend(run_dir=str(tmp_path / "run"), shards=40)
    assert ray_bytes(DEPTH3, backend, tmp_path) == local_bytes(DEPTH3, tmp_path)
    assert [r.name for r in backend.reports] == ["keys", "collect"]


@needs_ray
def test_resume_of_the_two_pass_enumeration_redoes_only_unfinished_shards(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "KEEP_GRAPHS_MAX_OPS", 2)
    run_dir = str(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        ray_bytes(DEPTH3, RayBackend(run_dir=run_dir, shards=40, stop_after=5), tmp_path)
    resumed = RayBackend(run_dir=run_dir, resume=True, shards=40)
    assert ray_bytes(DEPTH3, resumed, tmp_path) == local_bytes(DEPTH3, tmp_path)
    keys, collect = resumed.reports
    assert (keys.reused, keys.run, collect.reused) == (5, keys.total - 5, 0)


def test_keys_cut_into_ranges_stay_sorted_and_complete():
    import numpy as np
    from taso.generator.cluster import _repeated_in_range, _split_by_range

    keys = np.random.default_rng(0).integers(-(1 << 63), (1 << 63) - 1, 5000, dtype=np.int64)
    keys = np.concatenate([keys, keys[:300]])  # 300 repeated keys
    parts = _split_by_range(keys, 16)
    assert len(parts) == 16 and np.array_equal(np.concatenate(parts), np.sort(keys))
    repeated = np.concatenate([_repeated_in_range(p) for p in parts])
    assert np.array_equal(repeated, np.unique(keys[:300]))


@needs_ray
def test_a_worker_killed_mid_shard_is_retried_and_the_file_is_unchanged(ray_cluster, tmp_path):
    marker = tmp_path / "killed-once"
    backend = RayBackend(run_dir=str(tmp_path / "run"), shards=40, fault=str(marker))
    assert ray_bytes(DEPTH3, backend, tmp_path) == local_bytes(DEPTH3, tmp_path)
    assert marker.exists(), "no task killed its worker: the fault was not injected"


@needs_ray
def test_resume_after_an_interrupted_run_redoes_only_the_unfinished_shards(ray_cluster, tmp_path):
    run_dir = str(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        ray_bytes(DEPTH3, RayBackend(run_dir=run_dir, shards=40, stop_after=7), tmp_path)
    assert len([n for n in os.listdir(run_dir) if n.endswith(".shard")]) == 7

    resumed = RayBackend(run_dir=run_dir, resume=True, shards=40)
    assert ray_bytes(DEPTH3, resumed, tmp_path) == local_bytes(DEPTH3, tmp_path)
    (report,) = resumed.reports
    assert (report.reused, report.run, report.corrupt) == (7, report.total - 7, [])


@needs_ray
def test_a_corrupt_or_truncated_checkpoint_is_detected_and_redone_never_merged(ray_cluster, tmp_path):
    run_dir = tmp_path / "run"
    ray_bytes(DEPTH3, RayBackend(run_dir=str(run_dir), shards=40), tmp_path)
    files = sorted(p for p in run_dir.iterdir() if p.suffix == ".shard")
    flipped, truncated = files[3], files[10]
    data = bytearray(flipped.read_bytes())
    data[-5] ^= 0x01  # one bit of one key
    flipped.write_bytes(bytes(data))
    truncated.write_bytes(truncated.read_bytes()[:-16])
    for finished_stage in run_dir.glob("*.stage"):  # as if killed before pairing: the shards are what resumes
        finished_stage.unlink()

    resumed = RayBackend(run_dir=str(run_dir), resume=True, shards=40)
    assert ray_bytes(DEPTH3, resumed, tmp_path) == local_bytes(DEPTH3, tmp_path)
    (report,) = resumed.reports
    assert sorted(report.corrupt) == sorted([flipped.name, truncated.name])
    assert (report.run, report.reused) == (2, report.total - 2)


@needs_ray
def test_resume_refuses_a_run_directory_of_other_settings(ray_cluster, tmp_path):
    from taso.errors import TasoError

    run_dir = str(tmp_path / "run")
    ray_bytes(Settings(max_ops=2, ops=parse_ops("matmul,add")), RayBackend(run_dir=run_dir), tmp_path)
    with pytest.raises(TasoError, match="other settings"):
        ray_bytes(DEPTH3, RayBackend(run_dir=run_dir, resume=True), tmp_path)


@needs_ray
def test_cli_generate_ray_writes_the_local_file_and_reports_the_shards(ray_cluster, tmp_path, capsys):
    from taso.cli import main

    out = tmp_path / "ray.json"
    argv = ["generate", "--max-ops", "3", "--ops", "matmul,add,transpose", "--quiet", "-o", str(out)]
    assert main([*argv, "--ray", "--shards", "40"]) == 0
    stdout = capsys.readouterr().out
    assert "enumerate:" in stdout and "reused from checkpoints" in stdout
    assert out.read_bytes() == local_bytes(DEPTH3, tmp_path)
    assert (tmp_path / "ray.json.shards" / "shards.json").exists()
    for finished_stage in (tmp_path / "ray.json.shards").glob("*.stage"):  # as if killed before pairing
        finished_stage.unlink()
    assert main([*argv, "--ray", "--resume", str(tmp_path / "ray.json.shards"), "--shards", "40"]) == 0
    assert f"{len(plan_shards(Enumerator(DEPTH3), 40))} reused" in capsys.readouterr().out
    assert out.read_bytes() == local_bytes(DEPTH3, tmp_path)


@needs_ray
def test_cli_generate_fails_in_seconds_with_one_line_when_no_cluster_answers(tmp_path, capsys):
    import socket

    from taso.cli import main

    with socket.socket() as s:  # a free loopback port, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["generate", "--max-ops", "2", "-o", str(tmp_path / "c.json"), "--ray", f"127.0.0.1:{port}"]) == 2
    assert "no Ray cluster answers there" in capsys.readouterr().err


def test_cli_generate_refuses_to_resume_from_a_directory_that_is_no_run(tmp_path, capsys):
    from taso.cli import main

    assert main(["generate", "--max-ops", "2", "-o", str(tmp_path / "c.json"), "--resume", str(tmp_path)]) == 2
    assert "not a run directory (no manifest.json)" in capsys.readouterr().err


def _without_timings(rule) -> dict:
    data = rule.to_json()
    data.get("proof", {}).pop("seconds", None)
    return data


@needs_ray
def test_verify_on_ray_proves_the_same_rules_as_the_local_verifier(ray_cluster):
    from taso.generator.cluster import verify_rules_on_ray
    from taso.verifier.verify import Settings as VerifySettings
    from taso.verifier.verify import verify_rules

    candidates = generate(Settings(max_ops=2, ops=parse_ops("matmul,add,transpose"))).library.rules
    settings = VerifySettings(timeout_s=20)
    local = verify_rules(candidates, settings)
    on_ray = verify_rules_on_ray(candidates, settings)
    assert [_without_timings(r) for r in on_ray] == [_without_timings(r) for r in local]
    assert {r.status for r in on_ray} == {"proved"}


@needs_ray
def test_a_task_running_past_its_time_limit_is_cancelled_and_the_others_finish(ray_cluster):
    from taso.generator.cluster import _windowed

    def sleep_for(i: int) -> int:  # NOTE: defined here so that Ray ships it by value (workers cannot import tests)
        import time

        time.sleep(60 if i == 1 else 0.01)
        return i

    remote = ray_cluster.remote(num_cpus=1)(sleep_for)
    results = [None] * 4
    finished = list(_windowed(ray_cluster, lambda i: remote.remote(i), 4, 2, 3.0, results))
    assert sorted(finished) == [0, 1, 2, 3]
    assert results == [0, None, 2, 3]


@needs_ray
def test_cli_generate_joins_a_running_cluster_by_its_address(ray_cluster, tmp_path):
    import subprocess
    import sys

    address = ray_cluster.get_runtime_context().gcs_address
    out = tmp_path / "joined.json"
    argv = [sys.executable, "-m", "taso", "generate", "--max-ops", "3", "--ops", "matmul,add,transpose", "--quiet",
            "-o", str(out), "--ray", address, "--shards", "40"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == local_bytes(DEPTH3, tmp_path)
    assert ray_cluster.is_initialized(), "the joining process must leave the cluster running"


@needs_ray
def test_cli_verify_ray_writes_the_rules_the_local_verifier_writes(ray_cluster, tmp_path, capsys):
    from taso.cli import main
    from taso.rules import Library

    candidates = tmp_path / "c.json"
    generate(Settings(max_ops=2, ops=parse_ops("matmul,add,transpose"))).library.save(candidates)
    assert main(["verify", str(candidates), "-o", str(tmp_path / "local.json"), "--quiet"]) == 0
    assert main(["verify", str(candidates), "-o", str(tmp_path / "ray.json"), "--quiet", "--ray"]) == 0
    local, on_ray = Library.load(tmp_path / "local.json"), Library.load(tmp_path / "ray.json")
    assert [_without_timings(r) for r in on_ray.rules] == [_without_timings(r) for r in local.rules]
