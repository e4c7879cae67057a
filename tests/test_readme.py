"""Every ```python and ```bash block of README.md runs (issue 10, defect 11: the API example did not).

Each block runs on its own in a fresh temporary directory (so a block must build the models
it uses), with a private cost cache, small search budgets and the analytic cost model: the
point is that every command and call works as written, not to reproduce the figures. The
only commands not run are listed in SKIPPED with the reason, and a block that cannot run
offline in a test's time (a full benchmark, a download) says why on the line right above it:

    <!-- readme-test: skip: builds the whole corpus (40 models, minutes) -->
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```(python|bash)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
SKIP_MARK = re.compile(r"<!--\s*readme-test:\s*skip:\s*(.+?)\s*-->\s*$")

# Command prefixes the test does not run, and why.
SKIPPED = {
    "python3 -m venv": "set-up: the test already runs inside an installed environment",
    ". .venv/bin/activate": "set-up: the test already runs inside an installed environment",
    "source .venv/bin/activate": "set-up: the test already runs inside an installed environment",
    "pip install": "set-up: needs the network, and the package is already installed",
    "python -m pytest": "the test suite itself, of which this test is part",
}

# Options appended to a taso sub-command (argparse: the last occurrence wins) to keep it small.
SMALL_BUDGETS = {
    "optimize": ["--cost", "analytic", "--budget", "3", "--time-limit", "20", "--quiet"],
    "bench": ["--cost", "analytic", "--budget", "2", "--time-limit", "20", "--rounds", "1"],
    "generate": ["--max-ops", "2", "--ops", "matmul,transpose"],
}

# Textual substitutions in Python blocks, for the same reason.
PYTHON_SMALL_BUDGETS = [(re.compile(r"budget=\d+"), "budget=3"), (re.compile(r"cost=\"ort-cpu\""), 'cost="analytic"')]


def readme_blocks() -> list[tuple[str, str, int, str | None]]:
    """(language, code, line number, skip reason or None) of every fenced python or bash block."""
    text = README.read_text(encoding="utf-8")
    blocks = []
    for m in BLOCK.finditer(text):
        line_above = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = SKIP_MARK.search(line_above)
        blocks.append((m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, mark.group(1) if mark else None))
    return blocks


def bash_commands(code: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped, `&&` chains split."""
    joined = re.sub(r"\\\n", " ", code)
    commands: list[str] = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            commands += [c.strip() for c in line.split("&&") if c.strip()]
    return commands


def skip_reason(command: str) -> str | None:
    return next((why for prefix, why in SKIPPED.items() if command.startswith(prefix)), None)


def small(command: str) -> str:
    """The command with `taso` run from this environment and small budgets appended to its sub-command."""
    redirect = re.search(r"\s[|<>;]", command)  # budgets go to the taso command, not after a pipe
    head, rest = (command[:redirect.start()], command[redirect.start():]) if redirect else (command, "")
    words = shlex.split(head)
    if words and words[0] == "taso":
        words = [sys.executable, "-m", "taso", *words[1:]]
        if len(words) > 3 and words[3] in SMALL_BUDGETS:
            words += SMALL_BUDGETS[words[3]]
    return shlex.join(words) + rest


def _environment(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, TASO_CACHE_DIR=str(tmp_path / "cache"), MPLBACKEND="Agg")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


BLOCKS = readme_blocks()


def test_the_readme_has_code_blocks():
    run = [language for language, _, _, skip in BLOCKS if skip is None]
    assert "python" in run and "bash" in run


@pytest.mark.parametrize("language, code, line, skip", BLOCKS, ids=[f"README.md:{line}-{language}" for language, _, line, _ in BLOCKS])
def test_readme_block_runs(language, code, line, skip, tmp_path, monkeypatch):
    if skip is not None:
        pytest.skip(f"README.md:{line}: {skip}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    if language == "python":
        for pattern, replacement in PYTHON_SMALL_BUDGETS:
            code = pattern.sub(replacement, code)
        exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})  # noqa: S102 - the README's own example
        return
    ran, skipped = 0, []
    for command in bash_commands(code):
        reason = skip_reason(command)
        if reason:
            skipped.append(f"{command!r}: {reason}")
            continue
        result = subprocess.run(small(command), shell=True, cwd=tmp_path, env=_environment(tmp_path), capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"README.md:{line}: {command!r} exited {result.returncode}\n{result.stderr[-2000:]}"
        ran += 1
    if not ran:
        pytest.skip("; ".join(skipped))


def test_a_skipped_command_hides_no_other_command():
    """A skipped set-up line cannot carry a real command past the test (`pip install x; taso ...`)."""
    for language, code, line, _ in BLOCKS:
        if language == "bash":
            for command in bash_commands(code):
                if skip_reason(command):
                    assert not re.search(r"[;|`$]|\btaso\b", command), f"README.md:{line}: {command!r}"


def test_small_keeps_pipes_and_appends_budgets():
    assert small("taso optimize a.onnx -o b.onnx").endswith("--time-limit 20 --quiet")
    piped = small("taso info a.onnx | head -1")
    assert piped.endswith("| head -1") and "-m taso info a.onnx" in piped


def test_a_skip_mark_needs_a_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "README", tmp_path / "README.md")
    (tmp_path / "README.md").write_text("<!-- readme-test: skip: downloads a model -->\n```bash\ncurl x\n```\n\n```python\nprint(1)\n```\n")
    assert [(lang, skip) for lang, _, _, skip in readme_blocks()] == [("bash", "downloads a model"), ("python", None)]
