"""The distribution: every package is in the wheel, under the one ``taso`` namespace."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pyproject() -> dict:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib is in the standard library from Python 3.11")
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def _packages_on_disk(package_dir: dict[str, str]) -> set[str]:
    """Every folder with an ``__init__.py`` under each mapped root, named as the wheel would import it."""
    found = set()
    for package, folder in package_dir.items():
        base = os.path.join(ROOT, folder)
        for directory, subdirectories, files in os.walk(base):
            subdirectories[:] = [d for d in subdirectories if not d.startswith((".", "__pycache__"))]
            if "__init__.py" in files:
                relative = os.path.relpath(directory, base)
                found.add(package if relative == "." else f"{package}.{relative.replace(os.sep, '.')}")
    return found


def test_every_package_folder_is_listed_in_pyproject():
    config = _pyproject()["tool"]["setuptools"]
    package_dir = config["package-dir"]
    listed = set(config["packages"])
    on_disk = _packages_on_disk(package_dir)
    # A folder inside taso/ that is mapped on its own (taso.generator -> generator/) is not also a folder of taso/.
    assert on_disk - listed == set(), f"pyproject.toml's [tool.setuptools] packages lacks {sorted(on_disk - listed)}: `pip install .` would leave them out"
    assert listed - on_disk == set(), f"pyproject.toml lists packages with no folder: {sorted(listed - on_disk)}"


def test_the_shipped_data_is_package_data():
    config = _pyproject()["tool"]["setuptools"]
    patterns = config["package-data"]["taso"]
    import glob

    shipped = [f for pattern in patterns for f in glob.glob(os.path.join(ROOT, "taso", pattern))]
    assert {os.path.basename(f) for f in shipped} >= {"library.jsonl.gz", "groups.jsonl.gz"}
