import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _own_verdicts(tmp_path, monkeypatch):
    """Each test starts with no remembered end-to-end verdicts (taso.verdicts), in-process and in the CLI runs it starts,
    and never writes the user's own: a test that fakes the timing must not decide a later run."""
    monkeypatch.setenv("TASO_VERDICTS", str(tmp_path / "verdicts.json"))
