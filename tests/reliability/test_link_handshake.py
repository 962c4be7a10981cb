"""Other local connections cannot hold the real runner out of the link, and a huge
exception text reaches the GUI as an ``error`` with its type and traceback."""

from __future__ import annotations

import logging
import socket
import sys
import threading
from multiprocessing.connection import Client

import pytest
from waiting import wait_until

from gpuwatch import protocol
from gpuwatch.core.run import link

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="AF_UNIX sockets")


@pytest.fixture
def listening():
    """A listener accepting on a thread; ``make(timeout)`` starts it with that deadline."""
    made: list = []

    def make(handshake_timeout_s: float):
        private = link.private_dir()
        lst = link.LinkListener(
            private, link.new_authkey(), handshake_timeout_s=handshake_timeout_s
        )
        accepted: list = []
        thread = threading.Thread(target=lambda: accepted.append(lst.accept()), daemon=True)
        thread.start()
        made.append((lst, accepted, private))
        return lst, accepted

    yield make
    for lst, accepted, private in made:
        lst.close()
        for conn in accepted:
            if conn is not None:
                conn.close()
        link.remove_private_dir(private)


def connect_runner(address: str, authkey: bytes) -> list:
    """The real runner's connection attempt, on a thread (it blocks until accepted)."""
    result: list = []
    threading.Thread(
        target=lambda: result.append(Client(address, authkey=authkey)), daemon=True
    ).start()
    return result


def test_silent_connections_do_not_delay_the_runner(listening, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="gpuwatch.core.run.link")
    lst, accepted = listening(60.0)  # longer than this test may wait: nothing times out
    silent = []
    for _ in range(6):
        peer = socket.socket(socket.AF_UNIX)
        peer.connect(lst.address)
        silent.append(peer)
    runner = connect_runner(lst.address, lst.authkey)
    wait_until(lambda: accepted and runner, 30, "the runner accepted past six silent peers")
    assert accepted[0] is not None
    assert "no answer" not in caplog.text, "none of the silent peers had to time out first"
    for peer in silent:
        peer.close()
    runner[0].close()


def test_a_peer_answering_a_byte_at_a_time_is_cut_at_the_deadline(listening, caplog) -> None:
    """The deadline bounds the whole challenge, not each read."""
    caplog.set_level(logging.WARNING, logger="gpuwatch.core.run.link")
    lst, accepted = listening(1.0)
    dripping = threading.Event()
    cut = threading.Event()

    def drip() -> None:
        with socket.socket(socket.AF_UNIX) as peer:
            peer.connect(lst.address)
            answer = b"\x00\x00\x00\xc8" + b"x" * 200  # a frame header, then its bytes
            for byte in answer:
                try:
                    peer.sendall(bytes([byte]))
                except OSError:
                    break
                dripping.set()
                if cut.wait(0.2):  # one byte every 0.2 s: no single read waits 1 s
                    break

    threading.Thread(target=drip, daemon=True).start()
    wait_until(dripping.is_set, 10, "the dripping peer connected")
    wait_until(
        lambda: "no answer to the challenge within 1 s" in caplog.text,
        20,
        "the dripping peer cut at its deadline (it would drip for 40 s)",
    )
    cut.set()
    runner = connect_runner(lst.address, lst.authkey)
    wait_until(lambda: accepted and runner, 30, "the runner accepted")
    assert accepted[0] is not None
    runner[0].close()


def test_a_huge_exception_text_keeps_its_type_and_traceback() -> None:
    """The runner's sender cuts the message (saying so) instead of dropping the ``error``."""
    from gpuwatch.runner.link import Link as RunnerLink

    private = link.private_dir()
    lst = link.LinkListener(private, link.new_authkey())
    accepted: list = []
    thread = threading.Thread(target=lambda: accepted.append(lst.accept()), daemon=True)
    thread.start()
    runner = RunnerLink(Client(lst.address, authkey=lst.authkey))
    thread.join(30)
    gui = link.Link(accepted[0])
    huge = "x" * 10_000_000
    trace = (
        'Traceback (most recent call last):\n  File "train.py", line 7, in <module>\n'
        '    step(batch)\n  File "train.py", line 3, in step\n    raise RuntimeError(msg)\n'
        f"RuntimeError: {huge}\n"
    )
    try:
        runner.send("error", type="RuntimeError", message=huge, traceback=trace)
        message = gui.recv()
    finally:
        runner.finished()
        runner.close()
        gui.close()
        lst.close()
        link.remove_private_dir(private)
    assert message["kind"] == "error", message.get("text")
    assert message["type"] == "RuntimeError"
    assert len(message["message"]) <= protocol.MAX_ERROR_MESSAGE_CHARS
    assert (
        message["message"].startswith("xxx") and "characters cut by gpuwatch" in message["message"]
    )
    lines = message["traceback"].splitlines()
    assert lines[:5] == trace.splitlines()[:5], "every frame is kept"
    assert lines[5].startswith("RuntimeError: xxx") and "characters cut" in lines[5]
