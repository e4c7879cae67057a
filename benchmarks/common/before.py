"""Modules as they were at an earlier commit, imported beside the current ones, for side-by-side benchmarks."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def modules_at(commit: str, folder: str, package: str, names: tuple[str, ...]) -> dict[str, ModuleType]:
    """``folder/<name>.py`` at ``commit``, imported as ``package._before_<name>``; their imports of each other are
    redirected to the old copies. ``names`` in import order: each imports only earlier ones among them."""
    modules = {}
    for name in names:
        source = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{folder}/{name}.py"], check=True, capture_output=True,
                                text=True).stdout
        for other in names:
            source = source.replace(f"from .{other} import", f"from ._before_{other} import")
        qualified = f"{package}._before_{name}"
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(qualified, loader=None))
        module.__package__ = package
        sys.modules[qualified] = module
        exec(compile(source, f"{commit[:7]}:{folder}/{name}.py", "exec"), module.__dict__)
        modules[name] = module
    return modules
