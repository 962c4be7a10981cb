"""Every other ``sys.platform == "win32"`` branch in gpuwatch/, tested on any OS.

The link's address family (AF_PIPE on Windows) and how a pipe reads frames, the runner's end
(no session or killpg on Windows; CTRL_BREAK_EVENT becomes a KeyboardInterrupt), a script's
``sys.path[0]`` (symbolic links kept on Windows), the C++ compiler inductor calls, and how
commands are quoted for the user's shell. The launcher's branches are in
test_platform_launcher.py, the Job Object's in test_platform_win_job.py.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuwatch import protocol
from gpuwatch.commands.nsight_command import gpuwatch_argv, nsight_command
from gpuwatch.core.run import interpreters
from gpuwatch.core.run.link import Link, OversizedMessage, link_address
from gpuwatch.core.run.session import LaunchSpec
from gpuwatch.runner import link as runner_link
from gpuwatch.runner.availability import cpp_compiler
from gpuwatch.runner.script_environment import script_path_entry


def test_the_link_is_a_named_pipe_on_windows_and_a_private_socket_elsewhere(
    tmp_path: Path,
) -> None:
    address, family = link_address("win32", tmp_path, "0a1b2c")
    assert (address, family) == (r"\\.\pipe\gpuwatch-0a1b2c", "AF_PIPE")
    for platform in ("linux", "darwin"):
        assert link_address(platform, tmp_path, "0a1b2c") == (
            str(tmp_path / "link.sock"),
            "AF_UNIX",
        )


def test_the_runner_takes_a_pipe_name_as_it_is() -> None:
    """A pipe name is no ``HOST:PORT``: ``Client`` gets it as it is and picks AF_PIPE."""
    assert runner_link.parse_address(r"\\.\pipe\gpuwatch-0a1b2c") == r"\\.\pipe\gpuwatch-0a1b2c"
    assert runner_link.parse_address("127.0.0.1:5000") == ("127.0.0.1", 5000)


class PipeConnection:
    """A ``Connection`` over a Windows pipe as ``Link`` sees it: ``recv_bytes`` only."""

    def __init__(self, outcome: bytes | BaseException) -> None:
        self.outcome = outcome
        self.limits: list[int | None] = []

    def fileno(self) -> int:
        raise AssertionError("a pipe handle has no file descriptor to read frames from")

    def recv_bytes(self, maxlength: int | None = None) -> bytes:
        self.limits.append(maxlength)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def test_a_pipe_link_reads_messages_through_recv_bytes_with_the_hard_limit() -> None:
    message = protocol.encode("log", level="info", text="hello from the runner")
    conn = PipeConnection(message)
    received = Link(conn, pipe=True).recv()  # type: ignore[arg-type]
    assert received["kind"] == "log" and received["text"] == "hello from the runner"
    assert conn.limits == [protocol.HARD_MESSAGE_BYTES]


def test_a_pipe_link_turns_an_oversized_or_broken_pipe_into_the_end_of_the_link() -> None:
    """Over the limit, ``recv_bytes`` says only "bad message length" (no size): the link
    ends with the oversize sentence; any other pipe error is the end of the link."""
    with pytest.raises(OversizedMessage) as over:
        Link(PipeConnection(OSError("bad message length")), pipe=True).recv()  # type: ignore[arg-type]
    assert over.value.size is None and "a message, over the" in str(over.value)
    with pytest.raises(EOFError) as broken:
        Link(PipeConnection(OSError(109, "The pipe has been ended")), pipe=True).recv()  # type: ignore[arg-type]
    assert not isinstance(broken.value, OversizedMessage)


def test_the_pipe_default_follows_the_platform() -> None:
    link = Link(PipeConnection(b""))  # type: ignore[arg-type]
    assert link._pipe is (sys.platform == "win32")


def test_a_windows_runner_never_leads_a_session_or_ends_a_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Windows has no ``getsid``/``killpg``: the runner's Job Object ends its tree there."""

    def no_getsid(_pid: int) -> int:
        raise AssertionError("os.getsid does not exist on Windows")

    monkeypatch.setattr(runner_link.os, "getsid", no_getsid, raising=False)
    assert runner_link.leads_own_session("win32") is False


def test_ctrl_break_becomes_a_keyboard_interrupt_on_windows_only() -> None:
    handlers: list[tuple[int, Any]] = []

    def set_handler(number: int, handler: Any) -> None:
        handlers.append((number, handler))

    assert runner_link.interrupt_on_break("linux", set_handler) is False
    assert handlers == []
    assert runner_link.interrupt_on_break("win32", set_handler) is True
    assert handlers == [(runner_link.SIGBREAK, signal.default_int_handler)]
    assert getattr(signal, "SIGBREAK", 21) == runner_link.SIGBREAK
    with pytest.raises(KeyboardInterrupt):
        handlers[0][1](runner_link.SIGBREAK, None)


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")
def test_a_scripts_path_entry_keeps_symbolic_links_on_windows_only(tmp_path: Path) -> None:
    """CPython resolves symbolic links for ``sys.path[0]`` on POSIX, not on Windows."""
    real = tmp_path / "real dir é"
    real.mkdir()
    (real / "s.py").write_text("", encoding="utf-8")
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    script = str(tmp_path / "alias" / "s.py")
    assert script_path_entry(script, "linux") == str(real)
    assert script_path_entry(script, "win32") == str(tmp_path / "alias")


@pytest.mark.parametrize(
    ("platform", "environ", "compiler"),
    [
        ("win32", {}, "cl"),
        ("darwin", {}, "clang++"),
        ("linux", {}, "g++"),
        ("win32", {"CXX": "clang-cl"}, "clang-cl"),
    ],
)
def test_the_cpp_compiler_inductor_would_call(
    platform: str, environ: dict[str, str], compiler: str
) -> None:
    assert cpp_compiler(platform, environ) == compiler


def test_the_nsight_command_is_quoted_for_the_users_shell() -> None:
    spec = LaunchSpec(
        script=r"C:\Users\Zoë\my runs\train.py",
        script_args=("--name", "a b"),
        device="cuda",
        python=r"C:\Program Files\Python312\python.exe",
    )
    gpuwatch = [r"C:\Program Files\gpuwatch\gpuwatch-cli.exe"]
    windows = nsight_command(spec, gpuwatch, windows=True)
    assert r'"C:\Program Files\gpuwatch\gpuwatch-cli.exe" run --headless' in windows
    assert r'"C:\Users\Zoë\my runs\train.py" -- --name "a b"' in windows
    posix = nsight_command(spec, gpuwatch, windows=False)
    assert shlex.split(posix)[-3:] == ["--", "--name", "a b"]


def test_the_nsight_command_starts_the_frozen_app_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gpuwatch_argv() == [sys.executable, "-m", "gpuwatch"]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert gpuwatch_argv() == [sys.executable]


def test_a_pasteable_command_is_quoted_for_windows_there(monkeypatch: pytest.MonkeyPatch) -> None:
    python = r"C:\Users\Zoë Smith\venv\Scripts\python.exe"
    monkeypatch.setattr(sys, "platform", "win32")
    windows = interpreters.command(python, "-m", "pip", "install", "torch")
    monkeypatch.setattr(sys, "platform", "linux")
    posix = interpreters.command(python, "-m", "pip", "install", "torch")
    assert windows == subprocess.list2cmdline([python, "-m", "pip", "install", "torch"])
    assert windows.startswith(f'"{python}" ')
    assert shlex.split(posix)[0] == python
