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
