"""Start the runner as a fresh interpreter in its own process group, and end its whole tree.

Spawn semantics only (a new interpreter, never fork): the GUI process holds Qt and threads,
and CUDA cannot live in a forked child. The runner gets its own session/process group
(a new process group on Windows) so stop reaches DataLoader workers too. On Windows it also
goes into a kill-on-close Job Object (``win_job``), so the tree ends with gpuwatch however
gpuwatch ends, and a GUI without a console starts it with its console hidden.

What differs by OS is decided by small functions that take the platform as a parameter
(``popen_group_options``, ``stop_stages``), so both branches are tested on any OS
(tests/test_platform_launcher.py; docs/platforms.md says what only Windows itself can show).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

import gpuwatch
from gpuwatch import protocol
from gpuwatch.core.run import win_job

#: gpuwatch's own package directory; the runner's source is taken from here.
PACKAGE_DIR = Path(gpuwatch.__file__).resolve().parent
#: Folder of the frozen app that holds the runner's plain source (``<it>/gpuwatch/runner``).
FROZEN_RUNNER_SOURCE = "runner-src"
#: PyInstaller's bootloader saves the user's LD_LIBRARY_PATH here before prepending its own.
LD_ORIG = "LD_LIBRARY_PATH_ORIG"


class NoInterpreterError(RuntimeError):
    """A frozen gpuwatch has no Python of its own: the training interpreter must be chosen."""


def is_frozen() -> bool:
    """True inside the PyInstaller build (``sys.executable`` is then the app, not Python)."""
    return bool(getattr(sys, "frozen", False))


def bundle_dir() -> Path | None:
    """The frozen app's data folder (``sys._MEIPASS``), or None from a source install."""
    if not is_frozen():
        return None
    return Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent)).resolve()


def runner_source_root() -> Path:
    """The folder holding the ``gpuwatch`` package whose runner source this install ships
    (the package's parent from a source install; the build's plain copy when frozen)."""
    bundle = bundle_dir()
    if bundle is not None:
        return bundle / FROZEN_RUNNER_SOURCE
    return PACKAGE_DIR.parent


def runner_pythonpath(python: str, private_dir: Path) -> str:
    """The folder holding the ``gpuwatch`` package that ``python`` runs the runner from.

    For our own interpreter that is the directory holding the package. Another interpreter
    (a user's torch environment) must not see our site-packages, so it gets a plain copy
    of the runner's source (stdlib + torch only) in the session's private dir,
    with ``gpuwatch.probe`` so a user's script run there can ``import gpuwatch.probe``.
    The runner itself is started with it by ``boot_code`` (never through ``PYTHONPATH``);
    ``child_env`` puts it on ``PYTHONPATH`` for the survey, which runs no user code.
    """
    bundle = bundle_dir()
    if bundle is not None:  # the build ships the runner's source as plain files
        return str(bundle / FROZEN_RUNNER_SOURCE)
    if _same_interpreter(python):
        return str(PACKAGE_DIR.parent)
    target = private_dir / "src" / "gpuwatch"
    if not target.exists():
        target.mkdir(parents=True)
        for name in ("__init__.py", "protocol.py", "probe.py"):
            shutil.copy2(PACKAGE_DIR / name, target / name)
        shutil.copytree(
            PACKAGE_DIR / "runner", target / "runner", ignore=shutil.ignore_patterns("__pycache__")
        )
    return str(target.parent)


def _same_interpreter(python: str) -> bool:
    with contextlib.suppress(OSError):
        return os.path.samefile(python, sys.executable)
    return False


def default_python() -> str:
    """The interpreter that runs training when none is chosen: ours, unless frozen.

    A frozen app's ``sys.executable`` is the app itself, which would start another window,
    not a runner: there the interpreter must be chosen (Run → Choose Python…, ``--python``).
    """
    if is_frozen():
        raise NoInterpreterError(
            "no training Python chosen: pick one with Run → Choose "
            "Python… (or --python PATH); it needs torch"
        )
    return sys.executable


#: ``python -c`` source that runs ``gpuwatch.runner`` from a folder (``protocol.boot_code``).
boot_code = protocol.boot_code


def runner_command(
    python: str, address: str, workload: str, device: str, extra: Sequence[str] = (), *, root: str
) -> list[str]:
    """The runner training a built-in workload; ``root`` from ``runner_pythonpath``. It reads
    the link's key from its stdin (``spawn`` writes it there)."""
    return [
        python,
        "-c",
        boot_code(root),
        "--connect",
        address,
        protocol.AUTHKEY_STDIN_FLAG,
        "--workload",
        workload,
        "--device",
        device,
        *extra,
    ]


def script_command(
    python: str,
    address: str,
    script: str,
    script_args: Sequence[str],
    *,
    device: str,
    root: str,
    extra: Sequence[str] = (),
) -> list[str]:
    """The runner running a user's script as ``__main__``; its argv goes after ``--``. It
    reads the link's key from its stdin (``spawn`` writes it there)."""
    return user_code_command(
        python, address, ("--script", script), script_args, device=device, root=root, extra=extra
    )


def user_code_command(
    python: str,
    address: str,
    target: tuple[str, str],
    args: Sequence[str],
    *,
    device: str,
    root: str,
    extra: Sequence[str] = (),
) -> list[str]:
    """The runner running the user's code: ``target`` is ``("--script", PATH)`` or
    ``("--module", NAME)`` (as ``python -m``), ``args`` its argv after ``--``."""
    return [
        python,
        "-c",
        boot_code(root),
        "--connect",
        address,
        protocol.AUTHKEY_STDIN_FLAG,
        *target,
        "--device",
        device,
        *extra,
        "--",
        *args,
    ]


def clean_env(environ: dict[str, str] | None = None, bundle: Path | None = None) -> dict[str, str]:
    """``environ`` without the frozen app's own paths, for a child that is another Python.

    PyInstaller prepends its folder to ``LD_LIBRARY_PATH`` (Linux) and ``PATH`` (Windows)
    and sets ``_PYI_*``/``_MEIPASS2``; a user's torch would then load our bundled libraries
    (Qt's, an older libstdc++) instead of its own. The user's value is restored from
    ``LD_LIBRARY_PATH_ORIG``; every other path list loses its entries inside the bundle.
    From a source install (no bundle) the environment is passed on unchanged.
    """
    env = dict(os.environ if environ is None else environ)
    bundle = bundle_dir() if bundle is None else bundle
    if bundle is None:
        return env
    if LD_ORIG in env:
        env["LD_LIBRARY_PATH"] = env.pop(LD_ORIG)
    for name in [n for n in env if n.startswith("_PYI_") or n.startswith("_MEIPASS")]:
        del env[name]
    env.pop("PYTHONHOME", None)
    root = os.path.normcase(str(bundle))
    for name, value in list(env.items()):
        parts = value.split(os.pathsep)
        kept = [p for p in parts if not _inside(p, root)]
        if len(kept) != len(parts):
            if kept:
                env[name] = os.pathsep.join(kept)
            else:
                del env[name]
    return env


def _inside(path: str, root: str) -> bool:
    if not path:
        return False
    normal = os.path.normcase(os.path.abspath(path))
    return normal == root or normal.startswith(root.rstrip(os.sep) + os.sep)


def prepare_frozen_children(
    *, platform: str | None = None, frozen: bool | None = None, kernel32: Any = None
) -> bool:
    """Undo the bootloader's ``SetDllDirectoryW`` (inherited by children) on Windows, so a
    training Python loads its own DLLs; nothing to do elsewhere or from a source install.
    Returns whether it was undone (the arguments default to this process and its kernel32)
    (https://learn.microsoft.com/en-us/windows/win32/api/winbase/nf-winbase-setdlldirectoryw)."""
    platform = sys.platform if platform is None else platform
    frozen = is_frozen() if frozen is None else frozen
    if not (frozen and platform == "win32"):
        return False
    if kernel32 is None:
        import ctypes

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
    kernel32.SetDllDirectoryW(None)
    return True


def child_env(pythonpath: str) -> dict[str, str]:
    """Our environment, cleaned of a frozen app's paths, with ``pythonpath`` first on
    PYTHONPATH: for ``--survey`` only, which runs no user code (a runner gets ``runner_env``)."""
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    return env


def runner_env() -> dict[str, str]:
    """The user's environment, cleaned of a frozen app's paths, and nothing else: not the
    link's key (``spawn`` writes it to the runner's stdin: a process's initial environment
    stays readable in its ``/proc/PID/environ`` however it edits ``os.environ``), no
    ``PYTHONPATH`` (the runner is found by ``boot_code``), no ``PYTHONUNBUFFERED``/
    ``PYTHONIOENCODING`` (the runner sets up its streams in-process) and no
    ``CUDA_DEVICE_ORDER`` (it decides which GPU a script's ``cuda:0`` is; the GUI matches the
    device to NVML by UUID or PCI bus id instead)."""
    return clean_env()


#: Process creation flags
#: (https://learn.microsoft.com/en-us/windows/win32/procthread/process-creation-flags).
#: Spelled out because ``subprocess`` defines them on Windows only.
CREATE_NEW_PROCESS_GROUP = 0x00000200
CREATE_NO_WINDOW = 0x08000000


def popen_group_options(platform: str, *, has_console: bool) -> dict[str, Any]:
    """The ``Popen`` options that make the runner lead a process group of its own.

    POSIX: a new session (its own process group, which no terminal's Ctrl-C reaches).
    Windows: ``CREATE_NEW_PROCESS_GROUP``, so ``CTRL_BREAK_EVENT`` can be sent to the runner's
    group alone (``stop_stages``); and, when gpuwatch itself has no console (the installed
    windowed app, ``pythonw``), ``CREATE_NO_WINDOW``: the console the runner (a console
    program) would get would otherwise open as a window beside gpuwatch's. With a console
    (``gpuwatch-cli.exe``, ``python -m gpuwatch`` in a terminal) the runner shares it, which is
    what lets ``CTRL_BREAK_EVENT`` reach it: the event goes only to processes attached to the
    sender's console
    (https://learn.microsoft.com/en-us/windows/console/generateconsolectrlevent).
    """
    if platform == "win32":
        flags = CREATE_NEW_PROCESS_GROUP | (0 if has_console else CREATE_NO_WINDOW)
        return {"creationflags": flags}
    return {"start_new_session": True}


def has_console() -> bool:
    """Whether this process has a console (Windows; elsewhere the question does not arise)
    (https://learn.microsoft.com/en-us/windows/console/getconsolewindow)."""
    if sys.platform != "win32":
        return True
    import ctypes

    return bool(ctypes.windll.kernel32.GetConsoleWindow())  # type: ignore[attr-defined]


#: Each runner's Job Object (Windows), by pid, closed once ``end_tree`` has ended the tree.
_jobs: dict[int, win_job.WinJob] = {}


def spawn(
    cmd: list[str], env: dict[str, str], cwd: str | None = None, *, authkey: bytes | None = None
) -> subprocess.Popen:
    """Start ``cmd`` as the leader of a new process group, stdout+stderr merged to a pipe.

    With ``authkey`` its stdin is a pipe holding the key's hex and a newline, then closed (the
    runner reads that line and puts ``os.devnull`` in its place, so a watched script's stdin
    is the null device either way); without it, stdin is the null device. On Windows the
    process goes into a kill-on-close Job Object (``win_job``) before its key is written.
    """
    stdin = subprocess.DEVNULL if authkey is None else subprocess.PIPE
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=cwd,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        **popen_group_options(sys.platform, has_console=has_console()),
    )
    if sys.platform == "win32":
        job = win_job.contain(proc.pid)
        if job is not None:
            _jobs[proc.pid] = job
    if proc.stdin is not None:
        # 65 bytes fit any pipe's buffer: this never waits for the child to read them. A
        # child that is no runner (or is gone already) simply never reads them.
        with contextlib.suppress(OSError):
            proc.stdin.write(authkey.hex().encode() + b"\n")
        with contextlib.suppress(OSError):
            proc.stdin.close()
    return proc


def tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants that are alive now."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


#: Once the runner has exited, how long the processes it started may take to follow it before
#: gpuwatch ends them: a DataLoader worker or a subprocess that does not watch its parent never
#: follows, and waiting longer for it would only delay the end and call it a forced one.
LEFTOVER_GRACE_S = 1.0
#: How often a wait for processes that are not our children looks at them again.
_POLL_S = 0.05


#: The stages of a stop once the polite wait (the ``stop`` message) is over.
BREAK, TERMINATE, KILL = "break", "terminate", "kill"


def stop_stages(platform: str) -> tuple[str, ...]:
    """What a stop tries, in order, after the runner ignored the polite ``stop`` message.

    Windows: ``CTRL_BREAK_EVENT`` to the runner's process group first (the runner turns it into
    a ``KeyboardInterrupt``, as Ctrl-C, and can still send its last steps and ``bye``:
    ``gpuwatch.runner.link.interrupt_on_break``); there is no SIGTERM to catch, so the next
    stage, ``TerminateProcess``, ends a process outright. POSIX: SIGTERM to the group, then
    SIGKILL."""
    return (BREAK, TERMINATE, KILL) if platform == "win32" else (TERMINATE, KILL)


@dataclass
class TreeSignals:
    """How ``end_tree`` reaches a process tree on ``platform`` (tests pass a recording fake)."""

    platform: str = field(default_factory=lambda: sys.platform)

    def interrupt(self, proc: subprocess.Popen) -> None:
        """``CTRL_BREAK_EVENT`` to the group ``proc`` leads (Windows; ``os.kill`` calls
        ``GenerateConsoleCtrlEvent`` for it). It reaches the group only through a console
        both share (``popen_group_options``): without one it fails, and the next stage goes on."""
        with contextlib.suppress(OSError):
            os.kill(proc.pid, getattr(signal, "CTRL_BREAK_EVENT", 1))

    def end(self, proc: subprocess.Popen, known: dict[int, psutil.Process], *, kill: bool) -> None:
        """SIGTERM/SIGKILL the group (POSIX), then every known process (terminate/kill)."""
        if self.platform != "win32":
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        for p in known.values():
            with contextlib.suppress(psutil.Error):
                p.kill() if kill else p.terminate()

    def members(self, pid: int) -> dict[int, psutil.Process]:
        """The tree of ``pid`` and, on POSIX, everything left in its process group: once the
        runner has died, its orphaned children are nobody's descendants but stay in the group.
        """
        return _members(pid, self.platform)


@dataclass(frozen=True)
class TreeEnd:
    """How ``end_tree`` ended a process tree.

    ``how`` is what the root (the runner) took: "polite" (it left by itself), "interrupted"
    (it left after ``CTRL_BREAK_EVENT``, Windows), "terminated" or "killed". ``leftovers``
    counts the processes it had started that were still running ``LEFTOVER_GRACE_S`` after it
    left by itself, which ``end_tree`` then ended.
    """

    how: str
    leftovers: int = 0


def end_tree(
    proc: subprocess.Popen,
    *,
    terminate_after: float,
    kill_after: float,
    leftover_grace: float = LEFTOVER_GRACE_S,
    on_escalate: Callable[[str], None] | None = None,
    signals: TreeSignals | None = None,
) -> TreeEnd:
    """Wait up to ``terminate_after`` for ``proc`` to leave by itself, then go through
    ``stop_stages`` (Windows: break, terminate, kill; POSIX: terminate, kill), ``kill_after``
    each; once ``proc`` has left by itself, what it leaves behind gets only ``leftover_grace``
    before it is ended the same way (terminate, then kill). On Windows the runner's Job
    Object is closed last, which ends anything still in it.

    ``on_escalate`` hears "terminated"/"killed" just *before* the signal goes out to a root
    that did not leave in time, so whoever reports the end knows it by the time the process
    is gone (leftovers never escalate: the run itself ended by itself; nor does the break,
    which still lets the runner end its own way). Descendants are collected before
    signalling: once the root is gone, orphaned DataLoader workers are no longer its children
    and could not be found (on POSIX its process group still finds them).
    """
    signals = signals if signals is not None else TreeSignals()
    waits = _Waits(terminate_after, kill_after, leftover_grace)
    try:
        return _end_tree(proc, waits, on_escalate, signals)
    finally:
        job = _jobs.pop(proc.pid, None)
        if job is not None:
            job.close()


@dataclass(frozen=True)
class _Waits:
    """``end_tree``'s three waits (seconds)."""

    terminate_after: float
    kill_after: float
    leftover_grace: float


def _end_tree(
    proc: subprocess.Popen,
    waits: _Waits,
    on_escalate: Callable[[str], None] | None,
    signals: TreeSignals,
) -> TreeEnd:
    kill_after, leftover_grace = waits.kill_after, waits.leftover_grace
    known = signals.members(proc.pid)
    if _wait_root(proc, waits.terminate_after):
        known.update(signals.members(proc.pid))
        return TreeEnd("polite", _end_leftovers(proc, known, leftover_grace, kill_after, signals))
    stages = stop_stages(signals.platform)
    if BREAK in stages:
        known.update(signals.members(proc.pid))
        signals.interrupt(proc)
        if _wait_root(proc, kill_after):
            known.update(signals.members(proc.pid))
            left = _end_leftovers(proc, known, leftover_grace, kill_after, signals)
            return TreeEnd("interrupted", left)
    if on_escalate is not None:
        on_escalate("terminated")
    known.update(signals.members(proc.pid))
    signals.end(proc, known, kill=False)
    if _wait(proc, kill_after, known):
        return TreeEnd("terminated")
    if on_escalate is not None:
        on_escalate("killed")
    known.update(signals.members(proc.pid))
    signals.end(proc, known, kill=True)
    _wait(proc, kill_after, known)
    return TreeEnd("killed")


def _end_leftovers(
    proc: subprocess.Popen,
    known: dict[int, psutil.Process],
    grace: float,
    kill_after: float,
    signals: TreeSignals,
) -> int:
    """The root has exited: give the rest ``grace``, then terminate, then kill what is left.
    Returns how many were still running after the grace."""
    rest = [p for p in known.values() if p.pid != proc.pid]
    left = _wait_gone(rest, grace)
    if not left:
        return 0
    signals.end(proc, {p.pid: p for p in left}, kill=False)
    still = _wait_gone(left, kill_after)
    if still:
        signals.end(proc, {p.pid: p for p in still}, kill=True)
        _wait_gone(still, kill_after)
    return len(left)


def _members(pid: int, platform: str) -> dict[int, psutil.Process]:
    members = {p.pid: p for p in tree(pid)}
    if platform != "win32":
        for p in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if p.pid not in members and p.pid != os.getpid() and os.getpgid(p.pid) == pid:
                    members[p.pid] = p
    return members


def _wait_root(proc: subprocess.Popen, timeout: float) -> bool:
    """True when ``proc`` has exited within ``timeout``."""
    try:
        proc.wait(timeout=max(0.0, timeout))
    except subprocess.TimeoutExpired:
        return False
    return True


def _wait(proc: subprocess.Popen, timeout: float, known: dict[int, psutil.Process]) -> bool:
    """True when the root has exited and no known descendant is alive within ``timeout``."""
    deadline = time.monotonic() + timeout
    if not _wait_root(proc, timeout):
        return False
    rest = [p for p in known.values() if p.pid != proc.pid]
    return not _wait_gone(rest, deadline - time.monotonic())


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of ``procs`` still running after at most ``timeout`` seconds (none: at once).

    They are not our children, so nothing here can reap them; a zombie counts as gone (it
    has ended: only its parent, or init for an orphan, can remove it, and where init does not
    reap, as in some containers, waiting for it would wait out every timeout)."""
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        alive = [p for p in procs if _running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(_POLL_S)


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe_exit(code: int | None) -> str:
    """A plain sentence for a runner's exit status."""
    if code is None:
        return "still running"
    if code == 0:
        return "exited normally"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"
