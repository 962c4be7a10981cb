"""Test set-up shared by every test: headless Qt, and no test touches the user's settings."""

from __future__ import annotations

import os

# Must be set before any Qt import: tests run without a display (CI, this machine).
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def pytest_configure(config) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def pytest_sessionfinish(session, exitstatus) -> None:
    """A run that collected no test is a failure, not a pass (pytest exits 5)."""
    if exitstatus == 5:
        session.exitstatus = 1
