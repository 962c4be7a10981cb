"""Why the device idles: every stretch of device idle time gets one cause (docs/advisor.md).

Two piecewise-constant timelines are laid over each other on the ``perf_counter_ns`` axis:

* the **host** timeline of the selected steps: phase ``PHASES[i]`` from mark i to mark i+1,
  ``other`` from a step's end to the next step's start (only between consecutive step ids);
  outside those windows the host state is unknown and the time is not counted at all;
* the **device** timeline from the device marks: ``h2d`` is copy work on the stream,
  ``forward``/``backward``/``optimizer`` are kernel work (together: "stream active", the
  ``ACTIVE_FIRST``..``ACTIVE_LAST`` spans of ``analysis.active_spans``), everything else
  between marks is idle. Time not covered by marks (a step whose device marks never came)
  is *unknown*, never idle. On a CPU the device marks are the host marks.

Every stretch of device idle time is cut at the host boundaries, and each part takes its
cause from the host phase it overlaps: ``data`` → input,
``h2d`` → copy, ``sync`` → sync, ``forward``/``backward``/``optimizer`` → launch (the host
is busy issuing work and the device has none queued), loop overhead → other. **Overlaps:**
a gap that spans several host phases is split at their boundaries and each part gets the
cause of the phase active then (host phases never overlap one another, so no tie-break is
needed among them); the one overlay is a knob change being applied — the loop overhead in
which the runner applied it and the new configuration's transition steps — which takes
priority over every phase: **reconfigure**.

Everything is vectorised: runs of one device state become spans, and each idle span finds
the host intervals it overlaps with two ``searchsorted``; no Python loop runs over steps
(``bench/gap_causes_speed.py`` prints what it costs).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gpuwatch.core.figures.analysis import busy_fraction, merge_intervals
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import ALL_PHASES, N_MARKS, PHASES

CAUSES: tuple[str, ...] = ("input", "copy", "sync", "launch", "reconfigure", "other")

#: Host states: the indices of ``ALL_PHASES``, then these two.
HOST_RECONFIGURE = len(ALL_PHASES)
HOST_NONE = len(ALL_PHASES) + 1
N_HOST = len(ALL_PHASES) + 2

#: Device states.
DEVICE_IDLE, DEVICE_COPY, DEVICE_KERNEL, DEVICE_UNKNOWN = 0, 1, 2, 3
N_DEVICE = 4

#: Cause of device idle time per host state (index: host state; value: index in CAUSES).
_CAUSE_OF_HOST = np.array(
    [
        CAUSES.index(
            {
                "data": "input",
                "h2d": "copy",
                "sync": "sync",
                "forward": "launch",
                "backward": "launch",
                "optimizer": "launch",
            }.get(name, "other")
        )
        for name in ALL_PHASES
    ]
    + [CAUSES.index("reconfigure"), CAUSES.index("other")],
    dtype=np.int8,
)
#: Device state within a step per phase index (``other`` = between steps: idle).
_DEVICE_OF_PHASE = np.array(
    [
        DEVICE_COPY
        if name == "h2d"
        else DEVICE_KERNEL
        if name in ("forward", "backward", "optimizer")
        else DEVICE_IDLE
        for name in ALL_PHASES
    ],
    dtype=np.int8,
)

assert len(PHASES) + 1 == N_MARKS == len(ALL_PHASES), "one interval per mark, `other` last"


def cause_of_host_state(host_state: np.ndarray) -> np.ndarray:
    """The cause index (into ``CAUSES``) device idle time gets from each host state."""
    causes: np.ndarray = _CAUSE_OF_HOST[np.asarray(host_state)]
    return causes


@dataclass(frozen=True)
class TimeSplit:
    """The selected steps' host windows split by device state (ns).

    Device idle time comes as intervals cut at the host boundaries, each with the host state
    active then; busy and unknown device time only as totals (nothing draws them per host
    phase, and splitting them would cost a piece per phase and step).
    """

    idle_start: np.ndarray
    idle_end: np.ndarray
    idle_host: np.ndarray  # host state of each idle interval
    device_ns: np.ndarray  # (N_DEVICE,) total per device state inside the host windows
    host_ns: np.ndarray  # (N_HOST,) total per host state (HOST_NONE: 0, outside windows)

    @property
    def wall_ns(self) -> float:
        return float(self.host_ns.sum())

    def idle_by_host(self) -> np.ndarray:
        """Idle ns per host state, shape ``(N_HOST,)``."""
        return np.bincount(
            self.idle_host.astype(np.int64),
            (self.idle_end - self.idle_start).astype(np.float64),
            N_HOST,
        )

    def idle(self) -> CausedIdle:
        """The device-idle intervals with their causes."""
        return CausedIdle(self.idle_start, self.idle_end, cause_of_host_state(self.idle_host))


@dataclass(frozen=True)
class CausedIdle:
    """Device idle time cut into intervals, each with one cause (an index into ``CAUSES``)."""

    start: np.ndarray
    end: np.ndarray
    cause: np.ndarray

    def __len__(self) -> int:
        return int(self.start.shape[0])

    def totals_ns(self) -> dict[str, float]:
        """Idle ns per cause, every cause present (0 when it never happened)."""
        sums = np.bincount(
            self.cause.astype(np.int64), (self.end - self.start).astype(float), len(CAUSES)
        )
        return {name: float(v) for name, v in zip(CAUSES, sums, strict=True)}

    def spans(self, cause: str) -> tuple[np.ndarray, np.ndarray]:
        """Merged idle spans of one cause (touching pieces become one span: fewer to draw)."""
        keep = self.cause == CAUSES.index(cause)
        return merge_intervals(self.start[keep], self.end[keep])


def host_timeline(
    view: StepsView, rows: np.ndarray | None = None, reconfiguring: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Boundaries ``b`` (sorted) and the host state of each interval ``[b[k], b[k+1]]``.

    ``rows`` selects steps (a boolean mask, default all); ``reconfiguring`` flags steps of a
    transition, whose phases and the loop overhead just before them become reconfigure.
    """
    sel = np.ones(len(view), bool) if rows is None else np.asarray(rows, bool)
    host = view.host[sel]
    n = len(host)
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int8)
    bounds = np.maximum.accumulate(host.reshape(-1))  # clock oddities cannot go back in time
    states = np.tile(np.arange(N_MARKS, dtype=np.int8), n)[:-1]
    if n > 1:
        between = states[N_MARKS - 1 :: N_MARKS]  # a view: the loop overhead after each step
        between[np.diff(view.step[sel]) != 1] = HOST_NONE
    if reconfiguring is not None:
        flagged = np.flatnonzero(np.asarray(reconfiguring, bool)[sel])
        if flagged.size:
            cols = (flagged[:, None] * N_MARKS + np.arange(-1, N_MARKS - 1)).reshape(-1)
            cols = cols[(cols >= 0) & (cols < len(states))]
            # The overhead before a flagged step is where the runner applied the change.
            states[cols] = np.where(states[cols] == HOST_NONE, HOST_NONE, HOST_RECONFIGURE)
    return bounds, states


def device_timeline(view: StepsView) -> tuple[np.ndarray, np.ndarray]:
    """Boundaries and device state of each interval, from the steps with device marks."""
    has = np.asarray(view.has_device, bool)
    dev = view.device[has]
    n = len(dev)
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int8)
    bounds = np.maximum.accumulate(dev.reshape(-1))
    states = np.tile(_DEVICE_OF_PHASE, n)[:-1]
    if n > 1:
        between = states[N_MARKS - 1 :: N_MARKS]
        between[np.diff(view.step[has]) != 1] = DEVICE_UNKNOWN  # a step without marks
    return bounds, states


def runs(bounds: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Spans of consecutive intervals ``[bounds[k], bounds[k+1]]`` where ``mask[k]``."""
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    first, stop = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return bounds[first], bounds[stop]


def _split_by_host(
    a: np.ndarray, b: np.ndarray, hb: np.ndarray, hs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut sorted, disjoint spans at the host boundaries: ``(start, end, host state)`` of
    each part inside a host window (parts outside every window are dropped)."""
    k0 = np.maximum(np.searchsorted(hb, a, side="right") - 1, 0)
    k1 = np.minimum(np.searchsorted(hb, b, side="left"), len(hs))
    counts = np.maximum(k1 - k0, 0)
    span = np.repeat(np.arange(len(a)), counts)
    k = np.repeat(k0 - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
    s, e = np.maximum(a[span], hb[k]), np.minimum(b[span], hb[k + 1])
    state = hs[k]
    keep = (e > s) & (state != HOST_NONE)
    return s[keep], e[keep], state[keep]


def time_split(
    view: StepsView, rows: np.ndarray | None = None, reconfiguring: np.ndarray | None = None
) -> TimeSplit:
    """Device state over the selected steps' host windows; idle time cut by host phase.

    The device timeline uses every marked step of ``view`` (work of a neighbouring step may
    run on the device during a selected step); the host windows are the selected steps'.
    Cost: a few passes over the marks and two ``searchsorted`` per idle span; no sort.
    """
    hb, hs = host_timeline(view, rows, reconfiguring)
    host_ns = (
        np.bincount(hs.astype(np.int64), np.diff(hb).astype(np.float64), N_HOST)
        if len(hb) >= 2
        else np.zeros(N_HOST)
    )
    host_ns[HOST_NONE] = 0.0
    device_ns: np.ndarray = np.zeros(N_DEVICE)
    if len(hb) < 2:
        e = np.empty(0, np.int64)
        return TimeSplit(e, e.copy(), np.empty(0, np.int8), device_ns, host_ns)
    if _device_is_host(view):  # CPU: the host intervals are the device's own
        device = np.tile(_DEVICE_OF_PHASE, len(hb) // N_MARKS + 1)[: len(hs)]
        inside = hs != HOST_NONE
        widths = np.diff(hb).astype(np.float64)
        device_ns = np.bincount(device[inside].astype(np.int64), widths[inside], N_DEVICE)
        idle = inside & (device == DEVICE_IDLE) & (widths > 0)
        return TimeSplit(hb[:-1][idle], hb[1:][idle], hs[idle], device_ns, host_ns)
    db, ds = device_timeline(view)
    if len(db) >= 2:
        w0, w1 = runs(hb, hs != HOST_NONE)  # the host windows (a few runs of steps)
        for state in (DEVICE_COPY, DEVICE_KERNEL):
            a, b = runs(db, ds == state)
            covered = busy_fraction(a, b, w0, w1) * (w1 - w0)
            device_ns[state] = float(np.nansum(covered))
    s, e, host = _device_idle(hb, hs, db, ds)
    device_ns[DEVICE_IDLE] = float((e - s).sum())
    device_ns[DEVICE_UNKNOWN] = max(0.0, float(host_ns.sum()) - device_ns[:DEVICE_UNKNOWN].sum())
    return TimeSplit(s, e, host, device_ns, host_ns)


def _device_idle(
    hb: np.ndarray, hs: np.ndarray, db: np.ndarray, ds: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The device's idle intervals (timeline ``db``, ``ds``) inside the host windows
    (``hb``, ``hs``), cut at the host boundaries, each with its host state."""
    if len(db) >= 2:
        a, b = runs(db, ds == DEVICE_IDLE)
    else:
        a = b = np.empty(0, np.int64)
    return _split_by_host(a, b, hb, hs)


def _device_is_host(view: StepsView) -> bool:
    """Every step's device marks are its host marks (a CPU device)."""
    return bool(np.all(view.has_device)) and np.array_equal(view.device, view.host)


def caused_idle(
    view: StepsView, rows: np.ndarray | None = None, reconfiguring: np.ndarray | None = None
) -> CausedIdle:
    """The device's idle time during the selected steps, each interval with its cause
    (``time_split``'s idle intervals, without the busy totals: every frame prices these)."""
    if _device_is_host(view):
        return time_split(view, rows, reconfiguring).idle()
    hb, hs = host_timeline(view, rows, reconfiguring)
    if len(hb) < 2:
        e = np.empty(0, np.int64)
        return CausedIdle(e, e.copy(), np.empty(0, np.int8))
    s, e, host = _device_idle(hb, hs, *device_timeline(view))
    return CausedIdle(s, e, cause_of_host_state(host))


def reconfiguring_steps(view: StepsView, changes: Iterable[ConfigChange]) -> np.ndarray:
    """Steps of a knob change's transition (``first_step`` up to ``first_step +
    warmup_steps``). The start (config 0) is warm-up, not a change, and is not flagged."""
    flags = np.zeros(len(view), bool)
    for change in changes:  # a handful of changes, not steps
        if change.id == 0 or not change.changed:
            continue
        flags |= (
            (view.config == change.id)
            & (view.step >= change.first_step)
            & (view.step < change.first_step + change.warmup_steps)
        )
    return flags
