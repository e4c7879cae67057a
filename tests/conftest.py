import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from rule_examples import all_rules  # noqa: E402 - after the path insert

from taso.rules import Library  # noqa: E402


@pytest.fixture
def library(tmp_path) -> str:
    """A library file of the hand-written example rules, marked proved."""
    path = tmp_path / "lib.json"
    Library([r.with_status("proved") for r in all_rules()]).save(path)
    return str(path)


@pytest.fixture(autouse=True)
def _own_verdicts(tmp_path, monkeypatch):
    """Each test starts with no remembered end-to-end verdicts (taso.pipeline.verdicts), in-process and in the CLI runs it starts,
    and never writes the user's own: a test that fakes the timing must not decide a later run."""
    monkeypatch.setenv("TASO_VERDICTS", str(tmp_path / "verdicts.json"))
