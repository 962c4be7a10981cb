"""``gpuwatch run --connect HOST:PORT --token T -m torch.distributed.run …`` on another node.

A window (or a headless run) on the first machine watches a job of several machines: it
listens on TCP (``--listen``) and prints a token. On every other node this command runs
torchrun in the training Python (the runner's ``--ranks-only`` mode) with every rank it starts
connecting to that window, keyed by the token. Nothing of this node's run is shown here:
torchrun's own output and its exit code are this command's. The token reaches the runner on
its stdin, never on a command line.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from gpuwatch import protocol
from gpuwatch.core.run import launcher, link

#: How long the node's torchrun may take to end its ranks after Ctrl-C before it is killed.
INTERRUPT_WAIT_S = 30.0


class RemoteRanksError(ValueError):
    """A bad ``--connect``/``--token``: one sentence."""


@dataclass(frozen=True)
class RemoteRanks:
    """Where the window listens, its token, and what to run here (torchrun's arguments)."""

    address: str
    token: str
    torchrun_args: tuple[str, ...]
    python: str | None = None
    device: str = "auto"
    cwd: str | None = None


def check_token(token: str) -> str:
    """The token as the window printed it (hex); a mistyped one is refused here, not by a
    failed handshake on the other machine."""
    text = token.strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise RemoteRanksError(
            "--token is the hex string the window printed with its --listen address"
        ) from None
    if len(key) < 16:
        raise RemoteRanksError("--token is too short: copy the whole token the window printed")
    return text


def run_remote_ranks(remote: RemoteRanks) -> int:
    """Run torchrun here with its ranks sent to the window; torchrun's exit code."""
    token = check_token(remote.token)
    python = remote.python or launcher.default_python()
    folder = link.private_dir()
    try:
        root = launcher.runner_pythonpath(python, folder)
        cmd = [
            python,
            "-c",
            protocol.boot_code(root),
            "--connect",
            remote.address,
            protocol.AUTHKEY_STDIN_FLAG,
            "--ranks-only",
            "--module",
            protocol.TORCHRUN_MODULES[0],
            "--device",
            remote.device,
            "--",
            *remote.torchrun_args,
        ]
        return _run(cmd, token, remote.cwd, launcher.runner_env())
    finally:
        link.remove_private_dir(folder)


def _run(cmd: Sequence[str], token: str, cwd: str | None, env: dict[str, str]) -> int:
    """Start it in this terminal's process group (Ctrl-C reaches torchrun as it would), give
    it the token, wait for it."""
    proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, cwd=cwd, env=env)
    try:
        if proc.stdin is not None:
            proc.stdin.write(f"{token}\n".encode("ascii"))
            proc.stdin.close()
        return proc.wait()
    except KeyboardInterrupt:
        try:
            return proc.wait(INTERRUPT_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
    except BrokenPipeError:  # it exited before reading the token: its message says why
        return proc.wait()


def describe_failure(code: int) -> str | None:
    """A line for stderr when torchrun here did not end well (None when it did)."""
    if code == 0:
        return None
    return f"gpuwatch: torchrun on this node exited with code {code}"


def main_remote(remote: RemoteRanks, err: TextIO | None = None) -> int:
    """The command: one line on bad input (exit 2), torchrun's exit code otherwise."""
    err = err if err is not None else sys.stderr
    try:
        code = run_remote_ranks(remote)
    except (RemoteRanksError, launcher.NoInterpreterError) as exc:
        err.write(f"gpuwatch run: {exc}\n")
        return 2
    line = describe_failure(code)
    if line:
        err.write(line + "\n")
    return code
