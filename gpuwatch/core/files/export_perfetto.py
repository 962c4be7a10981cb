"""A recording as Chrome trace-event JSON, which Perfetto and chrome://tracing open.

One process for the run (for a run of many ranks: rank 0, then one process per other rank
with its steps, host phases and device spans), one track (thread) per lane: the steps, each
host phase, the device stream's active spans, the stream's gaps, and the configuration
segments; counters for the coarse samples; a global instant at every configuration change. Times are
microseconds from the run's t0. Events on one track never overlap (a viewer would nest or
drop them): a span that starts before the previous one on its track ended is cut to start
there, and dropped if nothing is left.

The trace is streamed: each track yields its events in time order, chunk by chunk, as
ready-encoded text, and a heap merge writes them sorted by time. Memory stays bounded by the
loaded recording plus a chunk per track, whatever the number of steps (docs/performance.md,
"Export"). A non-finite number (NaN or infinity in a recording) is written as null.
"""

from __future__ import annotations

import heapq
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from gpuwatch.core.figures.analysis import active_spans, gaps
from gpuwatch.core.figures.kernel_window import KernelWindow
from gpuwatch.core.files.atomic_file import atomic_output
from gpuwatch.core.files.recording import finite
from gpuwatch.core.files.recording_reader import Recording, kernel_windows
from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST, KERNEL_KINDS, PHASES

PID = 1
STEPS_TID = 1
SEGMENTS_TID = 2
PHASE_TIDS = {phase: 10 + i for i, phase in enumerate(PHASES)}
DEVICE_TID = 20
GAPS_TID = 21
#: Kernel capture windows (shaded "profiled"), then one track per stream (or CPU thread) of
#: their events, from ``KERNEL_TID`` on: events of two streams may overlap, of one never.
CAPTURE_TID = 22
KERNEL_TID = 100
#: Track names in their display order (``thread_sort_index``).
TRACKS: tuple[tuple[int, str], ...] = (
    (SEGMENTS_TID, "configurations"),
    (STEPS_TID, "steps"),
    *((tid, f"host: {phase}") for phase, tid in PHASE_TIDS.items()),
    (DEVICE_TID, "device stream (active)"),
    (GAPS_TID, "gaps"),
)
#: Spans cut and encoded per chunk of a track, and events written per ``write`` call.
CHUNK = 4096

#: ``progress(fraction)``: the share of the run's time written so far, 0 to 1.
Progress = Callable[[float], None]
#: A track's events: (ns since t0, the event as JSON text), in time order.
Timed = Iterator[tuple[float, str]]


def perfetto_trace(recording: Recording) -> dict[str, Any]:
    """The trace as a JSON-ready dict: ``{"traceEvents": [...], "displayTimeUnit": "ms"}``
    (parsed back from the streamed text: one encoder for the file and for this)."""
    buffer = io.StringIO()
    write_perfetto_to(recording, buffer)
    return json.loads(buffer.getvalue())


def write_perfetto(recording: Recording, out: str | Path, progress: Progress | None = None) -> int:
    """Write the trace to ``out`` whole or not at all (an existing file stays until the new
    one is complete); returns the number of events written."""
    with atomic_output(out) as stream:
        return write_perfetto_to(recording, stream, progress)


def write_perfetto_to(
    recording: Recording, stream: TextIO, progress: Progress | None = None
) -> int:
    """Stream the trace into ``stream``; returns the number of events written."""
    t0 = recording.t0_ns
    windows = kernel_windows(recording)
    streams = _kernel_streams(windows)
    head = [_dump(e) for e in (*_metadata(recording), *_kernel_metadata(windows, streams))]
    tracks: list[Timed] = [
        *_step_events(recording, t0),
        *_rank_events(recording, t0),
        _segment_events(recording, t0),
        *_device_events(recording, t0),
        *_counter_events(recording, t0),
        _change_instants(recording, t0),
        *_kernel_events(windows, streams, t0),
    ]
    stream.write('{"traceEvents":[')
    stream.write(",".join(head))
    written = len(head)
    span_ns = max(1, recording.t1_ns - t0)
    batch: list[str] = []
    for ts, text in heapq.merge(*tracks, key=itemgetter(0)):  # stable: ties keep track order
        batch.append(text)
        if len(batch) >= CHUNK:
            written = _write_batch(stream, batch, written)
            if progress is not None:
                progress(min(1.0, ts / span_ns))
    written = _write_batch(stream, batch, written)
    stream.write('],"displayTimeUnit":"ms"}')
    if progress is not None:
        progress(1.0)
    return written


def _write_batch(stream: TextIO, batch: list[str], written: int) -> int:
    if batch:
        stream.write(("," if written else "") + ",".join(batch))
        written += len(batch)
        batch.clear()
    return written


def _dump(event: dict[str, Any]) -> str:
    return json.dumps(finite(event), separators=(",", ":"), allow_nan=False)


def _us(ns: int) -> float:
    """ns since t0 as µs, rounded to whole ns so sums of ts and dur stay exact enough."""
    return round(ns / 1000, 3)


def _track_names(
    tracks: Sequence[tuple[int, str]], first_index: int, pid: int = PID
) -> list[dict[str, Any]]:
    """Perfetto metadata naming each ``(tid, label)`` track and fixing its order."""
    events: list[dict[str, Any]] = []
    for index, (tid, label) in enumerate(tracks, start=first_index):
        for name, args in (
            ("thread_name", {"name": label}),
            ("thread_sort_index", {"sort_index": index}),
        ):
            events.append({"ph": "M", "name": name, "pid": pid, "tid": tid, "ts": 0, "args": args})
    return events


def _metadata(recording: Recording) -> list[dict[str, Any]]:
    hello = recording.hello
    what = (hello.workload if hello else "") or recording.meta.get("spec", {}).get("workload")
    where = (hello.device.name or hello.device.kind) if hello else None
    name = f"gpuwatch: {what or 'run'} on {where or 'unknown device'}"
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "ts": 0, "args": {"name": name}}
    ]
    events += _track_names(TRACKS, first_index=0)
    if recording.ranks:  # rank 0's process keeps the run's tracks and takes rank 0's name
        events = [e for e in events if e["name"] != "process_name"]
        events += _rank_metadata(recording)
    return events


def _cut(
    starts: np.ndarray, ends: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per chunk: (begins, ends, row indices) of the spans kept on one track, in order.

    A span is cut to begin where the previous kept one ended and dropped if nothing is left.
    Spans with ``end <= start`` are never kept, so among the rest a dropped span ends before
    the running end: the running maximum of the ends is the previous kept span's end.
    """
    last_end = np.iinfo(np.int64).min
    for lo in range(0, len(starts), CHUNK):
        s = np.asarray(starts[lo : lo + CHUNK], np.int64)
        e = np.asarray(ends[lo : lo + CHUNK], np.int64)
        rows = np.flatnonzero(e > s)
        s, e = s[rows], e[rows]
        if not len(s):
            continue
        before = np.maximum.accumulate(np.concatenate(([last_end], e[:-1])))
        last_end = max(last_end, int(e.max()))
        begin = np.maximum(s, before)
        keep = e > begin
        yield begin[keep], e[keep], rows[keep] + lo


def _us_texts(ns: np.ndarray) -> list[str]:
    """Integer ns as exact decimal µs ("1234.567"): the number ``_us`` gives, without float
    rounding in a loop of millions."""
    if len(ns) and int(ns.min()) < 0:
        return [repr(_us(int(v))) for v in ns.tolist()]
    whole, frac = np.divmod(ns, 1000)
    return [f"{w}.{f:03d}" for w, f in zip(whole.tolist(), frac.tolist(), strict=True)]


def _step_spans(
    tid: int,
    cat: str,
    name: str | None,
    starts: np.ndarray,
    ends: np.ndarray,
    *,
    step: np.ndarray,
    config: np.ndarray,
    t0: int,
    pid: int = PID,
) -> Timed:
    """``X`` events with ``{"step", "config"}`` args, encoded directly (millions of them);
    ``name`` None names each after its step."""
    head = f'{{"ph":"X","pid":{pid},"tid":{tid},"cat":{json.dumps(cat)},"name":'
    fixed = json.dumps(name) if name is not None else None
    for begin, end, rows in _cut(starts, ends):
        since = begin - t0
        for key, ts, dur, st, c in zip(
            since.tolist(),
            _us_texts(since),
            _us_texts(end - begin),
            step[rows].tolist(),
            config[rows].tolist(),
            strict=True,
        ):
            label = fixed if fixed is not None else f'"step {st}"'
            yield (
                key,
                (f'{head}{label},"ts":{ts},"dur":{dur},"args":{{"step":{st},"config":{c}}}}}'),
            )


def _complete(
    tid: int, cat: str, name: str, spans: Iterable[tuple[int, int, dict[str, Any]]], t0: int
) -> Iterator[dict[str, Any]]:
    """``X`` events on one track from ``(start_ns, end_ns, args)`` in time order (few of
    them: segments, kernel windows and kernels), cut as ``_cut`` does."""
    last_end: int | None = None
    for start, end, args in spans:
        begin = start if last_end is None else max(start, last_end)
        if end <= begin:
            continue
        last_end = end
        yield {
            "ph": "X",
            "pid": PID,
            "tid": tid,
            "cat": cat,
            "name": name,
            "ts": _us(begin - t0),
            "dur": _us(end - begin),
            "args": args,
        }


def _encoded(events: Iterable[dict[str, Any]]) -> Timed:
    for event in events:
        yield round(event["ts"] * 1000), _dump(event)


def _step_events(recording: Recording, t0: int) -> list[Timed]:
    return _steps_tracks(recording.steps, t0, PID)


def _steps_tracks(view: StepsView, t0: int, pid: int) -> list[Timed]:
    """A process's steps and host phases (the run's, or one rank's)."""
    host = view.host
    tracks = [
        _step_spans(
            PHASE_TIDS[phase],
            "host",
            phase,
            host[:, i],
            host[:, i + 1],
            step=view.step,
            config=view.config,
            t0=t0,
            pid=pid,
        )
        for i, phase in enumerate(PHASES)
    ]
    tracks.append(
        _step_spans(
            STEPS_TID,
            "step",
            None,
            host[:, 0],
            host[:, -1],
            step=view.step,
            config=view.config,
            t0=t0,
            pid=pid,
        )
    )
    return tracks


def _rank_pid(rank: int) -> int:
    """Rank 0 is the run's own process (``PID``); rank r is ``PID + r``."""
    return PID + rank


def _rank_events(recording: Recording, t0: int) -> list[Timed]:
    """Every rank but rank 0 (the run's own steps) as a process of its own."""
    tracks: list[Timed] = []
    for rank in recording.ranks:
        if rank.info.rank == 0:
            continue
        pid = _rank_pid(rank.info.rank)
        tracks += [*_steps_tracks(rank.steps, t0, pid), _active_spans(rank.steps, t0, pid)]
    return tracks


def _rank_metadata(recording: Recording) -> list[dict[str, Any]]:
    """Names and order of the ranks' processes (rank 0's is the run's, renamed)."""
    events: list[dict[str, Any]] = []
    rank_tracks = [t for t in TRACKS if t[0] not in (SEGMENTS_TID, GAPS_TID)]
    for rank in recording.ranks:
        info, pid = rank.info, _rank_pid(rank.info.rank)
        where = f"{info.node}, " if info.node else ""
        name = f"rank {info.rank} ({where}local rank {info.local_rank}): {rank.hello.workload}"
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "tid": 0,
                "ts": 0,
                "args": {"name": name},
            }
        )
        events.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": pid,
                "tid": 0,
                "ts": 0,
                "args": {"sort_index": info.rank},
            }
        )
        if info.rank != 0:
            events += _track_names(rank_tracks, first_index=0, pid=pid)
    return events


def _device_events(recording: Recording, t0: int) -> list[Timed]:
    return [_active_spans(recording.steps, t0, PID), _gap_events(recording, t0)]


def _active_spans(view: StepsView, t0: int, pid: int) -> Timed:
    """A process's device stream-active spans (steps with device marks)."""
    rows = np.flatnonzero(view.has_device)
    return _step_spans(
        DEVICE_TID,
        "device",
        "active",
        view.device[rows, ACTIVE_FIRST],
        view.device[rows, ACTIVE_LAST],
        step=view.step[rows],
        config=view.config[rows],
        t0=t0,
        pid=pid,
    )


def _gap_events(recording: Recording, t0: int) -> Timed:
    s, e = active_spans(recording.steps)
    g0, g1 = gaps(s, e)
    head = f'{{"ph":"X","pid":{PID},"tid":{GAPS_TID},"cat":"device","name":"gap",'
    for begin, end, _ in _cut(g0, g1):
        since, length = begin - t0, end - begin
        for key, ts, dur, ns in zip(
            since.tolist(), _us_texts(since), _us_texts(length), length.tolist(), strict=True
        ):
            yield key, f'{head}"ts":{ts},"dur":{dur},"args":{{"ms":{ns / 1e6!r}}}}}'


def _kernel_streams(windows: list[KernelWindow]) -> dict[tuple[str, int], int]:
    """(device, stream or thread id) -> track id, in order of first appearance."""
    streams: dict[tuple[str, int], int] = {}
    for window in windows:
        for stream in window.stream[window.device_mask()].tolist():
            streams.setdefault((window.device, int(stream)), KERNEL_TID + len(streams))
    return streams


def _kernel_metadata(
    windows: list[KernelWindow], streams: dict[tuple[str, int], int]
) -> list[dict[str, Any]]:
    if not windows:
        return []
    tracks = [(CAPTURE_TID, "kernel capture windows (profiled)")]
    tracks += [
        (
            tid,
            f"kernels: stream {stream}"
            if device == "cuda"
            else f"CPU ops (profiled): thread {stream}",
        )
        for (device, stream), tid in streams.items()
    ]
    return _track_names(tracks, first_index=len(TRACKS))


def _kernel_events(
    windows: list[KernelWindow], streams: dict[tuple[str, int], int], t0: int
) -> list[Timed]:
    """Each window as a span, and its events on their stream's track (overlaps cut)."""
    tracks = [
        _encoded(
            _complete(
                CAPTURE_TID,
                "kernels",
                "profiled window",
                (
                    (w.t0_ns, w.t1_ns, {"steps": list(w.steps), "perturbed": list(w.perturbed)})
                    for w in windows
                ),
                t0,
            )
        )
    ]
    tracks += [
        _encoded(_stream_events(windows, device, stream, tid, t0))
        for (device, stream), tid in streams.items()
    ]
    return tracks


def _stream_events(
    windows: list[KernelWindow], device: str, stream: int, tid: int, t0: int
) -> Iterator[dict[str, Any]]:
    rows = []
    for w in windows:
        if w.device != device:
            continue
        for i in np.flatnonzero(w.device_mask() & (w.stream == stream)).tolist():
            rows.append(
                (
                    int(w.start[i]),
                    int(w.end[i]),
                    w.names[int(w.name[i])],
                    KERNEL_KINDS[int(w.kind[i])],
                )
            )
    rows.sort()
    for event in _complete(
        tid, "kernels", "event", ((s, e, {"name": n, "kind": k}) for s, e, n, k in rows), t0
    ):
        event["name"] = event["args"].pop("name")
        yield event


def _segment_events(recording: Recording, t0: int) -> Timed:
    return _encoded(_segments(recording, t0))


def _segments(recording: Recording, t0: int) -> Iterator[dict[str, Any]]:
    configs = recording.configs
    ends = [c.t_ns for c in configs[1:]] + [recording.t1_ns]
    for event in _complete(
        SEGMENTS_TID,
        "config",
        "segment",
        ((c.t_ns, end, _config_args(c)) for c, end in zip(configs, ends, strict=True)),
        t0,
    ):
        event["name"] = event["args"]["label"]
        yield event


def _config_args(change: Any) -> dict[str, Any]:
    return {
        "config": change.id,
        "label": change.label,
        "changed": dict(change.changed),
        "first_step": change.first_step,
        "warmup_steps": change.warmup_steps,
    }


def _change_instants(recording: Recording, t0: int) -> Timed:
    return _encoded(_instants(recording, t0))


def _instants(recording: Recording, t0: int) -> Iterator[dict[str, Any]]:
    for change in recording.configs:
        if change.id == 0:
            continue
        yield {
            "ph": "i",
            "s": "g",
            "pid": PID,
            "tid": SEGMENTS_TID,
            "cat": "config",
            "name": f"config {change.id}: {change.label}",
            "ts": _us(max(0, change.t_ns - t0)),
            "args": _config_args(change),
        }


def _counter_events(recording: Recording, t0: int) -> list[Timed]:
    """Each sample's value from the start of its period (a counter holds until the next)."""
    statuses = recording.coarse.statuses()
    tracks = []
    for metric in sorted(recording.coarse.names()):
        status = statuses.get(metric)
        label = status.label if status is not None and status.label else metric
        unit = f" ({status.unit})" if status is not None and status.unit else ""
        tracks.append(_counter(recording, metric, f"{label}{unit}", t0))
    return tracks


def _counter(recording: Recording, metric: str, name: str, t0: int) -> Timed:
    head = f'{{"ph":"C","pid":{PID},"tid":0,"cat":"coarse","name":{json.dumps(name)},'
    series = recording.coarse.snapshot(metric)
    order = np.argsort(series.t0, kind="stable")
    for start, value in zip(series.t0[order].tolist(), series.value[order].tolist(), strict=True):
        if not math.isfinite(value):
            continue
        since = max(0, start - t0)
        yield since, f'{head}"ts":{_us(since)!r},"args":{{"value":{float(value)!r}}}}}'
