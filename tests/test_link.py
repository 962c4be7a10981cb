"""The GUI side of the link: authenticated peers only, one runner, JSON only."""

from __future__ import annotations

import sys
import threading
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client

import pytest

from gpuwatch import protocol
from gpuwatch.core.run import link

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="AF_UNIX paths on POSIX")


@pytest.fixture
def listener(tmp_path):
    lst = link.LinkListener(tmp_path, link.new_authkey())
    yield lst
    lst.close()


def _accept_in_thread(lst: link.LinkListener) -> tuple[threading.Thread, list]:
    out: list = []
    t = threading.Thread(target=lambda: out.append(lst.accept()), daemon=True)
    t.start()
    return t, out


def test_private_dir_is_owner_only() -> None:
    d = link.private_dir()
    try:
        assert d.stat().st_mode & 0o777 == 0o700
    finally:
        link.remove_private_dir(d)


def test_wrong_key_is_rejected_and_right_key_accepted(listener) -> None:
    t, out = _accept_in_thread(listener)
    with pytest.raises(AuthenticationError):
        Client(listener.address, authkey=b"wrong" * 6)
    assert t.is_alive(), "a wrong key must not end the wait for the real runner"
    good = Client(listener.address, authkey=listener.authkey)
    t.join(5)
    assert out and out[0] is not None
    lnk = link.Link(out[0])
    good.send_bytes(protocol.encode("log", level="info", text="hi"))
    assert lnk.recv()["text"] == "hi"
    good.close()
    out[0].close()


def test_only_one_runner_is_accepted(listener) -> None:
    t, out = _accept_in_thread(listener)
    first = Client(listener.address, authkey=listener.authkey)
    t.join(5)
    with pytest.raises(OSError):  # the listening socket is gone after the first peer
        Client(listener.address, authkey=listener.authkey)
    first.close()
    out[0].close()


def test_close_wakes_a_blocked_accept(listener) -> None:
    t, out = _accept_in_thread(listener)
    listener.close()
    t.join(5)
    assert not t.is_alive()
    assert out == [None]


def test_link_drops_bad_messages_and_keeps_going(listener) -> None:
    t, out = _accept_in_thread(listener)
    peer = Client(listener.address, authkey=listener.authkey)
    t.join(5)
    lnk = link.Link(out[0])

    def send_all() -> None:  # in a thread: the oversized one fills the socket buffer
        peer.send_bytes(b"{not json")
        peer.send_bytes(protocol.encode("stop"))  # a GUI-only kind from the runner side
        peer.send_bytes(b"x" * (protocol.MAX_MESSAGE_BYTES + 10))
        peer.send_bytes(protocol.encode("bye", reason="stopped"))

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    for _ in range(3):
        with pytest.raises(protocol.ProtocolError):
            lnk.recv()
    assert lnk.recv()["kind"] == "bye"
    sender.join(5)
    peer.close()
    with pytest.raises(EOFError):
        lnk.recv()
    lnk.close()


def test_never_unpickles(listener) -> None:
    """A pickle payload is just malformed JSON to us."""
    import pickle

    t, out = _accept_in_thread(listener)
    peer = Client(listener.address, authkey=listener.authkey)
    t.join(5)
    peer.send_bytes(pickle.dumps({"kind": "bye", "reason": "x"}))
    with pytest.raises(protocol.ProtocolError):
        link.Link(out[0]).recv()
    peer.close()
    out[0].close()
