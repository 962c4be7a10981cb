"""CudaEventBackend logic on a SIMULATED stream (tests/simulated_stream.py), no GPU involved.

Ground truth comes from the simulation's own timeline; every assertion compares the backend's
converted marks against it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from simulated_stream import FakeClock, SimulatedStream, float32

from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST, N_MARKS
from gpuwatch.runner.timing import CudaEventBackend, HostBackend

MS = 1_000_000
S = 1_000_000_000


@dataclass
class Plan:
    """How one simulated training step behaves."""

    data_ns: int  # host blocked in next(loader): enqueues nothing
    launch_ns: int  # host cost of launching each device phase
    gpu_ns: tuple[int, int, int, int]  # device work of h2d, forward, backward, optimizer
    sync: bool  # loss.item() at the end: the host waits for the stream
    queue_limit_ns: int | None = None  # host blocks when the device is this far behind


@dataclass
class Run:
    truth: dict[int, list[int]] = field(default_factory=dict)
    device: dict[int, list[int]] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    #: (host time, anchor_host_ns) whenever the anchor changed; and calibration times.
    anchors: list[tuple[int, int]] = field(default_factory=list)
    calibrated_at: list[int] = field(default_factory=list)


class Rig:
    """A backend on a simulated stream, plus a loop that drives it like runner/loop.py."""

    def __init__(
        self, *, depth: int = 64, latency: int | Callable[[SimulatedStream], int] = 500
    ) -> None:
        self.clock = FakeClock()
        self.stream = SimulatedStream(self.clock, latency_ns=latency)
        self.syncs = 0
        self.backend = CudaEventBackend(
            depth=depth,
            event_factory=self.stream.event,
            clock=self.clock,
            synchronize=self._synchronize,
        )
        self.start_ns = self.clock.now_ns
        self.run = Run(
            anchors=[(self.clock.now_ns, self.backend.anchor_host_ns)],
            calibrated_at=[self.clock.now_ns],
        )

    def _synchronize(self) -> None:
        self.syncs += 1
        self.stream.synchronize()

    def _mark(self, truth: list[int], index: int) -> None:
        self.clock()  # the host mark
        self.backend.mark(index)
        truth[index] = self.stream.last_marker_ns

    def step(self, step_id: int, plan: Plan) -> None:
        clock, stream, backend = self.clock, self.stream, self.backend
        if plan.queue_limit_ns is not None and (
            stream.busy_until_ns - clock.now_ns > plan.queue_limit_ns
        ):
            clock.now_ns = stream.busy_until_ns - plan.queue_limit_ns
        skipped = backend.skipped
        backend.begin(step_id)
        truth = [0] * N_MARKS
        self._mark(truth, 0)
        clock.advance(plan.data_ns)
        self._mark(truth, 1)
        for phase, gpu_ns in enumerate(plan.gpu_ns):
            stream.launch(gpu_ns)
            clock.advance(plan.launch_ns)
            self._mark(truth, 2 + phase)
        if plan.sync:
            stream.synchronize()
        self._mark(truth, N_MARKS - 1)
        backend.end()
        if backend.skipped == skipped:
            self.run.truth[step_id] = truth
        self.collect(backend.poll())

    def collect(self, done: list[tuple[int, list[int]]]) -> None:
        for step_id, marks in done:
            self.run.device[step_id] = marks
            self.run.order.append(step_id)
        if self.backend.anchor_host_ns != self.run.anchors[-1][1]:
            self.run.anchors.append((self.clock.now_ns, self.backend.anchor_host_ns))
        if self.backend.calibrations > len(self.run.calibrated_at):
            self.run.calibrated_at.append(self.clock.now_ns)

    def run_for(
        self, plan: Callable[[int], Plan], *, steps: int | None = None, seconds: float | None = None
    ) -> Run:
        step_id = 0
        while (steps is None or step_id < steps) and (
            seconds is None or self.clock.now_ns - self.start_ns < seconds * S
        ):
            self.step(step_id, plan(step_id))
            step_id += 1
        self.collect(self.backend.poll(wait=True))
        return self.run


def errors(run: Run, steps: list[int] | None = None) -> list[int]:
    ids = run.device if steps is None else steps
    return [d - t for s in ids for d, t in zip(run.device[s], run.truth[s], strict=True)]


def max_interval(times: list[int], end_ns: int) -> int:
    points = [*times, end_ns]
    return max(b - a for a, b in itertools.pairwise(points))


def jitter(step_id: int, phase: int) -> int:
    """Deterministic ns-scale noise, so device times are not round numbers float32 holds exactly."""
    return (step_id * 7_919 + phase * 104_729) % 997


def gpu_bound(step_id: int) -> Plan:
    """The device is the bottleneck; the host stays ~2 steps ahead (never drained at a poll)."""
    work = (500_000, 8 * MS, 16 * MS, 3 * MS)
    return Plan(
        data_ns=1 * MS,
        launch_ns=100_000,
        gpu_ns=tuple(w + jitter(step_id, p) for p, w in enumerate(work)),  # type: ignore[arg-type]
        sync=False,
        queue_limit_ns=55 * MS,
    )


def input_bound(step_id: int) -> Plan:
    """Naive loop: long data waits, short device work, ``.item()`` every step."""
    return Plan(
        data_ns=(5 + step_id % 7) * MS,
        launch_ns=20_000,
        gpu_ns=(100_000, 1 * MS, 2 * MS, 300_000),
        sync=True,
    )


def test_harvest_in_order_with_sub_microsecond_conversion_error() -> None:
    rig = Rig()
    run = rig.run_for(gpu_bound, steps=300)
    assert run.order == list(range(300))
    assert max(abs(e) for e in errors(run)) < 1_000
    # Only the initial calibration and the final drain synchronize, never the loop.
    assert rig.syncs == 2
    assert rig.backend.skipped == 0


def test_empty_pool_skips_steps_instead_of_blocking() -> None:
    rig = Rig(depth=4)
    rig.stream.launch(10 * S)  # a long kernel: nothing recorded after it completes for 10 s
    plan = Plan(data_ns=1 * MS, launch_ns=10_000, gpu_ns=(1_000, 1_000, 1_000, 1_000), sync=False)
    host_start = rig.clock.now_ns
    for step_id in range(10):
        rig.step(step_id, plan)
    assert rig.backend.skipped == 6
    assert rig.run.order == []
    assert rig.clock.now_ns - host_start < 20 * MS  # the host never waited for the device
    rig.clock.advance(11 * S)
    rig.collect(rig.backend.poll())
    assert rig.run.order == [0, 1, 2, 3]
    rig.step(10, plan)  # sets are back in the pool: this step is marked again
    rig.collect(rig.backend.poll(wait=True))
    assert rig.backend.skipped == 6
    assert rig.run.order == [0, 1, 2, 3, 10]
    assert max(abs(e) for e in errors(rig.run)) < 1_000


def test_calibration_keeps_the_narrowest_bracket_and_converts_from_it() -> None:
    tries = [8_000, 3_000, 1_000, 6_000, 2_000]  # submission latency of each calibration try

    def latency(stream: SimulatedStream) -> int:  # the tries follow the initial synchronize
        return tries.pop(0) if stream.synchronizations and tries else 500

    rig = Rig(latency=latency)
    assert rig.backend.calibrations == 1
    assert 1_000 <= rig.backend.bracket_ns < 1_100  # the 1 µs try, not the first or last
    run = rig.run_for(gpu_bound, steps=50)
    # The anchor's host time is its bracket start, so every mark reads early by the chosen
    # try's latency (± float32 rounding at ~1 s offsets): inside the reported bracket, and proof
    # of which try was kept.
    errs = errors(run)
    assert all(-1_100 < e < -900 for e in errs)
    assert max(abs(e) for e in errs) <= rig.backend.bracket_ns + 100


def test_recalibrates_at_drained_moments_within_10_s() -> None:
    rig = Rig()
    run = rig.run_for(input_bound, seconds=25)
    assert rig.backend.calibrations >= 5  # every 5 s on a stream drained at each step end
    assert max_interval(run.calibrated_at, rig.clock.now_ns) <= 10 * S
    assert max_interval([t for t, _ in run.anchors], rig.clock.now_ns) <= 10 * S
    assert max(abs(e) for e in errors(run)) < 1_000


def test_chains_without_drained_moments_and_beats_float32_drift() -> None:
    rig = Rig()
    run = rig.run_for(gpu_bound, seconds=90)
    assert rig.backend.calibrations == 1  # the stream was never drained at a poll
    assert rig.backend.chains >= 80
    assert max_interval([t for t, _ in run.anchors], rig.clock.now_ns) <= 10 * S
    reference = run.truth[0][0]
    late = [s for s in run.device if run.truth[s][0] - reference > 60 * S]
    assert len(late) > 500
    assert max(abs(e) for e in errors(run, late)) < 2_000
    # What a conversion against the first anchor, never re-anchored, would have produced:
    naive = [
        round(1e6 * float32((t - reference) / 1e6)) - (t - reference)
        for s in late
        for t in run.truth[s]
    ]
    assert max(abs(e) for e in naive) > 2_000


def test_gaps_between_active_spans_match_the_true_idle_time() -> None:
    rig = Rig()
    run = rig.run_for(input_bound, steps=200)
    work = rig.stream.work  # four device items per step, in order
    for step_id in range(199):
        true_idle = work[4 * (step_id + 1)][0] - work[4 * step_id + 3][1]
        gap = run.device[step_id + 1][ACTIVE_FIRST] - run.device[step_id][ACTIVE_LAST]
        assert true_idle > 4 * MS
        assert abs(gap - true_idle) < 1_000


def test_host_backend_sends_no_device_marks() -> None:
    backend = HostBackend()
    backend.begin(0)
    for index in range(N_MARKS):
        backend.mark(index)
    backend.end()
    assert backend.kind == "host"
    assert backend.poll() == []
    assert backend.poll(wait=True) == []
