"""Start the runner as a fresh interpreter in its own process group, and end its whole tree.

Spawn semantics only (a new interpreter, never fork): the GUI process holds Qt and threads,
and CUDA cannot live in a forked child. The runner gets its own session/process group
(a new process group on Windows) so stop reaches DataLoader workers too.
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
from dataclasses import dataclass
from pathlib import Path

import psutil

import gpuwatch
from gpuwatch import protocol

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


def boot_code(root: str) -> str:
    """``python -c`` source that runs ``gpuwatch.runner`` from the folder ``root``.

    The script a runner watches must see the environment and ``sys.path`` of a plain
    ``python SCRIPT`` (docs/design.md, Lifecycle), so nothing goes on ``PYTHONPATH``: the
    boot puts ``root`` in front of ``sys.path`` to import our ``gpuwatch`` package, and for
    a script the runner moves it to the end before anything else is imported
    (``gpuwatch.runner.script_environment.settle_source_root``). A built-in workload keeps it
    in front, so its forkserver/spawn workers import the same ``gpuwatch`` as the runner.
    """
    return (
        f"import sys; sys.path.insert(0, {root!r}); "
        f"from gpuwatch.runner.cli import main; sys.exit(main(source_root={root!r}))"
    )


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
    return [
        python,
        "-c",
        boot_code(root),
        "--connect",
        address,
        protocol.AUTHKEY_STDIN_FLAG,
        "--script",
        script,
        "--device",
        device,
        *extra,
        "--",
        *script_args,
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


def prepare_frozen_children() -> None:
    """Undo the bootloader's ``SetDllDirectoryW`` (inherited by children) on Windows, so a
    training Python loads its own DLLs; nothing to do elsewhere or from a source install."""
    if is_frozen() and sys.platform == "win32":
        import ctypes

        ctypes.windll.kernel32.SetDllDirectoryW(None)


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


def spawn(
    cmd: list[str], env: dict[str, str], cwd: str | None = None, *, authkey: bytes | None = None
) -> subprocess.Popen:
    """Start ``cmd`` as the leader of a new process group, stdout+stderr merged to a pipe.

    With ``authkey`` its stdin is a pipe holding the key's hex and a newline, then closed (the
    runner reads that line and puts ``os.devnull`` in its place, so a watched script's stdin
    is the null device either way); without it, stdin is the null device.
    """
    kwargs: dict = {}
    if sys.platform == "win32":
        kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP
    else:
        kwargs["start_new_session"] = True
    stdin = subprocess.DEVNULL if authkey is None else subprocess.PIPE
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=cwd,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        **kwargs,
    )
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


@dataclass(frozen=True)
class TreeEnd:
    """How ``end_tree`` ended a process tree.

    ``how`` is what the root (the runner) took: "polite" (it left by itself), "terminated" or
    "killed". ``leftovers`` counts the processes it had started that were still running
    ``LEFTOVER_GRACE_S`` after it left by itself, which ``end_tree`` then ended.
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
) -> TreeEnd:
    """Wait up to ``terminate_after`` for ``proc`` to leave by itself, then terminate, then
    kill its whole tree; once ``proc`` has left by itself, what it leaves behind gets only
    ``leftover_grace`` before it is ended the same way (terminate, then kill).

    ``on_escalate`` hears "terminated"/"killed" just *before* the signal goes out to a root
    that did not leave in time, so whoever reports the end knows it by the time the process
    is gone (leftovers never escalate: the run itself ended by itself). Descendants are
    collected before signalling: once the root is gone, orphaned DataLoader workers are no
    longer its children and could not be found (on POSIX its process group still finds them).
    """
    known = _members(proc.pid)
    if _wait_root(proc, terminate_after):
        known.update(_members(proc.pid))
        return TreeEnd("polite", _end_leftovers(proc, known, leftover_grace, kill_after))
    if on_escalate is not None:
        on_escalate("terminated")
    known.update(_members(proc.pid))
    _signal_all(proc, known, kill=False)
    if _wait(proc, kill_after, known):
        return TreeEnd("terminated")
    if on_escalate is not None:
        on_escalate("killed")
    known.update(_members(proc.pid))
    _signal_all(proc, known, kill=True)
    _wait(proc, kill_after, known)
    return TreeEnd("killed")


def _end_leftovers(
    proc: subprocess.Popen, known: dict[int, psutil.Process], grace: float, kill_after: float
) -> int:
    """The root has exited: give the rest ``grace``, then terminate, then kill what is left.
    Returns how many were still running after the grace."""
    rest = [p for p in known.values() if p.pid != proc.pid]
    left = _wait_gone(rest, grace)
    if not left:
        return 0
    _signal_all(proc, {p.pid: p for p in left}, kill=False)
    still = _wait_gone(left, kill_after)
    if still:
        _signal_all(proc, {p.pid: p for p in still}, kill=True)
        _wait_gone(still, kill_after)
    return len(left)


def _members(pid: int) -> dict[int, psutil.Process]:
    """The tree of ``pid`` and, on POSIX, everything left in its process group: once the
    runner has died, its orphaned children are nobody's descendants but stay in the group."""
    members = {p.pid: p for p in tree(pid)}
    if sys.platform != "win32":
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


def _signal_all(proc: subprocess.Popen, known: dict[int, psutil.Process], kill: bool) -> None:
    if sys.platform != "win32":
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
    for p in known.values():
        with contextlib.suppress(psutil.Error):
            p.kill() if kill else p.terminate()


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
