"""The code as it was at an earlier commit, measured by running that commit.

A side-by-side benchmark runs its own measuring half (``--worker``) in fresh processes, alternately on the
current checkout and on an unpacked copy of the earlier commit: :func:`checkout` unpacks the commit once into
a cache; :func:`mount` makes ``import taso`` in a process resolve to a given tree, laid out as that tree's
``pyproject.toml`` maps its packages; :func:`run_worker` starts the script's worker on a tree and returns the
JSON object its last line printed. The worker measures one side only, so no code is kept as it was.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType

import tomllib

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("TASO_BENCH_COMMITS", Path.home() / ".cache" / "taso" / "commits"))
TREE_FLAG = "--tree"


def checkout(commit: str) -> Path:
    """The tree of ``commit`` (any name git resolves), unpacked once under :data:`CACHE` and reused."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{commit}^{{commit}}"], check=True, capture_output=True,
                         text=True).stdout.strip()
    tree = CACHE / sha
    if not (tree / "pyproject.toml").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=CACHE, prefix=f".{sha[:12]}-"))
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", sha], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")
        staging.rename(tree)
    return tree


class _TreeFinder(importlib.abc.MetaPathFinder):
    """Finds the packages a tree's pyproject maps (``taso``, ``taso.generator`` = ``generator/`` ...) in that tree;
    their submodules are then found through the packages' own paths."""

    def __init__(self, packages: dict[str, Path]) -> None:
        self.packages = packages

    def find_spec(self, fullname: str, path: object = None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        folder = self.packages.get(fullname)
        if folder is not None:
            return importlib.util.spec_from_file_location(fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])
        if fullname.partition(".")[0] not in self.packages:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)  # type: ignore[arg-type]
        if spec is None:  # not in this tree: no other finder (the installed checkout's) may supply it
            raise ModuleNotFoundError(f"No module named {fullname!r} in this tree", name=fullname)
        return spec


def mount(tree: Path) -> None:
    """Make ``import taso`` (and every package the tree's pyproject maps) in this process load ``tree``'s code."""
    setuptools = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = setuptools.get("package-dir", {})
    names = setuptools.get("packages", [])
    names = names if isinstance(names, list) else []
    packages = {name: tree / mapped.get(name, name.replace(".", "/")) for name in {"taso", *names, *mapped}}
    sys.meta_path.insert(0, _TreeFinder({name: folder for name, folder in packages.items() if (folder / "__init__.py").exists()}))


def mount_from_argv() -> bool:
    """``--tree PATH`` on this process's command line: mount that tree before anything imports taso. True when mounted."""
    if TREE_FLAG not in sys.argv:
        return False
    at = sys.argv.index(TREE_FLAG)
    tree = Path(sys.argv[at + 1])
    del sys.argv[at:at + 2]
    mount(tree)
    return True


def first_module(*names: str) -> ModuleType:
    """The first of ``names`` the mounted tree has: the same module under the names it had at different commits."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name is None or not any(name == error.name or name.startswith(error.name + ".") for name in names):
                raise
    raise ModuleNotFoundError(f"none of {', '.join(names)} in this tree")


def run_worker(script: str | Path, tree: Path, args: list[str], timeout: float | None = None) -> dict:
    """Run ``script --worker ARGS`` in a fresh process on ``tree``'s code; the JSON object it printed last.
    The worker is the current script: it reaches each tree's code by names that tree has (:func:`first_module`)."""
    command = [sys.executable, str(script), TREE_FLAG, str(tree), "--worker", *args]
    env = dict(os.environ)
    if tree != ROOT:  # an earlier commit keeps its own cost cache: neither side overwrites the other's (their formats differ)
        env["TASO_CACHE_DIR"] = str(tree.with_name(tree.name + ".cache"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=tree, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{Path(script).name} --worker on {tree.name[:12]} failed (exit {done.returncode}): "
                         f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def alternating_runs(script: str | Path, trees: dict[str, Path], args: list[str] | dict[str, list[str]], times: int) -> dict[str, list[dict]]:
    """Each side's worker run ``times`` times, the sides taking turns to go first; every run's JSON, by side. ``args``:
    the worker's arguments, or each side's own."""
    names = list(trees)
    runs: dict[str, list[dict]] = {side: [] for side in names}
    for k in range(times):
        for side in (names if k % 2 == 0 else names[::-1]):
            runs[side].append(run_worker(script, trees[side], args[side] if isinstance(args, dict) else args))
    return runs


def sides(before: str) -> dict[str, Path]:
    """The two trees a side-by-side benchmark runs: ``before`` (a commit) and ``now`` (this checkout)."""
    return {"before": checkout(before), "now": ROOT}
