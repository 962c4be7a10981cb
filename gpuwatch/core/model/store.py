"""Bounded, thread-safe numpy ring buffers for step timing and coarse samples.

The link reader thread appends; the GUI timer takes *copies* (``snapshot``), so threads
exchange arrays, never live objects. Memory is fixed at construction: old data falls off.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

import numpy as np

from gpuwatch.protocol import N_MARKS

#: Default ring sizes: ~2 minutes of steps at 1,000 steps/s; ~3 hours of 1 Hz samples.
DEFAULT_STEP_CAPACITY = 1 << 17
DEFAULT_SERIES_CAPACITY = 1 << 14


@dataclass(frozen=True)
class StepsView:
    """A copy of consecutive steps, oldest first.

    ``host`` and ``device`` are ``(n, N_MARKS)`` int64 arrays of ``perf_counter_ns`` marks.
    ``device`` rows are valid only where ``has_device`` is true (CUDA marks arrive later, or
    were skipped when the event pool ran dry). On a CPU device the session stores the host
    marks as device marks: there, host spans are the device truth.
    """

    step: np.ndarray
    config: np.ndarray
    samples: np.ndarray
    host: np.ndarray
    device: np.ndarray
    has_device: np.ndarray

    def __len__(self) -> int:
        return int(self.step.shape[0])

    def rows(self, which: slice | np.ndarray) -> StepsView:
        """The steps ``which`` selects (a slice or a boolean mask), every column alike."""
        return StepsView(
            self.step[which],
            self.config[which],
            self.samples[which],
            self.host[which],
            self.device[which],
            self.has_device[which],
        )

    def shifted(self, by_ns: np.ndarray) -> StepsView:
        """The same steps with every mark moved by ``-by_ns`` (one value per step): another
        machine's marks put on this machine's clock (``rank_clock``)."""
        back = by_ns.astype(np.int64)[:, None]
        return dataclasses.replace(self, host=self.host - back, device=self.device - back)

    @classmethod
    def empty(cls) -> StepsView:
        return cls(
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            np.empty((0, N_MARKS), np.int64),
            np.empty((0, N_MARKS), np.int64),
            np.empty(0, bool),
        )


class StepStore:
    """Ring buffer of steps in arrival order (step ids and end marks increase)."""

    def __init__(self, capacity: int = DEFAULT_STEP_CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._step = np.zeros(capacity, np.int64)
        # Every column is int64, like every integer the protocol accepts: a script may count
        # samples in tokens (billions), and a value the ring cannot hold would end the link's
        # reader thread.
        self._config = np.zeros(capacity, np.int64)
        self._samples = np.zeros(capacity, np.int64)
        self._host = np.zeros((capacity, N_MARKS), np.int64)
        self._device = np.zeros((capacity, N_MARKS), np.int64)
        self._has_device = np.zeros(capacity, bool)
        # ns the runner's instruments spent on each step; -1 where the runner did not say
        # (an older runner, a recording)
        self._instrument_ns = np.full(capacity, -1, np.int64)
        self._count = 0  # total rows ever appended
        self._device_is_host = False

    @property
    def count(self) -> int:
        """Steps appended since creation (including those that fell off the ring)."""
        return self._count

    def set_device_is_host(self, value: bool) -> None:
        """On a CPU device host spans are the device truth: mirror them as device marks."""
        self._device_is_host = value

    def clear(self) -> None:
        with self._lock:
            self._count = 0

    def append(
        self,
        step: list[int],
        config: list[int],
        samples: list[int],
        host: list[list[int]],
        instrument_ns: list[int] | None = None,
    ) -> None:
        """Append a columnar batch as sent in a ``steps`` message (``instrument_ns``: its
        optional column, the runner's own time per step)."""
        n = len(step)
        if n == 0:
            return
        host_arr = np.asarray(host, np.int64).reshape(n, N_MARKS)
        spent = (
            np.full(n, -1, np.int64)
            if instrument_ns is None
            else np.maximum(np.asarray(instrument_ns, np.int64), 0)
        )
        with self._lock:
            if n > self.capacity:  # keep only what fits
                step, config, samples = (
                    step[-self.capacity :],
                    config[-self.capacity :],
                    samples[-self.capacity :],
                )
                host_arr = host_arr[-self.capacity :]
                spent = spent[-self.capacity :]
                self._count += n - self.capacity
                n = self.capacity
            idx = (self._count + np.arange(n)) % self.capacity
            self._step[idx] = step
            self._config[idx] = config
            self._samples[idx] = samples
            self._host[idx] = host_arr
            self._instrument_ns[idx] = spent
            if self._device_is_host:
                self._device[idx] = host_arr
            self._has_device[idx] = self._device_is_host
            self._count += n

    def set_device_marks(self, step: list[int], device: list[list[int]]) -> int:
        """Attach device marks to steps already stored; returns how many found their step."""
        if not step:
            return 0
        ids = np.asarray(step, np.int64)
        marks = np.asarray(device, np.int64).reshape(len(step), N_MARKS)
        with self._lock:
            n = min(self._count, self.capacity)
            start = (self._count - n) % self.capacity
            found = np.zeros(len(ids), bool)
            # Marks arrive a batch or two after their steps: look among the newest rows first
            # (a slice), and over the whole ring only for ids not found there.
            for lo in dict.fromkeys((max(0, n - max(4096, 4 * len(ids))), 0)):
                todo = ~found
                stored = self._rows(self._step, start, lo, n)
                if not todo.any() or not len(stored):
                    break
                pos = np.searchsorted(stored, ids[todo])
                pos_c = np.minimum(pos, len(stored) - 1)
                hit = (pos < len(stored)) & (stored[pos_c] == ids[todo])
                rows = (start + lo + pos_c[hit]) % self.capacity
                self._device[rows] = marks[todo][hit]
                self._has_device[rows] = True
                found[np.flatnonzero(todo)[hit]] = True
            return int(found.sum())

    def snapshot(
        self, since_ns: int | None = None, last: int | None = None, *, before: int = 0
    ) -> StepsView:
        """Copy the steps that end at or after ``since_ns`` (all if None), at most ``last``;
        with ``before``, also that many steps before them (whatever covers ``since_ns`` from
        its left, e.g. the loop overhead or device work running into it).

        Copies are made from at most two slices of the ring (never a fancy index over every
        row): the window redraws from this ~30 times a second over up to 10^5 steps.
        """
        with self._lock:
            n = min(self._count, self.capacity)
            start = (self._count - n) % self.capacity
            lo = 0
            if since_ns is not None and n:
                lo = max(self._first_ending_at(start, n, since_ns) - before, 0)
            if last is not None:
                lo = max(lo, n - last) if last > 0 else n
            return self._view(start, lo, n)

    def around(self, t_ns: int) -> StepsView:
        """The first stored step ending at or after ``t_ns`` with its neighbours on either
        side (up to three rows): a binary search over the end marks, copying only those rows,
        so looking up the step under the mouse costs nothing like a snapshot."""
        with self._lock:
            n = min(self._count, self.capacity)
            if not n:
                return StepsView.empty()
            start = (self._count - n) % self.capacity
            k = self._first_ending_at(start, n, t_ns)
            return self._view(start, max(k - 1, 0), min(k + 2, n))

    def _view(self, start: int, lo: int, hi: int) -> StepsView:
        """Copies of stored rows ``lo..hi`` (oldest first) of every column; lock held."""
        columns = (
            self._step,
            self._config,
            self._samples,
            self._host,
            self._device,
            self._has_device,
        )
        return StepsView(*(self._rows(column, start, lo, hi) for column in columns))

    def instrument_share(self, window_ns: int | None = None) -> float | None:
        """The share of step time the runner's instruments spent, over the steps that end in
        the last ``window_ns`` before the newest step's end (None: every stored step): the sum
        of their ``instrument_ns`` over the sum of their durations (first to last mark). None
        until a step in that window carries the figure."""
        with self._lock:
            n = min(self._count, self.capacity)
            if not n:
                return None
            start = (self._count - n) % self.capacity
            newest = int(self._host[(start + n - 1) % self.capacity, -1])
            lo = 0 if window_ns is None else self._first_ending_at(start, n, newest - window_ns)
            spent = self._rows(self._instrument_ns, start, lo, n)
            host = self._rows(self._host, start, lo, n)
        known = spent >= 0
        if not known.any():
            return None
        duration = int((host[known, -1] - host[known, 0]).sum())
        if duration <= 0:
            return None
        return float(spent[known].sum()) / duration

    def _first_ending_at(self, start: int, n: int, since_ns: int) -> int:
        """Logical index of the first stored step whose end mark is >= ``since_ns``."""
        ends = self._host[:, -1]
        head = min(n, self.capacity - start)  # rows before the ring wraps
        k = int(np.searchsorted(ends[start : start + head], since_ns, side="left"))
        if k < head:
            return k
        return head + int(np.searchsorted(ends[: n - head], since_ns, side="left"))

    def _rows(self, column: np.ndarray, start: int, lo: int, hi: int) -> np.ndarray:
        """A copy of logical rows ``[lo, hi)`` of a ring column whose oldest row is ``start``."""
        a, b = start + lo, start + hi
        cap = self.capacity
        rows: np.ndarray
        if b <= cap:
            rows = column[a:b].copy()
        elif a >= cap:
            rows = column[a - cap : b - cap].copy()
        else:
            rows = np.concatenate((column[a:], column[: b - cap]))
        return rows


@dataclass(frozen=True)
class MetricStatus:
    """Whether a coarse metric is measured here, and if not, why ("n/a", never 0)."""

    name: str
    label: str
    unit: str
    available: bool
    reason: str | None = None
    period_s: float | None = None
    source: str = ""


@dataclass(frozen=True)
class SeriesView:
    """Samples of one metric, each the value over its real period ``[t0, t1]`` (ns)."""

    t0: np.ndarray
    t1: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return int(self.value.shape[0])


@dataclass
class _Ring:
    t0: np.ndarray
    t1: np.ndarray
    value: np.ndarray
    count: int = 0


@dataclass
class SeriesStore:
    """Coarse samples (NVML, psutil) per metric name, each with its sampling period."""

    capacity: int = DEFAULT_SERIES_CAPACITY
    _rings: dict[str, _Ring] = field(default_factory=dict)
    _status: dict[str, MetricStatus] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def set_status(self, status: MetricStatus) -> None:
        with self._lock:
            self._status[status.name] = status

    def statuses(self) -> dict[str, MetricStatus]:
        with self._lock:
            return dict(self._status)

    def append(self, name: str, t0_ns: int, t1_ns: int, value: float) -> None:
        self.append_many(name, [t0_ns], [t1_ns], [value])

    def append_many(
        self, name: str, t0_ns: list[int], t1_ns: list[int], values: list[float]
    ) -> None:
        n = len(values)
        if n == 0:
            return
        with self._lock:
            ring = self._rings.get(name)
            if ring is None:
                cap = self.capacity
                ring = _Ring(
                    np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.float64)
                )
                self._rings[name] = ring
            cap = len(ring.value)
            take = slice(-cap, None)
            t0 = np.asarray(t0_ns, np.int64)[take]
            t1 = np.asarray(t1_ns, np.int64)[take]
            v = np.asarray(values, np.float64)[take]
            idx = (ring.count + np.arange(len(v))) % cap
            ring.t0[idx], ring.t1[idx], ring.value[idx] = t0, t1, v
            ring.count += len(v)

    def names(self) -> list[str]:
        with self._lock:
            return list(self._rings)

    def snapshot(self, name: str, since_ns: int | None = None) -> SeriesView:
        """Copy of one metric's samples whose period ends at or after ``since_ns``."""
        with self._lock:
            ring = self._rings.get(name)
            if ring is None:
                e = np.empty(0, np.int64)
                return SeriesView(e, e.copy(), np.empty(0, np.float64))
            cap = len(ring.value)
            n = min(ring.count, cap)
            order = ((ring.count - n) % cap + np.arange(n)) % cap
            if since_ns is not None:
                order = order[ring.t1[order] >= since_ns]
            return SeriesView(ring.t0[order], ring.t1[order], ring.value[order])
