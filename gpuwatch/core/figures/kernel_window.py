"""A kernel capture window (a ``kernels`` message) and the exact figures it gives.

CUDA events only bound busy time from above (a phase span may hide bubbles); the profiler's
own records do not. From one window: busy time = union of kernel/memcpy/memset intervals
(per stream, and over all streams: "at least one ran", NVML's meaning but exact), launch gaps
(idle between consecutive activities of one stream), under-filled kernels (Kineto's "blocks
per SM" < 1: the kernel cannot occupy every SM, which no time-based utilization shows) and
HTA's idle categories (Holistic Trace Analysis, ``TraceAnalysis.get_idle_time_breakdown``;
tests/test_kernel_window_hta.py checks them against HTA itself):

* **host wait**: the next activity was launched (its runtime call) after the previous one had
  ended: the host did not enqueue work fast enough (input, Python, ``.item()``).
* **kernel wait**: not host wait and the gap is shorter than ``KERNEL_WAIT_NS``: launch
  overhead between back-to-back small kernels (CUDA graphs / ``torch.compile`` help).
* **other**: the rest (cross-stream waits, launch delays, unknown launch time).

On a CPU device the events are the outermost CPU ops of each thread; an op runs when it is
issued, so its launch is its start and every gap between ops is host wait by the same rule.
Busy time there is every torch op of the training process, the input pipeline's too when it
runs in the loop (``num_workers=0``: decode and augmentation inside ``next(loader)``), so it can
exceed the compute phases' share (docs/advisor.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuwatch.core.figures.analysis import gaps, merge_intervals
from gpuwatch.protocol import CAPTURE_STATUSES, KERNEL_KINDS

#: HTA's ``consecutive_kernel_delay``: a shorter gap whose launch came in time is kernel wait.
#: HTA documents its default of 30 as nanoseconds but compares it with the trace's timestamps,
#: which Kineto writes in µs, so what HTA reports is 30 µs; back-to-back kernels on one A100
#: stream sit 1-16 µs apart in real traces, none under 30 ns (docs/advisor.md, "Checked against
#: HTA on real GPU traces").
KERNEL_WAIT_NS = 30_000
KERNEL, MEMCPY, MEMSET, CPU_OP = (
    KERNEL_KINDS.index(k) for k in ("kernel", "memcpy", "memset", "cpu_op")
)


class KernelWindowError(ValueError):
    """A ``kernels`` message whose columns do not fit together (dropped with a log line)."""


@dataclass(frozen=True)
class IdleBreakdown:
    """HTA's idle categories inside a window, summed over streams (ns)."""

    host_wait_ns: int
    kernel_wait_ns: int
    other_ns: int

    @property
    def total_ns(self) -> int:
        return self.host_wait_ns + self.kernel_wait_ns + self.other_ns

    def to_json(self) -> dict[str, float]:
        return {
            "host_wait_ms": self.host_wait_ns / 1e6,
            "kernel_wait_ms": self.kernel_wait_ns / 1e6,
            "other_ms": self.other_ns / 1e6,
        }


@dataclass(frozen=True)
class WindowSummary:
    """The figures of one window; see the module docstring for what each one means."""

    window_ns: int
    busy_ns: int
    busy_fraction: float | None
    kernels: int  # GPU kernels, or CPU ops on a CPU device
    copies: int  # memcpy + memset activities
    launch_gaps: int
    launch_gap_median_ns: float | None
    launch_gap_total_ns: int
    underfilled: int  # kernels with blocks per SM < 1
    underfilled_busy_share: float | None  # of busy time; None without geometry
    geometry_known: int  # kernels whose blocks per SM Kineto gave
    idle: IdleBreakdown
    stream_busy_ns: dict[int, int]
    dropped: int

    def to_json(self) -> dict[str, Any]:
        """The ``kernel_window`` object of ``gpuwatch bench --format json``."""
        return {
            "window_ms": self.window_ns / 1e6,
            "busy_ms": self.busy_ns / 1e6,
            "busy_fraction": self.busy_fraction,
            "kernels": self.kernels,
            "copies": self.copies,
            "launch_gaps": self.launch_gaps,
            "launch_gap_median_us": (
                None if self.launch_gap_median_ns is None else self.launch_gap_median_ns / 1e3
            ),
            "launch_gap_total_ms": self.launch_gap_total_ns / 1e6,
            "underfilled": self.underfilled,
            "underfilled_busy_share": self.underfilled_busy_share,
            "geometry_known": self.geometry_known,
            "idle": self.idle.to_json(),
            "dropped": self.dropped,
        }


@dataclass(frozen=True)
class OpRow:
    """One name's line of a window's op table, as ``torch.profiler``'s ``key_averages()``
    table has it: calls, total time, and self time (total minus the time of the events
    nested directly inside each call on the same stream or thread)."""

    name: str
    kind: str  # protocol.KERNEL_KINDS: kernel, memcpy, memset or cpu_op
    calls: int
    total_ns: int
    self_ns: int

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.calls if self.calls else 0.0


@dataclass(frozen=True)
class KernelWindow:
    """One capture window on the host ``perf_counter_ns`` axis.

    ``status`` is ``ok`` or the failure (``refused``/``failed``, with ``error``); a failed
    window has no events. ``steps`` are the recorded steps, ``perturbed`` every step that ran
    under the profiler (the recorded ones plus its warm-up): the scoreboard leaves them out.
    Figures cover ``[t0_ns, covered_t1_ns]``: up to ``t1_ns`` unless events were dropped at
    the message cap, then up to the first dropped event.
    """

    status: str
    error: str | None
    device: str  # "cuda" | "cpu"
    steps: tuple[int, ...]
    perturbed: tuple[int, ...]
    t0_ns: int
    t1_ns: int
    covered_t1_ns: int
    names: tuple[str, ...]
    kind: np.ndarray  # int8 index into protocol.KERNEL_KINDS
    name: np.ndarray  # int32 index into names
    stream: np.ndarray  # int64: CUDA stream id, or the thread id of a CPU op
    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    launch: np.ndarray  # int64 ns of the launching runtime call; -1 unknown
    blocks_per_sm: np.ndarray  # float64; NaN unknown
    grid: tuple[tuple[int, int, int] | None, ...]
    block: tuple[tuple[int, int, int] | None, ...]
    dropped: int

    def __len__(self) -> int:
        return int(self.start.shape[0])

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> KernelWindow:
        """Build from a decoded ``kernels`` message; ``KernelWindowError`` if it is malformed."""
        try:
            return cls._from_message(message)
        except (KeyError, TypeError, ValueError) as exc:
            raise KernelWindowError(f"malformed 'kernels' message: {exc}") from None

    @classmethod
    def _from_message(cls, m: dict[str, Any]) -> KernelWindow:
        status = str(m["status"])
        if status not in CAPTURE_STATUSES:
            raise ValueError(f"unknown status {status!r}")
        n = len(m["start"])
        names = tuple(str(x) for x in m["names"])
        kind = np.asarray(m["type"], np.int8).reshape(n)
        name = np.asarray(m["name"], np.int32).reshape(n)
        if n and (kind.min() < 0 or kind.max() >= len(KERNEL_KINDS)):
            raise ValueError("type index out of range")
        if n and (name.min() < 0 or name.max() >= len(names)):
            raise ValueError("name index out of range")
        start = np.asarray(m["start"], np.int64).reshape(n)
        end = np.asarray(m["end"], np.int64).reshape(n)
        t0 = int(m.get("t0_ns", int(start.min()) if n else 0))
        t1 = int(m.get("t1_ns", int(end.max()) if n else t0))
        covered = m.get("covered_t1_ns")
        return cls(
            status=status,
            error=str(m["error"]) if m.get("error") else None,
            device=str(m.get("device", "cpu")),
            steps=tuple(int(s) for s in m["steps"]),
            perturbed=tuple(int(s) for s in m["perturbed"]),
            t0_ns=t0,
            t1_ns=t1,
            covered_t1_ns=int(covered) if covered is not None else t1,
            names=names,
            kind=kind,
            name=name,
            stream=np.asarray(m["stream"], np.int64).reshape(n),
            start=start,
            end=end,
            launch=_optional_ints(m.get("launch"), n),
            blocks_per_sm=_optional_floats(m.get("blocks_per_sm"), n),
            grid=_dims(m.get("grid"), n),
            block=_dims(m.get("block"), n),
            dropped=int(m.get("dropped", 0)),
        )

    def to_message(self) -> dict[str, Any]:
        """The ``kernels`` message this window was built from (a recording started mid-run
        writes the windows the session already holds this way)."""
        message: dict[str, Any] = {
            "kind": "kernels",
            "status": self.status,
            "device": self.device,
            "steps": list(self.steps),
            "perturbed": list(self.perturbed),
            "t0_ns": self.t0_ns,
            "t1_ns": self.t1_ns,
            "covered_t1_ns": self.covered_t1_ns,
            "dropped": self.dropped,
            "names": list(self.names),
            "type": self.kind.tolist(),
            "name": self.name.tolist(),
            "stream": self.stream.tolist(),
            "start": self.start.tolist(),
            "end": self.end.tolist(),
            "launch": [None if v < 0 else v for v in self.launch.tolist()],
            "blocks_per_sm": [v if np.isfinite(v) else None for v in self.blocks_per_sm.tolist()],
            "grid": [None if g is None else list(g) for g in self.grid],
            "block": [None if b is None else list(b) for b in self.block],
        }
        if self.error:
            message["error"] = self.error
        return message

    def device_mask(self) -> np.ndarray:
        """Events that occupy the device: GPU activities on CUDA, CPU ops on a CPU."""
        mask: np.ndarray = self.kind != CPU_OP if self.device == "cuda" else self.kind == CPU_OP
        return mask

    def busy_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Union of the device events' intervals over all streams, clipped to the window."""
        sel = self.device_mask()
        s = np.clip(self.start[sel], self.t0_ns, self.covered_t1_ns)
        e = np.clip(self.end[sel], self.t0_ns, self.covered_t1_ns)
        return merge_intervals(s, e)

    def summary(self) -> WindowSummary:
        window_ns = max(0, self.covered_t1_ns - self.t0_ns)
        sel = self.device_mask()
        bs, be = self.busy_spans()
        busy = int((be - bs).sum())
        kernels = int(
            np.count_nonzero(self.kind[sel] == (KERNEL if self.device == "cuda" else CPU_OP))
        )
        copies = int(np.count_nonzero(sel & ((self.kind == MEMCPY) | (self.kind == MEMSET))))
        gap_lengths: list[np.ndarray] = []
        stream_busy: dict[int, int] = {}
        host = kernel = other = 0
        launch = self.launch if self.device == "cuda" else self.start
        for stream in np.unique(self.stream[sel]).tolist():
            idx = np.flatnonzero(sel & (self.stream == stream))
            s, e = merge_intervals(self.start[idx], self.end[idx])
            stream_busy[int(stream)] = int((e - s).sum())
            g0, g1 = gaps(s, e, min_ns=1)
            gap_lengths.append(g1 - g0)
            h, k, o = _idle_categories(self.start[idx], self.end[idx], launch[idx])
            host, kernel, other = host + h, kernel + k, other + o
        lengths = np.concatenate(gap_lengths) if gap_lengths else np.empty(0, np.int64)
        kern = sel & (self.kind == KERNEL)
        known = kern & np.isfinite(self.blocks_per_sm)
        under = known & (self.blocks_per_sm < 1)
        under_share = None
        if known.any() and busy > 0:
            us, ue = merge_intervals(self.start[under], self.end[under])
            under_share = float((ue - us).sum()) / busy
        return WindowSummary(
            window_ns=window_ns,
            busy_ns=busy,
            busy_fraction=busy / window_ns if window_ns > 0 else None,
            kernels=kernels,
            copies=copies,
            launch_gaps=int(lengths.size),
            launch_gap_median_ns=float(np.median(lengths)) if lengths.size else None,
            launch_gap_total_ns=int(lengths.sum()),
            underfilled=int(under.sum()),
            underfilled_busy_share=under_share,
            geometry_known=int(known.sum()),
            idle=IdleBreakdown(host, kernel, other),
            stream_busy_ns=stream_busy,
            dropped=self.dropped,
        )

    def top_names(self, count: int = 5) -> list[tuple[str, int, int]]:
        """``(name, calls, total ns)`` of the device events with the most total time."""
        sel = self.device_mask()
        if not sel.any():
            return []
        totals = np.bincount(
            self.name[sel], weights=(self.end - self.start)[sel], minlength=len(self.names)
        )
        calls = np.bincount(self.name[sel], minlength=len(self.names))
        order = np.argsort(-totals, kind="stable")[:count]
        return [(self.names[i], int(calls[i]), int(totals[i])) for i in order if calls[i]]

    def op_table(self) -> list[OpRow]:
        """The device events grouped by name (and kind), most total time first.

        Self time subtracts each event's direct children: events of the same stream (the
        thread, for CPU ops) lying wholly inside it. A CPU window holds only each thread's
        outermost ops and a CUDA stream runs its activities one after another, so there the
        self time equals the total unless the events do nest.
        """
        sel = np.flatnonzero(self.device_mask())
        if not sel.size:
            return []
        duration = self.end[sel] - self.start[sel]
        inner = _nested_time(self.stream[sel], self.start[sel], self.end[sel])
        key = self.name[sel].astype(np.int64) * len(KERNEL_KINDS) + self.kind[sel]
        keys, group = np.unique(key, return_inverse=True)
        calls = np.bincount(group, minlength=len(keys))
        total = np.bincount(group, weights=duration, minlength=len(keys))
        own = np.bincount(group, weights=duration - inner, minlength=len(keys))
        rows = [
            OpRow(
                name=self.names[int(k) // len(KERNEL_KINDS)],
                kind=KERNEL_KINDS[int(k) % len(KERNEL_KINDS)],
                calls=int(calls[i]),
                total_ns=int(total[i]),
                self_ns=int(own[i]),
            )
            for i, k in enumerate(keys.tolist())
        ]
        rows.sort(key=lambda r: (-r.total_ns, r.name))
        return rows


def _nested_time(stream: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per event, the summed duration of its direct children (events of the same stream
    wholly inside it, with no other such event between them). Streams without nesting are
    answered with numpy alone; only nested ones walk their events with a stack."""
    inner = np.zeros(start.shape[0], np.int64)
    order = np.lexsort((-end, start, stream))
    for s in np.unique(stream).tolist():
        idx = order[stream[order] == s]
        if idx.size < 2:
            continue
        reach = np.maximum.accumulate(end[idx])[:-1]
        if not (start[idx[1:]] < reach).any():
            continue
        stack: list[int] = []
        for i in idx.tolist():
            while stack and not (start[i] >= start[stack[-1]] and end[i] <= end[stack[-1]]):
                stack.pop()
            if stack:
                inner[stack[-1]] += end[i] - start[i]
            stack.append(i)
    return inner


def describe(summary: WindowSummary, device: str) -> str:
    """One line for a tooltip, the log or ``gpuwatch bench``."""
    what = "kernels" if device == "cuda" else "CPU ops"
    busy = "n/a" if summary.busy_fraction is None else f"{100 * summary.busy_fraction:.0f}%"
    parts = [f"busy {busy} of {summary.window_ns / 1e6:.1f} ms", f"{summary.kernels} {what}"]
    if summary.launch_gaps:
        parts.append(
            f"{summary.launch_gaps} gaps (median "
            f"{(summary.launch_gap_median_ns or 0) / 1e3:.1f} µs, total "
            f"{summary.launch_gap_total_ns / 1e6:.2f} ms)"
        )
    if device == "cuda":
        if summary.geometry_known:
            share = summary.underfilled_busy_share or 0.0
            parts.append(
                f"{summary.underfilled} under-filled (<1 block/SM, {100 * share:.0f}% of busy)"
            )
        else:
            parts.append("launch geometry n/a")
    if summary.dropped:
        parts.append(f"{summary.dropped} events dropped at the message cap")
    return "; ".join(parts)


def _idle_categories(
    start: np.ndarray, end: np.ndarray, launch: np.ndarray
) -> tuple[int, int, int]:
    """HTA's categories for the gaps of one stream (events in any order, may nest)."""
    if start.size < 2:
        return 0, 0, 0
    order = np.argsort(start, kind="stable")
    s, e, ln = start[order], end[order], launch[order]
    prev_end = np.maximum.accumulate(e)[:-1]
    gap = s[1:] - prev_end
    idle = gap > 0
    host = idle & (ln[1:] >= 0) & (ln[1:] > prev_end)
    kernel = idle & ~host & (gap < KERNEL_WAIT_NS)
    other = idle & ~host & ~kernel
    return int(gap[host].sum()), int(gap[kernel].sum()), int(gap[other].sum())


def _optional_ints(values: Any, n: int) -> np.ndarray:
    if values is None:
        return np.full(n, -1, np.int64)
    return np.asarray([-1 if v is None else int(v) for v in values], np.int64).reshape(n)


def _optional_floats(values: Any, n: int) -> np.ndarray:
    if values is None:
        return np.full(n, np.nan)
    return np.asarray([np.nan if v is None else float(v) for v in values], np.float64).reshape(n)


def _dims(values: Any, n: int) -> tuple[tuple[int, int, int] | None, ...]:
    if values is None:
        return (None,) * n
    if len(values) != n:
        raise ValueError("geometry column differs in length")
    out: list[tuple[int, int, int] | None] = []
    for v in values:
        out.append(None if v is None else (int(v[0]), int(v[1]), int(v[2])))
    return tuple(out)
