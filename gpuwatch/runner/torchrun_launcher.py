"""``gpuwatch run -m torch.distributed.run ARGS``: torchrun in this process, every rank watched.

The user's own launcher does the launching: this process runs torchrun's ``run`` with the
user's arguments, and only the command torchrun builds for each rank changes (its
``config_from_args``, looked up at call time, is wrapped): the rank starts as the same
interpreter running our boot, which runs the script as ``python -u SCRIPT`` would and opens a
link of its own (``ranks.rank_command``). So rendezvous, restarts, the environment of each
rank and how torchrun ends them are torchrun's.

This process trains nothing: its ``hello`` has ``role`` ``launcher`` and names the training
script; the ranks' hellos carry ``rank``. It reports how torchrun ended: a rank that failed is
named in an ``error`` (``type`` ``RankFailed`` with ``rank``, ``exitcode`` and ``signal``), as
torchrun's own summary would name it. A ``stop`` from the GUI interrupts torchrun as Ctrl-C
does; torchrun then ends its ranks (the GUI asks each rank to stop as well).
"""

from __future__ import annotations

import os
import platform
import queue
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuwatch.protocol import PROTOCOL_VERSION, ROLE_LAUNCHER, TORCH_MISSING
from gpuwatch.runner.link import Link, write_authkey_file
from gpuwatch.runner.ranks import RankLaunchError, RankLink, rank_command
from gpuwatch.runner.script_control import grace_s, interrupt_main_thread

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: The signal torchrun ends the other ranks with once one has failed (its default).
_DEATH_SIGNAL = "SIGTERM"


@dataclass(frozen=True)
class LauncherPlace:
    """What every rank is given: the GUI's address and key, where our code is, and the
    runner options the user chose (device, max steps, the run's private folder)."""

    address: str
    key: bytes
    root: str
    device_spec: str
    max_steps: int | None
    private_dir: str | None


@dataclass(frozen=True)
class RankFailure:
    """One failed rank as torchrun reports it (its ``ChildFailedError.failures``)."""

    rank: int
    local_rank: int
    exitcode: int
    signal: str | None
    pid: int

    def sentence(self) -> str:
        how = f"was killed by {self.signal}" if self.signal else f"exited with code {self.exitcode}"
        return f"rank {self.rank} {how}"


def run_torchrun(link: Link, module: str, args: Sequence[str], place: LauncherPlace) -> int:
    """Run ``python -m module args`` (torchrun) with every rank watched; the exit code."""
    try:
        import torch.distributed.run as torchrun
    except Exception as exc:
        return _fail(
            link,
            TORCH_MISSING,
            f"{sys.executable} cannot import {module} ({type(exc).__name__}: {exc}): install "
            "torch in it, or choose a Python that has it (--python PATH)",
            EXIT_FAILED,
        )
    sys.argv = [getattr(torchrun, "__file__", module), *args]
    try:
        parsed = torchrun.parse_args(list(args))
    except SystemExit as exc:  # argparse printed its usage line as the launcher's output
        code = exc.code if isinstance(exc.code, int) else EXIT_USAGE
        return _fail(link, "UsageError", f"{module}: bad arguments (see its message above)", code)
    folder = place.private_dir or tempfile.mkdtemp(prefix="gpuwatch-ranks-")
    ranks = _WatchedRanks(torchrun, _rank_link(place, folder))
    import torch

    link.send(
        "hello",
        protocol=PROTOCOL_VERSION,
        pid=os.getpid(),
        role=ROLE_LAUNCHER,
        workload=_training_name(parsed),
        device={"kind": "cpu", "index": None, "name": "torchrun (trains nothing)"},
        versions={"python": platform.python_version(), "torch": torch.__version__},
        os=platform.platform(),
        knobs=[],
        config={"id": 0, "values": {}},
        workload_config={},
        launcher={"module": module, "args": list(args), "nproc_per_node": _nproc(parsed)},
    )
    link.log("info", f"running -m {module} {' '.join(args)}".rstrip() + f" in {os.getcwd()}")
    stop = _StopOnRequest(link)
    stop.start()
    ranks.install()
    try:
        torchrun.run(parsed)
    except RankLaunchError as exc:
        return _fail(link, "RankLaunchError", str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        return _bye(link, "stopped" if stop.asked else "interrupted", EXIT_OK)
    except Exception as exc:
        if stop.asked and type(exc).__name__ == "SignalException":  # its own SIGINT handler
            return _bye(link, "stopped", EXIT_OK)
        failures = rank_failures(exc)
        if failures:
            first = failures[0]
            link.send(
                "error",
                type="RankFailed",
                message=_failed_sentence(failures),
                traceback="",
                rank=first.rank,
                exitcode=first.exitcode,
                signal=first.signal,
                ranks=[f.rank for f in failures],
            )
            return _bye(link, "error", EXIT_FAILED)
        return _fail(
            link,
            type(exc).__name__,
            f"{module} failed: {type(exc).__name__}: {exc}",
            EXIT_FAILED,
            trace=traceback.format_exc(),
        )
    finally:
        ranks.remove()
        stop.close()
    return _bye(link, "stopped" if stop.asked else "script_exit", EXIT_OK)


def run_ranks_only(module: str, args: Sequence[str], place: LauncherPlace) -> int:
    """``gpuwatch run --connect HOST:PORT --token T -m torch.distributed.run ARGS`` on a node
    whose ranks a window on another machine watches: torchrun here, no link of this process's
    own (the window started nothing here), every rank connecting to ``place.address`` with the
    token. The exit code is torchrun's; a failed rank is one line on stderr."""
    import torch.distributed.run as torchrun

    sys.argv = [getattr(torchrun, "__file__", module), *args]
    parsed = torchrun.parse_args(list(args))  # bad arguments: argparse's message, exit 2
    folder = tempfile.mkdtemp(prefix="gpuwatch-ranks-")
    ranks = _WatchedRanks(torchrun, _rank_link(place, folder))
    ranks.install()
    try:
        torchrun.run(parsed)
    except RankLaunchError as exc:
        sys.stderr.write(f"gpuwatch: {exc}\n")
        return EXIT_USAGE
    except Exception as exc:
        failures = rank_failures(exc)
        what = _failed_sentence(failures) if failures else f"{type(exc).__name__}: {exc}"
        sys.stderr.write(f"gpuwatch: {module} failed: {what}\n")
        return EXIT_FAILED
    finally:
        ranks.remove()
        shutil.rmtree(folder, ignore_errors=True)
    return EXIT_OK


def _rank_link(place: LauncherPlace, folder: str) -> RankLink:
    return RankLink(
        root=place.root,
        address=place.address,
        keyfile=write_authkey_file(folder, place.key),
        options=_rank_options(place),
    )


class _WatchedRanks:
    """torchrun's ``config_from_args`` wrapped so every rank starts through our boot."""

    def __init__(self, torchrun: Any, rank_link: RankLink) -> None:
        self._torchrun = torchrun
        self._original = torchrun.config_from_args
        self._rank_link = rank_link

    def install(self) -> None:
        self._torchrun.config_from_args = self._config_from_args

    def remove(self) -> None:
        self._torchrun.config_from_args = self._original

    def _config_from_args(self, namespace: Any) -> tuple[Any, Any, list[str]]:
        config, cmd, cmd_args = self._original(namespace)
        if not isinstance(cmd, str):
            raise RankLaunchError(
                "torchrun runs the script inside its own process (--run-path): gpuwatch "
                "watches ranks that torchrun starts as Python processes"
            )
        return config, cmd, rank_command(cmd_args, self._rank_link)


def rank_failures(exc: BaseException) -> list[RankFailure]:
    """The failed ranks of torchrun's ``ChildFailedError``, the first to fail first (by its
    timestamp, then rank); none for any other exception."""
    failures = getattr(exc, "failures", None)
    if not isinstance(failures, dict):
        return []
    found: list[tuple[int, RankFailure]] = []
    for rank, failure in failures.items():
        name = getattr(failure, "signal_name", None)
        signal_name = name() if callable(name) else None
        found.append(
            (
                int(getattr(failure, "timestamp", 0) or 0),
                RankFailure(
                    rank=int(rank),
                    local_rank=int(getattr(failure, "local_rank", 0) or 0),
                    exitcode=int(getattr(failure, "exitcode", 1) or 0),
                    signal=signal_name if signal_name and signal_name != "<N/A>" else None,
                    pid=int(getattr(failure, "pid", 0) or 0),
                ),
            )
        )
    # torchrun ends the ranks still running with SIGTERM once one has failed, and reports
    # those too, often within the same second: the one that failed first is not one of them.
    found.sort(key=lambda item: (item[0], item[1].signal == _DEATH_SIGNAL, item[1].rank))
    return [failure for _, failure in found]


def _failed_sentence(failures: list[RankFailure]) -> str:
    """The first failure, and any other that was not torchrun ending the rest."""
    first = failures[0].sentence()
    others = [f for f in failures[1:] if f.signal != _DEATH_SIGNAL]
    if not others:
        return first
    return f"{first} (then {', '.join(f.sentence() for f in others)})"


def _rank_options(place: LauncherPlace) -> tuple[str, ...]:
    options = ["--device", place.device_spec]
    if place.max_steps:
        options += ["--max-steps", str(place.max_steps)]
    if place.private_dir:
        options += ["--private-dir", place.private_dir]
    return tuple(options)


def _training_name(parsed: Any) -> str:
    script = str(getattr(parsed, "training_script", "") or "")
    return script if getattr(parsed, "module", False) else os.path.basename(script)


def _nproc(parsed: Any) -> int | None:
    value = str(getattr(parsed, "nproc_per_node", "") or "")
    return int(value) if value.isdigit() else None


#: A stop without a grace of its own gives the ranks this long to reach a step boundary.
DEFAULT_STOP_GRACE_S = 5.0
#: After their grace, how long the ranks get to send their last steps and exit (on a loaded
#: machine a rank's teardown takes seconds); less than the GUI's own patience after the grace
#: (``core.run.session.POLITE_STOP_S`` + ``RANKS_EXIT_S``), so torchrun still ends what is
#: left itself.
_RANK_EXIT_S = 20.0


class _StopOnRequest:
    """A ``stop`` from the GUI (or the link lost) interrupts torchrun as Ctrl-C would, once the
    ranks have had their grace to stop by themselves."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.asked = False
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gpuwatch-stop", daemon=True)

    def start(self) -> None:
        if threading.current_thread() is threading.main_thread() and (
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        ):
            signal.signal(signal.SIGINT, signal.default_int_handler)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def _watch(self) -> None:
        while not self._closed.is_set():
            try:
                message = self.link.controls.get(timeout=0.2)
            except queue.Empty:
                if self.link.lost.is_set():
                    break
                continue
            if message["kind"] == "stop":
                self.asked = True
                # The GUI asked every rank to stop at its next step boundary: torchrun ends
                # by itself once they have. Only ranks that did not are interrupted.
                self._closed.wait(grace_s(message, DEFAULT_STOP_GRACE_S) + _RANK_EXIT_S)
                break
        if not self._closed.is_set():
            interrupt_main_thread()


def _bye(link: Link, reason: str, code: int) -> int:
    link.send("bye", reason=reason, code=code, steps=0, cuda_used=False, instrumentation="auto")
    link.finished()
    link.close()
    return code


def _fail(link: Link, kind: str, message: str, code: int, trace: str = "") -> int:
    link.send("error", type=kind, message=message, traceback=trace)
    return _bye(link, "error", code)
