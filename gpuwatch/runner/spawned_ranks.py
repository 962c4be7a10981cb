"""Ranks a watched script starts itself (``torch.multiprocessing.spawn`` / ``start_processes``).

While a script runs, ``start_processes`` (which ``spawn`` calls) hands each process our
``run_rank`` wrapped around the script's own function, with the link's address and key: they
travel pickled through the start method's pipe, never on a command line or in the environment.
In the child, ``run_rank`` calls the script's function as torch would (``fn(i, *args)``) and
waits for it to join a process group: once ``torch.distributed.init_process_group`` returns,
the rank is known (``get_rank``, ``get_world_size``; the local rank is the process index), so
the process opens its own link, says hello as that rank and watches its steps as a watched
script's, until the function returns. A process that never joins a group is left alone, and
so are processes started any other way (DataLoader workers, a ``Pool``).

Limits: a DataLoader iterated before ``init_process_group`` was called is not hooked until it
is iterated again; the function's exceptions are torch's to report (the parent re-raises them
from ``spawn``, and the watched parent reports that).
"""

from __future__ import annotations

import functools
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuwatch.protocol import ROLE_RANK

#: ``hello.config.warmup_steps`` of a rank (as a watched script's).
RANK_WARMUP_STEPS = 3


@dataclass(frozen=True)
class RankStart:
    """What a spawned process needs to watch itself: where the GUI listens, the link's key,
    the device and step limit the user chose, and the script's name for hello."""

    address: str
    key: bytes
    device_spec: str
    max_steps: int | None
    name: str


class SpawnedRanks:
    """Wraps ``torch.multiprocessing``'s ``start_processes`` while a script runs."""

    def __init__(self, torch: Any, start: RankStart) -> None:
        self._module: Any = sys.modules.get("torch.multiprocessing.spawn")
        self._mp = getattr(torch, "multiprocessing", None)
        self._start = start
        self._original: Callable[..., Any] | None = None

    def install(self) -> None:
        module = self._module
        original = getattr(module, "start_processes", None)
        if module is None or original is None:
            return
        start = self._start

        @functools.wraps(original)
        def start_processes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return original(functools.partial(run_rank, start, fn), *args, **kwargs)

        self._original = original
        module.start_processes = start_processes
        if self._mp is not None and getattr(self._mp, "start_processes", None) is original:
            self._mp.start_processes = start_processes

    def remove(self) -> None:
        original, self._original = self._original, None
        if original is None:
            return
        if self._module is not None:
            self._module.start_processes = original
        if self._mp is not None:
            self._mp.start_processes = original


def run_rank(start: RankStart, fn: Callable[..., Any], index: int, *args: Any) -> Any:
    """The script's ``fn(index, *args)``, watched from the moment it joins a process group."""
    import torch.distributed as dist

    watch = _RankWatch(start, index)
    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*a: Any, **k: Any) -> Any:
        result = original(*a, **k)
        watch.begin()
        return result

    dist.init_process_group = init_process_group
    try:
        return fn(index, *args)
    except KeyboardInterrupt:  # a stop: torch's own wrapper would swallow it anyway
        if not watch.stopping:
            raise
        return None
    finally:
        dist.init_process_group = original
        watch.end()


class _RankWatch:
    """One spawned rank's link and instruments, from ``begin`` (it joined) to ``end``.

    Never raises into the script: a rank that cannot be watched says why on stderr once and
    trains on unwatched."""

    def __init__(self, start: RankStart, index: int) -> None:
        self.start = start
        self.index = index
        self.link: Any = None
        self.watch: Any = None
        self.backend: Any = None

    @property
    def stopping(self) -> bool:
        return self.watch is not None and self.watch.control.stop_reason is not None

    def begin(self) -> None:
        if self.link is not None:
            return
        try:
            self._begin()
        except Exception as exc:
            sys.stderr.write(
                f"gpuwatch: rank process {self.index} is not watched: {type(exc).__name__}: {exc}\n"
            )
            self._close()

    def _begin(self) -> None:
        import torch
        import torch.distributed as dist

        from gpuwatch.runner.link import Link
        from gpuwatch.runner.script_hello import say_hello
        from gpuwatch.runner.script_instruments import ScriptInstruments
        from gpuwatch.runner.session import script_device

        start = self.start
        rank = {
            "rank": dist.get_rank(),
            "local_rank": self.index,
            "world_size": dist.get_world_size(),
            "node_rank": 0,
            "node": socket.gethostname(),
        }
        self.link = link = Link.connect(start.address, start.key)
        device = script_device(torch, start.device_spec)
        self.backend = backend = say_hello(
            link,
            torch,
            device,
            workload=start.name,
            warmup_steps=RANK_WARMUP_STEPS,
            role=ROLE_RANK,
            rank=rank,
        )
        self.watch = ScriptInstruments.build(
            link, torch, device, backend, max_steps=start.max_steps
        )
        self.watch.install()

    def end(self) -> None:
        watch, link = self.watch, self.link
        if watch is None or link is None:
            self._close()
            return
        try:
            watch.remove()
            recorder, control = watch.recorder, watch.control
            recorder.finish(keep_open=not control.interrupted)
            self.backend.close()
            link.send(
                "bye",
                reason=control.stop_reason or "script_exit",
                code=0,
                steps=recorder.steps,
                cuda_used=False,
                instrumentation=recorder.instrumentation,
                interrupted=control.interrupted,
                **recorder.bye_fields(),
            )
        except Exception as exc:
            sys.stderr.write(f"gpuwatch: rank process {self.index}: {type(exc).__name__}: {exc}\n")
        self._close()

    def _close(self) -> None:
        link, self.link = self.link, None
        if link is not None:
            link.finished()
            link.close()
