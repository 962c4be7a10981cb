"""Fixtures of the reliability tests: a torch-free fake runner and a Session that is closed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuwatch.core.run.session import Session

FAKE_RUNNER = Path(__file__).with_name("fake_runner.py")


@pytest.fixture(scope="session")
def fake_python(tmp_path_factory) -> str:
    """An "interpreter" whose ``-m gpuwatch.runner ...`` runs ``fake_runner.py`` instead."""
    if sys.platform == "win32":
        pytest.skip("the fake interpreter is a POSIX shell script")
    wrapper = tmp_path_factory.mktemp("fake-python") / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_RUNNER}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture
def session():
    s = Session(sample_coarse=False)
    yield s
    s.close()
