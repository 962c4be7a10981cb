"""The runner's link: in-process against a Pipe, and a real runner subprocess against a real
``multiprocessing.connection.Listener`` (AF_UNIX in a private temp dir, authkey in the env)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing import AuthenticationError, Pipe
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.protocol import AUTHKEY_ENV, N_MARKS, PROTOCOL_VERSION, RUNNER_KINDS, decode, encode
from gpuwatch.runner.link import Link, LinkError, parse_address, read_authkey

REPO = Path(__file__).resolve().parents[1]
KEY = bytes(range(32))
#: A runner whose link closed ends by itself well within this, even on a loaded machine.
RUNNER_ENDS_S = 60
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="AF_UNIX listener")

Message = dict[str, Any]


# --- in-process: the Link class over a Pipe ------------------------------------------------


def read_all(conn: Connection, out: list[Message]) -> None:
    """Collect every message until the other end closes."""
    while True:
        try:
            out.append(decode(conn.recv_bytes(), allowed=RUNNER_KINDS))
        except (EOFError, OSError):
            return


def test_slow_gui_never_blocks_sending_and_drops_are_counted() -> None:
    ours, gui = Pipe()
    link = Link(ours, grace_s=60)
    rows = [[n] * N_MARKS for n in range(2000)]  # ~100 kB per message
    sent = 0
    received: list[Message] = []
    drain = threading.Thread(target=read_all, args=(gui, received))
    try:
        start = time.perf_counter()
        for _ in range(300):  # nobody reads: the socket buffer and then the queue fill up
            link.send_batch(
                "steps", step=list(range(2000)), config=[0] * 2000, samples=[1] * 2000, host=rows
            )
            sent += 1
        assert time.perf_counter() - start < 10  # enqueueing never waited for the GUI
        drain.start()  # the GUI catches up; the next batch reports what was dropped
        deadline = time.monotonic() + 20
        while not any(m["kind"] == "log" for m in received) and time.monotonic() < deadline:
            link.send_batch("steps", step=[0], config=[0], samples=[1], host=[[0] * N_MARKS])
            sent += 1
            time.sleep(0.01)
        link.close()
        drain.join(timeout=20)
    finally:
        link.finished()
        gui.close()
    warnings = [m["text"] for m in received if m["kind"] == "log"]
    assert len(warnings) == 1 and warnings[0].startswith("dropped ")
    dropped = int(warnings[0].split()[1])
    assert dropped > 0
    # Every batch either arrived or was counted (batches queued after the report may arrive).
    assert sum(m["kind"] == "steps" for m in received) + dropped == sent


def test_reader_drops_malformed_messages_and_queues_controls() -> None:
    ours, gui = Pipe()
    link = Link(ours, grace_s=60)
    try:
        gui.send_bytes(b"{not json")
        gui.send_bytes(encode("bye", reason="stopped"))  # a runner kind: not for us
        gui.send_bytes(encode("pause"))
        assert link.controls.get(timeout=5) == {"kind": "pause"}
        for _ in range(2):
            assert gui.poll(5)
            message = decode(gui.recv_bytes(), allowed=RUNNER_KINDS)
            assert message["level"] == "warning"
            assert message["text"].startswith("dropped a malformed message from the GUI")
        assert not link.lost.is_set()
        gui.close()  # the GUI goes away
        assert link.lost.wait(5)
    finally:
        link.finished()
        gui.close()
        link.close(timeout=1)


def test_authkey_and_address_parsing() -> None:
    assert read_authkey({AUTHKEY_ENV: "00ff"}) == b"\x00\xff"
    with pytest.raises(LinkError, match="not set"):
        read_authkey({})
    assert parse_address("/tmp/x/link.sock") == "/tmp/x/link.sock"
    assert parse_address(r"\\.\pipe\gpuwatch-1") == r"\\.\pipe\gpuwatch-1"
    assert parse_address("127.0.0.1:7777") == ("127.0.0.1", 7777)
    assert parse_address("[::1]:7777") == ("::1", 7777)


# --- a real runner subprocess --------------------------------------------------------------


@contextmanager
def listening(key: bytes = KEY) -> Iterator[tuple[Listener, str]]:
    with tempfile.TemporaryDirectory(prefix="gw-") as private:  # 0700, short AF_UNIX path
        address = os.path.join(private, "link.sock")
        listener = Listener(address, family="AF_UNIX", authkey=key)
        try:
            yield listener, address
        finally:
            listener.close()


@contextmanager
def runner(address: str, *args: str, key: bytes = KEY) -> Iterator[subprocess.Popen[str]]:
    env = dict(os.environ, PYTHONPATH=str(REPO), **{AUTHKEY_ENV: key.hex()})
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch.runner", "--connect", address, "--device", "cpu", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def accept(listener: Listener, timeout: float = 30) -> Connection:
    """``accept`` has no timeout: wait for it on a thread (a dead runner must fail the test)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(_accept(listener)), daemon=True)
    thread.start()
    thread.join(timeout)
    assert result, "the runner never connected"
    if isinstance(result[0], BaseException):
        raise result[0]
    connection: Connection = result[0]
    return connection


def _accept(listener: Listener) -> Connection | BaseException:
    try:
        return listener.accept()
    except (AuthenticationError, OSError, EOFError) as exc:
        return exc


class Inbox:
    """Reads and validates the runner's messages; every wait has a deadline."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.messages: list[Message] = []

    def next(self, timeout: float) -> Message | None:
        if not self.conn.poll(timeout):
            return None
        message = decode(self.conn.recv_bytes(), allowed=RUNNER_KINDS)
        self.messages.append(message)
        return message

    def until(self, wanted: Callable[[Message], bool], timeout: float = 30) -> Message:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            message = self.next(left)
            if message is not None and wanted(message):
                return message
        raise AssertionError(f"no such message within {timeout} s; got {self.messages[-5:]}")

    def kinds_within(self, seconds: float) -> list[str]:
        deadline = time.monotonic() + seconds
        kinds = []
        while (left := deadline - time.monotonic()) > 0:
            message = self.next(left)
            if message is not None:
                kinds.append(message["kind"])
        return kinds

    def steps(self) -> tuple[list[int], list[list[int]]]:
        batches = [m for m in self.messages if m["kind"] == "steps"]
        return ([s for m in batches for s in m["step"]], [r for m in batches for r in m["host"]])


def is_log(text: str) -> Callable[[Message], bool]:
    return lambda m: m["kind"] == "log" and text in m["text"]


def is_kind(kind: str) -> Callable[[Message], bool]:
    return lambda m: m["kind"] == kind


def test_round_trip_hello_steps_controls_and_stop() -> None:
    with listening() as (listener, address), runner(address) as proc:
        inbox = Inbox(accept(listener))
        hello = inbox.next(timeout=60)
        assert hello is not None and hello["kind"] == "hello"  # first, and valid
        assert hello["protocol"] == PROTOCOL_VERSION and hello["pid"] == proc.pid
        assert hello["workload"] == "vision" and hello["timing"] == "host"
        assert hello["device"]["kind"] == "cpu" and hello["device"]["cores"] >= 1
        assert [k["name"] for k in hello["knobs"]][:2] == ["num_workers", "pin_memory"]
        assert hello["config"]["id"] == 0 and hello["config"]["values"]["num_workers"] == 0
        assert hello["batch_size"] == hello["config"]["values"]["batch_size"]
        assert hello["workload_config"]["image_size"] == 64 and hello["os"]
        inbox.until(lambda m: m["kind"] == "steps" and m["step"][-1] >= 2)

        inbox.conn.send_bytes(b"\x00garbage")
        inbox.until(is_log("dropped a malformed message from the GUI"))
        inbox.conn.send_bytes(encode("set", values={"batch_size": 16}, request=5))
        config = inbox.until(is_kind("config"))
        assert config["id"] == 1 and config["request"] == 5
        assert config["changed"] == {"batch_size": 16} and config["rebuilt"] == ["loader"]
        later = inbox.until(lambda m: m["kind"] == "steps" and m["step"][-1] > config["first_step"])
        assert later["samples"][-1] == 16 and later["config"][-1] == 1

        inbox.conn.send_bytes(encode("pause"))
        inbox.until(is_log("paused after"))
        assert "steps" not in inbox.kinds_within(0.5)  # nothing runs while paused
        inbox.conn.send_bytes(encode("resume"))
        inbox.until(is_kind("steps"))

        inbox.conn.send_bytes(encode("stop"))
        assert inbox.until(is_kind("bye"))["reason"] == "stopped"
        assert proc.wait(timeout=20) == 0
        ids, rows = inbox.steps()
        assert ids == list(range(len(ids)))
        marks = [mark for row in rows for mark in row]
        assert marks == sorted(marks)
        assert all(len(row) == N_MARKS for row in rows)
        assert all(m["kind"] != "error" for m in inbox.messages)


def test_gui_closing_the_link_ends_a_training_runner() -> None:
    with listening() as (listener, address), runner(address) as proc:
        inbox = Inbox(accept(listener))
        inbox.until(is_kind("steps"), timeout=60)
        inbox.conn.close()
        # Ends by itself (a lingering runner fails the wait); how fast is the machine's matter.
        assert proc.wait(timeout=RUNNER_ENDS_S) == 0


def test_gui_closing_the_link_during_startup_ends_the_runner() -> None:
    """Closed while the runner imports torch (the main thread is busy): the watchdog exits."""
    with listening() as (listener, address), runner(address) as proc:
        accept(listener).close()
        assert proc.wait(timeout=RUNNER_ENDS_S) == 0


def test_wrong_authkey_exits_3() -> None:
    with listening() as (listener, address), runner(address, key=b"not the key") as proc:
        with pytest.raises(AuthenticationError):
            accept(listener)
        assert proc.wait(timeout=20) == 3
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        assert stderr.strip().count("\n") == 0 and "authentication" in stderr
