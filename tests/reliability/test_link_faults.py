"""The link: only the authkey holder gets in, bad messages are dropped without
crashing either side, a protocol mismatch is said plainly, and nobody else can reach it."""

from __future__ import annotations

import logging
import os
import socket
import stat
import sys
import threading
import time

import psutil
import pytest
from waiting import wait_until

from gpuwatch.core.run import link
from gpuwatch.core.run.session import DROPS_LOGGED, LaunchSpec, Session, SessionState

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="AF_UNIX sockets")


@pytest.fixture
def listening(tmp_path):
    """A listener with a short handshake deadline, accepting on a thread."""
    private = link.private_dir()
    lst = link.LinkListener(private, link.new_authkey(), handshake_timeout_s=1.0)
    accepted: list = []
    thread = threading.Thread(target=lambda: accepted.append(lst.accept()), daemon=True)
    thread.start()
    yield lst, accepted, thread
    lst.close()
    for conn in accepted:
        if conn is not None:
            conn.close()
    link.remove_private_dir(private)


def test_a_silent_or_babbling_plain_socket_is_rejected_logged_and_the_runner_still_gets_in(
    listening, caplog
) -> None:
    from multiprocessing.connection import Client

    lst, accepted, thread = listening
    caplog.set_level(logging.WARNING, logger="gpuwatch.core.run.link")
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(lst.address)  # connects and never answers the challenge
    wait_until(lambda: "no answer to the challenge" in caplog.text, 10, "the silent peer dropped")
    babbler = socket.socket(socket.AF_UNIX)
    babbler.connect(lst.address)
    babbler.sendall(b"\x00\x00\x00\x05hello")
    wait_until(lambda: caplog.text.count("rejected") >= 2, 10, "the babbling peer rejected")
    assert thread.is_alive() and not accepted, "no plain socket gets a connection"
    runner = Client(lst.address, authkey=lst.authkey)
    thread.join(10)
    assert accepted and accepted[0] is not None, "the real runner is accepted afterwards"
    runner.close()
    silent.close()
    babbler.close()


def test_the_link_is_a_private_unix_socket_and_nothing_listens_on_tcp(fake_python) -> None:
    session = Session(sample_coarse=False)
    try:
        session.start(LaunchSpec(workload="rate:100", device="cpu", python=fake_python))
        wait_until(
            lambda: session.steps.count > 0 or session.state is SessionState.FAILED,
            30,
            "steps from the fake runner",
        )
        address = session._listener.address  # the socket the runner connected to
        folder = os.path.dirname(address)
        info = os.stat(folder)
        assert stat.S_IMODE(info.st_mode) == 0o700, "only this user can reach the socket"
        assert info.st_uid == os.getuid()
        assert not os.path.exists(address), "the socket file is removed once the runner is in"
        me = psutil.Process()
        inet = [c for c in me.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        assert inet == [], "gpuwatch never listens on TCP (unreachable from other machines)"
    finally:
        session.close()


def test_a_second_client_cannot_connect(fake_python) -> None:
    from multiprocessing.connection import Client

    session = Session(sample_coarse=False)
    try:
        session.start(LaunchSpec(workload="rate:100", device="cpu", python=fake_python))
        wait_until(lambda: session.steps.count > 0, 30, "steps from the fake runner")
        with pytest.raises(OSError):  # the listening socket is gone after the first runner
            Client(session._listener.address, authkey=b"any key")
        assert session.state is SessionState.RUNNING
    finally:
        session.close()


def test_malformed_wrong_typed_unknown_oversized_and_flooded_messages_are_dropped(
    fake_python,
) -> None:
    session = Session(sample_coarse=False)
    try:
        session.start(LaunchSpec(workload="garbage", device="cpu", python=fake_python))
        wait_until(
            lambda: session.steps.count == 10 or session.state is SessionState.FAILED,
            60,
            "the good steps after the garbage",
        )
        assert session.state is SessionState.RUNNING, session.error
        assert session.dropped_messages == 8 + 20_000
        log = [line.text for line in session.drain_log()]
        dropped = [t for t in log if t.startswith("dropped a message from the runner")]
        assert any("not JSON" in t for t in dropped)
        assert any("unknown message kind 'launch_missiles'" in t for t in dropped)
        assert any("unexpected message kind 'stop'" in t for t in dropped)
        assert any("exceeds" in t for t in dropped)
        assert len(dropped) <= DROPS_LOGGED + 20_008 // 1000, "a flood does not flood the log"
        session.stop()
        assert session.wait_ended(30)
        assert session.state is SessionState.FINISHED, session.error
        assert session.bye_reason == "stopped", "the link still worked after all that"
    finally:
        session.close()


def test_a_truncated_message_ends_the_link_and_keeps_the_steps(fake_python) -> None:
    session = Session(sample_coarse=False)
    try:
        session.start(LaunchSpec(workload="truncated", device="cpu", python=fake_python))
        assert session.wait_ended(30)
        assert session.steps.count == 5
        assert session.state is SessionState.FINISHED, session.error
    finally:
        session.close()


def test_a_protocol_mismatch_is_one_clear_message(fake_python) -> None:
    session = Session(sample_coarse=False)
    try:
        session.start(LaunchSpec(workload="v99", device="cpu", python=fake_python))
        assert session.wait_ended(30)
        assert session.state is SessionState.FAILED
        assert session.error == (
            "the runner speaks protocol 99, this gpuwatch speaks 1: "
            "install the same gpuwatch version in the training environment"
        )
    finally:
        session.close()


def test_a_flood_from_the_gui_side_neither_blocks_nor_breaks_the_runner_link() -> None:
    """The runner's reader drops junk (logging a bounded number of warnings) and keeps going."""
    from multiprocessing.connection import Client

    from gpuwatch import protocol
    from gpuwatch.runner.link import Link as RunnerLink

    private = link.private_dir()
    lst = link.LinkListener(private, link.new_authkey())
    accepted: list = []
    thread = threading.Thread(target=lambda: accepted.append(lst.accept()), daemon=True)
    thread.start()
    runner = RunnerLink(Client(lst.address, authkey=lst.authkey))
    thread.join(10)
    gui = link.Link(accepted[0])
    try:
        started = time.monotonic()
        for _ in range(5_000):
            accepted[0].send_bytes(b"{junk")
        assert gui.send("stop")
        wait_until(lambda: not runner.controls.empty(), 30, "the stop after the flood")
        assert runner.controls.get()["kind"] == "stop"
        assert not runner.lost.is_set()
        assert time.monotonic() - started < 30
        warnings = 0
        while True:  # the runner said what it dropped, without queueing 5,000 warnings
            try:
                message = gui.recv()
            except protocol.ProtocolError:
                continue
            if message["kind"] == "log":
                warnings += 1
            if warnings and not accepted[0].poll(0.5):
                break
        assert 0 < warnings <= 5_000
    finally:
        runner.finished()
        runner.close()
        gui.close()
        lst.close()
        link.remove_private_dir(private)
