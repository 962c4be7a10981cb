"""GUI side of the authenticated local link to the runner (docs/design.md, "Lifecycle").

A ``multiprocessing.connection`` Listener on an AF_UNIX socket inside a private 0700 temp
dir (a named pipe, AF_PIPE, on Windows: ``link_address``), authenticated with a random 32-byte
key that reaches the runner on its stdin. Only ``send_bytes``/``recv_bytes`` with JSON payloads
are used: ``Connection.recv()`` would unpickle whatever the peer sent.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
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
    """A fresh random key that authenticates one run's link."""
    return secrets.token_bytes(32)


#: How long a connecting peer may take for the whole authentication challenge (POSIX).
HANDSHAKE_TIMEOUT_S = 5.0
#: Challenges run at once; more connections wait in the socket's backlog meanwhile (each
#: pending challenge ends within ``HANDSHAKE_TIMEOUT_S``, so the wait is bounded too).
MAX_PENDING_HANDSHAKES = 32


def link_address(platform: str, private_dir: Path, token: str) -> tuple[str, str]:
    """Where the runner connects on ``platform``, and the ``multiprocessing.connection`` family.

    Windows has no AF_UNIX in ``multiprocessing.connection``: a named pipe (AF_PIPE, in the
    local machine's ``pipe`` namespace) whose name holds ``token``, which nobody can guess.
    Elsewhere a socket file in ``private_dir``, which only this user can enter.
    """
    if platform == "win32":
        return rf"\\.\pipe\gpuwatch-{token}", "AF_PIPE"
    return str(private_dir / "link.sock"), "AF_UNIX"


class LinkListener:
    """Listens for one runner and closes the listening endpoint once it is connected; with
    ``many`` it goes on accepting authenticated peers (the ranks a torchrun runner starts)
    until ``close()``.

    On POSIX every connection gets its own challenge thread with a deadline on the *whole*
    challenge (a timer shuts its socket down), so neither a peer that connects and says
    nothing nor one that answers a byte at a time holds up the real runner: it is accepted as
    soon as it has answered, whatever other local connections are doing. A Windows pipe
    listener runs the challenge itself, inside ``accept`` (its pipe has no socket to put a
    deadline on).
    """

    def __init__(
        self,
        private_dir: Path,
        authkey: bytes,
        *,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        many: bool = False,
        tcp: tuple[str, int] | None = None,
    ) -> None:
        self.authkey = authkey
        self.many = many
        self.handshake_timeout_s = handshake_timeout_s
        address: str | tuple[str, int]
        if tcp is not None:  # ranks on other machines (``--listen``): the key is the token
            address, self.family = tcp, "AF_INET"
        else:
            address, self.family = link_address(sys.platform, private_dir, secrets.token_hex(12))
        self._pipe = self.family == "AF_PIPE"
        self._listener: Listener | None = Listener(
            address, family=self.family, authkey=authkey if self._pipe else None
        )
        self._bound: Any = self._listener.address  # a path, a pipe name, or (host, port)
        #: Where peers connect: a socket path, a pipe name, or (TCP) ``HOST:PORT`` as bound.
        self.address: str = (
            f"{self._bound[0]}:{self._bound[1]}" if tcp is not None else str(self._bound)
        )
        self._closed = False
        self._lock = threading.Lock()
        self._accepted: queue.Queue[Connection | None] = queue.Queue()
        self._slots = threading.BoundedSemaphore(MAX_PENDING_HANDSHAKES)
        self._accept_thread: threading.Thread | None = None

    def accept(self) -> Connection | None:
        """Block until an authenticated peer connects; None once ``close()`` was called.

        A peer with a wrong key, or none within the deadline, is rejected, logged, and
        waited past.
        """
        with self._lock:
            if self._accept_thread is None and not self._closed:
                self._accept_thread = threading.Thread(
                    target=self._accept_loop, name="gpuwatch-link-accept", daemon=True
                )
                self._accept_thread.start()
        return self._accepted.get()

    def _accept_loop(self) -> None:
        while not self._closed:
            if not self._slots.acquire(timeout=0.2):
                continue
            listener = self._listener
            try:
                if listener is None:
                    return
                conn = listener.accept()
            except (OSError, EOFError) as exc:
                self._slots.release()
                if self._closed:
                    return
                log.warning("link: rejected a connection (%s)", exc)
                continue
            except Exception as exc:  # Windows: AuthenticationError and friends
                self._slots.release()
                log.warning("link: rejected an unauthenticated connection (%s)", exc)
                continue
            if self._closed:  # the wake-up connection from close()
                self._slots.release()
                conn.close()
                return
            if self._pipe:  # the listener ran the challenge already
                self._slots.release()
                self._won(conn)
                if self.many:
                    continue
                return
            threading.Thread(
                target=self._challenge, args=(conn,), daemon=True, name="gpuwatch-link-challenge"
            ).start()

    def _challenge(self, conn: Connection) -> None:
        """The challenge ``Listener`` would run, bounded as a whole by the deadline."""
        try:
            with _Deadline(conn, self.handshake_timeout_s) as deadline:
                try:
                    deliver_challenge(conn, self.authkey)
                    answer_challenge(conn, self.authkey)
                except (OSError, EOFError) as exc:
                    reason: object = exc
                    if deadline.expired:
                        reason = f"no answer to the challenge within {self.handshake_timeout_s:g} s"
                    log.warning("link: rejected a connection (%s)", reason)
                    conn.close()
                    return
                except Exception as exc:  # AuthenticationError and friends
                    log.warning("link: rejected an unauthenticated connection (%s)", exc)
                    conn.close()
                    return
                if not deadline.finish():
                    log.warning(
                        "link: rejected a connection (no answer to the challenge within %g s)",
                        self.handshake_timeout_s,
                    )
                    conn.close()
                    return
        finally:
            self._slots.release()
        self._won(conn)

    def _won(self, conn: Connection) -> None:
        """The first authenticated peer is the runner: hand it out, stop listening (unless
        ``many``: then every authenticated peer is handed out in turn)."""
        with self._lock:
            if self._closed:
                conn.close()
                return
            if self.many:
                self._accepted.put(conn)
                return
            self._closed = True
        self._wake_accept()
        self._close_listener()  # before the runner is handed out: nobody else gets in after it
        self._accepted.put(conn)

    def close(self) -> None:
        """Stop listening; wakes a thread blocked in ``accept()``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._accepted.put(None)
        self._wake_accept()
        self._close_listener()

    def _wake_accept(self) -> None:
        """Listener.accept() cannot be interrupted portably: connect to ourselves.

        The wake-up peer must never block the caller (nobody may be accepting), so on POSIX
        it is a plain socket that connects and hangs up; on Windows a pipe client in a
        daemon thread.
        """
        if self._pipe:

            def knock() -> None:
                with contextlib.suppress(Exception):
                    Client(self.address, authkey=self.authkey).close()

            threading.Thread(target=knock, name="gpuwatch-link-wake", daemon=True).start()
            return
        family = socket.AF_INET if self.family == "AF_INET" else socket.AF_UNIX
        with contextlib.suppress(OSError), socket.socket(family) as sock:
            sock.settimeout(1.0)
            sock.connect(self._bound)

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.close()


class Link:
    """An accepted connection that speaks protocol messages.

    ``pipe``: the connection is a Windows pipe handle (the default there), which has no file
    descriptor to read frames from; ``recv_bytes`` then reads them and names no size.
    """

    def __init__(self, conn: Connection, *, pipe: bool | None = None) -> None:
        self._conn = conn
        self._pipe = sys.platform == "win32" if pipe is None else pipe
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
        """Next valid runner message. Raises EOFError when the link is closed or broken
        (``OversizedMessage`` for a message over the hard limit), ProtocolError for a
        message that must be dropped (the link stays usable)."""
        try:
            if self._pipe:  # a pipe handle: no fd to read frames from
                data = self._conn.recv_bytes(protocol.HARD_MESSAGE_BYTES)
            else:
                data = _read_frame(self._conn.fileno(), protocol.HARD_MESSAGE_BYTES)
        except EOFError:
            raise
        except OSError as exc:
            if "bad message length" in str(exc):  # Windows: over the limit, size unknown
                raise OversizedMessage(None) from exc
            raise EOFError(str(exc)) from exc
        return protocol.decode(data, allowed=protocol.RUNNER_KINDS)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.close()


class _Deadline:
    """Shuts a connection's socket down once ``seconds`` have passed, unless ``finish()`` came
    first: a read blocked in the challenge then ends (EOF), however the peer trickles bytes."""

    def __init__(self, conn: Connection, seconds: float) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._done = False
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def finish(self) -> bool:
        """The challenge is over: True if in time (the socket is then left alone)."""
        with self._lock:
            self._done = True
            return not self.expired

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
        with (
            contextlib.suppress(OSError),
            socket.socket(fileno=os.dup(self._conn.fileno())) as sock,
        ):
            sock.shutdown(socket.SHUT_RDWR)


MiB = 1024 * 1024


class OversizedMessage(EOFError):
    """The runner sent a message over ``protocol.HARD_MESSAGE_BYTES``: the link cannot go on
    (the rest of the stream is that message), and the user must be told why it ended."""

    def __init__(self, size: int | None) -> None:
        self.size = size
        limit = protocol.HARD_MESSAGE_BYTES // MiB
        what = f"a message of {size / MiB:,.0f} MiB" if size is not None else "a message"
        super().__init__(
            f"the runner sent {what}, over the {limit} MiB limit: gpuwatch "
            f"closed the link, so the run stopped (a runner bug, or something "
            f"else writing to the link)"
        )


def _read_frame(fd: int, limit: int) -> bytes:
    """One ``Connection.send_bytes`` frame read straight from the socket (POSIX), so that a
    frame over ``limit`` is refused with its size (``recv_bytes`` says only "bad message
    length"). The header: 4-byte big-endian size, or -1 and an 8-byte size."""
    size = struct.unpack("!i", _read_exact(fd, 4))[0]
    if size == -1:
        size = struct.unpack("!Q", _read_exact(fd, 8))[0]
    if size < 0:
        raise EOFError(f"bad message length {size}")
    if size > limit:
        raise OversizedMessage(size)
    return _read_exact(fd, size)


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, MiB))
        if not chunk:
            raise EOFError("the link was closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


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
    """Delete a ``private_dir`` and stop tracking it for the cleanup at exit."""
    shutil.rmtree(path, ignore_errors=True)
    with _live_lock:
        _live_dirs.discard(path)


@atexit.register
def _remove_live_dirs() -> None:
    """At exit, every private directory of this process: the tracked ones, and any a Ctrl-C
    caught between ``mkdtemp`` and its tracking (named after this process, so only ours)."""
    with _live_lock:
        paths = list(_live_dirs)
    with contextlib.suppress(OSError):
        paths += Path(tempfile.gettempdir()).glob(f"{PRIVATE_PREFIX}{os.getpid()}-*")
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
