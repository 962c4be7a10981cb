"""Open a recording read-only and hand back what the views need (no torch, no GPU).

The file is opened with SQLite's ``mode=ro`` so looking at it never changes it, and every
value is JSON text checked field by field: nothing is unpickled or evaluated. Each way a file
can be unusable gets its own one-sentence ``RecordingError``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sqlite3
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpuwatch.core.figures.kernel_window import KernelWindow, KernelWindowError
from gpuwatch.core.files.recording import (
    DEVICE_COLUMNS,
    MARK_COLUMNS,
    SCHEMA_VERSION,
    RecordingError,
)
from gpuwatch.core.model.log_buffer import LogLine
from gpuwatch.core.model.messages import (
    CollectiveSample,
    ConfigChange,
    Hello,
    RankInfo,
    Refusal,
)
from gpuwatch.core.model.rank_clock import Pong, shift_to_rank0
from gpuwatch.core.model.store import DEFAULT_SERIES_CAPACITY, MetricStatus, SeriesStore, StepsView
from gpuwatch.protocol import N_MARKS

SQLITE_MAGIC = b"SQLite format 3\x00"
_TABLES = frozenset({"meta", "events", "steps", "configs", "samples", "statuses"})
_LEVELS = ("info", "warning", "error")
#: Step rows read per ``fetchmany``: the rows go into preallocated arrays, so a recording of
#: millions of steps never exists as millions of Python tuples at once.
STEP_CHUNK = 65_536


@dataclass(frozen=True)
class RecordedRank:
    """One rank of a run of many ranks as recorded: who it was, what it said when it ended,
    and its steps (rank 0's are the recording's own ``steps``)."""

    info: RankInfo
    hello: Hello
    steps: StepsView
    bye: dict[str, Any] | None = None
    error: str | None = None
    #: DDP's all-reduce samples, stamped with when they arrived.
    collective: tuple[CollectiveSample, ...] = ()
    #: Round trips to its clock (a rank of another machine; none for the window's own).
    pongs: tuple[Pong, ...] = ()


@dataclass
class Recording:
    """A recorded run, fully loaded (the file is closed again)."""

    path: Path
    meta: dict[str, Any]
    #: The run's hello, its device named as the live window saw it (a script's is named by a
    #: later ``device`` message) and config 0's warm-up known (see ``_config0_warmup``).
    hello: Hello | None
    steps: StepsView
    configs: list[ConfigChange]
    refusals: list[Refusal]
    coarse: SeriesStore
    log: list[LogLine]
    bye: dict[str, Any] | None
    error: str | None
    exit_code: int | None
    t0_ns: int
    t1_ns: int
    #: Every rank of a run of many ranks, by rank (empty for one process, or a file written
    #: before ranks were recorded).
    ranks: tuple[RecordedRank, ...] = ()
    _events: list[tuple[int, int, str, dict[str, Any]]] = field(repr=False, default_factory=list)
    _step_seq: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0, np.int64))
    _device_seq: np.ndarray = field(repr=False, default_factory=lambda: np.empty(0, np.int64))
    _device_marks: np.ndarray = field(
        repr=False, default_factory=lambda: np.empty((0, N_MARKS), np.int64)
    )

    @property
    def duration_s(self) -> float:
        return max(0, self.t1_ns - self.t0_ns) / 1e9

    def messages(self) -> list[tuple[int, dict[str, Any]]]:
        """(arrival t_ns, runner message) in arrival order, to dispatch into a fresh Session.

        Only runner messages: the GUI's own log lines (source ``gpuwatch``) are in ``log``,
        since a Session dispatching the messages writes its own. A Session stamps config 0
        and refusals with its own clock and names segments after their change: take
        ``configs`` (exact times, labels as last seen) and ``refusals`` from the recording.
        """
        steps_by_seq = _rows_by(self._step_seq)
        device_by_seq = _rows_by(self._device_seq)
        view = self.steps
        out: list[tuple[int, dict[str, Any]]] = []
        for seq, t_ns, kind, body in self._events:
            if kind == "steps":
                rows = steps_by_seq.get(seq)
                if rows is None:
                    continue
                message = {
                    "kind": "steps",
                    "step": view.step[rows].tolist(),
                    "config": view.config[rows].tolist(),
                    "samples": view.samples[rows].tolist(),
                    "host": view.host[rows].tolist(),
                }
            elif kind == "device_marks":
                rows = device_by_seq.get(seq)
                if rows is None:
                    continue
                message = {
                    "kind": "device_marks",
                    "step": view.step[rows].tolist(),
                    "device": self._device_marks[rows].tolist(),
                }
            elif kind == "log" and body.get("source") == "gpuwatch":
                continue
            elif kind == "hello" and self.hello is not None:
                message = _with_warmup({**body, "kind": kind}, self.hello.warmup_steps)
            else:
                message = {**body, "kind": kind}
            out.append((t_ns, message))
        return out


def kernel_windows(recording: Recording) -> list[KernelWindow]:
    """The recording's kernel capture windows that succeeded (``kernels`` rows of ``events``),
    in arrival order; a malformed one is skipped, as a live session drops it."""
    windows = []
    for _, _, kind, body in recording._events:
        if kind != "kernels":
            continue
        try:
            window = KernelWindow.from_message(body)
        except KernelWindowError:
            continue
        if window.ok:
            windows.append(window)
    return windows


def open_recording(path: str | Path) -> Recording:
    """Load a recording; ``RecordingError`` says in one sentence why a file cannot be used."""
    path = Path(path)
    _check_file(path)
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise RecordingError(f"cannot open {path}: {exc}") from None
    try:
        return _load(conn, path)
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise RecordingError(
                f"{path} is not a gpuwatch recording (not an SQLite file)"
            ) from None
        raise RecordingError(f"{path} is damaged ({exc})") from None
    except (ValueError, TypeError, KeyError, OverflowError) as exc:  # JSON, a field's type
        raise RecordingError(f"{path} is damaged (bad value: {exc})") from None
    finally:
        conn.close()


def _check_file(path: Path) -> None:
    """Refuse what is not a regular file before opening it: opening a FIFO blocks until a
    writer appears (forever), a device may never end."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise RecordingError(f"{path}: no such file") from None
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise RecordingError(f"{path} is a directory, not a gpuwatch recording")
    if not stat.S_ISREG(mode):
        raise RecordingError(
            f"{path} is {_file_kind(mode)}, not a gpuwatch recording (a "
            f"recording is a regular file)"
        )
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        raise RecordingError(f"{path}: no such file") from None
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not head:
        raise RecordingError(f"{path} is not a gpuwatch recording (an empty file)")
    if head != SQLITE_MAGIC:
        raise RecordingError(f"{path} is not a gpuwatch recording (not an SQLite file)")


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _load(conn: sqlite3.Connection, path: Path) -> Recording:
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "meta" not in tables:
        raise RecordingError(
            f"{path} is not a gpuwatch recording (an SQLite file without gpuwatch tables)"
        )
    meta = {key: json.loads(value) for key, value in conn.execute("SELECT key, value FROM meta")}
    version = meta.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordingError(f"{path} is not a gpuwatch recording (no schema version)")
    if version < SCHEMA_VERSION:
        raise RecordingError(
            f"{path} was made by an older gpuwatch (schema {version}); this "
            f"version reads schema {SCHEMA_VERSION}"
        )
    if version > SCHEMA_VERSION:
        raise RecordingError(
            f"{path} was made by a newer gpuwatch (schema {version}); this "
            f"version reads schema {SCHEMA_VERSION}: update gpuwatch to open "
            f"it"
        )
    missing = _TABLES - tables
    if missing:
        raise RecordingError(f"{path} is damaged (missing tables: {', '.join(sorted(missing))})")
    check = conn.execute("PRAGMA quick_check").fetchone()[0]
    if check != "ok":
        raise RecordingError(f"{path} is damaged ({check})")

    events = [
        (int(seq), int(t_ns), str(kind), _object(json.loads(body)))
        for seq, t_ns, kind, body in conn.execute(
            "SELECT seq, t_ns, kind, body FROM events ORDER BY seq"
        )
    ]
    sent = next(({**body, "kind": kind} for _, _, kind, body in events if kind == "hello"), None)
    sent = _with_named_device(sent, events)
    configs = _load_configs(conn)
    hello = (
        None if sent is None else Hello.from_message(_with_warmup(sent, _config0_warmup(configs)))
    )
    on_cpu = hello is None or hello.device.kind != "cuda"
    steps, step_seq, device_seq, device_marks = _load_steps(conn, on_cpu=on_cpu)
    coarse = _load_coarse(conn)
    refusals = [
        Refusal(
            body.get("request") if _is_int(body.get("request")) else None,
            _object(body.get("values", {})),
            str(body.get("message", "")),
            t_ns,
        )
        for _, t_ns, kind, body in events
        if kind == "refused"
    ]
    log = [_log_line(t_ns, body) for _, t_ns, kind, body in events if kind == "log"]
    bye = next(
        ({**body, "kind": kind} for _, _, kind, body in reversed(events) if kind == "bye"), None
    )
    error = meta.get("error")
    if not isinstance(error, str):
        runner_error = next(
            (body for _, _, kind, body in reversed(events) if kind == "error"), None
        )
        error = (
            f"{runner_error.get('type')}: {runner_error.get('message')}"
            if runner_error is not None
            else None
        )
    exit_code = meta.get("exit_code")
    t0_ns = meta.get("t0_ns")
    if not _is_int(t0_ns):
        raise ValueError("meta t0_ns is not an integer")
    ends = [int(meta["t1_ns"])] if _is_int(meta.get("t1_ns")) else []
    ends += [t for _, t, _, _ in events[-1:]]
    ends += [int(steps.host[-1, -1])] if len(steps) else []
    return Recording(
        path=path,
        meta=meta,
        hello=hello,
        steps=steps,
        configs=configs,
        refusals=refusals,
        coarse=coarse,
        log=log,
        bye=bye,
        error=error,
        exit_code=exit_code if _is_int(exit_code) else None,
        t0_ns=t0_ns,
        t1_ns=max([t0_ns, *ends]),
        ranks=_load_ranks(conn, tables, steps),
        _events=events,
        _step_seq=step_seq,
        _device_seq=device_seq,
        _device_marks=device_marks,
    )


def _load_ranks(
    conn: sqlite3.Connection, tables: set[str], steps: StepsView
) -> tuple[RecordedRank, ...]:
    """The ranks (``rank_events``, ``rank_steps``): each rank that said hello, its steps
    (rank 0's: the run's own; another machine's put on rank 0's clock by its recorded round
    trips, ``rank_clock``), its last ``bye`` and ``error``, its DDP all-reduce samples."""
    if not {"rank_events", "rank_steps"} <= tables:
        return ()
    hellos: dict[int, Hello] = {}
    byes: dict[int, dict[str, Any]] = {}
    errors: dict[int, str] = {}
    collective: dict[int, list[CollectiveSample]] = {}
    pongs: dict[int, list[Pong]] = {}  # round trips to the clocks of other machines' ranks
    rows = conn.execute("SELECT rank, t_ns, kind, body FROM rank_events ORDER BY seq")
    for rank, t_ns, kind, body in rows:
        message = {**_object(json.loads(body)), "kind": kind}
        if kind == "hello":
            hello = Hello.from_message(message)
            if hello.rank is not None and hello.rank.rank == rank:
                hellos[int(rank)] = hello
        elif kind == "bye":
            byes[int(rank)] = message
        elif kind == "error":
            errors[int(rank)] = f"{message.get('type')}: {message.get('message')}"
        elif kind == "pong":
            with contextlib.suppress(KeyError, TypeError, ValueError):
                pong = Pong(int(message["t"]), int(t_ns), int(message["clock_ns"]))
                pongs.setdefault(int(rank), []).append(pong)
        elif kind == "collective":
            with contextlib.suppress(KeyError, TypeError, ValueError):
                sample = CollectiveSample.from_message(message, int(t_ns))
                collective.setdefault(int(rank), []).append(sample)
    ranks = []
    for rank, hello in sorted(hellos.items()):
        if hello.rank is None:
            continue
        if rank == 0:
            view = steps
        else:
            view = _load_rank_steps(conn, rank, hello.device.kind != "cuda")
            shift = shift_to_rank0(view.host[:, 0], pongs.get(rank), pongs.get(0))
            if shift is not None:  # on rank 0's clock, as the live window drew it
                view = view.shifted(shift)
        ranks.append(
            RecordedRank(
                hello.rank,
                hello,
                view,
                byes.get(rank),
                errors.get(rank),
                tuple(collective.get(rank, ())),
                tuple(pongs.get(rank, ())),
            )
        )
    return tuple(ranks)


def _load_rank_steps(conn: sqlite3.Connection, rank: int, on_cpu: bool) -> StepsView:
    columns = ("step", "config", "samples", *MARK_COLUMNS, *DEVICE_COLUMNS)
    rows = conn.execute(
        f"SELECT {', '.join(columns)} FROM rank_steps WHERE rank = ? ORDER BY step", (rank,)
    ).fetchall()
    if not rows:
        return StepsView.empty()
    data = _int_rows(rows)
    host = data[:, 3 : 3 + N_MARKS].copy()
    recorded = data[:, 3 + N_MARKS :]
    has = recorded[:, 0] >= 0
    if on_cpu:
        device, has_device = host.copy(), np.ones(len(data), bool)
    else:
        device, has_device = np.where(has[:, None], recorded, 0), has
    return StepsView(
        data[:, 0].copy(), data[:, 1].copy(), data[:, 2].copy(), host, device, has_device
    )


def _config0_warmup(configs: list[ConfigChange]) -> int | None:
    """Config 0's warm-up as the live session used it (the ``configs`` table), if recorded."""
    return next((c.warmup_steps for c in configs if c.id == 0), None)


def _with_warmup(hello: dict[str, Any], warmup_steps: int | None) -> dict[str, Any]:
    """The hello with ``config.warmup_steps`` filled in where the runner did not send it (a
    recording made before it did); ``Hello.from_message`` has a default for what is left."""
    config = _object(hello.get("config", {}))
    if warmup_steps is None or isinstance(config.get("warmup_steps"), int):
        return hello
    return {**hello, "config": {**config, "warmup_steps": warmup_steps}}


def _with_named_device(
    hello: dict[str, Any] | None, events: list[tuple[int, int, str, dict[str, Any]]]
) -> dict[str, Any] | None:
    """A watched script's hello names its CUDA device only once the script has used it (a
    later ``device`` message): the recording's hello takes that name, as the live one did."""
    if hello is None or not _object(hello.get("device", {})).get("pending"):
        return hello
    named = next((body.get("device") for _, _, kind, body in events if kind == "device"), None)
    return {**hello, "device": named} if isinstance(named, dict) else hello


def _load_steps(
    conn: sqlite3.Connection, *, on_cpu: bool
) -> tuple[StepsView, np.ndarray, np.ndarray, np.ndarray]:
    """Steps in step order; on a CPU the host marks are the device marks (as in a Session).

    Each chunk of rows goes straight into the final arrays, so reading a million steps holds
    no intermediate table beside them.
    """
    columns = ("step", "seq", "config", "samples", *MARK_COLUMNS, "device_seq", *DEVICE_COLUMNS)
    n = conn.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
    ids, seq, device_seq = (np.empty(n, np.int64) for _ in range(3))
    config, samples = np.empty(n, np.int64), np.empty(n, np.int64)  # as the live store
    host, recorded = np.empty((n, N_MARKS), np.int64), np.empty((n, N_MARKS), np.int64)
    cursor = conn.execute(f"SELECT {', '.join(columns)} FROM steps ORDER BY step")
    filled = 0
    while rows := cursor.fetchmany(STEP_CHUNK):
        end = filled + len(rows)
        if end > n:
            raise ValueError("the steps table changed while it was read")
        data = _int_rows(rows)
        ids[filled:end], seq[filled:end] = data[:, 0], data[:, 1]
        config[filled:end], samples[filled:end] = data[:, 2], data[:, 3]
        host[filled:end] = data[:, 4 : 4 + N_MARKS]
        device_seq[filled:end] = data[:, 4 + N_MARKS]
        recorded[filled:end] = data[:, 5 + N_MARKS :]
        filled = end
    if filled < n:
        ids, seq, device_seq, config, samples, host, recorded = (
            a[:filled].copy() for a in (ids, seq, device_seq, config, samples, host, recorded)
        )
        n = filled
    has = device_seq >= 0
    if on_cpu:
        device, has_device = host.copy(), np.ones(n, bool)
    else:
        device, has_device = np.where(has[:, None], recorded, 0), has
    view = StepsView(ids, config, samples, host, device, has_device)
    return view, seq, device_seq, recorded


def _int_rows(rows: list[tuple[Any, ...]]) -> np.ndarray:
    """Rows of integers, NULL (no device marks) as -1."""
    try:
        return np.array(rows, np.int64)
    except TypeError:  # a NULL among them
        return np.array([[-1 if v is None else v for v in row] for row in rows], np.int64)


def _load_configs(conn: sqlite3.Connection) -> list[ConfigChange]:
    out = []
    for (
        cid,
        t_ns,
        label,
        values,
        changed,
        first_step,
        warmup,
        apply_s,
        rebuilt,
        request,
    ) in conn.execute(
        "SELECT id, t_ns, label, knob_values, changed, first_step, "
        "warmup_steps, apply_s, rebuilt, request FROM configs "
        "ORDER BY id"
    ):
        out.append(
            ConfigChange(
                id=int(cid),
                values=_object(json.loads(values)),
                changed=_object(json.loads(changed)),
                t_ns=int(t_ns),
                first_step=int(first_step),
                warmup_steps=int(warmup),
                apply_s=float(apply_s) if apply_s is not None else 0.0,
                rebuilt=tuple(str(r) for r in _list(json.loads(rebuilt))),
                request=int(request) if request is not None else None,
                label=str(label),
            )
        )
    return out


def _load_coarse(conn: sqlite3.Connection) -> SeriesStore:
    counts = dict(conn.execute("SELECT metric, COUNT(*) FROM samples GROUP BY metric"))
    store = SeriesStore(capacity=max([DEFAULT_SERIES_CAPACITY, *counts.values()]))
    for metric in counts:
        rows = conn.execute(
            "SELECT t0, t1, value FROM samples WHERE metric = ? ORDER BY t1, t0", (metric,)
        ).fetchall()
        t0, t1, value = zip(*rows, strict=True)
        store.append_many(
            str(metric),
            list(t0),
            list(t1),
            [float("nan") if v is None else float(v) for v in value],
        )
    for metric, text in conn.execute("SELECT metric, status FROM statuses"):
        s = _object(json.loads(text))
        period = s.get("period_s")
        store.set_status(
            MetricStatus(
                name=str(metric),
                label=str(s.get("label", metric)),
                unit=str(s.get("unit", "")),
                available=bool(s.get("available")),
                reason=str(s["reason"]) if s.get("reason") is not None else None,
                period_s=float(period) if isinstance(period, int | float) else None,
                source=str(s.get("source", "")),
            )
        )
    return store


def _log_line(t_ns: int, body: dict[str, Any]) -> LogLine:
    level = body.get("level")
    source = "gpuwatch" if body.get("source") == "gpuwatch" else "runner"
    return LogLine(t_ns, level if level in _LEVELS else "info", source, str(body.get("text", "")))


def _rows_by(seq: np.ndarray) -> dict[int, np.ndarray]:
    """Row indices grouped by message sequence number (rows of one message stay in order)."""
    order = np.argsort(seq, kind="stable")
    groups: dict[int, np.ndarray] = {}
    for key, idx in itertools.groupby(order.tolist(), key=lambda i: int(seq[i])):
        if key >= 0:
            groups[key] = np.fromiter(idx, np.int64)
    return groups


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, found {type(value).__name__}")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON list, found {type(value).__name__}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
