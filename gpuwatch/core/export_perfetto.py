"""A recording as Chrome trace-event JSON, which Perfetto and chrome://tracing open.

One process for the run, one track (thread) per lane: the steps, each host phase, the
device stream's active spans, the stream's gaps, and the configuration segments; counters
for the coarse samples; a global instant at every configuration change. Times are
microseconds from the run's t0. Events on one track never overlap (a viewer would nest or
drop them): a span that starts before the previous one on its track ended is cut to start
there, and dropped if nothing is left.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gpuwatch.core.analysis import active_spans, gaps
from gpuwatch.core.kernel_window import KernelWindow
from gpuwatch.core.recording_reader import Recording, kernel_windows
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


def perfetto_trace(recording: Recording) -> dict[str, Any]:
    """The trace as a JSON-ready dict: ``{"traceEvents": [...], "displayTimeUnit": "ms"}``."""
    t0 = recording.t0_ns
    windows = kernel_windows(recording)
    streams = _kernel_streams(windows)
    timed = [*_step_events(recording, t0), *_segment_events(recording, t0),
             *_device_events(recording, t0), *_counter_events(recording, t0),
             *_change_instants(recording, t0), *_kernel_events(windows, streams, t0)]
    timed.sort(key=lambda e: e["ts"])  # stable: a track's events keep their order
    return {"traceEvents": [*_metadata(recording), *_kernel_metadata(windows, streams),
                            *timed], "displayTimeUnit": "ms"}


def write_perfetto(recording: Recording, out: str | Path) -> None:
    with Path(out).open("w", encoding="utf-8") as f:
        json.dump(perfetto_trace(recording), f, separators=(",", ":"), allow_nan=False)


def _us(ns: int) -> float:
    """ns since t0 as µs, rounded to whole ns so sums of ts and dur stay exact enough."""
    return round(ns / 1000, 3)


def _metadata(recording: Recording) -> list[dict[str, Any]]:
    hello = recording.hello or {}
    device = hello.get("device") if isinstance(hello.get("device"), dict) else {}
    what = hello.get("workload") or recording.meta.get("spec", {}).get("workload") or "run"
    name = f"gpuwatch: {what} on {device.get('name') or device.get('kind') or 'unknown device'}"
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "ts": 0,
         "args": {"name": name}}]
    for index, (tid, label) in enumerate(TRACKS):
        events.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid, "ts": 0,
                       "args": {"name": label}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid, "ts": 0,
                       "args": {"sort_index": index}})
    return events


def _complete(tid: int, cat: str, name: str, spans: Iterator[tuple[int, int, dict[str, Any]]],
              t0: int) -> Iterator[dict[str, Any]]:
    """``X`` events on one track from ``(start_ns, end_ns, args)`` in time order, never
    overlapping: a span is cut to begin where the previous one ended."""
    last_end: int | None = None
    for start, end, args in spans:
        begin = start if last_end is None else max(start, last_end)
        if end <= begin:
            continue
        last_end = end
        yield {"ph": "X", "pid": PID, "tid": tid, "cat": cat, "name": name,
               "ts": _us(begin - t0), "dur": _us(end - begin), "args": args}


def _step_events(recording: Recording, t0: int) -> Iterator[dict[str, Any]]:
    view = recording.steps
    args = [{"step": int(s), "config": int(c)} for s, c in
            zip(view.step.tolist(), view.config.tolist(), strict=True)]
    host = view.host
    for i, phase in enumerate(PHASES):
        yield from _complete(PHASE_TIDS[phase], "host", phase,
                             zip(host[:, i].tolist(), host[:, i + 1].tolist(), args,
                                 strict=True), t0)
    for event in _complete(STEPS_TID, "step", "step",
                           zip(host[:, 0].tolist(), host[:, -1].tolist(), args, strict=True),
                           t0):
        event["name"] = f"step {event['args']['step']}"
        yield event


def _device_events(recording: Recording, t0: int) -> Iterator[dict[str, Any]]:
    view = recording.steps
    has = view.has_device
    dev = view.device[has]
    args = [{"step": int(s), "config": int(c)} for s, c in
            zip(view.step[has].tolist(), view.config[has].tolist(), strict=True)]
    yield from _complete(DEVICE_TID, "device", "active",
                         zip(dev[:, ACTIVE_FIRST].tolist(), dev[:, ACTIVE_LAST].tolist(), args,
                             strict=True), t0)
    s, e = active_spans(view)
    g0, g1 = gaps(s, e)
    yield from _complete(GAPS_TID, "device", "gap",
                         ((a, b, {"ms": (b - a) / 1e6}) for a, b in
                          zip(g0.tolist(), g1.tolist(), strict=True)), t0)


def _kernel_streams(windows: list[KernelWindow]) -> dict[tuple[str, int], int]:
    """(device, stream or thread id) -> track id, in order of first appearance."""
    streams: dict[tuple[str, int], int] = {}
    for window in windows:
        for stream in window.stream[window.device_mask()].tolist():
            streams.setdefault((window.device, int(stream)), KERNEL_TID + len(streams))
    return streams


def _kernel_metadata(windows: list[KernelWindow], streams: dict[tuple[str, int], int]
                     ) -> list[dict[str, Any]]:
    if not windows:
        return []
    tracks = [(CAPTURE_TID, "kernel capture windows (profiled)")]
    tracks += [(tid, f"kernels: stream {stream}" if device == "cuda"
                else f"CPU ops (profiled): thread {stream}")
               for (device, stream), tid in streams.items()]
    events = []
    for index, (tid, label) in enumerate(tracks, start=len(TRACKS)):
        events.append({"ph": "M", "name": "thread_name", "pid": PID, "tid": tid, "ts": 0,
                       "args": {"name": label}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": PID, "tid": tid, "ts": 0,
                       "args": {"sort_index": index}})
    return events


def _kernel_events(windows: list[KernelWindow], streams: dict[tuple[str, int], int],
                   t0: int) -> Iterator[dict[str, Any]]:
    """Each window as a span, and its events on their stream's track (overlaps cut)."""
    yield from _complete(CAPTURE_TID, "kernels", "profiled window",
                         ((w.t0_ns, w.t1_ns, {"steps": list(w.steps),
                                              "perturbed": list(w.perturbed)})
                          for w in windows), t0)
    for (device, stream), tid in streams.items():
        rows = []
        for w in windows:
            if w.device != device:
                continue
            for i in np.flatnonzero(w.device_mask() & (w.stream == stream)).tolist():
                rows.append((int(w.start[i]), int(w.end[i]), w.names[int(w.name[i])],
                             KERNEL_KINDS[int(w.kind[i])]))
        rows.sort()
        for event in _complete(tid, "kernels", "event",
                               ((s, e, {"name": n, "kind": k}) for s, e, n, k in rows), t0):
            event["name"] = event["args"].pop("name")
            yield event


def _segment_events(recording: Recording, t0: int) -> Iterator[dict[str, Any]]:
    configs = recording.configs
    ends = [c.t_ns for c in configs[1:]] + [recording.t1_ns]
    for event in _complete(SEGMENTS_TID, "config", "segment",
                           ((c.t_ns, end, _config_args(c)) for c, end in
                            zip(configs, ends, strict=True)), t0):
        event["name"] = event["args"]["label"]
        yield event


def _config_args(change: Any) -> dict[str, Any]:
    return {"config": change.id, "label": change.label, "changed": dict(change.changed),
            "first_step": change.first_step, "warmup_steps": change.warmup_steps}


def _change_instants(recording: Recording, t0: int) -> Iterator[dict[str, Any]]:
    for change in recording.configs:
        if change.id == 0:
            continue
        yield {"ph": "i", "s": "g", "pid": PID, "tid": SEGMENTS_TID, "cat": "config",
               "name": f"config {change.id}: {change.label}", "ts": _us(max(0, change.t_ns - t0)),
               "args": _config_args(change)}


def _counter_events(recording: Recording, t0: int) -> Iterator[dict[str, Any]]:
    """Each sample's value from the start of its period (a counter holds until the next)."""
    statuses = recording.coarse.statuses()
    for metric in sorted(recording.coarse.names()):
        status = statuses.get(metric)
        label = status.label if status is not None and status.label else metric
        unit = f" ({status.unit})" if status is not None and status.unit else ""
        series = recording.coarse.snapshot(metric)
        order = np.argsort(series.t0, kind="stable")
        for start, value in zip(series.t0[order].tolist(), series.value[order].tolist(),
                                strict=True):
            if not math.isfinite(value):
                continue
            yield {"ph": "C", "pid": PID, "tid": 0, "cat": "coarse", "name": f"{label}{unit}",
                   "ts": _us(max(0, start - t0)), "args": {"value": value}}
