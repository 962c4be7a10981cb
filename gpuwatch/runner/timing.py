"""Device-side step marks: where the device (not the host) was at each phase boundary.

The loop takes host marks itself (``time.perf_counter_ns``) and calls the backend right after
each one. ``HostBackend`` is for CPU devices, where compute is synchronous and the host spans
*are* the device truth, so it sends nothing (the GUI mirrors host marks). ``CudaEventBackend``
records CUDA events on the stream that is current at each mark and converts them to the host's
``perf_counter_ns`` axis (docs/design.md, "A step's marks"): events are read back by
``query()`` only, never by a ``synchronize()`` inside the loop, and a step is left unmarked
(and counted in ``skips``) rather than ever blocking or raising.
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol

from gpuwatch.protocol import ACTIVE_LAST, N_MARKS

#: (step id, device marks on the host ``perf_counter_ns`` axis)
DeviceMarks = tuple[int, list[int]]


class TimingEvent(Protocol):
    """The part of ``torch.cuda.Event`` the backend uses (a simulation can stand in for it)."""

    def record(self, stream: Any = ...) -> None: ...

    def query(self) -> bool: ...

    def elapsed_time(self, end_event: TimingEvent) -> float: ...


@dataclass
class MarkSkips:
    """Steps left without device marks, by reason (a dropped step is no step: not counted)."""

    #: No event set was free: the device was a whole pool of steps behind.
    pool_empty: int = 0
    #: A mark fell inside CUDA-graph capture, where events may be neither recorded nor read.
    capturing: int = 0
    #: The current device changed inside the step (events belong to one device).
    device_changed: int = 0
    #: The script had not started CUDA when the step began.
    no_cuda: int = 0
    #: The timing backend could not be set up on the device.
    failed: int = 0

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    def add(self, other: MarkSkips) -> MarkSkips:
        return MarkSkips(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def describe(self) -> str:
        """``3 while the device was a pool of steps behind, 2 during CUDA-graph capture``."""
        parts = [
            f"{getattr(self, name)} {text}"
            for name, text in _SKIP_REASONS.items()
            if getattr(self, name)
        ]
        return ", ".join(parts)


_SKIP_REASONS = {
    "pool_empty": "while the device was a whole event pool of steps behind",
    "capturing": "during CUDA-graph capture",
    "device_changed": "that changed the current device mid-step",
    "no_cuda": "before the script used CUDA",
    "failed": "after the device timing failed to start",
}


class TimingBackend(ABC):
    """Per-step device marks, harvested later without ever stalling the training loop."""

    #: Value of ``hello["timing"]``.
    kind: str
    #: True when every call does nothing (the CPU's host backend): a caller on the training
    #: thread's hot path may then make none.
    inert = False

    @property
    def skips(self) -> MarkSkips:
        """Steps left without device marks so far, by reason."""
        return MarkSkips()

    @property
    def skipped(self) -> int:
        """Steps left without device marks so far."""
        return self.skips.total

    @abstractmethod
    def begin(self, step_id: int) -> None:
        """A step starts; called before its first mark."""

    @abstractmethod
    def mark(self, index: int) -> None:
        """Boundary ``MARKS[index]`` was reached on the host (its host mark is already taken)."""

    @abstractmethod
    def end(self) -> None:
        """The step's last mark has been placed."""

    @abstractmethod
    def poll(self, *, wait: bool = False) -> list[DeviceMarks]:
        """Marks of finished steps, oldest first. ``wait`` (after the loop only) drains all."""

    def close(self) -> None:  # noqa: B027 - optional hook; most backends hold nothing
        """Release device resources."""


class HostBackend(TimingBackend):
    """CPU device: host spans are the device truth, so there is nothing extra to send."""

    kind = "host"
    inert = True

    def begin(self, step_id: int) -> None:
        pass

    def mark(self, index: int) -> None:
        pass

    def end(self) -> None:
        pass

    def poll(self, *, wait: bool = False) -> list[DeviceMarks]:
        return []


class CalibrationError(RuntimeError):
    """The device never completed a calibration event (the stream is stuck)."""


class CudaEventBackend(TimingBackend):
    """CUDA events at every mark, from a fixed pool, converted to ``perf_counter_ns``.

    Conversion: ``host_ns(ev) = anchor_host_ns + 1e6 * anchor.elapsed_time(ev)``. The anchor
    comes from a calibration: record an event on an idle stream, spin on
    ``query()``, take the host time; best of ``tries``, keeping the narrowest bracket (its width,
    ``bracket_ns``, is the ± uncertainty; ``anchor_host_ns`` is the bracket's start).

    ``elapsed_time`` is float32 milliseconds, whose rounding grows with the offset (≈0.5 µs at
    10 s, ≈4 µs at 65 s), so the anchor must stay recent. Two ways, neither stalls the loop:

    * **calibrate** when the last calibration is ``calibrate_every_s`` old, on
      ``calibration_stream``: a stream of its own with no work (torch's pool streams are
      created ``cudaStreamNonBlocking``, ``c10/cuda/CUDAStream.cpp``, so they do not wait for
      the default stream), where the calibration event completes at once even while the
      training stream is busy. Calibrating absorbs drift between the GPU and host clocks, so
      it must not depend on the training stream ever draining: a sync-free loop that keeps the
      GPU busy never drains, and chaining alone carries the drift forward (500 ppm was 0.26 ms
      off after one second on the simulated device, growing without bound). Without a
      calibration stream (an injected simulation) a poll calibrates only when the training
      stream is drained: every event set done except, at most, the newest one's sync-phase
      tail (its ``optimizer_end`` is done). The spin of each try is bounded by
      ``spin_limit_ns`` in case the stream has work after all.
    * **chain** when the anchor is ``chain_after_s`` old and no calibration happened: the newest
      completed event becomes the anchor, with the host time just computed for it. Free (no
      record, no spin); each chain adds at most half a float32 ULP of its offset (≈30 ns at 1 s),
      which is why it runs every second rather than only at the 10 s limit.

    Each event set is converted with the anchor that was current when it began, so an offset is
    never negative; a replaced anchor event is reused only once those sets are harvested.

    **Device and streams.** Events belong to the device they are first recorded on (torch
    refuses a record on another device's stream), so a backend serves one ``device`` and
    ``FollowDevice`` keeps one per device. Each mark records on the stream current at that
    moment (``current_stream``): a step run under ``with torch.cuda.stream(s)`` is measured on
    ``s``; a set whose marks went to several streams is done when all its events are. A mark
    that finds another current device abandons the step (``skips.device_changed``); one during
    CUDA-graph capture (``capturing``) abandons it too (``skips.capturing``), and ``poll``
    reads nothing while a capture is on. An abandoned set, or one left open by a step the
    caller dropped (``begin`` without ``end``), goes straight back to the pool.

    ``event_factory``, ``clock``, ``synchronize``, ``calibration_stream``, ``current_stream``
    and ``capturing`` are injectable so the logic is tested on a simulated stream without CUDA;
    the defaults use ``torch.cuda`` (imported only here; the calibration stream is a new stream
    of ``device``, where the pool's events are first recorded, so creating the backend waits
    for nothing). Without a calibration stream ``synchronize`` runs once at creation (initial
    calibration); it runs in ``poll(wait=True)`` after the loop.
    """

    kind = "cuda_events"

    def __init__(
        self,
        *,
        depth: int = 64,
        event_factory: Callable[[], TimingEvent] | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        synchronize: Callable[[], None] | None = None,
        tries: int = 5,
        spin_limit_ns: int = 2_000_000,
        calibrate_every_s: float = 5.0,
        chain_after_s: float = 1.0,
        calibration_stream: Any = None,
        device: int | None = None,
        current_stream: Callable[[], Any] | None = None,
        capturing: Callable[[], bool] | None = None,
    ) -> None:
        if event_factory is None or synchronize is None:
            import torch

            def cuda_event() -> TimingEvent:
                return torch.cuda.Event(enable_timing=True)  # type: ignore[no-any-return]

            if event_factory is None:
                if device is None:
                    device = torch.cuda.current_device()
                if calibration_stream is None:
                    calibration_stream = torch.cuda.Stream(device=device)
                current_stream = current_stream or torch.cuda.current_stream
                capturing = capturing or torch.cuda.is_current_stream_capturing
            event_factory = event_factory or cuda_event
            if synchronize is None:  # this backend's device, whichever is current at the drain
                synchronize = functools.partial(torch.cuda.synchronize, device)
        self.device = device
        self._calibration_stream = calibration_stream
        self._current_stream = current_stream
        self._capturing = capturing or _never
        self._factory = event_factory
        self._clock = clock
        self._synchronize = synchronize
        self._tries = tries
        self._spin_limit_ns = spin_limit_ns
        self._calibrate_every_ns = int(calibrate_every_s * 1e9)
        self._chain_after_ns = int(chain_after_s * 1e9)
        self._free: list[list[TimingEvent]] = [
            [event_factory() for _ in range(N_MARKS)] for _ in range(depth)
        ]
        self._spares: list[TimingEvent] = [event_factory() for _ in range(tries + 1)]
        # torch creates the CUDA event at its first record(): do that now, not inside the loop,
        # on the idle calibration stream (it binds the event to the device and waits for nothing).
        for event in (*(ev for events in self._free for ev in events), *self._spares):
            if calibration_stream is None:
                event.record()
            else:
                event.record(calibration_stream)
        self._pending: deque[_EventSet] = deque()
        self._current: _EventSet | None = None
        self._sets_begun = 0
        #: Replaced anchors, each with the sequence number of the last set that still uses it.
        self._retiring: deque[tuple[TimingEvent, int]] = deque()
        self._anchor: _Anchor | None = None
        self.bracket_ns = 0
        self.calibrations = 0
        self.chains = 0
        self._calibrated_at_ns = 0
        self._retry_at_ns = 0
        self._skips = MarkSkips()
        #: Stream handles seen in one step's marks, for the caller's notice (several: a side
        #: stream was current at some marks).
        self.streams_seen: set[int] = set()
        if calibration_stream is None:
            self._synchronize()
        if not self._calibrate(spin_limit_ns=1_000_000_000):
            raise CalibrationError("a CUDA event recorded on an idle stream never completed")

    @property
    def anchor_host_ns(self) -> int:
        """Host time given to the current anchor event."""
        assert self._anchor is not None  # set by the initial calibration
        return self._anchor.host_ns

    @property
    def skips(self) -> MarkSkips:
        return self._skips

    def begin(self, step_id: int) -> None:
        self.abandon()  # the caller dropped the previous step before its end
        if self._capturing():
            self._skips.capturing += 1
            return
        if not self._free:  # the device is `depth` steps behind: leave the step unmarked
            self._skips.pool_empty += 1
            return
        assert self._anchor is not None
        self._current = _EventSet(step_id, self._sets_begun, self._free.pop(), self._anchor)
        self._sets_begun += 1

    def abandon(self) -> None:
        """Forget the open step's marks; its event set goes back to the pool (a record
        overwrites an event's previous one, CUDA Runtime API ``cudaEventRecord``)."""
        if self._current is not None:
            self._free.append(self._current.events)
            self._current = None

    def mark(self, index: int) -> None:
        current = self._current
        if current is None:
            return
        if self._current_stream is None:
            current.events[index].record()
            return
        if self._capturing():
            self.abandon()
            self._skips.capturing += 1
            return
        stream = self._current_stream()
        if stream.device_index != self.device:
            self.abandon()
            self._skips.device_changed += 1
            return
        current.events[index].record(stream)
        handle = stream.cuda_stream
        if current.stream is None:
            current.stream = handle
        elif handle != current.stream:
            current.streams = True
        self.streams_seen.add(handle)

    def end(self) -> None:
        if self._current is not None:
            self._pending.append(self._current)
            self._current = None

    def poll(self, *, wait: bool = False) -> list[DeviceMarks]:
        if self._capturing():  # no query may run during capture
            return []
        if wait and self._pending:
            self._synchronize()
        done: list[DeviceMarks] = []
        newest: _EventSet | None = None
        # In order: a set is done when its last event is (stream order; every event when its
        # marks went to several streams), so stop at the first set still in flight.
        while self._pending and self._pending[0].done():
            newest = self._pending.popleft()
            anchor, ref = newest.anchor.host_ns, newest.anchor.event
            done.append(
                (
                    newest.step_id,
                    [anchor + round(1e6 * ref.elapsed_time(ev)) for ev in newest.events],
                )
            )
            self._free.append(newest.events)
            while self._retiring and self._retiring[0][1] <= newest.seq:
                self._spares.append(self._retiring.popleft()[0])
        if wait:
            return done
        calibrated = False
        now = self._clock()
        idle = self._calibration_stream is not None or self._drained()
        if (
            idle
            and now - self._calibrated_at_ns >= self._calibrate_every_ns
            and now >= self._retry_at_ns
        ):
            calibrated = self._calibrate(spin_limit_ns=self._spin_limit_ns)
            if not calibrated:  # busy after all (another stream?): don't spin at every step
                self._retry_at_ns = now + self._chain_after_ns
        if (
            not calibrated
            and newest is not None
            and done[-1][1][-1] - self.anchor_host_ns >= self._chain_after_ns
        ):
            self._chain(newest.events, done[-1][1][-1])
        return done

    def _drained(self) -> bool:
        if self._current is not None or len(self._pending) > 1:
            return False
        return not self._pending or self._pending[0].events[ACTIVE_LAST].query()

    def _spare(self) -> TimingEvent:
        return self._spares.pop() if self._spares else self._factory()

    def _calibrate(self, *, spin_limit_ns: int) -> bool:
        """Best of ``tries`` record→spin→host-time brackets; False if every try timed out."""
        best: tuple[TimingEvent, int, int] | None = None
        for _ in range(self._tries):
            event = self._spare()
            h0 = self._clock()
            if self._calibration_stream is None:
                event.record()
            else:
                event.record(self._calibration_stream)  # type: ignore[call-arg]
            h1: int | None = None
            while not event.query():
                if self._clock() - h0 > spin_limit_ns:
                    break
            else:
                h1 = self._clock()
            if h1 is None:  # the stream is busy after all: give up, try at a later poll
                self._spares.append(event)
                break
            if best is None or h1 - h0 < best[2] - best[1]:
                if best is not None:
                    self._spares.append(best[0])
                best = (event, h0, h1)
            else:
                self._spares.append(event)
        if best is None:
            return False
        event, h0, h1 = best
        self._replace_anchor(_Anchor(event, h0))
        self.bracket_ns = h1 - h0
        self._calibrated_at_ns = h1
        self.calibrations += 1
        return True

    def _chain(self, events: list[TimingEvent], host_ns: int) -> None:
        """Make the completed last event of a harvested set the anchor.

        The set is already back in the free pool; its slot gets a spare event instead.
        """
        anchor_event, events[-1] = events[-1], self._spare()
        self._replace_anchor(_Anchor(anchor_event, host_ns))
        self.chains += 1

    def _replace_anchor(self, anchor: _Anchor) -> None:
        old, self._anchor = self._anchor, anchor
        if old is None:
            return
        if self._pending or self._current is not None:  # still converted with the old anchor
            self._retiring.append((old.event, self._sets_begun - 1))
        else:
            self._spares.append(old.event)


@dataclass(frozen=True)
class _Anchor:
    event: TimingEvent
    host_ns: int


def _never() -> bool:
    return False


@dataclass
class _EventSet:
    step_id: int
    seq: int  # order of begin(); sets complete in this order
    events: list[TimingEvent]
    anchor: _Anchor
    stream: int | None = None  # handle of the stream of the first mark
    streams: bool = False  # marks went to more than one stream

    def done(self) -> bool:
        if self.streams:
            return all(event.query() for event in self.events)
        return self.events[-1].query()
