"""A simulation installed for the duration of one test (in-process)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from simcuda.install import install, uninstall
from simcuda.model import SimConfig, SimGpu


@contextlib.contextmanager
def installed(config: SimConfig | None = None) -> Iterator[SimGpu]:
    """``install(config)`` on this thread, ``uninstall()`` afterwards (also on failure)."""
    sim = install(config)
    try:
        yield sim
    finally:
        uninstall()
