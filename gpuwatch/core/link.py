"""GUI side of the authenticated local link to the runner (DESIGN §2).

A ``multiprocessing.connection`` Listener on an AF_UNIX socket inside a private 0700 temp
dir (a named pipe on Windows), authenticated with a random 32-byte key that reaches the
runner through its environment. Only ``send_bytes``/``recv_bytes`` with JSON payloads are
used: ``Connection.recv()`` would unpickle whatever the peer sent.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import secrets
import shutil
import socket
import struct
import sys
import tempfile
import threading
from multiprocessing.connection import (
    Client,
    Connection,
    Listener,
    answer_challenge,
    deliver_challenge,
)
from pathlib import Path
from typing import Any

import psutil

from gpuwatch import protocol

log = logging.getLogger(__name__)


def new_authkey() -> bytes:
    return secrets.token_bytes(32)


#: How long a connecting peer may take to answer the authentication challenge (POSIX).
HANDSHAKE_TIMEOUT_S = 5.0


class LinkListener:
    """Listens for exactly one runner; closes the listening endpoint once it is connected.

    On POSIX the challenge runs here, with a deadline: ``Listener.accept()`` would wait forever
    on a peer that connects and says nothing, and the real runner could never get in.
    """

    def __init__(self, private_dir: Path, authkey: bytes, *,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S) -> None:
        self.authkey = authkey
        self.handshake_timeout_s = handshake_timeout_s
        if sys.platform == "win32":
            self.address = rf"\\.\pipe\gpuwatch-{secrets.token_hex(12)}"
            self._listener: Listener | None = Listener(self.address, family="AF_PIPE",
                                                       authkey=authkey)
        else:
            self.address = str(private_dir / "link.sock")
            self._listener = Listener(self.address, family="AF_UNIX")
        self._closed = False

    def accept(self) -> Connection | None:
        """Block until an authenticated peer connects; None once ``close()`` was called.

        A peer with a wrong key is rejected, logged, and waited past.
        """
        while not self._closed and self._listener is not None:
            try:
                conn = self._listener.accept()
                if sys.platform != "win32":
                    self._authenticate(conn)
            except (OSError, EOFError) as exc:
                if self._closed:
                    return None
                if isinstance(exc, BlockingIOError):  # SO_RCVTIMEO ran out
                    exc = f"no answer to the challenge within {self.handshake_timeout_s:g} s"
                log.warning("link: rejected a connection (%s)", exc)
                continue
            except Exception as exc:  # AuthenticationError and friends
                log.warning("link: rejected an unauthenticated connection (%s)", exc)
                continue
            if self._closed:  # the wake-up connection from close()
                conn.close()
                return None
            self._close_listener()
            return conn
        return None

    def _authenticate(self, conn: Connection) -> None:
        """The challenge ``Listener`` would run, bounded by ``handshake_timeout_s``.

        A receive timeout on the socket makes a silent peer's read fail (OSError), so the
        wait ends; the timeout is lifted again for the accepted runner.
        """
        try:
            _set_receive_timeout(conn, self.handshake_timeout_s)
            deliver_challenge(conn, self.authkey)
            answer_challenge(conn, self.authkey)
            _set_receive_timeout(conn, 0.0)
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        """Stop listening; wakes a thread blocked in ``accept()``."""
        if self._closed:
            return
        self._closed = True
        self._wake_accept()
        self._close_listener()

    def _wake_accept(self) -> None:
        """Listener.accept() cannot be interrupted portably: connect to ourselves.

        The wake-up peer must never block the caller (nobody may be accepting), so on POSIX
        it is a plain socket that connects and hangs up; on Windows a pipe client in a
        daemon thread.
        """
        if sys.platform == "win32":
            def knock() -> None:
                with contextlib.suppress(Exception):
                    Client(self.address, authkey=self.authkey).close()
            threading.Thread(target=knock, name="gpuwatch-link-wake", daemon=True).start()
            return
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(1.0)
            sock.connect(self.address)

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.close()


class Link:
    """An accepted connection that speaks protocol messages."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._send_lock = threading.Lock()

    def send(self, kind: str, **fields: Any) -> bool:
        """Send one GUI→runner message; False if the link is gone.

        Thread-safe: the window sends ``set`` while the stop thread may send ``stop``, and two
        interleaved ``send_bytes`` would corrupt the stream.
        """
        data = protocol.encode(kind, **fields)
        try:
            with self._send_lock:
                self._conn.send_bytes(data)
        except (OSError, ValueError):
            return False
        return True

    def recv(self) -> dict[str, Any]:
        """Next valid runner message. Raises EOFError when the link is closed or broken,
        ProtocolError for a message that must be dropped (the link stays usable)."""
        try:
            data = self._conn.recv_bytes(protocol.HARD_MESSAGE_BYTES)
        except (OSError, EOFError) as exc:
            raise EOFError(str(exc)) from exc
        return protocol.decode(data, allowed=protocol.RUNNER_KINDS)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.close()


def _set_receive_timeout(conn: Connection, seconds: float) -> None:
    """SO_RCVTIMEO on the connection's socket (0: none); plain reads then fail when it
    runs out, which a ``settimeout`` (a non-blocking socket) would break."""
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)


#: Private directories are named ``gpuwatch-<pid>-<random>`` after the process that made them.
PRIVATE_PREFIX = "gpuwatch-"
_STALE_NAME = re.compile(rf"^{PRIVATE_PREFIX}(\d+)-[\w]+$")
_live_dirs: set[Path] = set()
_live_lock = threading.Lock()


def private_dir() -> Path:
    """A fresh directory only this user can enter (mkdtemp creates it 0700).

    It is removed by ``remove_private_dir`` when its run ends, or when this interpreter exits
    (a Ctrl-C, an error in the GUI); what a killed process left is removed by the next one
    (``remove_stale_private_dirs``).
    """
    remove_stale_private_dirs()
    path = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-"))
    with _live_lock:
        _live_dirs.add(path)
    return path


def remove_private_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    with _live_lock:
        _live_dirs.discard(path)


@atexit.register
def _remove_live_dirs() -> None:
    with _live_lock:
        paths = list(_live_dirs)
    for path in paths:
        remove_private_dir(path)


def remove_stale_private_dirs(folder: Path | None = None) -> list[Path]:
    """Remove the private directories of gpuwatch processes that no longer exist (killed with
    ``kill -9``: nothing of theirs ran at exit); returns what was removed. Only our own
    user's directories are touched, and never one of a live process."""
    base = Path(folder or tempfile.gettempdir())
    removed = []
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            match = _STALE_NAME.match(entry.name)
            if match is None or _pid_alive(int(match[1])):
                continue
            with contextlib.suppress(OSError):
                if entry.is_dir() and not entry.is_symlink() and _owned_by_us(entry):
                    shutil.rmtree(entry, ignore_errors=True)
                    removed.append(entry)
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        return psutil.pid_exists(pid)
    except Exception:  # cannot tell: keep the directory
        return True


def _owned_by_us(path: Path) -> bool:
    getuid = getattr(os, "getuid", None)
    return getuid is None or path.stat().st_uid == getuid()
