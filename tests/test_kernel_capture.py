"""The runner's kernel capture: reading raw Kineto events, the window's life cycle, refusals.

There is no GPU here. The CUDA tests feed SIMULATED events: fake objects with the
``_KinetoEvent`` method names, whose activity types, streams, correlation ids and metadata
follow Kineto's conventions (pytorch/kineto ``libkineto/src/output_json.cpp``). The CPU tests
use the real profiler.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from gpuwatch import protocol
from gpuwatch.core.figures.kernel_window import KernelWindow
from gpuwatch.runner.kernel_capture import (
    CLOCK_MARKS,
    DISTURBED,
    MARKER,
    REPLACED,
    CuptiRelease,
    KernelCapture,
    epoch_offset,
    kernel_geometry,
    marker_bounds,
    marker_error,
    marker_offset,
    parse_steps,
    window_message,
)
from gpuwatch.runner.nvtx_ranges import NvtxPhases
from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.profiler_watch import RECORDING
from gpuwatch.runner.script_control import ScriptControl
from gpuwatch.runner.timing import HostBackend

OFFSET = 1_000_000_000_000  # simulated epoch - perf_counter offset


@dataclass
class FakeKinetoEvent:
    """SIMULATED stand-in for ``torch._C._autograd._KinetoEvent`` (same method names)."""

    _name: str
    _activity: str
    _start: int
    _end: int
    _resource: int = 7
    _correlation: int = 0
    _metadata: str = ""

    def name(self) -> str:
        return self._name

    def activity_type(self) -> str:
        return self._activity

    def start_ns(self) -> int:
        return self._start + OFFSET

    def end_ns(self) -> int:
        return self._end + OFFSET

    def device_resource_id(self) -> int:
        return self._resource

    def correlation_id(self) -> int:
        return self._correlation

    def metadata_json(self) -> str:
        return self._metadata


class FakeLink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.logs: list[tuple[str, str]] = []

    def send(self, kind: str, **fields: Any) -> None:
        protocol.encode(kind, **fields)  # what the real link would refuse, fails here
        self.sent.append((kind, fields))

    def log(self, level: str, text: str) -> None:
        self.logs.append((level, text))

    def kernels(self) -> list[dict[str, Any]]:
        return [fields for kind, fields in self.sent if kind == "kernels"]


# ---- reading events -------------------------------------------------------------------

GEOMETRY = (
    '"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 41, '
    '"registers per thread": 32, "shared memory": 0, "blocks per SM": 0.25, '
    '"warps per SM": 1.0, "grid": [33, 1, 1], "block": [128, 1, 1], '
    '"est. achieved occupancy %": 3'
)


def test_simulated_cuda_events_become_kernels_on_the_host_axis() -> None:
    events = [  # SIMULATED CUDA window
        FakeKinetoEvent("aten::mm", "cpu_op", 90, 140, _resource=555, _correlation=3),
        FakeKinetoEvent("cudaLaunchKernel", "cuda_runtime", 100, 105, 555, _correlation=41),
        FakeKinetoEvent("gemm_kernel", "kernel", 120, 180, 7, 41, GEOMETRY),
        FakeKinetoEvent("cudaMemcpyAsync", "cuda_runtime", 150, 152, 555, _correlation=42),
        FakeKinetoEvent("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 200, 260, 9, 42),
        FakeKinetoEvent("Memset (Device)", "gpu_memset", 270, 275, 7, 43),
        FakeKinetoEvent("ProfilerStep#3", "user_annotation", 80, 300, 555),
        FakeKinetoEvent("phase", "gpu_user_annotation", 80, 300, 7),
    ]
    message = window_message(
        events, device="cuda", offset_ns=OFFSET, t0_ns=50, t1_ns=400, steps=[4], perturbed=[3, 4]
    )
    assert [message["names"][i] for i in message["name"]] == [
        "gemm_kernel",
        "Memcpy HtoD (Pageable -> Device)",
        "Memset (Device)",
    ]
    assert [protocol.KERNEL_KINDS[t] for t in message["type"]] == ["kernel", "memcpy", "memset"]
    assert message["start"] == [120, 200, 270] and message["end"] == [180, 260, 275]
    assert message["stream"] == [7, 9, 7]
    assert message["launch"] == [100, 150, None]  # the correlated runtime call's start
    assert message["grid"] == [[33, 1, 1], None, None]
    assert message["block"] == [[128, 1, 1], None, None]
    assert message["blocks_per_sm"] == [0.25, None, None]
    window = KernelWindow.from_message(
        protocol.decode(json.dumps({"kind": "kernels", **message}).encode())
    )
    summary = window.summary()
    assert summary.kernels == 1 and summary.copies == 2
    assert summary.underfilled == 1 and summary.geometry_known == 1


def test_geometry_is_optional_and_never_guessed() -> None:
    assert kernel_geometry("") == (None, None, None)
    assert kernel_geometry("not json") == (None, None, None)
    assert kernel_geometry('"grid": [1, 2]') == (None, None, None)
    assert kernel_geometry('{"blocks per SM": 4}') == (None, None, 4.0)


def test_cpu_window_keeps_outermost_ops_per_thread_and_caps_the_count() -> None:
    events = [
        FakeKinetoEvent("aten::linear", "cpu_op", 0, 100, 1),
        FakeKinetoEvent("aten::addmm", "cpu_op", 10, 90, 1),  # nested: dropped
        FakeKinetoEvent("aten::relu", "cpu_op", 100, 150, 1),
        FakeKinetoEvent("autograd::engine", "cpu_op", 20, 60, 2),  # other thread
        FakeKinetoEvent("aten::sum", "cpu_op", 200, 210, 1),
        FakeKinetoEvent("kernel?", "kernel", 0, 1, 7),
    ]  # not on a CPU device
    message = window_message(
        events,
        device="cpu",
        offset_ns=OFFSET,
        t0_ns=0,
        t1_ns=300,
        steps=[1],
        perturbed=[0, 1],
        max_events=3,
    )
    assert [message["names"][i] for i in message["name"]] == [
        "aten::linear",
        "autograd::engine",
        "aten::relu",
    ]
    assert message["dropped"] == 1 and message["covered_t1_ns"] == 200
    assert "launch" not in message and "grid" not in message


def test_epoch_offset_takes_the_narrowest_pair() -> None:
    ticks = iter([0, 10, 100, 101, 200, 230])  # brackets of 10, 1, 30 ns
    walls = iter([5_000, 7_100, 9_000])
    assert epoch_offset(lambda: next(walls), lambda: next(ticks), pairs=3) == 7_100 - 100


@pytest.mark.parametrize("value", [0, -1, protocol.MAX_CAPTURE_STEPS + 1, "5", 2.0, True])
def test_bad_step_counts_are_not_accepted(value: Any) -> None:
    assert parse_steps(value) is None


# ---- the window's life cycle with a fake profiler ----------------------------------------


class FakeProfiler:
    """Follows ``schedule(wait=0, warmup=1, active=N)``: ``on_ready`` at the N+1-th step().

    Marker ranges opened while it "records" become events on the SIMULATED Kineto clock
    (``perf_counter_ns + OFFSET``), as torch's ``record_function`` ranges would.
    """

    def __init__(self, steps: int, on_ready: Any, events: list[Any], fail: str = "") -> None:
        self.steps, self.on_ready, self.fail = steps, on_ready, fail
        self.events = list(events)
        self.calls = 0
        self.running = False
        self.stopped = 0
        self.environ_at_stop: dict[str, str] = {}

    def start(self) -> None:
        if self.fail == "start":
            raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
        self.running = True

    def step(self) -> None:
        self.calls += 1
        if self.calls == self.steps + 1:
            self.running = False
            self.on_ready(self)

    def stop(self) -> None:
        self.running = False
        self.stopped += 1

    @property
    def recording(self) -> bool:
        return self.running and 1 <= self.calls <= self.steps

    @property
    def profiler(self) -> Any:
        events = self.events

        class Results:
            def events(self) -> list[Any]:
                return events

        class Inner:
            kineto_results = Results()

        return Inner()


class FakeWatch:
    """Stands in for ``ProfilerWatch``: the test says whether the script's profiler is on."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.listeners: list[Any] = []
        self.own_depth = 0

    def subscribe(self, listener: Any) -> bool:
        self.listeners.append(listener)
        return True

    def unsubscribe(self, listener: Any) -> None:
        self.listeners.remove(listener)

    @contextlib.contextmanager
    def own(self) -> Iterator[None]:
        self.own_depth += 1
        try:
            yield
        finally:
            self.own_depth -= 1

    def busy_reason(self) -> str | None:
        return self.reason

    def script_calls(self, what: str) -> None:
        for listener in list(self.listeners):
            listener(what)


@dataclass
class Rig:
    capture: KernelCapture
    link: FakeLink
    made: list[FakeProfiler]
    watch: FakeWatch
    environ: dict[str, str]


def make_rig(
    device: str = "cpu",
    *,
    events: list[Any] | None = None,
    fail: str = "",
    cuda: tuple[int, int] | None = (13, 0),
    environ: dict[str, str] | None = None,
    marks: bool = True,
) -> Rig:
    link = FakeLink()
    made: list[FakeProfiler] = []
    watch = FakeWatch()
    env = {} if environ is None else environ

    def factory(dev: str, steps: int, on_ready: Any) -> FakeProfiler:
        prof = FakeProfiler(steps, on_ready, events or [], fail)
        original_stop = prof.stop

        def stop() -> None:
            prof.environ_at_stop = dict(env)
            original_stop()

        prof.stop = stop  # type: ignore[method-assign]
        made.append(prof)
        return prof

    @contextlib.contextmanager
    def marker(name: str) -> Iterator[None]:
        start = time.perf_counter_ns()
        yield
        if marks and made and made[-1].recording:
            made[-1].events.append(
                FakeKinetoEvent(name, "user_annotation", start, time.perf_counter_ns(), 555)
            )

    capture = KernelCapture(
        link,
        device=device,
        profiler_factory=factory,
        marker=marker,
        watch=watch,
        release=CuptiRelease(env, lambda: cuda),
    )
    return Rig(capture, link, made, watch, env)


def make_capture(
    device: str = "cpu", events: list[Any] | None = None, fail: str = ""
) -> tuple[KernelCapture, FakeLink, list[FakeProfiler]]:
    rig = make_rig(device, events=events, fail=fail)
    return rig.capture, rig.link, rig.made


def test_window_opens_at_a_boundary_records_n_steps_after_a_warmup_and_tears_down() -> None:
    events = [FakeKinetoEvent("aten::mm", "cpu_op", 0, 5)]
    capture, link, made = make_capture(events=events)
    assert capture.at_boundary(10) is False  # nothing armed: nothing happens, nothing to come
    assert not made
    capture.request(2)
    assert capture.busy and not made
    # boundaries before steps 10 (warm-up), 11, 12 and after 12: each but the last says more
    # is to come
    assert [capture.at_boundary(step) for step in range(10, 14)] == [True, True, True, False]
    assert not capture.busy and made[0].stopped == 1 and not made[0].running
    [window] = link.kernels()
    assert window["status"] == "ok" and window["steps"] == [11, 12]
    assert window["perturbed"] == [10, 11, 12]
    assert window["t0_ns"] < window["t1_ns"]
    capture.at_boundary(14)
    assert len(made) == 1  # the profiler is not held outside the window


def test_a_script_boundary_asks_the_capture_only_from_a_request_until_it_is_done() -> None:
    """The script's step boundary runs at every step: with no capture asked for, the kernel
    capture is not called at all; a ``capture`` control has it called until its window is
    over, and the window comes out whole."""
    rig = make_rig("cpu", events=[FakeKinetoEvent("aten::mm", "cpu_op", 0, 5)])
    control = ScriptControl(rig.link, ProbeKnobs(rig.link))  # type: ignore[arg-type]
    control.capture = rig.capture
    asked: list[int] = []
    at_boundary = rig.capture.at_boundary

    def counted(step: int) -> bool:
        asked.append(step)
        return at_boundary(step)

    rig.capture.at_boundary = counted  # type: ignore[method-assign]
    for step in range(5):
        control.at_boundary(step)
    assert asked == []
    control._inbox.put({"kind": "capture", "steps": 2})
    for step in range(5, 12):
        control.at_boundary(step)
    assert asked == [5, 6, 7, 8]  # armed at 5, warm-up step 5, steps 6 and 7, closed at 8
    [window] = rig.link.kernels()
    assert window["status"] == "ok" and window["steps"] == [6, 7]


def test_bad_or_overlapping_requests_are_refused_in_one_sentence() -> None:
    capture, link, _ = make_capture()
    capture.request(0)
    capture.request(protocol.MAX_CAPTURE_STEPS + 1)
    capture.request(3)
    capture.request(3)
    refused = link.kernels()
    assert [w["status"] for w in refused] == ["refused"] * 3
    assert "from 1 to 50, not 0" in refused[0]["error"]
    assert "already running" in refused[2]["error"]
    assert all(level == "warning" for level, _ in link.logs)


def test_profiler_that_cannot_start_is_reported_and_training_goes_on() -> None:
    capture, link, made = make_capture(device="cuda", fail="start")
    capture.request(2)
    capture.at_boundary(5)
    [window] = link.kernels()
    assert window["status"] == "failed" and "CUPTI" in window["error"]
    assert "training goes on" in window["error"]
    assert made[0].stopped == 1 and not capture.busy


def test_simulated_cuda_window_without_gpu_activity_says_cupti_may_be_taken() -> None:
    capture, link, _ = make_capture(
        device="cuda", events=[FakeKinetoEvent("aten::mm", "cpu_op", 0, 5)]
    )
    capture.request(1)
    for step in range(3):
        capture.at_boundary(step)
    [window] = link.kernels()
    assert window["status"] == "failed" and "no GPU activity" in window["error"]


def test_closing_mid_window_stops_the_profiler() -> None:
    capture, link, made = make_capture()
    capture.request(5)
    capture.at_boundary(0)
    capture.at_boundary(1)
    capture.close()
    assert made[0].stopped == 1 and not capture.busy
    assert link.kernels()[0]["status"] == "failed"


# ---- the real profiler on the CPU ----------------------------------------------------------


def test_real_cpu_capture_twice_in_a_row_puts_ops_inside_the_steps() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    link = FakeLink()
    capture = KernelCapture(link, device="cpu")
    spans: dict[int, tuple[int, int]] = {}
    step = 0
    for _ in range(2):
        capture.request(2)
        for _ in range(4):
            capture.at_boundary(step)
            t0 = time.perf_counter_ns()
            loss = model(torch.randn(16, 64)).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            spans[step] = (t0, time.perf_counter_ns())
            step += 1
        capture.at_boundary(step)
    capture.close()
    windows = [KernelWindow.from_message(m) for m in link.kernels()]
    assert [w.status for w in windows] == ["ok", "ok"], link.logs
    for w in windows:
        first, last = spans[w.steps[0]], spans[w.steps[-1]]
        assert len(w) > 5
        assert first[0] - 1_000 <= int(w.start.min()) and int(w.end.max()) <= last[1] + 1_000
        summary = w.summary()
        assert summary.busy_fraction is not None and 0 < summary.busy_fraction < 1
        assert any(name.startswith("aten::") for name in w.names)


# ---- NVTX phase ranges --------------------------------------------------------------------


def test_nvtx_ranges_wrap_each_phase_and_never_leak() -> None:
    open_ranges: dict[int, str] = {}
    seen: list[str] = []

    def start(name: str) -> int:
        seen.append(name)
        open_ranges[len(seen)] = name
        return len(seen)

    backend = NvtxPhases(HostBackend(), start=start, end=open_ranges.pop)
    for _ in range(2):
        backend.begin(0)
        for i in range(protocol.N_MARKS):
            backend.mark(i)
            assert len(open_ranges) == (1 if i < protocol.N_MARKS - 1 else 0)
        backend.end()
    assert seen[: len(protocol.PHASES)] == [f"gpuwatch:{p}" for p in protocol.PHASES]
    backend.begin(1)
    backend.mark(0)
    backend.begin(2)  # a dropped step (script mode) must not leave its range open
    assert open_ranges == {}
    assert backend.kind == "host"


def test_a_window_too_big_for_one_message_keeps_the_earliest_events_that_fit() -> None:
    from gpuwatch.runner.kernel_capture import fit_message

    events = [
        FakeKinetoEvent(f"aten::op{i % 50}", "cpu_op", i * 10, i * 10 + 5, 1) for i in range(2000)
    ]
    message = fit_message(
        events,
        budget=20_000,
        device="cpu",
        offset_ns=OFFSET,
        t0_ns=0,
        t1_ns=20_000,
        steps=[1],
        perturbed=[0, 1],
    )
    kept = len(message["start"])
    assert 0 < kept < 2000 and message["dropped"] == 2000 - kept
    assert len(json.dumps(message, separators=(",", ":"))) <= 20_000
    assert message["covered_t1_ns"] == kept * 10  # the first dropped event's start


def test_simulated_cuda_window_reaches_the_last_kernel_that_ran_after_the_host() -> None:
    events = [FakeKinetoEvent("late_kernel", "kernel", 350, 480, 7, 1)]  # SIMULATED
    message = window_message(
        events, device="cuda", offset_ns=OFFSET, t0_ns=0, t1_ns=400, steps=[1], perturbed=[0, 1]
    )
    assert message["t1_ns"] == message["covered_t1_ns"] == 480


# ---- the clock: marker ranges instead of wall-clock pairs ----------------------------------


def test_marker_offset_is_the_middle_of_what_every_bracket_allows() -> None:
    # Kineto = host + 1000. Marker 1 ran inside host [100, 140], marker 2 inside [200, 210].
    spans, brackets = [(1110, 1130), (1203, 1207)], [(100, 140), (200, 210)]
    assert marker_offset(spans, brackets) == 1000  # [990, 1010] ∩ [997, 1003]
    assert marker_bounds(spans, brackets) == (997, 1003) and marker_error(spans, brackets) == 3
    assert marker_error([(1110, 1131)], [(100, 140)]) == 10  # [991, 1010]: 1000 is 9 and 10 off
    # Brackets that disagree (a clock stepped between them): the narrowest one decides, and
    # nothing bounds its error.
    disagree = [(500, 505), (1100, 1101)], [(0, 10), (100, 102)]
    assert marker_offset(*disagree) == 1100 - 101 and marker_error(*disagree) is None
    with pytest.raises(ValueError):
        marker_offset([], [])


TICK_NS = 15_600_000  # Windows' time.time_ns() before Python 3.13 (GetSystemTimeAsFileTime)


class SimulatedHost:
    """A perf_counter that advances 300 ns a read and a wall clock that ticks every 15.6 ms."""

    OFFSET = 5 * 10**17  # the true wall - perf_counter offset

    def __init__(self, now: int) -> None:
        self.now = now

    def clock(self) -> int:
        self.now += 300
        return self.now

    def coarse_wall(self) -> int:
        wall = self.now + self.OFFSET
        return wall - wall % TICK_NS


def test_wall_clock_pairs_fail_with_a_windows_tick_and_markers_do_not_need_them() -> None:
    """SIMULATED 15.6 ms wall clock: the old pairs are off by up to a tick, median half."""
    errors = []
    for phase in range(0, TICK_NS, TICK_NS // 400):
        host = SimulatedHost(10**12 + phase)
        errors.append(abs(epoch_offset(host.coarse_wall, host.clock) - host.OFFSET))
    assert max(errors) > 15_000_000 and 7_000_000 < statistics.median(errors) < 8_600_000
    assert max(errors) > 1_000_000  # what the offset must not be off by


def test_real_cpu_window_offset_holds_with_a_15_6_ms_wall_clock() -> None:
    walls: list[int] = []

    def coarse_wall() -> int:  # SIMULATED Windows wall clock (must not be needed at all)
        walls.append(1)
        now = time.time_ns()
        return now - now % TICK_NS

    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    link = FakeLink()
    capture = KernelCapture(link, device="cpu", wall=coarse_wall)
    spans = {}
    capture.request(2)
    for step in range(4):
        capture.at_boundary(step)
        t0 = time.perf_counter_ns()
        model(torch.randn(16, 32)).sum().backward()
        spans[step] = (t0, time.perf_counter_ns())
    capture.at_boundary(4)
    capture.close()
    [window] = [KernelWindow.from_message(m) for m in link.kernels()]
    assert window.ok, link.logs
    assert capture.offset_source == "markers" and not walls
    # On Linux Kineto's CPU clock is CLOCK_REALTIME, so precise pairs give the true offset.
    assert capture.offset_ns is not None
    assert abs(capture.offset_ns - epoch_offset()) <= 1_000_000
    assert spans[1][0] - 1_000 <= int(window.start.min())
    assert int(window.end.max()) <= spans[2][1] + 1_000
    assert not any(name.startswith(MARKER) for name in window.names)


def test_simulated_kineto_clock_unrelated_to_the_wall_is_found_from_the_markers() -> None:
    """Windows/macOS: Kineto's CPU clock is torch's steady clock, not the Unix epoch."""
    rig = make_rig(events=[FakeKinetoEvent("aten::mm", "cpu_op", 0, 5)])
    rig.capture.request(1)
    for step in range(3):
        rig.capture.at_boundary(step)
    [window] = rig.link.kernels()
    assert window["status"] == "ok" and window["names"] == ["aten::mm"]
    [start], [end] = window["start"], window["end"]
    assert abs(start) <= 1_000_000 and end - start == 5  # off by at most a marker's bracket
    assert rig.capture.offset_source == "markers"
    assert rig.capture.offset_ns is not None and abs(rig.capture.offset_ns - OFFSET) <= 1_000_000
    assert rig.capture.offset_error_ns is not None
    assert abs(rig.capture.offset_ns - OFFSET) <= rig.capture.offset_error_ns  # what it claims
    assert len(rig.made[0].events) == 1 + CLOCK_MARKS


def test_events_without_the_windows_markers_are_not_reported_as_its_own() -> None:
    rig = make_rig(events=[FakeKinetoEvent("aten::mm", "cpu_op", 0, 5)], marks=False)
    rig.capture.request(1)
    for step in range(3):
        rig.capture.at_boundary(step)
    [window] = rig.link.kernels()
    assert window["status"] == "failed" and window["error"] == REPLACED


def test_a_cpu_window_without_ops_is_failed_never_ok_with_busy_0() -> None:
    rig = make_rig(events=[])
    rig.capture.request(1)
    for step in range(3):
        rig.capture.at_boundary(step)
    [window] = rig.link.kernels()
    assert window["status"] == "failed" and "no CPU ops" in window["error"]


# ---- the script's own profiler (SIMULATED by the fake watch; real one: test_kernel_capture_
# profiler.py) -----------------------------------------------------------------------------


def test_request_while_the_scripts_profiler_is_on_is_refused_and_starts_nothing() -> None:
    rig = make_rig()
    rig.watch.reason = RECORDING
    rig.capture.request(2)
    rig.capture.at_boundary(0)
    [window] = rig.link.kernels()
    assert window["status"] == "refused" and window["error"] == RECORDING
    assert "its trace" in RECORDING and not rig.made and not rig.capture.busy


def test_scripts_profiler_started_between_request_and_boundary_refuses_the_window() -> None:
    rig = make_rig()
    rig.capture.request(2)
    rig.watch.reason = RECORDING
    rig.capture.at_boundary(0)
    [window] = rig.link.kernels()
    assert window["status"] == "refused" and not rig.made and not rig.capture.busy


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_scripts_profiler_starting_in_the_window_closes_ours_first(device: str) -> None:
    rig = make_rig(
        device, events=[FakeKinetoEvent("k", "kernel" if device == "cuda" else "cpu_op", 0, 5)]
    )
    rig.capture.request(3)
    rig.capture.at_boundary(0)
    rig.capture.at_boundary(1)
    rig.watch.script_calls("prepare")  # before the script's prepare reaches Kineto
    prof = rig.made[0]
    assert prof.stopped == 1 and not rig.capture.busy
    assert prof.environ_at_stop == {}  # no CUPTI teardown under the script's session
    [window] = rig.link.kernels()
    assert window["status"] == "failed" and window["error"] == DISTURBED
    for step in range(2, 6):
        rig.capture.at_boundary(step)
    assert len(rig.link.kernels()) == 1 and rig.environ == {}


# ---- CUPTI is detached after a CUDA window -----------------------------------------------

CUDA_EVENTS = [FakeKinetoEvent("gemm", "kernel", 10, 20, 7, 1)]  # SIMULATED


def run_window(rig: Rig, steps: int = 2, last_boundary: int = 6) -> None:
    rig.capture.request(steps)
    for step in range(last_boundary + 1):
        rig.capture.at_boundary(step)


def test_cuda_window_has_kineto_detach_cupti_for_one_step_then_restores_the_environment() -> None:
    rig = make_rig("cuda", events=CUDA_EVENTS)
    rig.capture.request(2)
    for step in range(4):  # warm-up 0, recorded 1-2, closed at the boundary before step 3
        rig.capture.at_boundary(step)
    assert rig.made[0].environ_at_stop == {"TEARDOWN_CUPTI": "1"}
    assert rig.environ == {"TEARDOWN_CUPTI": "1"}  # until step 3's CUDA calls finalize CUPTI
    [window] = rig.link.kernels()
    assert window["status"] == "ok" and window["perturbed"] == [0, 1, 2, 3]
    rig.capture.at_boundary(4)
    assert rig.environ == {}


def test_scripts_profiler_right_after_a_window_gets_its_own_environment() -> None:
    rig = make_rig("cuda", events=CUDA_EVENTS)
    rig.capture.request(1)
    for step in range(3):
        rig.capture.at_boundary(step)
    assert rig.environ == {"TEARDOWN_CUPTI": "1"}
    rig.watch.script_calls("prepare")
    assert rig.environ == {}


@pytest.mark.parametrize(
    ("environ", "cuda", "said"),
    [
        ({"TEARDOWN_CUPTI": "0"}, (13, 0), "TEARDOWN_CUPTI=0 is set"),
        ({}, (12, 4), "before CUDA 12.6"),
        ({}, None, "CUDA unknown"),
    ],
)
def test_cupti_teardown_is_left_to_the_script_or_skipped_where_unsafe(
    environ: dict[str, str], cuda: tuple[int, int] | None, said: str
) -> None:
    before = dict(environ)
    rig = make_rig("cuda", events=CUDA_EVENTS, cuda=cuda, environ=environ)
    for _ in range(2):
        run_window(rig)
        rig.capture.at_boundary(7)
    assert rig.environ == before and rig.made[0].environ_at_stop == before
    notes = [text for level, text in rig.link.logs if "CUPTI stays attached" in text]
    assert len(notes) == 1 and said in notes[0]  # said once per run
    assert [w["status"] for w in rig.link.kernels()] == ["ok", "ok"]
    assert rig.link.kernels()[0]["perturbed"] == [0, 1, 2]


def test_script_set_teardown_is_kept_and_a_cpu_window_never_touches_the_environment() -> None:
    rig = make_rig("cuda", events=CUDA_EVENTS, environ={"TEARDOWN_CUPTI": "1"})
    run_window(rig)
    assert rig.environ == {"TEARDOWN_CUPTI": "1"} and not any(
        "CUPTI stays" in text for _, text in rig.link.logs
    )
    cpu = make_rig("cpu", events=[FakeKinetoEvent("aten::mm", "cpu_op", 0, 5)])
    run_window(cpu)
    assert cpu.environ == {} and cpu.made[0].environ_at_stop == {}


def test_closing_restores_the_environment_and_leaves_the_watch() -> None:
    rig = make_rig("cuda", events=CUDA_EVENTS)
    rig.capture.request(1)
    for step in range(3):
        rig.capture.at_boundary(step)
    assert rig.environ and rig.watch.listeners
    rig.capture.close()
    assert rig.environ == {} and not rig.watch.listeners
