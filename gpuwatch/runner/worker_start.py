"""How the built-in workloads' DataLoader workers start: spawn semantics, fast where possible.

gpuwatch gives DataLoader workers ``spawn`` semantics on every OS, as Windows has them: each
worker is a fresh
interpreter image that inherits nothing (no threads, no CUDA context), receives the dataset
pickled, and needs the ``__main__`` guard. ``spawn`` itself pays a fresh ``import torch`` per
worker: 3.4-3.6 s on this 2-core machine with torch 2.14's CUDA build, so a live
``num_workers`` change could never show its first batch within seconds (docs/performance.md §5).

``forkserver`` keeps every one of those properties (the server is a fresh interpreter; workers
forked from it still unpickle their dataset) but imports torch and the workload's modules once,
in the server, started at the beginning of a run while the runner builds its dataset. A worker
is then a ``fork()`` of a warm process: milliseconds. Python 3.14 made it Linux's default for
the same reason. Windows has no ``forkserver``: workers are spawned there, as before.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence


def start_method() -> str:
    """``forkserver`` where the OS has it (Linux, macOS), else ``spawn`` (Windows)."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def warm_up(modules: Sequence[str]) -> bool:
    """Start the fork server now, importing ``modules`` (torch, the workload's data module),
    so the first loader with workers forks from a warm process. Returns False where workers
    are spawned. Call it once, before any loader starts workers: the preload list is read when
    the server starts."""
    if start_method() != "forkserver":
        return False
    from multiprocessing import forkserver

    multiprocessing.set_forkserver_preload(list(modules))
    forkserver.ensure_running()  # starts the server; its imports run in that process
    return True
