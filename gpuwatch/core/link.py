"""GUI side of the authenticated local link to the runner (DESIGN §2).

A ``multiprocessing.connection`` Listener on an AF_UNIX socket inside a private 0700 temp
dir (a named pipe on Windows), authenticated with a random 32-byte key that reaches the
runner through its environment. Only ``send_bytes``/``recv_bytes`` with JSON payloads are
used: ``Connection.recv()`` would unpickle whatever the peer sent.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import shutil
import socket
import sys
import tempfile
import threading
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from gpuwatch import protocol

log = logging.getLogger(__name__)


def new_authkey() -> bytes:
    return secrets.token_bytes(32)


class LinkListener:
    """Listens for exactly one runner; closes the listening endpoint once it is connected."""

    def __init__(self, private_dir: Path, authkey: bytes) -> None:
        self.authkey = authkey
        if sys.platform == "win32":
            self.address = rf"\\.\pipe\gpuwatch-{secrets.token_hex(12)}"
            family = "AF_PIPE"
        else:
            self.address = str(private_dir / "link.sock")
            family = "AF_UNIX"
        self._listener: Listener | None = Listener(self.address, family=family,
                                                   authkey=authkey)
        self._closed = False

    def accept(self) -> Connection | None:
        """Block until an authenticated peer connects; None once ``close()`` was called.

        A peer with a wrong key is rejected, logged, and waited past.
        """
        while not self._closed and self._listener is not None:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError) as exc:
                if self._closed:
                    return None
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


def private_dir() -> Path:
    """A fresh directory only this user can enter (mkdtemp creates it 0700)."""
    return Path(tempfile.mkdtemp(prefix="gpuwatch-"))


def remove_private_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
