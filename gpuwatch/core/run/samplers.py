"""Coarse samplers (NVML device metrics, the runner's process-tree CPU) as daemon threads.

Each sampler writes ``[t0, t1] -> value`` samples into a ``SeriesStore`` on the
``perf_counter_ns`` axis, where ``[t0, t1]`` is the real period the value describes, and
sets a ``MetricStatus`` per metric: a metric that cannot be measured here gets
``available=False`` with the reason and never a sample (no 0 standing in for "unknown").

Polling runs on a jittered schedule against absolute time (py-spy's timer): a fixed period
beside a periodic training loop can alias with it and show a steady, wrong picture.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import psutil

from gpuwatch.core.model.metrics import (
    NVML_GPU_UTIL,
    NVML_MEM_USED,
    NVML_POWER,
    NVML_SM_CLOCK,
    PROC_CPU,
    PROC_RSS,
    SYS_CPU,
)
from gpuwatch.core.model.store import MetricStatus, SeriesStore
from gpuwatch.core.run import nvml
from gpuwatch.core.run.clock import candidate_clocks, clock_offset_ns, guess_clock

log = logging.getLogger(__name__)


#: Said wherever the NVML utilization period is not known (docs/design.md, "Coarse figures").
PERIOD_UNKNOWN = "period unknown (1/6–1 s per NVML docs)"

Jitter = Literal["uniform", "exponential"]


# ---- Schedule and thread ----------------------------------------------------------------


class JitterSchedule:
    """Random sampling intervals around ``mean_s``, laid out on absolute time.

    ``uniform``: ``mean * U(1 - spread, 1 + spread)``, bounded latency for a live display.
    ``exponential``: a floor of 10 % of the mean plus an exponential draw (py-spy), which
    is memoryless and so cannot lock onto any period. Both keep the mean.
    """

    def __init__(
        self,
        mean_s: float,
        kind: Jitter = "uniform",
        spread: float = 0.5,
        rng: random.Random | None = None,
    ) -> None:
        if mean_s <= 0:
            raise ValueError(f"mean interval must be positive, got {mean_s}")
        if kind not in ("uniform", "exponential"):
            raise ValueError(f"unknown jitter kind {kind!r}")
        if not 0 <= spread < 1:
            raise ValueError(f"spread must be in [0, 1), got {spread}")
        self.mean_s = mean_s
        self.kind = kind
        self.spread = spread
        self.late = 0  # times we fell more than one mean interval behind and resynced
        self._rng = rng or random.Random()

    def interval(self) -> float:
        if self.kind == "uniform":
            return self.mean_s * self._rng.uniform(1 - self.spread, 1 + self.spread)
        floor = 0.1 * self.mean_s
        return floor + self._rng.expovariate(1.0 / (self.mean_s - floor))

    def next_deadline(self, deadline: float, now: float) -> float:
        """The deadline after ``deadline`` (absolute time, so lateness does not accumulate).

        After a long stall (suspend, overload) we resync to ``now`` instead of bursting
        through every missed tick.
        """
        nxt = deadline + self.interval()
        if nxt < now - self.mean_s:
            self.late += 1
            nxt = now + self.interval()
        return nxt


class Sampler:
    """A daemon thread: ``probe()`` once, then ``poll()`` on the schedule until stopped.

    ``probe``/``poll`` are public so tests can drive a sampler step by step. ``poll``
    returning False ends the thread by itself (e.g. the watched process is gone).
    """

    thread_name = "gpuwatch-sampler"

    def __init__(self, schedule: JitterSchedule) -> None:
        self.schedule = schedule
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def probe(self) -> bool:
        """Set the metric statuses; return False if there is nothing to sample."""
        raise NotImplementedError

    def poll(self) -> bool:
        """Take one round of samples; return False to stop sampling."""
        raise NotImplementedError

    def start(self) -> None:
        """Start the thread (once; later calls do nothing)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Ask the thread to end and wait up to ``timeout`` s; safe to call repeatedly."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end by itself; True if it has."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.running

    def _run(self) -> None:
        try:
            if not self.probe():
                return
            deadline = time.perf_counter()
            while not self._stop.is_set():
                deadline = self.schedule.next_deadline(deadline, time.perf_counter())
                if self._stop.wait(max(0.0, deadline - time.perf_counter())):
                    break
                if not self.poll():
                    break
        except Exception:  # a sampler must never die silently
            log.exception("%s stopped on an unexpected error", self.thread_name)


# ---- NVML -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    name: str
    label: str
    unit: str


_UTIL_SPEC = _Spec(NVML_GPU_UTIL, "NVML GPU utilization", "%")
_MEM_SPEC = _Spec(NVML_MEM_USED, "GPU memory used", "bytes")
_CLOCK_SPEC = _Spec(NVML_SM_CLOCK, "SM clock", "MHz")
_POWER_SPEC = _Spec(NVML_POWER, "GPU power", "W")
_NVML_SPECS = (_UTIL_SPEC, _MEM_SPEC, _CLOCK_SPEC, _POWER_SPEC)

_SAMPLES = "nvmlDeviceGetSamples"
_RATES = "nvmlDeviceGetUtilizationRates"
#: ``nvmlValueType_t`` → field of ``c_nvmlValue_t``.
_VALUE_FIELDS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}
#: Consecutive failed reads after which a metric is declared unavailable.
_MAX_FAILURES = 5
#: An offset that moved more than this is a clock step (NTP), not measurement jitter.
_OFFSET_STEP_NS = 1_000_000
#: Stamps beyond this (year ~2255) are garbage, and would overflow int64 nanoseconds.
_MAX_STAMP_US = 9 * 10**15
#: A newest sample farther than this from every host clock is on a clock we do not know.
_MAX_CLOCK_DISTANCE_NS = 3600 * 10**9


def _status(
    spec: _Spec,
    available: bool,
    reason: str | None = None,
    *,
    period_s: float | None = None,
    source: str = "",
    label: str | None = None,
) -> MetricStatus:
    return MetricStatus(
        name=spec.name,
        label=label or spec.label,
        unit=spec.unit,
        available=available,
        reason=reason,
        period_s=period_s,
        source=source,
    )


def nvml_unavailable_statuses(store: SeriesStore | None, reason: str) -> list[MetricStatus]:
    """The four NVML statuses as unavailable with ``reason``, set on ``store`` if given.

    For the GUI's "n/a — <reason>" when NVML cannot be used (no driver, CPU run, no match).
    """
    statuses = [_status(spec, False, reason, source="NVML") for spec in _NVML_SPECS]
    if store is not None:
        for status in statuses:
            store.set_status(status)
    return statuses


def _memory_used(info: Any) -> float:
    return float(info.used)


def _milliwatts_to_watts(mw: Any) -> float:
    return float(mw) / 1000.0


class UtilizationBuffer:
    """Turns batches of NVML utilization samples into ``[t0, t1]`` samples on the perf axis.

    - Period: the median spacing of recent sample stamps, so a lost sample does not widen
      its neighbour; a lone first sample waits until a second one gives the spacing.
    - Clock: NVML's stamp clock is unspecified (epoch µs per the docs, ``CLOCK_BOOTTIME`` on
      some Linux drivers), so it is recognised from the newest stamp (``guess_clock``). On
      an unknown clock the newest stamp is anchored at "now": the latest estimate that is
      not in the future wins.
    - Values outside 0–100 % (reported driver glitches such as 4294967295) are dropped.
    - ``t0`` never reaches back before the previous sample's end, so the series is a step
      series without overlaps even when stamps jitter.
    """

    def __init__(self) -> None:
        self.last_ts_us = 0  # NVML's own clock: handed back to nvmlDeviceGetSamples as is
        self.period_ns: int | None = None
        self.clock: str | None = None
        self.last_t1: int | None = None
        self._recent: deque[int] = deque(maxlen=33)
        self._pending: list[tuple[int, float]] = []
        self._offset: int | None = None

    def ingest(self, result: Any) -> tuple[list[int], list[int], list[float]] | None:
        """``(t0, t1, values)`` to store from ``(value_type, [nvmlSample_t])``, or None."""
        value_type, samples = result
        field = _VALUE_FIELDS.get(int(value_type), "uiVal")
        fresh = sorted(
            (int(s.timeStamp), float(getattr(s.sampleValue, field)))
            for s in samples
            if self.last_ts_us < int(s.timeStamp) < _MAX_STAMP_US
        )
        if not fresh:
            return None
        self.last_ts_us = fresh[-1][0]
        self._recent.extend(ts for ts, _ in fresh)
        self._pending.extend((ts, v) for ts, v in fresh if 0.0 <= v <= 100.0)
        spacing = np.diff(np.fromiter(self._recent, np.int64))
        spacing = spacing[spacing > 0]
        if spacing.size == 0 or not self._pending:
            return None
        self.period_ns = round(float(np.median(spacing)) * 1000)
        offset = self._offset_for(self.last_ts_us * 1000)
        t1 = np.array([ts for ts, _ in self._pending], np.int64) * 1000 - offset
        previous_end = np.empty_like(t1)
        previous_end[0] = t1[0] - self.period_ns if self.last_t1 is None else self.last_t1
        previous_end[1:] = t1[:-1]
        t0 = np.maximum(t1 - self.period_ns, previous_end)
        values = np.array([v for _, v in self._pending])
        self._pending.clear()
        keep = t1 > t0  # a sample stamped before the last stored end is already covered
        if not keep.any():
            return None
        self.last_t1 = int(t1[keep][-1])
        return t0[keep].tolist(), t1[keep].tolist(), values[keep].tolist()

    def _offset_for(self, newest_ns: int) -> int:
        """Offset from NVML's stamp clock to perf_counter_ns (stable unless the clock steps)."""
        clocks = candidate_clocks()
        if self.clock is None:
            name, distance = guess_clock(newest_ns, clocks)
            self.clock = name if distance <= _MAX_CLOCK_DISTANCE_NS else "unknown"
            log.info("NVML sample stamps read as the %s clock", self.clock)
            if self.clock == "unknown":
                log.warning(
                    "NVML sample stamps match no host clock: anchoring the newest "
                    "sample at the time it was read"
                )
        if self.clock == "unknown":
            anchored = newest_ns - time.perf_counter_ns()  # the newest sample is not future
            self._offset = anchored if self._offset is None else max(self._offset, anchored)
            return self._offset
        offset, _ = clock_offset_ns(clocks[self.clock])
        if self._offset is None or abs(offset - self._offset) >= _OFFSET_STEP_NS:
            self._offset = offset  # first batch, or a clock step: take the new offset
        return self._offset


class NvmlSampler(Sampler):
    """Device utilization, memory, SM clock and power of one GPU, from NVML.

    Utilization comes from ``nvmlDeviceGetSamples`` when the GPU offers it: NVML's own
    sample buffer, each sample stamped by the driver and placed over its real period by
    ``UtilizationBuffer``; the period is published as ``MetricStatus.period_s``. NVML lets
    that buffer run dry while the GPU idles; then a ``nvmlDeviceGetUtilizationRates``
    reading keeps the series going, so "idle at 0 %" never looks like "nothing measured".

    Fallback ``nvmlDeviceGetUtilizationRates`` gives "the past sample period" of unknown
    length (1/6–1 s by product). Convention: each reading covers ``[previous poll, this
    poll]``, so readings tile the axis without overlap like a step series; the label says
    the true period is unknown and ``period_s`` stays None.

    Memory, clock and power are instantaneous readings, stored over ``[previous poll, now]``.
    """

    thread_name = "gpuwatch-nvml"

    def __init__(
        self,
        store: SeriesStore,
        device: nvml.DeviceMatch | Any | None = None,
        mean_interval_s: float = 0.25,
        *,
        uuid: str | None = None,
        pci_bus_id: str | None = None,
        index: int | None = None,
        jitter: Jitter = "uniform",
        rng: random.Random | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        super().__init__(JitterSchedule(mean_interval_s, jitter, rng=rng))
        self.store = store
        self._clock = clock  # injectable so tests can let time pass
        self.match = device if isinstance(device, nvml.DeviceMatch) else None
        self.handle = device.handle if isinstance(device, nvml.DeviceMatch) else device
        self._identity = {"uuid": uuid, "pci_bus_id": pci_bus_id, "index": index}
        self._util_mode: Literal["samples", "rates"] | None = None
        self._rates_ok = False
        self._buffer = UtilizationBuffer()
        self._period_ns: int | None = None  # last period published in the status
        self._points: dict[str, tuple[_Spec, str, tuple[Any, ...], Callable[[Any], float]]] = {}
        self._failures: dict[str, int] = {}
        self._started_ns = 0
        self._last_poll_ns = 0

    @classmethod
    def for_device(
        cls,
        store: SeriesStore,
        *,
        uuid: str | None = None,
        pci_bus_id: str | None = None,
        index: int | None = None,
        **kwargs: Any,
    ) -> NvmlSampler:
        """A sampler for the runner's torch device, matched by UUID, PCI bus id, then index.

        The lookup happens in ``probe`` (in the sampler's thread: ``nvmlInit`` can take a
        while). If NVML is unusable or no device matches, the four NVML statuses say why and
        the thread ends: the caller never has to special-case a missing GPU.
        """
        return cls(store, None, uuid=uuid, pci_bus_id=pci_bus_id, index=index, **kwargs)

    def _resolve(self) -> bool:
        if self.handle is not None:
            return True
        try:
            self.match = nvml.find_device(**self._identity)
        except nvml.NvmlUnavailable as exc:
            nvml_unavailable_statuses(self.store, exc.reason)
            return False
        self.handle = self.match.handle
        if self.match.warning:
            log.warning("%s", self.match.warning)
        return True

    # -- probe --

    def probe(self) -> bool:
        if not self._resolve():
            return False
        now = self._started_ns = self._clock()
        self._probe_utilization()
        clock_sm = getattr(nvml.pynvml, "NVML_CLOCK_SM", 1)
        for spec, func, args, convert in (
            (_MEM_SPEC, "nvmlDeviceGetMemoryInfo", (), _memory_used),
            (_CLOCK_SPEC, "nvmlDeviceGetClockInfo", (clock_sm,), float),
            (_POWER_SPEC, "nvmlDeviceGetPowerUsage", (), _milliwatts_to_watts),
        ):
            reply = nvml.query_with_reason(func, self.handle, *args)
            if reply.ok:
                self._points[spec.name] = (spec, func, args, convert)
                self.store.set_status(_status(spec, True, source=func))
            else:
                self.store.set_status(_status(spec, False, reply.reason, source=func))
        self._last_poll_ns = now
        return self._util_mode is not None or bool(self._points)

    def _probe_utilization(self) -> None:
        samples = self._read_samples()
        rates = nvml.query_with_reason(_RATES, self.handle)
        self._rates_ok = rates.ok
        if samples.ok or samples.reason == nvml.NO_DATA:
            self._util_mode = "samples"
            self.store.set_status(_status(_UTIL_SPEC, True, source=_SAMPLES))
            if samples.ok:
                self._store_samples(samples.value)
        elif rates.ok:
            self._util_mode = "rates"
            self.store.set_status(
                _status(
                    _UTIL_SPEC, True, source=_RATES, label=f"{_UTIL_SPEC.label}, {PERIOD_UNKNOWN}"
                )
            )
        else:
            reason = (
                rates.reason
                if rates.reason == samples.reason
                else f"{rates.reason} (sample buffer: {samples.reason})"
            )
            if self._on_mig() and rates.reason == nvml.NOT_SUPPORTED:
                reason = nvml.MIG_NO_UTILIZATION
            self.store.set_status(_status(_UTIL_SPEC, False, reason, source="NVML"))

    def _on_mig(self) -> bool:
        """Whether the handle is a MIG device or a GPU in MIG mode."""
        device = self.match.device if self.match is not None else None
        return device is not None and (device.mig_index is not None or device.mig_enabled)

    # -- poll --

    def poll(self) -> bool:
        now = self._clock()
        t0 = self._last_poll_ns
        if self._util_mode == "samples":
            self._poll_samples(now)
        elif self._util_mode == "rates":
            reply = nvml.query_with_reason(_RATES, self.handle)
            if reply.ok:
                self._ok(NVML_GPU_UTIL)
                self.store.append(NVML_GPU_UTIL, t0, now, float(reply.value.gpu))
            else:
                self._fail(_UTIL_SPEC, reply.reason)
        for spec, func, args, convert in list(self._points.values()):
            if self._util_mode is None and not self._points:
                break  # the driver went away: everything is retired already
            reply = nvml.query_with_reason(func, self.handle, *args)
            if reply.ok:
                self._ok(spec.name)
                self.store.append(spec.name, t0, now, convert(reply.value))
            else:
                self._fail(spec, reply.reason)
        self._last_poll_ns = now
        return self._util_mode is not None or bool(self._points)

    def _read_samples(self) -> nvml.Reply:
        kind = getattr(nvml.pynvml, "NVML_GPU_UTILIZATION_SAMPLES", 1)
        return nvml.query_with_reason(_SAMPLES, self.handle, kind, self._buffer.last_ts_us)

    def _poll_samples(self, now: int) -> None:
        reply = self._read_samples()
        if not reply.ok and reply.reason != nvml.NO_DATA:
            self._fail(_UTIL_SPEC, reply.reason)
            return
        self._ok(NVML_GPU_UTIL)
        if reply.ok and self._store_samples(reply.value):
            return
        self._fill_dry_buffer(now)

    def _store_samples(self, result: Any) -> bool:
        batch = self._buffer.ingest(result)
        period = self._buffer.period_ns
        if period is not None and (
            self._period_ns is None or abs(period - self._period_ns) > 0.05 * self._period_ns
        ):
            self._period_ns = period
            self.store.set_status(_status(_UTIL_SPEC, True, period_s=period / 1e9, source=_SAMPLES))
        if batch is None:
            return False
        self.store.append_many(NVML_GPU_UTIL, *batch)
        return True

    def _fill_dry_buffer(self, now: int) -> None:
        """No new samples for two periods (at least 1 s): NVML went quiet, read the rate."""
        if not self._rates_ok:
            return
        # Cover the time since the last stored sample, but not before this sampler started.
        start = max(self._buffer.last_t1 or 0, self._started_ns)
        if now - start < max(2 * (self._buffer.period_ns or 0), 10**9):
            return
        reply = nvml.query_with_reason(_RATES, self.handle)
        if reply.ok:
            self.store.append(NVML_GPU_UTIL, start, now, float(reply.value.gpu))
            self._buffer.last_t1 = now

    def _ok(self, name: str) -> None:
        self._failures[name] = 0

    def _fail(self, spec: _Spec, reason: str | None) -> None:
        """Skip this reading; after repeated failures retire the metric.

        A lost GPU or a vanished driver answers nothing more: every metric is retired at
        once, with one log line, and the thread ends (no polling into the void).
        """
        if reason in nvml.DRIVER_GONE.values():
            log.warning("NVML sampling stopped: %s", reason)
            for each in _NVML_SPECS:
                self.store.set_status(_status(each, False, reason, source="NVML"))
            self._util_mode = None
            self._points.clear()
            return
        count = self._failures.get(spec.name, 0) + 1
        self._failures[spec.name] = count
        if count < _MAX_FAILURES:
            return
        log.warning("NVML metric %s stopped: %s", spec.name, reason)
        self.store.set_status(_status(spec, False, reason or "NVML query failed", source="NVML"))
        if spec.name == NVML_GPU_UTIL:
            self._util_mode = None
        self._points.pop(spec.name, None)


# ---- Process tree -----------------------------------------------------------------------


_PROC_CPU_SPEC = _Spec(PROC_CPU, "runner CPU (process tree)", "% of one core")
_PROC_RSS_SPEC = _Spec(PROC_RSS, "runner memory (RSS, process tree)", "bytes")
_SYS_CPU_SPEC = _Spec(SYS_CPU, "system CPU (all cores)", "%")
_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)
#: psutil derives create times from the integer boot time on Linux: up to ~1 s early.
_CREATE_TIME_SLACK_S = 1.0


def _system_cpu_times() -> tuple[float, float]:
    """(busy, total) CPU seconds of the machine, counted the way psutil.cpu_percent does."""
    t = psutil.cpu_times()
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    idle = t.idle + getattr(t, "iowait", 0.0)
    return total - idle, total


class ProcessTreeSampler(Sampler):
    """CPU % and RSS of the runner *and all its descendants* (DataLoader workers), via psutil.

    CPU is in % of one core (the ``top`` convention, so 4 busy workers read ~400 %), from
    CPU-time differences between samples: a worker born mid-interval counts in full, one
    that died mid-interval loses only its last partial interval. ``sys.cpu`` is the
    machine-wide figure (0–100 %). Every sample covers ``[previous sample, now]``.
    The thread ends by itself when the root process is gone.
    """

    thread_name = "gpuwatch-proctree"

    def __init__(
        self,
        store: SeriesStore,
        pid: int,
        interval_s: float = 1.0,
        *,
        jitter: Jitter = "uniform",
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(JitterSchedule(interval_s, jitter, rng=rng))
        self.store = store
        self.pid = pid
        self._root: psutil.Process | None = None
        self._cpu: dict[tuple[int, float], float] = {}  # (pid, create time) → CPU seconds
        self._last_ns = 0
        self._last_wall = 0.0
        self._sys_last: tuple[float, float] | None = None

    def probe(self) -> bool:
        source = f"psutil (pid {self.pid})"
        try:
            self._root = psutil.Process(self.pid)
            self._root.cpu_times()
        except _GONE:
            reason = f"process {self.pid} is not running"
        except psutil.AccessDenied:
            reason = f"access denied to process {self.pid}"
        else:
            for spec in (_PROC_CPU_SPEC, _PROC_RSS_SPEC, _SYS_CPU_SPEC):
                self.store.set_status(
                    _status(
                        spec,
                        True,
                        period_s=self.schedule.mean_s,
                        source="psutil" if spec is _SYS_CPU_SPEC else source,
                    )
                )
            self._last_ns = time.perf_counter_ns()
            self._last_wall = time.time()
            self._cpu, _ = self._read_tree()
            self._sys_last = _system_cpu_times()
            return True
        for spec in (_PROC_CPU_SPEC, _PROC_RSS_SPEC):
            self.store.set_status(_status(spec, False, reason, source=source))
        self.store.set_status(
            _status(_SYS_CPU_SPEC, False, f"not sampled: {reason}", source="psutil")
        )
        return False

    def _root_alive(self) -> bool:
        root = self._root
        if root is None:
            return False
        try:
            return root.is_running() and root.status() != psutil.STATUS_ZOMBIE
        except _GONE:
            return False
        except psutil.AccessDenied:
            return True

    def _read_tree(self) -> tuple[dict[tuple[int, float], float], int]:
        """CPU seconds per live process of the tree, and their summed RSS."""
        if self._root is None:
            return {}, 0
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except _GONE:
            return {}, 0
        except psutil.AccessDenied:
            procs = [self._root]
        cpu: dict[tuple[int, float], float] = {}
        rss = 0
        for proc in procs:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    mem = proc.memory_info()
                    key = (proc.pid, proc.create_time())
            except (*_GONE, psutil.AccessDenied):
                continue  # exited meanwhile, or not ours to read: skip quietly
            cpu[key] = times.user + times.system
            rss += mem.rss
        return cpu, rss

    def poll(self) -> bool:
        if not self._root_alive():
            return False
        cpu, rss = self._read_tree()
        now = time.perf_counter_ns()
        wall = time.time()
        used = 0.0
        for key, seconds in cpu.items():
            before = self._cpu.get(key)
            if before is not None:
                used += max(seconds - before, 0.0)
            elif key[1] >= self._last_wall - _CREATE_TIME_SLACK_S:  # born in this interval
                used += seconds
        elapsed = now - self._last_ns
        if cpu and elapsed > 0:
            self.store.append(PROC_CPU, self._last_ns, now, used * 1e9 / elapsed * 100.0)
            self.store.append(PROC_RSS, self._last_ns, now, float(rss))
        sys_now = _system_cpu_times()
        if self._sys_last is not None and elapsed > 0:
            d_busy, d_total = sys_now[0] - self._sys_last[0], sys_now[1] - self._sys_last[1]
            if d_total > 0:
                self.store.append(
                    SYS_CPU, self._last_ns, now, min(max(d_busy / d_total * 100.0, 0.0), 100.0)
                )
        self._cpu, self._sys_last = cpu, sys_now
        self._last_ns, self._last_wall = now, wall
        return True
