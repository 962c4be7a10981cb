"""Record a Session's run to one SQLite file (tables in docs/recording-format.md).

The link thread only enqueues (``Session.add_listener``); a dedicated writer thread commits
batches every ``flush_s`` (or ``BATCH_ROWS`` messages) in WAL mode, so a crash or kill of the
GUI or the runner loses at most the batch being collected. Nothing is ever written on the
GUI thread after ``start`` or in the runner. Values are plain JSON text: a recording never
holds anything that must be unpickled or evaluated to be read.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import math
import os
import platform
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from gpuwatch import __version__
from gpuwatch.core.model.messages import ConfigChange, RankInfo
from gpuwatch.core.model.metrics import rank_metric
from gpuwatch.core.model.store import MetricStatus, SeriesStore, StepsView
from gpuwatch.core.run.session import Session

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
SUFFIX = ".gpuwatch"
#: Messages queued for the writer; beyond this they are dropped (and counted), never blocked on.
QUEUE_SIZE = 20_000
#: The queue's memory bound, in the estimate of ``queued_size``: a flood of big messages (4 MiB
#: logs, long step batches) reaches it long before ``QUEUE_SIZE`` messages.
QUEUE_BYTES = 64 * 1024 * 1024
#: Log lines (the kinds a script can flood with) may take this share of the queue's bound, so a
#: log flood cannot crowd out the steps.
LOG_SHARE = 0.25
_LOG_KINDS = frozenset({"log", "error"})
#: At most one log line about dropped messages this often (the first drop is logged at once).
DROP_NOTE_EVERY_S = 5.0
#: A batch is committed after this many messages even if ``flush_s`` has not passed.
BATCH_ROWS = 2_000
#: Steps per synthetic ``steps`` message when recording starts mid-run (the ring's contents).
PRELUDE_CHUNK = 512

MARK_COLUMNS = tuple(f"h{i}" for i in range(7))
DEVICE_COLUMNS = tuple(f"d{i}" for i in range(7))

SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (seq INTEGER PRIMARY KEY, t_ns INTEGER NOT NULL, kind TEXT NOT NULL,
                     body TEXT NOT NULL);
CREATE TABLE steps (step INTEGER PRIMARY KEY, seq INTEGER NOT NULL, config INTEGER NOT NULL,
                    samples INTEGER NOT NULL,
                    {", ".join(f"{c} INTEGER NOT NULL" for c in MARK_COLUMNS)},
                    device_seq INTEGER,
                    {", ".join(f"{c} INTEGER" for c in DEVICE_COLUMNS)});
CREATE TABLE configs (id INTEGER PRIMARY KEY, t_ns INTEGER NOT NULL, label TEXT NOT NULL,
                      knob_values TEXT NOT NULL, changed TEXT NOT NULL,
                      first_step INTEGER NOT NULL, warmup_steps INTEGER NOT NULL,
                      apply_s REAL NOT NULL, rebuilt TEXT NOT NULL, request INTEGER);
CREATE TABLE samples (metric TEXT NOT NULL, t0 INTEGER NOT NULL, t1 INTEGER NOT NULL,
                      value REAL);
CREATE INDEX samples_by_metric ON samples (metric, t1);
CREATE TABLE statuses (metric TEXT PRIMARY KEY, status TEXT NOT NULL);
CREATE TABLE rank_events (seq INTEGER PRIMARY KEY, rank INTEGER NOT NULL, t_ns INTEGER NOT NULL,
                          kind TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE rank_steps (rank INTEGER NOT NULL, step INTEGER NOT NULL, config INTEGER NOT NULL,
                         samples INTEGER NOT NULL,
                         {", ".join(f"{c} INTEGER NOT NULL" for c in MARK_COLUMNS)},
                         {", ".join(f"{c} INTEGER" for c in DEVICE_COLUMNS)},
                         PRIMARY KEY (rank, step));
"""
#: The key a rank's message carries on the recorder's queue (never on the wire).
RANK_KEY = "_rank"

_STOP = object()


def _step_rows(message: dict[str, Any]) -> list[tuple[int, ...]]:
    """A ``steps`` message's rows: step, config, samples and the seven host marks."""
    return [
        (step, config, samples, *host)
        for step, config, samples, host in zip(
            message["step"], message["config"], message["samples"], message["host"], strict=True
        )
    ]


def _step_messages(view: StepsView, cuda: bool) -> list[tuple[dict[str, Any], int]]:
    """Stored steps as the ``steps`` (and ``device_marks``) messages that brought them, in
    chunks of ``PRELUDE_CHUNK``, each timed at its last step's end."""
    items: list[tuple[dict[str, Any], int]] = []
    for i in range(0, len(view), PRELUDE_CHUNK):
        part = slice(i, i + PRELUDE_CHUNK)
        t_ns = int(view.host[part][-1, -1])
        items.append(
            (
                {
                    "kind": "steps",
                    "step": view.step[part].tolist(),
                    "config": view.config[part].tolist(),
                    "samples": view.samples[part].tolist(),
                    "host": view.host[part].tolist(),
                },
                t_ns,
            )
        )
        has = view.has_device[part]
        if cuda and has.any():
            items.append(
                (
                    {
                        "kind": "device_marks",
                        "step": view.step[part][has].tolist(),
                        "device": view.device[part][has].tolist(),
                    },
                    t_ns,
                )
            )
    return items


class RecordingError(Exception):
    """A recording that cannot be written or read; ``str(exc)`` is one sentence for the user."""


def to_json(value: Any) -> str:
    """Strict JSON; a non-finite number (a runner's ``1e400`` parses as infinity) becomes
    null, as the protocol writes a figure it does not have, so one value cannot stop a
    recording."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:
        return json.dumps(finite(value), separators=(",", ":"), allow_nan=False, default=str)


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (at any depth) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def queued_size(message: dict[str, Any]) -> int:
    """About the memory a queued message holds (Python objects, not its JSON): cheap enough
    for the link thread, and never an underestimate by much for the kinds that can be big."""
    kind = message["kind"]
    if kind in ("steps", "device_marks"):
        return 256 + 400 * len(message["step"])
    if kind == "log":
        return 256 + len(message["text"])
    if kind == "kernels":
        return 1024 + 200 * len(message["start"]) + sum(len(str(n)) for n in message["names"])
    if kind == "error":
        return 256 + len(message["message"]) + len(str(message.get("traceback") or ""))
    return 1024 + len(str(message))


def machine_info() -> dict[str, Any]:
    """Where the run was recorded (no host name: recordings get shared)."""
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }


def config_message(change: ConfigChange) -> dict[str, Any]:
    """A ``config`` message as the runner sent it, rebuilt from an applied configuration."""
    return {
        "kind": "config",
        "id": change.id,
        "request": change.request,
        "values": dict(change.values),
        "changed": dict(change.changed),
        "t_ns": change.t_ns,
        "apply_s": change.apply_s,
        "first_step": change.first_step,
        "warmup_steps": change.warmup_steps,
        "rebuilt": list(change.rebuilt),
    }


def status_json(status: MetricStatus) -> dict[str, Any]:
    """A metric's status as the recording's ``statuses`` table keeps it (available or why not, and
    its source)."""
    return {
        "name": status.name,
        "label": status.label,
        "unit": status.unit,
        "available": status.available,
        "reason": status.reason,
        "period_s": status.period_s,
        "source": status.source,
    }


class Recorder:
    """Writes a Session's run to one SQLite file on its own writer thread (WAL, batched).

    One recorder covers one run: if the session starts another run, recording stops with
    ``error`` set. Started while a run is already going (the window's Record toggle), it
    first writes what the session holds (hello, configurations, the steps still in its ring).
    """

    def __init__(
        self,
        path: str | Path,
        session: Session,
        *,
        spec: dict[str, Any] | None = None,
        flush_s: float = 0.25,
        overwrite: bool = False,
        queue_size: int = QUEUE_SIZE,
        queue_bytes: int = QUEUE_BYTES,
    ) -> None:
        self.path = Path(path)
        self.session = session
        self.spec = dict(spec or {})
        self.flush_s = flush_s
        self.overwrite = overwrite
        self.steps_written = 0
        #: Messages the writer could not keep up with (dropped, never waited on), and the
        #: steps among them: in the file's meta, the session's log and the headless summary.
        self.dropped = 0
        self.dropped_steps = 0
        self.queue_bytes = queue_bytes
        self._queued_bytes = 0
        self._queued_log_bytes = 0
        self._queued_lock = threading.Lock()
        self._drops_noted = 0
        self._drop_noted_at = -float("inf")
        self.error: str | None = None
        self._queue: queue.Queue[Any] = queue.Queue(queue_size)
        self._conn: sqlite3.Connection | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._closed = False
        self._seq = 0
        self._hellos = 0
        self._hello_pid: Any = None
        self._t0_written: int | None = None
        self._t1_ns = 0
        self._sample_t1: dict[str, int] = {}
        self._statuses: dict[str, dict[str, Any]] = {}

    # ---- Public API ------------------------------------------------------------------

    def start(self) -> None:
        """Create the file and its tables, attach to the session, start the writer thread."""
        if self._thread is not None or self._closed:
            raise RecordingError("this recorder was already started; make a new one")
        self._conn = self._create()
        self.session.add_listener(self._on_message)
        self.session.add_rank_listener(self._on_rank_message)
        prelude = self._prelude()
        self._thread = threading.Thread(
            target=self._run, args=(prelude,), name="gpuwatch-recorder", daemon=True
        )
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Write the last batch and the run's outcome, detach; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._closing = True
        self.session.remove_listener(self._on_message)
        self.session.remove_rank_listener(self._on_rank_message)
        thread = self._thread
        if thread is None:
            return
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            self._fail(f"the recorder could not finish writing within {timeout:g} s")
        thread.join(timeout)
        if thread.is_alive():
            self._fail(f"the recorder could not finish writing within {timeout:g} s")

    @property
    def recording(self) -> bool:
        return self._thread is not None and not self._closing and self.error is None

    # ---- Listener (link thread) ------------------------------------------------------

    def _on_message(self, message: dict[str, Any], t_ns: int) -> None:
        """Called on the link thread: queue and return at once, whatever happens."""
        if self._closing:
            return
        size = queued_size(message)
        is_log = message["kind"] in _LOG_KINDS
        with self._queued_lock:
            room = self._queued_bytes + size <= self.queue_bytes or self._queued_bytes == 0
            if (
                is_log
                and self._queued_log_bytes
                and self._queued_log_bytes + size > self.queue_bytes * LOG_SHARE
            ):
                room = False
            if room:
                try:
                    self._queue.put_nowait((message, t_ns, size, is_log))
                    self._queued_bytes += size
                    self._queued_log_bytes += size if is_log else 0
                    return
                except queue.Full:
                    pass
            self.dropped += 1
            if message["kind"] == "steps":
                self.dropped_steps += len(message["step"])

    def _on_rank_message(self, rank: RankInfo, message: dict[str, Any], t_ns: int) -> None:
        """A rank's message (every rank's hello, the other ranks' all): queued as the run's
        are, tagged with the rank."""
        self._on_message({**message, RANK_KEY: rank.rank}, t_ns)

    # ---- File ------------------------------------------------------------------------

    def _create(self) -> sqlite3.Connection:
        path = self.path
        if path.is_dir():
            raise RecordingError(f"cannot record to {path}: it is a directory")
        if path.exists() or path.is_symlink():
            if not self.overwrite:
                raise RecordingError(f"cannot record to {path}: the file already exists")
            for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
        if not path.parent.is_dir():
            raise RecordingError(
                f"cannot record to {path}: the folder {path.parent} does not exist"
            )
        try:
            conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(f"BEGIN; {SCHEMA}")
            meta = {
                "schema_version": SCHEMA_VERSION,
                "gpuwatch_version": __version__,
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"
                ),
                "spec": self.spec,
                "machine": machine_info(),
                "t0_ns": self.session.t0_ns,
            }
            conn.executemany(
                "INSERT INTO meta VALUES (?, ?)", [(k, to_json(v)) for k, v in meta.items()]
            )
            conn.execute("COMMIT")
        except (sqlite3.Error, OSError) as exc:
            raise RecordingError(f"cannot record to {path}: {exc}") from None
        self._t0_written = self.session.t0_ns
        return conn

    def _prelude(self) -> list[tuple[dict[str, Any], int]]:
        """What a run already going has shown so far, as the messages that built it."""
        session = self.session
        hello = session.hello
        if hello is None:
            return []
        changes = session.config_changes()
        first_t = changes[0].t_ns if changes else time.perf_counter_ns()
        items: list[tuple[dict[str, Any], int]] = [(hello.to_message(), first_t)]
        items += [(config_message(c), c.t_ns) for c in changes if c.id > 0]
        items += _step_messages(session.steps.snapshot(), session.device_kind == "cuda")
        for run in session.ranks():
            rank_hello = run.model.hello
            if rank_hello is None:
                continue
            tag = {RANK_KEY: run.info.rank}
            items.append(({**rank_hello.to_message(), **tag}, first_t))
            # what the rank's listeners were told besides its steps: DDP's samples, and the
            # round trips that put another machine's steps on the run's clock
            items += [({**c.to_message(), **tag}, c.t_ns) for c in run.model.collective()]
            items += [({**p.to_message(), **tag}, p.back_ns) for p in run.clock_pongs() or []]
            if run.info.rank == 0:
                continue  # its steps are the run's, above
            cuda = run.model.device_kind == "cuda"
            view = run.model.steps.snapshot()
            items += [({**m, **tag}, t) for m, t in _step_messages(view, cuda)]
        items += [(w.to_message(), w.t1_ns) for w in session.kernel_windows()]
        items[1:] = sorted(items[1:], key=lambda item: item[1])  # the hello stays first
        return items

    # ---- Writer thread ---------------------------------------------------------------

    def _run(self, prelude: list[tuple[dict[str, Any], int]]) -> None:
        batch = list(prelude)
        taken = taken_log = 0  # queued bytes of the batch: still held until it is written
        stop = False
        while True:
            deadline = time.monotonic() + self.flush_s
            while len(batch) < BATCH_ROWS:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    break
                try:
                    item = self._queue.get(timeout=wait)
                except queue.Empty:
                    break
                if item is _STOP:
                    stop = True
                    break
                message, t_ns, size, is_log = item
                taken += size
                taken_log += size if is_log else 0
                batch.append((message, t_ns))
            self._note_drops(final=stop)
            if self.error is None:
                self._write_guarded(batch, final=stop)
            batch = []
            with self._queued_lock:
                self._queued_bytes -= taken
                self._queued_log_bytes -= taken_log
            taken = taken_log = 0
            if stop:
                break
        self._close_connection()

    def _note_drops(self, *, final: bool) -> None:
        """Say in the run's log (so in the window, headless and this recording) that messages
        were dropped: at the first drop, then at most every ``DROP_NOTE_EVERY_S``."""
        dropped = self.dropped
        now = time.monotonic()
        if dropped == self._drops_noted or (
            self._drops_noted and not final and now - self._drop_noted_at < DROP_NOTE_EVERY_S
        ):
            return
        self._drops_noted, self._drop_noted_at = dropped, now
        text = (
            f"recording to {self.path} cannot keep up: {dropped:,} messages dropped so "
            f"far ({self.dropped_steps:,} steps); the run goes on, and the file's meta "
            f"counts them"
        )
        log.warning("%s", text)
        if not final:
            self.session._log_line("warning", "gpuwatch", text)

    def _write_guarded(self, batch: list[tuple[dict[str, Any], int]], *, final: bool) -> None:
        try:
            self._write(batch, final=final)
        except Exception as exc:  # a bug too must stop the recording loudly, not kill the thread
            with contextlib.suppress(sqlite3.Error):
                if self._conn is not None and self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
            if not isinstance(exc, (sqlite3.Error, OSError)):
                log.exception("recording to %s failed", self.path)
                exc = f"internal error: {type(exc).__name__}: {exc}"
            self._fail(f"recording to {self.path} stopped ({exc}); the run goes on")

    def _fail(self, message: str) -> None:
        if self.error is None:
            self.error = message
            log.error("%s", message)
        self._closing = True
        self.session.remove_listener(self._on_message)
        self.session.remove_rank_listener(self._on_rank_message)

    def _write(self, batch: list[tuple[dict[str, Any], int]], *, final: bool) -> None:
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN")
        steps = 0
        for message, t_ns in batch:
            steps += self._write_message(conn, message, t_ns)
            if self.error is not None:
                break
        self._write_configs(conn)
        self._write_coarse(conn)
        self._write_meta(conn, final=final)
        conn.execute("COMMIT")
        self.steps_written += steps  # committed: these survive a crash from now on

    def _write_message(self, conn: sqlite3.Connection, message: dict[str, Any], t_ns: int) -> int:
        """Write one message; returns how many new steps it added."""
        if RANK_KEY in message:
            self._write_rank_message(conn, message, t_ns)
            return 0
        kind = message["kind"]
        if kind == "hello":
            if message.get("pid") == self._hello_pid:
                return 0  # the prelude already wrote this run's hello
            self._hello_pid = message.get("pid")
            self._hellos += 1
            if self._hellos > 1:
                self._fail(
                    f"recording to {self.path} ended: the session started another "
                    f"run (record each run to its own file)"
                )
                return 0
            t_ns = self._config0_t_ns(t_ns)
        self._seq += 1
        seq = self._seq
        added = 0
        self._t1_ns = max(self._t1_ns, t_ns)
        if kind == "steps":
            rows = [(step, seq, *rest) for step, *rest in _step_rows(message)]
            before = conn.total_changes
            conn.executemany(
                f"INSERT OR IGNORE INTO steps (step, seq, config, samples, "
                f"{', '.join(MARK_COLUMNS)}) VALUES ({', '.join('?' * 11)})",
                rows,
            )
            added = conn.total_changes - before
            body: dict[str, Any] = {"rows": len(rows)}
        elif kind == "device_marks":
            conn.executemany(
                f"UPDATE steps SET device_seq = ?, "
                f"{', '.join(f'{c} = ?' for c in DEVICE_COLUMNS)} WHERE step = ?",
                [
                    (seq, *marks, step)
                    for step, marks in zip(message["step"], message["device"], strict=True)
                ],
            )
            body = {"rows": len(message["step"])}
        else:
            body = {k: v for k, v in message.items() if k != "kind"}
        conn.execute("INSERT INTO events VALUES (?, ?, ?, ?)", (seq, t_ns, kind, to_json(body)))
        return added

    def _write_rank_message(
        self, conn: sqlite3.Connection, message: dict[str, Any], t_ns: int
    ) -> None:
        """A rank's message into ``rank_events`` and its steps into ``rank_steps``."""
        rank, kind = message[RANK_KEY], message["kind"]
        self._seq += 1
        self._t1_ns = max(self._t1_ns, t_ns)
        if kind == "steps":
            conn.executemany(
                f"INSERT OR IGNORE INTO rank_steps (rank, step, config, samples, "
                f"{', '.join(MARK_COLUMNS)}) VALUES ({', '.join('?' * 11)})",
                [(rank, *row) for row in _step_rows(message)],
            )
            body: dict[str, Any] = {"rows": len(message["step"])}
        elif kind == "device_marks":
            conn.executemany(
                f"UPDATE rank_steps SET {', '.join(f'{c} = ?' for c in DEVICE_COLUMNS)} "
                "WHERE rank = ? AND step = ?",
                [
                    (*marks, rank, step)
                    for step, marks in zip(message["step"], message["device"], strict=True)
                ],
            )
            body = {"rows": len(message["step"])}
        else:
            body = {k: v for k, v in message.items() if k not in ("kind", RANK_KEY)}
        conn.execute(
            "INSERT INTO rank_events VALUES (?, ?, ?, ?, ?)",
            (self._seq, rank, t_ns, kind, to_json(body)),
        )

    def _config0_t_ns(self, arrival_ns: int) -> int:
        """The hello's time as the session stamped config 0, so a replay times it the same."""
        changes = self.session.config_changes()
        return changes[0].t_ns if changes and changes[0].id == 0 else arrival_ns

    def _write_configs(self, conn: sqlite3.Connection) -> None:
        """The session's configurations as they are now (labels as last seen)."""
        if self._hellos == 0:
            return
        conn.executemany(
            "INSERT OR REPLACE INTO configs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    c.id,
                    c.t_ns,
                    c.label,
                    to_json(c.values),
                    to_json(c.changed),
                    c.first_step,
                    c.warmup_steps,
                    c.apply_s if math.isfinite(c.apply_s) else 0.0,
                    to_json(list(c.rebuilt)),
                    c.request,
                )
                for c in self.session.config_changes()
            ],
        )

    def _write_coarse(self, conn: sqlite3.Connection) -> None:
        """New coarse samples (read from the session's store, and the series of the GPUs
        other ranks train on, ``rank_metric``) and changed statuses."""
        coarse = self.session.coarse
        for name in coarse.names():
            self._write_series(conn, name, coarse, name)
        for gpu in self.session.rank_gpus():
            if gpu.store is not coarse:
                for name in gpu.store.names():
                    self._write_series(conn, rank_metric(gpu.rank, name), gpu.store, name)
        for name, status in coarse.statuses().items():
            data = status_json(status)
            if self._statuses.get(name) != data:
                conn.execute("INSERT OR REPLACE INTO statuses VALUES (?, ?)", (name, to_json(data)))
                self._statuses[name] = data

    def _write_series(
        self, conn: sqlite3.Connection, metric: str, store: SeriesStore, name: str
    ) -> None:
        """``store``'s samples of ``name`` newer than the last written, as ``metric``."""
        last = self._sample_t1.get(metric)
        view = store.snapshot(name, last)
        keep = slice(None) if last is None else view.t1 > last
        t0, t1, value = view.t0[keep], view.t1[keep], view.value[keep]
        if len(t1) == 0:
            return
        conn.executemany(
            "INSERT INTO samples VALUES (?, ?, ?, ?)",
            zip([metric] * len(t1), t0.tolist(), t1.tolist(), value.tolist(), strict=True),
        )
        self._sample_t1[metric] = int(t1.max())
        self._t1_ns = max(self._t1_ns, int(t1.max()))

    def _write_meta(self, conn: sqlite3.Connection, *, final: bool) -> None:
        session = self.session
        meta: dict[str, Any] = {
            "t1_ns": self._t1_ns,
            "dropped_messages": self.dropped,
            "dropped_steps": self.dropped_steps,
        }
        if self._hellos and session.t0_ns != self._t0_written:
            meta["t0_ns"] = self._t0_written = session.t0_ns
        if final:
            meta.update(
                exit_code=session.exit_code,
                error=session.error,
                state=session.state.value,
                closed=True,
            )
        conn.executemany(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, to_json(v)) for k, v in meta.items()]
        )

    def _close_connection(self) -> None:
        """Fold the WAL back in so a finished recording is one self-contained file."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with contextlib.suppress(sqlite3.Error):
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode=DELETE")
        with contextlib.suppress(sqlite3.Error):
            conn.close()
