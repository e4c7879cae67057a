"""The house keeps its shape (docs/design.md, "The rooms"): rooms along the path a model takes, no import circle but
the IR's own, small modules, benchmarks apart from the tests.

Imports are read from the source (every ``import`` statement, lazy ones inside functions included), so a circle
closed by a function-level import counts too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The packages as pyproject.toml maps them.
PACKAGES = {"taso": ROOT / "taso", "taso.generator": ROOT / "generator", "taso.verifier": ROOT / "verifier",
            "taso.specs": ROOT / "specs", "taso.models": ROOT / "models"}
MAX_LINES = 700
MAX_TOP_LEVEL_MODULES = 8  # taso/*.py besides __init__ and __main__
MAX_FLAT_BENCHMARKS = 4


def _modules() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """The project's modules ``name`` imports anywhere in its source (a package re-exporting its own submodules aside)."""
    path = MODULES[name]
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) if node.level else node.module
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names}
    return {m for m in found if m in MODULES and m != name and not m.startswith(name + ".")}


def import_circles() -> list[list[str]]:
    """The strongly connected groups of two or more modules in the import graph (Tarjan's algorithm)."""
    edges = {name: _imports(name) for name in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                circles.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(MODULES)))
    for name in sorted(MODULES):
        if name not in index:
            visit(name)
    return circles


def test_the_only_import_circle_is_inside_the_ir():
    circles = import_circles()
    assert len(circles) <= 1, circles
    assert all(name.startswith("taso.ir.") for circle in circles for name in circle), circles


def test_the_cycle_finder_sees_a_circle_closed_inside_a_function(tmp_path, monkeypatch):
    """The check above can fail: a lazy import that closes a circle is found."""
    (tmp_path / "a.py").write_text("import taso.b\n")
    (tmp_path / "b.py").write_text("def f():\n    from . import a\n")
    monkeypatch.setitem(MODULES, "taso.a", tmp_path / "a.py")
    monkeypatch.setitem(MODULES, "taso.b", tmp_path / "b.py")
    assert ["taso.a", "taso.b"] in import_circles()


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_source_file_is_over_700_lines(package):
    long = {str(path.relative_to(ROOT)): lines for name, path in MODULES.items() if name == package or name.startswith(package + ".")
            if (lines := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_taso_holds_rooms_not_a_flat_list_of_modules():
    flat = sorted(p.name for p in (ROOT / "taso").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(flat) <= MAX_TOP_LEVEL_MODULES, flat


def test_benchmarks_are_grouped_by_subject_and_no_test_imports_one():
    flat = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))
    assert len(flat) <= MAX_FLAT_BENCHMARKS, flat
    subjects = {p.parent.name for p in (ROOT / "benchmarks").glob("*/*.py")}
    assert {"costs", "search", "generator", "end_to_end", "peers", "gpu"} <= subjects | {"gpu"}
    scripts = {p.stem for p in (ROOT / "benchmarks").rglob("*.py")} | {"common"}
    for test in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(test.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not {n.split(".")[0] for n in names} & scripts, f"{test.name}:{node.lineno} imports a benchmark"
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.path.insert", "sys.path.append", "importlib.util.spec_from_file_location"):
                assert "benchmarks" not in ast.unparse(node), f"{test.name}:{node.lineno} reaches into benchmarks/"


def test_no_benchmark_imports_a_private_name_of_taso_or_of_another_script():
    private = []
    for script in (ROOT / "benchmarks").rglob("*.py"):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] != "__future__":
                private += [f"{script.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if isinstance(node.value, ast.Name) and node.value.id not in ("self", "cls"):
                    private.append(f"{script.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not private, private
