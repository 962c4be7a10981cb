"""GPU activity in ``torch.profiler`` on the simulated device: what CUPTI adds to a trace.

On a GPU, a ``torch.profiler.profile`` with ``ProfilerActivity.CUDA`` returns, besides the CPU
ops, one activity per device work item (``kernel``, ``gpu_memcpy``, ``gpu_memset``; its
``device_resource_id`` is the stream) and one ``cuda_runtime`` launch call per item with the
same correlation id, all on the clock Kineto stamps the CPU ops with (the shape the real traces
in ``tests/fixtures/gpu_traces`` have). That clock is torch's approximate clock (the TSC)
converted to Unix ns, which differs from ``time.time_ns()`` by up to a millisecond here, so the
device's host times are moved onto it through empty ``record_function`` ranges ("clock marks")
emitted at known host times while the profiler records. The conversion is one linear map per
session (c10 ``ApproximateClockToUnixTimeConverter``: the median rate of 1001 clock pairs taken
at the session's start and end), so one offset, bounded from both sides by every mark, holds
for the whole session; ``SimProfile.clock_fits`` keeps each session's ``ClockFit`` so a test
can derive its tolerance from the marks.

The real profiler is asked for the CPU activity only: with CUPTI, Kineto records the CPU ops
as in a CPU-only session, and the device's part is this module's. Asked for CUDA where torch
supports no CUDA activity (no GPU here), torch falls back to ``KINETO_GPU_FALLBACK`` and records
a CUDA event at every op's start and end, which without a driver fails with a logged C++
backtrace ("Failed to record CUDA event"): tens of milliseconds per ``record_function``, which
widened every clock mark's bracket (and the capture's markers') to as much.

``profile_class(sim)`` is the subclass of ``torch.profiler.profile`` that ``install()`` puts in
its place: when CUDA activity was asked for, it adds the simulated device's work items that
started while the profiler recorded (from the step where its schedule turned to recording) to
what ``prof.profiler.kineto_results.events()`` returns in ``on_trace_ready``. The CPU ops stay the
real profiler's. Launch geometry is not modelled: ``metadata_json`` is empty, as Kineto leaves
it for copies.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch.profiler as torch_profiler
from torch.autograd.profiler import record_function

from simcuda.model import Kernel, SimGpu

_RECORDING = {"RECORD", "RECORD_AND_SAVE"}


@dataclass(frozen=True)
class SimActivity:
    """One Kineto event (the ``_KinetoEvent`` methods gpuwatch reads), epoch ns."""

    event_name: str
    activity: str
    start: int
    end: int
    resource: int
    correlation: int

    def name(self) -> str:
        return self.event_name

    def activity_type(self) -> str:
        return self.activity

    def start_ns(self) -> int:
        return self.start

    def end_ns(self) -> int:
        return self.end

    def device_resource_id(self) -> int:
        return self.resource

    def correlation_id(self) -> int:
        return self.correlation

    def metadata_json(self) -> str:
        return ""


#: The empty ranges that tie the profiler's clock to the host's (user_annotation events).
CLOCK_MARK = "simcuda::clock"


def emit_clock_mark() -> tuple[int, int]:
    """An empty ``record_function`` range between two host reads: the Kineto clock (torch's
    approximate clock converted to Unix ns, not ``time.time_ns()``) stamps it too."""
    a = time.perf_counter_ns()
    with record_function(CLOCK_MARK):
        pass
    return a, time.perf_counter_ns()


@dataclass(frozen=True)
class ClockFit:
    """Kineto clock minus host clock for one session: every offset in ``[low, high]`` agrees
    with every clock mark, ``offset_ns`` is the middle, so it is off by ``error_ns`` at most."""

    low: int
    high: int

    @property
    def offset_ns(self) -> int:
        return (self.low + self.high) // 2

    @property
    def error_ns(self) -> int:
        return (self.high - self.low + 1) // 2


def kineto_minus_host(events: list[Any], brackets: list[tuple[int, int]]) -> ClockFit:
    """What every clock mark allows: a mark that ran between host reads a and b and was
    stamped [start, end] puts the offset in [end - b, start - a]. Marks that allow no common
    offset mean Kineto's clock moved against the host's within the session, which one linear
    conversion cannot do: that is raised, never averaged away."""
    spans = [(e.start_ns(), e.end_ns()) for e in events if e.name() == CLOCK_MARK]
    if not spans or len(spans) != len(brackets):
        raise RuntimeError(f"{len(spans)} clock marks in the trace, {len(brackets)} emitted")
    low = max(end - b for (_, end), (_, b) in zip(spans, brackets, strict=True))
    high = min(start - a for (start, _), (a, _) in zip(spans, brackets, strict=True))
    if low > high:
        raise RuntimeError(
            f"the clock marks allow no common offset (they disagree by {low - high} ns)"
        )
    return ClockFit(low, high)


def activities_of(kernels: list[Kernel], offset_ns: int, ids: Iterator[int]) -> list[SimActivity]:
    """A launch call and a device activity per work item, paired by correlation id."""
    out: list[SimActivity] = []
    for correlation, kernel in zip(ids, kernels, strict=False):
        copy = kernel.name.startswith("memcpy")
        launch = "cudaMemcpyAsync" if copy else "cudaLaunchKernel"
        out.append(
            SimActivity(
                launch,
                "cuda_runtime",
                kernel.enqueue_ns + offset_ns,
                kernel.enqueue_ns + offset_ns + 2_000,
                0,
                correlation,
            )
        )
        out.append(
            SimActivity(
                kernel.name,
                "gpu_memcpy" if copy else "kernel",
                kernel.start_ns + offset_ns,
                kernel.end_ns + offset_ns,
                kernel.stream,
                correlation,
            )
        )
    return out


class _Results:
    def __init__(self, real: Any, extra: list[SimActivity]) -> None:
        self._real = real
        self._extra = extra

    def events(self) -> list[Any]:
        return [*self._real.events(), *self._extra]


class _View:
    """What ``on_trace_ready`` receives: the real profile, with ``profiler.kineto_results``
    answering the simulated activities too."""

    def __init__(self, real: Any, results: _Results) -> None:
        self._real = real
        self.kineto_results = results

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _ProfileView:
    def __init__(self, prof: Any, results: _Results) -> None:
        self._prof = prof
        self.profiler = _View(prof.profiler, results)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._prof, name)


def profile_class(sim: SimGpu) -> type:
    """A ``torch.profiler.profile`` that adds ``sim``'s device work to CUDA-activity traces."""
    ids = itertools.count(1_000_000)

    class SimProfile(torch_profiler.profile):  # type: ignore[misc, name-defined]
        #: One ``ClockFit`` per CUDA-activity session that delivered its trace, in order.
        clock_fits: ClassVar[list[ClockFit]] = []

        def __init__(
            self, *args: Any, activities: Any = None, on_trace_ready: Any = None, **kwargs: Any
        ) -> None:
            self._sim_cuda = activities is not None and (
                torch_profiler.ProfilerActivity.CUDA in activities
            )
            self._sim_ready = on_trace_ready
            self._sim_since: int | None = None
            self._sim_marks: list[tuple[int, int]] = []
            real_activities = None
            if activities is not None:  # CUPTI's part is the model's (module docstring)
                real_activities = [
                    a for a in activities if a != torch_profiler.ProfilerActivity.CUDA
                ]
            super().__init__(
                *args,
                activities=real_activities,
                on_trace_ready=self._sim_on_ready if on_trace_ready else None,
                **kwargs,
            )

        def _sim_note(self) -> None:
            action = getattr(getattr(self, "current_action", None), "name", "")
            if action not in _RECORDING:
                return
            if self._sim_since is None:
                self._sim_since = sim.now()
            if self._sim_cuda:
                self._sim_marks.append(emit_clock_mark())

        def start(self) -> None:
            super().start()
            self._sim_note()

        def step(self) -> None:
            super().step()
            self._sim_note()

        def _sim_on_ready(self, prof: Any) -> None:
            extra: list[SimActivity] = []
            real = prof.profiler.kineto_results
            if self._sim_cuda and self._sim_since is not None:
                since, until = self._sim_since, sim.now()
                kernels = [
                    k
                    for d in sim.devices
                    for k in list(d.kernels)
                    if since <= k.enqueue_ns <= until
                ]
                fit = kineto_minus_host(list(real.events()), self._sim_marks)
                SimProfile.clock_fits.append(fit)
                extra = activities_of(kernels, fit.offset_ns, ids)
            self._sim_ready(_ProfileView(prof, _Results(real, extra)))

    return SimProfile
