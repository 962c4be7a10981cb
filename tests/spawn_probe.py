"""Helpers a spawned DataLoader worker unpickles in tests; stdlib only, so what they report
about the worker's ``sys.modules`` is what the workload under test imported, not this module."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def collate_with_modules(
    collate: Callable[[list[Any]], Any], items: list[Any]
) -> tuple[Any, list[str]]:
    """``collate(items)`` plus the names of every module loaded in this process by now (after
    the dataset was unpickled and its items decoded and augmented)."""
    return collate(items), sorted(name for name, mod in sys.modules.items() if mod is not None)


class PidDataset:
    """Items are ``[pid, parent pid]`` of the worker that made them."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> list[int]:
        import os

        return [os.getpid(), os.getppid()]
