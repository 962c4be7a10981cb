"""The runs' private directories a process left in the temp folder (shared by the tests)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def private_dirs(pid: int | None = None) -> set[Path]:
    """The private directories that process ``pid`` (default: this one) made for its runs and
    that are still in the temp folder (``gpuwatch.core.run.link`` names them after their maker,
    so another test run on the same machine is not counted)."""
    pid = os.getpid() if pid is None else pid
    return set(Path(tempfile.gettempdir()).glob(f"gpuwatch-{pid}-*"))


def sweep_after_kill(pid: int) -> None:
    """What the next gpuwatch does when it starts a run: remove the private directories of a
    process killed with ``kill -9`` (nothing of it ran at exit), then check that ``pid``'s are
    gone, so a test that kills a gpuwatch process leaves nothing in the temp folder."""
    from gpuwatch.core.run.link import remove_stale_private_dirs

    remove_stale_private_dirs()
    left = private_dirs(pid)
    assert not left, f"the killed process's private directories stayed: {sorted(map(str, left))}"
