"""A SIMULATED CUDA stream for testing the event logic without a GPU.

This is a model, never a GPU measurement: nothing here runs on a device, and no number it
produces says anything about real hardware. It models only what measurement.md §1.2 states:

* work and event markers run in stream order; an item starts at
  ``max(previous item's end, enqueue time + submission latency)``;
* an event's timestamp is when the stream reaches it, and ``query()`` turns true once the
  simulated time has passed it;
* ``elapsed_time`` returns float32 milliseconds (rounded with ``struct``, like CUDA) and raises
  unless both events are complete, like torch >= 2.13.

One fake clock drives both the host and the device, so the ground truth is exact. Every clock
read costs ``tick_ns``, which is what lets a spin on ``query()`` terminate.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field


def float32(value: float) -> float:
    """Round a Python float to the nearest float32, as CUDA's ``elapsed_time`` returns it."""
    rounded: float = struct.unpack("f", struct.pack("f", value))[0]
    return rounded


class FakeClock:
    """Simulated ``perf_counter_ns``: each read advances time by ``tick_ns``."""

    def __init__(self, start_ns: int = 1_000_000_000, tick_ns: int = 20) -> None:
        self.now_ns = start_ns
        self.tick_ns = tick_ns

    def __call__(self) -> int:
        self.now_ns += self.tick_ns
        return self.now_ns

    def advance(self, ns: int) -> None:
        """The host spends ``ns`` doing something else (Python code, data loading, ...)."""
        self.now_ns += ns


@dataclass
class SimulatedStream:
    """One in-order stream; ``latency_ns`` may be a callable (given the stream) to vary the
    submission latency of each item."""

    clock: FakeClock
    latency_ns: int | Callable[[SimulatedStream], int] = 500
    busy_until_ns: int = 0
    synchronizations: int = 0
    #: Ground truth: (start, end) of every work item, in stream order.
    work: list[tuple[int, int]] = field(default_factory=list)
    #: Ground truth: timestamp of the most recently recorded event marker.
    last_marker_ns: int = 0

    def _arrival(self) -> int:
        latency = self.latency_ns(self) if callable(self.latency_ns) else self.latency_ns
        return self.clock.now_ns + latency

    def launch(self, duration_ns: int) -> None:
        """Enqueue a kernel/copy of ``duration_ns`` (asynchronous for the host)."""
        start = max(self.busy_until_ns, self._arrival())
        self.busy_until_ns = start + duration_ns
        self.work.append((start, self.busy_until_ns))

    def synchronize(self) -> None:
        """The host blocks until the stream is drained (``torch.cuda.synchronize``)."""
        self.clock.now_ns = max(self.clock.now_ns, self.busy_until_ns)
        self.synchronizations += 1

    def event(self) -> SimulatedEvent:
        """An event factory for ``CudaEventBackend(event_factory=stream.event)``."""
        return SimulatedEvent(self)


class SimulatedEvent:
    """A simulated ``torch.cuda.Event(enable_timing=True)`` on a ``SimulatedStream``."""

    def __init__(self, stream: SimulatedStream) -> None:
        self._stream = stream
        self.timestamp_ns: int | None = None

    def record(self) -> None:
        stream = self._stream
        self.timestamp_ns = max(stream.busy_until_ns, stream._arrival())
        stream.busy_until_ns = self.timestamp_ns
        stream.last_marker_ns = self.timestamp_ns

    def query(self) -> bool:
        return self.timestamp_ns is None or self._stream.clock.now_ns >= self.timestamp_ns

    def elapsed_time(self, end_event: SimulatedEvent) -> float:
        if (
            self.timestamp_ns is None
            or end_event.timestamp_ns is None
            or not (self.query() and end_event.query())
        ):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return float32((end_event.timestamp_ns - self.timestamp_ns) / 1e6)
