"""The launcher's Windows and POSIX branches, both tested on any OS (core/run/launcher.py).

Each OS decision is a function of the platform: the runner's process-group options and
creation flags, the stop's stages in order (CTRL_BREAK_EVENT, terminate, kill on Windows),
the break itself, the bootloader's DLL directory undone for a frozen GUI's external Python,
and the command that Python gets. docs/platforms.md says what only Windows can show.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuwatch.core.run import launcher
from gpuwatch.core.run.launcher import (
    CREATE_NEW_PROCESS_GROUP,
    CREATE_NO_WINDOW,
    TreeEnd,
    TreeSignals,
    end_tree,
    popen_group_options,
    stop_stages,
)


def test_the_creation_flags_are_microsofts_values() -> None:
    """Process creation flags as documented (and as ``subprocess`` has them on Windows)."""
    assert CREATE_NEW_PROCESS_GROUP == 0x00000200
    assert CREATE_NO_WINDOW == 0x08000000
    if sys.platform == "win32":
        assert subprocess.CREATE_NEW_PROCESS_GROUP == CREATE_NEW_PROCESS_GROUP
        assert subprocess.CREATE_NO_WINDOW == CREATE_NO_WINDOW


@pytest.mark.parametrize(
    ("platform", "console", "options"),
    [
        ("win32", True, {"creationflags": 0x00000200}),
        ("win32", False, {"creationflags": 0x00000200 | 0x08000000}),
        ("linux", True, {"start_new_session": True}),
        ("darwin", False, {"start_new_session": True}),
    ],
    ids=["windows-console", "windows-windowed-gui", "linux", "macos"],
)
def test_the_runner_leads_its_own_group_and_a_windowed_gui_hides_its_console(
    platform: str, console: bool, options: dict[str, Any]
) -> None:
    assert popen_group_options(platform, has_console=console) == options


def test_the_stop_stages_in_order() -> None:
    assert stop_stages("win32") == ("break", "terminate", "kill")
    assert stop_stages("linux") == ("terminate", "kill")
    assert stop_stages("darwin") == ("terminate", "kill")


class StubbornProc:
    """A ``Popen`` stand-in whose process leaves only at the stage named ``leaves_at``."""

    pid = 4242

    def __init__(self, leaves_at: str | None) -> None:
        self.leaves_at = leaves_at
        self.gone = False
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if not self.gone:
            raise subprocess.TimeoutExpired("runner", timeout or 0.0)
        return 0


@dataclass
class RecordingSignals(TreeSignals):
    """Records each stage instead of signalling; the process leaves at its stage."""

    proc: StubbornProc | None = None
    done: list[str] = field(default_factory=list)

    def _reached(self, stage: str) -> None:
        self.done.append(stage)
        if self.proc is not None and self.proc.leaves_at == stage:
            self.proc.gone = True

    def interrupt(self, proc: Any) -> None:
        self._reached("break")

    def end(self, proc: Any, known: dict[int, psutil.Process], *, kill: bool) -> None:
        self._reached("kill" if kill else "terminate")

    def members(self, pid: int) -> dict[int, psutil.Process]:
        return {}


@pytest.mark.parametrize(
    ("platform", "leaves_at", "stages", "how", "heard"),
    [
        ("win32", "break", ["break"], "interrupted", []),
        ("win32", "terminate", ["break", "terminate"], "terminated", ["terminated"]),
        ("win32", None, ["break", "terminate", "kill"], "killed", ["terminated", "killed"]),
        ("linux", "terminate", ["terminate"], "terminated", ["terminated"]),
        ("linux", None, ["terminate", "kill"], "killed", ["terminated", "killed"]),
    ],
)
def test_a_stop_escalates_in_the_platforms_order(
    platform: str, leaves_at: str | None, stages: list[str], how: str, heard: list[str]
) -> None:
    proc = StubbornProc(leaves_at)
    signals = RecordingSignals(platform=platform, proc=proc)
    escalations: list[str] = []
    end = end_tree(
        proc,  # type: ignore[arg-type]
        terminate_after=0.0,
        kill_after=0.0,
        leftover_grace=0.0,
        on_escalate=escalations.append,
        signals=signals,
    )
    assert signals.done == stages
    assert end == TreeEnd(how)
    assert escalations == heard, "the break is no escalation: the runner still ends its way"


def test_a_runner_that_leaves_politely_gets_no_signal() -> None:
    proc = StubbornProc(None)
    proc.gone = True
    signals = RecordingSignals(platform="win32", proc=proc)
    end = end_tree(proc, terminate_after=1.0, kill_after=0.0, signals=signals)  # type: ignore[arg-type]
    assert end == TreeEnd("polite") and signals.done == []


def test_the_break_is_ctrl_break_event_to_the_runners_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``os.kill(pid, CTRL_BREAK_EVENT)`` is how Python calls GenerateConsoleCtrlEvent for the
    group ``pid`` leads; it fails without a shared console, and the stop goes on."""
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(launcher.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    TreeSignals(platform="win32").interrupt(StubbornProc(None))  # type: ignore[arg-type]
    assert sent == [(4242, getattr(signal, "CTRL_BREAK_EVENT", 1))]

    def refuse(pid: int, sig: int) -> None:
        raise OSError(6, "The handle is invalid")

    monkeypatch.setattr(launcher.os, "kill", refuse)
    TreeSignals(platform="win32").interrupt(StubbornProc(None))  # type: ignore[arg-type]


def test_windows_ends_processes_one_by_one_without_killpg(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    groups: list[int] = []
    monkeypatch.setattr(launcher.os, "killpg", lambda pid, sig: groups.append(pid), raising=False)

    @dataclass
    class Member:
        pid: int
        ended: list[str] = field(default_factory=list)

        def terminate(self) -> None:
            self.ended.append("terminate")

        def kill(self) -> None:
            self.ended.append("kill")

    members = {1: Member(1), 2: Member(2)}
    TreeSignals(platform="win32").end(StubbornProc(None), members, kill=False)  # type: ignore[arg-type]
    assert groups == [] and [m.ended for m in members.values()] == [["terminate"]] * 2
    TreeSignals(platform="linux").end(StubbornProc(None), members, kill=True)  # type: ignore[arg-type]
    assert groups == [4242] and [m.ended for m in members.values()] == [["terminate", "kill"]] * 2


class FakeKernel32:
    def __init__(self) -> None:
        self.calls: list[object] = []

    def SetDllDirectoryW(self, path: object) -> int:
        self.calls.append(path)
        return 1


@pytest.mark.parametrize(
    ("platform", "frozen", "undone"),
    [("win32", True, True), ("win32", False, False), ("linux", True, False)],
)
def test_a_frozen_windows_gui_undoes_the_bootloaders_dll_directory(
    platform: str, frozen: bool, undone: bool
) -> None:
    """PyInstaller's bootloader calls SetDllDirectoryW, which children inherit; a training
    Python started by the frozen app must load its own DLLs: SetDllDirectoryW(NULL)."""
    k = FakeKernel32()
    assert launcher.prepare_frozen_children(platform=platform, frozen=frozen, kernel32=k) is undone
    assert k.calls == ([None] if undone else [])


def test_the_frozen_gui_starts_the_chosen_python_with_its_bundled_runner_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Frozen, ``sys.executable`` is the app: never the trainer; the runner's plain source
    comes from the bundle, and the command survives Windows' quoting with spaces and
    non-ASCII characters."""
    bundle = tmp_path / "Program Files" / "gpuwatch ü" / "_internal"
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    with pytest.raises(launcher.NoInterpreterError):
        launcher.default_python()
    python = r"C:\Users\Zoë Smith\venvs\torch env\Scripts\python.exe"
    root = launcher.runner_pythonpath(python, tmp_path / "private")
    assert root == str(bundle.resolve() / launcher.FROZEN_RUNNER_SOURCE)
    cmd = launcher.script_command(
        python,
        r"\\.\pipe\gpuwatch-0123",
        r"D:\my runs\train é.py",
        ["--lr", "0.1 0.2"],
        device="cpu",
        root=root,
    )
    assert cmd[0] == python and cmd[1] == "-c"
    line = subprocess.list2cmdline(cmd)
    assert f'"{python}"' in line and r'"D:\my runs\train é.py"' in line
    assert _windows_argv(line) == cmd, "CreateProcess's parsing gives the same argv back"


def _windows_argv(line: str) -> list[str]:
    """Split a command line as the MSVC runtime does (the rules ``list2cmdline`` follows:
    https://learn.microsoft.com/en-us/cpp/c-language/parsing-c-command-line-arguments)."""
    args: list[str] = []
    current: list[str] = []
    quoted = in_arg = False
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            j = i
            while j < len(line) and line[j] == "\\":
                j += 1
            n = j - i
            if j < len(line) and line[j] == '"':
                current.append("\\" * (n // 2))
                if n % 2:
                    current.append('"')
                    j += 1
                i, in_arg = j, True
                continue
            current.append("\\" * n)
            i, in_arg = j, True
            continue
        if c == '"':
            quoted, in_arg = not quoted, True
        elif c in " \t" and not quoted:
            if in_arg:
                args.append("".join(current))
                current, in_arg = [], False
        else:
            current.append(c)
            in_arg = True
        i += 1
    if in_arg:
        args.append("".join(current))
    return args


def test_a_frozen_guis_environment_is_cleaned_for_the_training_python(tmp_path: Path) -> None:
    """The bundle's folders leave every path list; PyInstaller's own variables go."""
    bundle = tmp_path / "gpuwatch app"
    sep = launcher.os.pathsep
    env = launcher.clean_env(
        {
            "PATH": sep.join([str(bundle), "/usr/bin", str(bundle / "sub")]),
            "LD_LIBRARY_PATH": str(bundle),
            "LD_LIBRARY_PATH_ORIG": "/opt/cuda/lib64",
            "_PYI_APPLICATION_HOME_DIR": str(bundle),
            "PYTHONHOME": str(bundle),
            "HOME": "/home/zoë",
        },
        bundle=bundle,
    )
    assert env == {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/cuda/lib64", "HOME": "/home/zoë"}
