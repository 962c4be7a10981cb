"""The runner's end of the GUI link: JSON messages over ``multiprocessing.connection``.

Two threads keep the training loop away from the socket. A **sender** thread owns every
``send_bytes``: the loop only enqueues, so a slow or frozen GUI can never stall a training step
(step batches are dropped and counted when the bounded queue is full). A **reader** thread
receives control messages into ``controls``, which the loop drains at step boundaries. Only
``send_bytes``/``recv_bytes`` with ``gpuwatch.protocol`` JSON are used: ``recv()`` would unpickle
whatever the peer sent.

When the link breaks (GUI gone), ``lost`` is set so the loop stops by itself; if the process has
not finished ``grace_s`` later (stuck in a slow step), a watchdog terminates our DataLoader
workers and calls ``os._exit(0)``, so no orphan keeps running. Started by gpuwatch (leader of
its own session), the runner also ends the rest of its process group on the way out: nobody
else is left to do it.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import queue
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Client, Connection
from typing import Any

from gpuwatch.protocol import (
    AUTHKEY_ENV,
    GUI_KINDS,
    HARD_MESSAGE_BYTES,
    ProtocolError,
    decode,
    encode,
    fit_error,
)

#: Step batches waiting for the sender; at ~20 batches/s this is several seconds of backlog.
QUEUE_SIZE = 128
#: How long ``hello``, ``error`` or ``bye`` may wait for queue room.
PUT_TIMEOUT_S = 1.0
_TCP_ADDRESS = re.compile(r"^(?P<host>[\w.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")


class LinkError(Exception):
    """The link could not be set up (exit code 3): the text is the one line shown to users."""


def read_authkey(environ: Mapping[str, str]) -> bytes:
    """The hex authkey from ``GPUWATCH_AUTHKEY`` (a runner started by hand): never taken from
    argv (visible to others). gpuwatch itself passes it on stdin (``read_authkey_stdin``)."""
    value = environ.get(AUTHKEY_ENV)
    if not value:
        raise LinkError(f"{AUTHKEY_ENV} is not set: the runner must be started by gpuwatch")
    return _parse_key(value, AUTHKEY_ENV)


#: The key line is 64 hex digits; anything much longer is not a key.
_KEY_LINE_MAX = 1024


def read_authkey_stdin() -> bytes:
    """The hex authkey from the first line of stdin, which then becomes the null device.

    Read from the file descriptor (nothing is left in ``sys.stdin``'s buffer) before any of
    the user's code runs: the key is never in this process's environment, which would stay
    readable in ``/proc/self/environ`` whatever ``os.environ`` says, and a watched script's
    stdin is the null device, as gpuwatch always gave it.
    """
    data = b""
    try:
        while b"\n" not in data and len(data) < _KEY_LINE_MAX:
            chunk = os.read(0, _KEY_LINE_MAX - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise LinkError(f"cannot read the link's key from stdin: {exc}") from None
    finally:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    line = data.split(b"\n", 1)[0].decode("ascii", "replace")
    if not line.strip():
        raise LinkError("no key on stdin: the runner must be started by gpuwatch")
    return _parse_key(line, "the key on stdin")


def read_authkey_file(path: str) -> bytes:
    """The hex authkey from a file (a rank: ``protocol.AUTHKEY_FILE_FLAG``). The launcher
    runner wrote it into the run's private folder, which gpuwatch removes when the run ends."""
    try:
        with open(path, encoding="ascii") as file:
            line = file.readline(_KEY_LINE_MAX)
    except (OSError, UnicodeDecodeError) as exc:
        raise LinkError(f"cannot read the link's key from {path}: {exc}") from None
    return _parse_key(line, f"the key in {path}")


def write_authkey_file(folder: str, key: bytes) -> str:
    """Write ``key`` (hex) where the ranks a launcher starts read it, readable by its owner
    only; returns the file's path. It never replaces a file: a second launcher in the same
    folder is a mistake to report, not a key to overwrite."""
    path = os.path.join(folder, "ranks.key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as file:
        file.write(key.hex() + "\n")
    return path


def _parse_key(value: str, where: str) -> bytes:
    try:
        key = bytes.fromhex(value.strip())
    except ValueError:
        raise LinkError(f"{where} is not a hex string") from None
    if not key:
        raise LinkError(f"{where} is empty")
    return key


def parse_address(text: str) -> str | tuple[str, int]:
    """``HOST:PORT`` is TCP (a rank on another machine); anything else is a socket path or a
    Windows pipe name (``\\\\.\\pipe\\...``), which ``Client`` tells apart by itself."""
    match = _TCP_ADDRESS.match(text)
    if match and not os.path.exists(text):
        return match["host"].strip("[]"), int(match["port"])
    return text


class Link:
    """A connected link with its sender and reader threads (see the module docstring)."""

    def __init__(self, conn: Connection, *, grace_s: float = 3.0) -> None:
        self._conn = conn
        self._grace_s = grace_s
        self._out: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(QUEUE_SIZE)
        #: Decoded GUI messages, oldest first; drained by the loop between steps.
        self.controls: queue.Queue[dict[str, Any]] = queue.Queue()
        #: Set when the GUI end is gone; the loop then stops on its own.
        self.lost = threading.Event()
        self._closing = threading.Event()
        self._finished = threading.Event()
        self._dropped = 0
        self._drop_lock = threading.Lock()
        self._sender = threading.Thread(
            target=self._send_loop, name="gpuwatch-link-send", daemon=True
        )
        self._reader = threading.Thread(
            target=self._read_loop, name="gpuwatch-link-read", daemon=True
        )
        self._sender.start()
        self._reader.start()

    @classmethod
    def connect(cls, address: str, authkey: bytes) -> Link:
        """Connect and authenticate, or raise ``LinkError`` with a one-line reason."""
        try:
            conn = Client(parse_address(address), authkey=authkey)
        except multiprocessing.AuthenticationError:
            raise LinkError(
                f"authentication with gpuwatch at {address} failed (wrong {AUTHKEY_ENV})"
            ) from None
        except (OSError, EOFError, ValueError) as exc:
            raise LinkError(f"cannot connect to gpuwatch at {address}: {exc}") from None
        return cls(conn)

    def send(self, kind: str, **fields: Any) -> None:
        """Queue a message that should not be dropped (``hello``, ``error``, ``bye``): waits
        up to ``PUT_TIMEOUT_S`` for queue room, never for I/O. Not for use inside the loop."""
        if self.lost.is_set():
            return
        try:
            self._out.put((kind, fields), timeout=PUT_TIMEOUT_S)
        except queue.Full:
            self._count_drop()

    def send_batch(self, kind: str, **fields: Any) -> None:
        """Queue a message from the loop; if the GUI is behind, drop and count it, never wait.

        The count is reported in a ``log`` warning once the queue has room again.
        """
        if self.lost.is_set():
            return
        if self._dropped and self._out.qsize() < QUEUE_SIZE // 2:
            with self._drop_lock:
                dropped, self._dropped = self._dropped, 0
            self._put_nowait(
                "log",
                level="warning",
                text=f"dropped {dropped} message(s): the GUI did not keep up",
            )
        if not self._put_nowait(kind, **fields):
            self._count_drop()

    def log(self, level: str, text: str) -> None:
        """A ``log`` message; never waits (it is sent from the loop and the reader thread)."""
        self.send_batch("log", level=level, text=text)

    def close(self, timeout: float = 2.0) -> None:
        """Flush what is queued (up to ``timeout``), then close the connection."""
        self._closing.set()
        with contextlib.suppress(queue.Full):
            self._out.put(None, timeout=timeout)
        self._sender.join(timeout)
        self._shutdown_socket()
        self._conn.close()
        self._reader.join(timeout)

    def finished(self) -> None:
        """The process is about to exit normally: the watchdog must not kill it."""
        self._finished.set()

    def _shutdown_socket(self) -> None:
        """Wake the reader blocked in ``recv``: ``close()`` alone does not, and the blocked call
        keeps the socket open, so the GUI would see EOF only when the process exits.

        A Windows pipe has no socket (``fromfd`` fails); closing its handle cancels the read.
        """
        with contextlib.suppress(OSError, ValueError):
            sock = socket.fromfd(
                self._conn.fileno(),
                socket.AF_UNIX if hasattr(socket, "AF_UNIX") else socket.AF_INET,
                socket.SOCK_STREAM,
            )
            with sock:
                sock.shutdown(socket.SHUT_RDWR)

    def _count_drop(self) -> None:
        with self._drop_lock:
            self._dropped += 1

    def _put_nowait(self, kind: str, **fields: Any) -> bool:
        try:
            self._out.put_nowait((kind, fields))
        except queue.Full:
            return False
        return True

    def _send_loop(self) -> None:
        while (item := self._out.get()) is not None:
            kind, fields = item
            if kind == "error":  # a huge exception text must not cost its type and traceback
                fields = fit_error(fields)
            try:
                data = encode(kind, **fields)
            except ProtocolError as exc:  # a runner bug: say so on the link, keep going
                data = encode("log", level="error", text=f"runner could not encode: {exc}")
            try:
                self._conn.send_bytes(data)
            except (OSError, ValueError):
                if not self._closing.is_set():
                    self._on_lost()
                return

    def _read_loop(self) -> None:
        while True:
            try:
                data = self._conn.recv_bytes(HARD_MESSAGE_BYTES)
            except (EOFError, OSError, ValueError):  # ValueError: closed by us meanwhile
                if not self._closing.is_set():
                    self._on_lost()
                return
            try:
                message = decode(data, allowed=GUI_KINDS)
            except ProtocolError as exc:
                self.log("warning", f"dropped a malformed message from the GUI: {exc}")
                continue
            if message["kind"] == "ping":  # answered here, at once: the round trip is the clock
                self._put_nowait("pong", t=message["t"], clock_ns=time.perf_counter_ns())
                continue
            self.controls.put(message)

    def _on_lost(self) -> None:
        if self.lost.is_set():
            return
        self.lost.set()
        atexit.register(end_own_group)
        threading.Thread(target=self._watchdog, name="gpuwatch-link-watchdog", daemon=True).start()

    def _watchdog(self) -> None:
        if self._finished.wait(self._grace_s):
            return
        for child in multiprocessing.active_children():  # our DataLoader workers
            child.terminate()
        sys.stderr.write("gpuwatch runner: the GUI link closed; exiting\n")
        sys.stderr.flush()
        if leads_own_session():  # the group (with us) ends at once: nothing is left behind
            with contextlib.suppress(OSError):
                os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(0)


def leads_own_session(platform: str = sys.platform) -> bool:
    """True when gpuwatch started us as the leader of a new session (its launcher does, on
    POSIX): then our process group is ours alone, never a shell job's group with other
    members. Never on Windows, which has no sessions or ``killpg``: there the runner's Job
    Object (``gpuwatch.core.run.win_job``) ends its tree when the GUI goes."""
    return platform != "win32" and os.getsid(0) == os.getpid()


#: Windows' ``signal.SIGBREAK`` (the C runtime's number), spelled out for other OSes' tests.
SIGBREAK = getattr(signal, "SIGBREAK", 21)


def interrupt_on_break(platform: str = sys.platform, set_handler: Any = signal.signal) -> bool:
    """On Windows, make ``CTRL_BREAK_EVENT`` a ``KeyboardInterrupt`` in the main thread, as
    Ctrl-C is; returns whether a handler was set (only there, and from the main thread).

    A stop that the runner did not answer in time sends ``CTRL_BREAK_EVENT`` to its process
    group before it terminates it (``gpuwatch.core.run.launcher.stop_stages``): Windows has no
    SIGTERM, and Python's default for SIGBREAK ends the process at once, losing its last steps
    and ``bye``. Interrupted instead, the runner leaves through its usual stop path. A handler
    the script sets later still wins.
    """
    if platform != "win32" or threading.current_thread() is not threading.main_thread():
        return False
    set_handler(SIGBREAK, signal.default_int_handler)
    return True


def end_own_group() -> None:
    """At exit after the GUI went away: nobody else will end our process group, so a process
    the script started that does not watch its parent would outlive us. SIGTERM the group
    (ourselves excepted: we are exiting anyway)."""
    if not leads_own_session():
        return
    with contextlib.suppress(OSError, ValueError):  # ValueError: not the main thread
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(os.getpgrp(), signal.SIGTERM)
