"""How DataLoader workers start: spawn semantics, fast where possible, and said when slow.

gpuwatch gives the built-in workloads' DataLoader workers ``spawn`` semantics on every OS, as
Windows has them: each worker is a fresh interpreter image that inherits nothing (no threads,
no CUDA context), receives the dataset pickled, and needs the ``__main__`` guard. ``spawn``
itself pays a fresh ``import torch`` per worker (seconds with torch's CUDA build), so a live
``num_workers`` change could never show its first batch quickly (docs/performance.md §5).

``forkserver`` keeps every one of those properties (the server is a fresh interpreter; workers
forked from it still unpickle their dataset) but imports torch and the workload's modules once,
in the server, started at the beginning of a run while the runner builds its dataset. A worker
is then a ``fork()`` of a warm process: milliseconds. Python 3.14 made it Linux's default for
the same reason. Windows has no ``forkserver``: workers are spawned there.

``GPUWATCH_WORKER_START=spawn`` makes the runner spawn them anywhere, to see (and measure) the
Windows path on Linux or macOS. Where workers are spawned, the wait for their first batch is
announced with an estimate (``WorkerStarts``: "starting 2 workers (spawn): ~5 s"), from the
last start measured in this run or a first guess.

A watched script that starts spawn workers without an ``if __name__ == "__main__":`` guard
makes each worker run the whole script again, and the worker fails with multiprocessing's
"An attempt has been made to start a new process before the current process has finished its
bootstrapping phase" (https://docs.python.org/3/library/multiprocessing.html#the-spawn-and-forkserver-start-methods,
"Safe importing of main module"). ``MainGuardWatch`` catches that in the worker, so the run
ends with one message and the two-line fix instead of one traceback per worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.spawn
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Forces the start method of the built-in workloads' workers (``spawn`` or ``forkserver``).
WORKER_START_ENV = "GPUWATCH_WORKER_START"
#: A first guess at how long spawned workers take to deliver their first batch, before any
#: was measured in this run: a fresh interpreter importing torch, on a busy machine.
FIRST_SPAWN_ESTIMATE_S = 5.0
FIRST_FORKSERVER_ESTIMATE_S = 0.5


def start_method(environ: Mapping[str, str] | None = None) -> str:
    """``forkserver`` where the OS has it (Linux, macOS), else ``spawn`` (Windows); or what
    ``GPUWATCH_WORKER_START`` asks for, where the OS has it."""
    environ = os.environ if environ is None else environ
    available = multiprocessing.get_all_start_methods()
    wanted = environ.get(WORKER_START_ENV, "").strip().lower()
    if wanted in ("spawn", "forkserver") and wanted in available:
        return wanted
    return "forkserver" if "forkserver" in available else "spawn"


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


@dataclass
class WorkerStarts:
    """How long workers took to deliver their first batch in this run, per start method and
    worker count, for the notice that announces the next start."""

    measured: dict[tuple[str, int], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def estimate_s(self, method: str, workers: int) -> float:
        """The last measurement for this method and count, else the newest for this method,
        else the first guess."""
        with self._lock:
            if (method, workers) in self.measured:
                return self.measured[(method, workers)]
            same = [s for (m, _), s in self.measured.items() if m == method]
        if same:
            return same[-1]
        return FIRST_SPAWN_ESTIMATE_S if method == "spawn" else FIRST_FORKSERVER_ESTIMATE_S

    def notice(self, method: str, workers: int) -> str:
        """``starting 2 workers (spawn): ~5 s``."""
        estimate = _seconds(self.estimate_s(method, workers))
        return f"starting {workers} {_workers(workers)} ({method}): ~{estimate}"

    def record(self, method: str, workers: int, seconds: float) -> None:
        with self._lock:
            self.measured.pop((method, workers), None)  # re-inserted last: the newest
            self.measured[(method, workers)] = seconds


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 2 else f"{value:.1f} s"


def _workers(n: int) -> str:
    return "worker" if n == 1 else "workers"


#: This runner's measurements (one process, one run).
STARTS = WorkerStarts()


@dataclass
class WorkerStart:
    """One announced start of ``workers`` workers: ``ready`` when their first batch is in
    (or their start failed; any thread), ``report`` once it is known they work: it records
    the time for later estimates and says it."""

    method: str
    workers: int
    log: Callable[[str], None]
    starts: WorkerStarts = field(default_factory=lambda: STARTS)
    clock: Callable[[], float] = time.monotonic
    started: float = 0.0
    took_s: float | None = None
    reported: bool = False

    def __post_init__(self) -> None:
        self.started = self.clock()

    def ready(self) -> None:
        if self.took_s is None:
            self.took_s = self.clock() - self.started

    def report(self) -> None:
        if self.reported:
            return  # several iterators may share one start: said once
        self.reported = True
        if self.took_s is None:
            self.ready()
        assert self.took_s is not None
        self.starts.record(self.method, self.workers, self.took_s)
        self.log(
            f"{self.workers} {_workers(self.workers)} ({self.method}) delivered the first "
            f"batch in {self.took_s:.1f} s"
        )


def announce_start(
    workers: int,
    log: Callable[[str], None],
    *,
    method: str | None = None,
    meanwhile: str = "",
    starts: WorkerStarts = STARTS,
) -> WorkerStart:
    """Say that ``workers`` workers start now (``log`` gets the notice, then ``meanwhile``)
    and return the start, to mark ``ready`` and ``report``. For any loader that starts
    workers while the run waits or goes on (the built-in workloads' knob changes, a watched
    script's loader swap). ``method``: how they start (default: the built-in workloads')."""
    method = method or start_method()
    log(starts.notice(method, workers) + meanwhile)
    return WorkerStart(method, workers, log, starts)


def loader_start_method(loader: Any) -> str:
    """How ``loader``'s workers start: its own ``multiprocessing_context``, else the script's
    default start method, else the platform's. Read without fixing the default: asking
    ``multiprocessing.get_start_method()`` would set it, and a later ``set_start_method`` in
    the script would then fail."""
    context = getattr(loader, "multiprocessing_context", None)
    if isinstance(context, str):
        return context
    if context is not None and hasattr(context, "get_start_method"):
        return str(context.get_start_method())
    chosen = multiprocessing.get_start_method(allow_none=True)
    return chosen or multiprocessing.get_all_start_methods()[0]  # the first is the default


# ---- The missing ``__main__`` guard --------------------------------------------------------

#: What a spawned worker exits with when it failed for want of the guard.
MISSING_GUARD_EXIT = 3
#: The words of multiprocessing's error for a process started while the main module is still
#: being imported by a spawned child (``multiprocessing.spawn._check_not_importing_main``).
BOOTSTRAPPING = "finished its bootstrapping phase"


def missing_guard_message(script: str) -> str:
    """The one message for a script whose spawned workers re-ran it: what happened, the fix."""
    name = os.path.basename(script)
    return (
        f"{name} starts worker processes with 'spawn' (each one imports the script again) but "
        f'has no `if __name__ == "__main__":` guard, so every worker re-ran the whole script '
        f'and failed (multiprocessing: "An attempt has been made to start a new process before '
        f"the current process has finished its bootstrapping phase\"). Put the script's "
        f"top-level code in a function and call it under the guard:\n"
        f'    if __name__ == "__main__":\n'
        f"        main()"
    )


def guarded_command(command: list[str], marker: str) -> list[str]:
    """``multiprocessing.spawn.get_command_line``'s command, its ``-c`` program wrapped so that
    a child failing for want of the guard leaves ``marker`` and exits quietly (one message
    comes from the runner instead of a traceback per worker). Anything else it raises is
    raised as before. A command without ``-c`` (a frozen interpreter's) is left alone.

    A slower worker may fail after the run has ended and the marker's folder is gone (the
    first worker's failure ended the script): it then has nothing to tell and still exits
    quietly."""
    if "-c" not in command[:-1]:
        return command
    at = command.index("-c") + 1
    program = (
        "import sys\n"
        "try:\n"
        f"    exec({command[at]!r})\n"
        "except RuntimeError as exc:\n"
        f"    if {BOOTSTRAPPING!r} not in str(exc):\n"
        "        raise\n"
        "    try:\n"
        f"        open({marker!r}, 'a').close()\n"
        "    except OSError:\n"
        "        pass\n"
        f"    sys.exit({MISSING_GUARD_EXIT})\n"
    )
    return [*command[:at], program, *command[at + 1 :]]


class MainGuardWatch:
    """While installed, spawned children of this process run ``guarded_command``; ``missing``
    says whether one of them failed for want of the script's ``__main__`` guard."""

    def __init__(self, parent: str | None = None) -> None:
        self._parent = parent  # the run's private folder, else the temp folder
        self._folder: str | None = None
        self._original: Callable[..., list[str]] | None = None

    @property
    def marker(self) -> str | None:
        return None if self._folder is None else os.path.join(self._folder, "missing-guard")

    def install(self) -> None:
        """Wrap ``multiprocessing.spawn.get_command_line`` (spawn children of every kind:
        DataLoader workers, ``Process``, ``Pool``, on POSIX and Windows)."""
        if self._original is not None:
            return
        self._folder = tempfile.mkdtemp(prefix=f"gpuwatch-{os.getpid()}-", dir=self._parent)
        original = multiprocessing.spawn.get_command_line
        marker = self.marker
        assert marker is not None

        def get_command_line(**kwds: Any) -> list[str]:
            return guarded_command(original(**kwds), marker)

        self._original = original
        multiprocessing.spawn.get_command_line = get_command_line  # type: ignore[assignment]

    def missing(self) -> bool:
        marker = self.marker
        return marker is not None and os.path.exists(marker)

    def remove(self) -> None:
        """Put ``get_command_line`` back and delete the marker's folder."""
        if self._original is not None:
            multiprocessing.spawn.get_command_line = self._original  # type: ignore[assignment]
            self._original = None
        folder, self._folder = self._folder, None
        if folder is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(folder, ignore_errors=True)
