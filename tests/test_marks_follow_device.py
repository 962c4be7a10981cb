"""Device marks follow the script's device and streams, start nothing before the script uses
CUDA, skip CUDA-graph capture, and return every event set: on the SIMULATED device
(``tests/simcuda``; a model, not a GPU measurement), against its ground truth markers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from simcuda.fixtures import installed
from simcuda.model import SimConfig, SimGpu

from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST, N_MARKS
from gpuwatch.runner.follow_device import FollowDevice
from gpuwatch.runner.nvtx_ranges import RANGE_NAMES, NvtxPhases
from gpuwatch.runner.session import make_script_backend, script_device
from gpuwatch.runner.timing import CudaEventBackend, HostBackend, TimingBackend

#: 1 ms of device work per ``_sleep`` phase at this simulated clock rate.
CLOCK_HZ = 1.0e9
WORK = 1_000_000
#: Float32 milliseconds over a second's offset round by well under this; the rest of a mark's
#: error is its anchor's calibration bracket, which the backend reports (``bracket_ns``): a few
#: µs on an idle machine, more when the test's thread is preempted inside the bracket.
ROUNDING_NS = 2_000


@pytest.fixture
def two_gpus() -> Iterator[SimGpu]:
    with installed(SimConfig(devices=2, sleep_clock_hz=CLOCK_HZ)) as sim:
        yield sim


class Notices:
    def __init__(self) -> None:
        self.texts: list[str] = []
        self.devices: list[int] = []


def follow(notices: Notices) -> FollowDevice:
    return FollowDevice(torch, notify=notices.texts.append, on_device=notices.devices.append)


def step(
    sim: SimGpu, backend: TimingBackend, step_id: int, stream: torch.cuda.Stream | None = None
) -> list[int]:
    """One step with device work in its h2d..optimizer phases, on ``stream`` (None: the
    current one); returns the ground truth of each mark (the marker just recorded)."""
    truth: list[int] = []
    with torch.cuda.stream(stream):
        device = sim.devices[torch.cuda.current_device()]
        backend.begin(step_id)
        for index in range(N_MARKS):
            if 1 <= index < ACTIVE_LAST:
                torch.cuda._sleep(WORK)
            backend.mark(index)
            truth.append(device.markers[-1].complete_ns)
        backend.end()
    return truth


def drain(backend: TimingBackend) -> dict[int, list[int]]:
    return dict(backend.poll(wait=True))


def tolerance_ns(backend: TimingBackend) -> int:
    """The widest calibration bracket among ``backend``'s devices, plus rounding: the bound
    the backend itself claims for its marks."""
    backend = getattr(backend, "inner", backend)  # NVTX ranges around the device marks
    backends = getattr(backend, "backends", None)
    cuda = list(backends.values()) if backends is not None else [backend]
    return max(b.bracket_ns for b in cuda) + ROUNDING_NS


def assert_close(marks: list[int], truth: list[int], backend: TimingBackend) -> None:
    errors = [abs(m - t) for m, t in zip(marks, truth, strict=True)]
    assert max(errors) <= tolerance_ns(backend), (errors, tolerance_ns(backend))


def test_recording_after_set_device_is_refused_by_the_simulated_device(two_gpus: SimGpu) -> None:
    """What broke the script: an event belongs to the device it was first recorded on, and
    torch refuses to record it on another device's stream (``c10/cuda/CUDAEvent.h``)."""
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    torch.cuda.set_device(1)
    with pytest.raises(RuntimeError, match="does not match recording stream's device"):
        event.record()
    torch.cuda.set_device(0)


def test_nothing_starts_cuda_before_the_script_does(two_gpus: SimGpu) -> None:
    device = script_device(torch, "auto")
    assert device == torch.device("cuda") and device.index is None
    notices = Notices()
    backend = make_script_backend(
        torch, device, notify=notices.texts.append, on_device=notices.devices.append
    )
    backend.begin(0)
    for index in range(N_MARKS):
        backend.mark(index)
    backend.end()
    assert backend.poll() == []
    assert not two_gpus.driver_initialized, two_gpus.initialized_by
    assert backend.skips.no_cuda == 1
    torch.ones(4, device="cuda")  # the script starts CUDA
    truth = step(two_gpus, backend, 1)
    assert_close(drain(backend)[1], truth, backend)
    assert notices.devices == [0]
    assert any("follow the current stream of cuda:0" in text for text in notices.texts)


def test_marks_follow_set_device_mid_run(two_gpus: SimGpu) -> None:
    notices = Notices()
    backend = follow(notices)
    torch.ones(1, device="cuda")
    truth = {s: step(two_gpus, backend, s) for s in range(5)}
    torch.cuda.set_device(1)
    truth |= {s: step(two_gpus, backend, s) for s in range(5, 10)}
    marks = drain(backend)
    assert sorted(marks) == list(range(10)) and backend.skipped == 0
    for s, expected in truth.items():
        assert_close(marks[s], expected, backend)
    assert notices.devices == [0, 1]
    assert [m.stream for m in two_gpus.devices[1].markers][-N_MARKS:] == [0] * N_MARKS
    # A step that changes device in its middle: no marks, no exception, counted.
    torch.cuda.set_device(0)
    backend.begin(10)
    backend.mark(0)
    torch.cuda.set_device(1)
    for index in range(1, N_MARKS):
        backend.mark(index)
    backend.end()
    assert 10 not in drain(backend)
    assert backend.skips.device_changed == 1
    torch.cuda.set_device(0)


def test_the_drain_waits_for_a_device_the_script_has_left(two_gpus: SimGpu) -> None:
    """The drain after the loop synchronizes each backend's own device: a script that moved to
    cuda:1 while its last steps on cuda:0 were still running keeps their marks
    (``torch.cuda.synchronize()`` alone waits for the current device only)."""
    backend = follow(Notices())
    torch.ones(1, device="cuda")
    backend.begin(0)
    for index in range(N_MARKS):
        if 1 <= index < ACTIVE_LAST:
            torch.cuda._sleep(200 * WORK)  # a second of device work in all: still in flight
        backend.mark(index)
    backend.end()
    torch.cuda.set_device(1)
    try:
        assert list(drain(backend)) == [0]
    finally:
        torch.cuda.set_device(0)


def test_a_step_on_a_side_stream_is_measured_there(two_gpus: SimGpu) -> None:
    notices = Notices()
    backend = follow(notices)
    side = torch.cuda.Stream()
    torch.cuda._sleep(50 * WORK)  # the default stream is busy for 50 ms: its markers are late
    truth = step(two_gpus, backend, 0, stream=side)
    assert {m.stream for m in list(two_gpus.devices[0].markers)[-N_MARKS:]} == {side.stream_id}
    assert_close(drain(backend)[0], truth, backend)
    # Marks split over two streams: the set is done only when every event is.
    backend.begin(1)
    backend.mark(0)
    with torch.cuda.stream(side):
        for index in range(1, N_MARKS - 1):
            torch.cuda._sleep(WORK)
            backend.mark(index)
    torch.cuda._sleep(30 * WORK)
    backend.mark(N_MARKS - 1)
    backend.end()
    assert backend.poll() == []
    marks = drain(backend)[1]
    assert marks[-1] - marks[0] >= 30 * WORK - tolerance_ns(backend)
    assert any("2 streams" in text and "not measured" in text for text in notices.texts)


def test_capture_is_skipped_and_replays_are_device_work(two_gpus: SimGpu) -> None:
    notices = Notices()
    backend = follow(notices)
    torch.ones(1, device="cuda")
    step(two_gpus, backend, 0)
    graph = torch.cuda.CUDAGraph()
    backend.begin(1)
    backend.mark(0)
    with torch.cuda.graph(graph):
        torch.cuda._sleep(3 * WORK)
        for index in range(1, N_MARKS):  # the step's marks fall inside the capture
            backend.mark(index)
        assert backend.poll() == []  # no query during capture
        backend.end()
        backend.begin(2)  # a step that begins inside the capture
        backend.mark(0)
        backend.end()
    assert backend.skips.capturing == 2
    before = len(two_gpus.devices[0].kernels)
    backend.begin(3)
    backend.mark(0)
    backend.mark(1)
    graph.replay()
    replayed = list(two_gpus.devices[0].kernels)[before:]
    for index in range(2, N_MARKS):
        backend.mark(index)
    backend.end()
    marks = drain(backend)
    assert set(marks) == {0, 3}
    assert len(replayed) == 1 and replayed[0].end_ns - replayed[0].start_ns == 3 * WORK
    assert marks[3][ACTIVE_FIRST] <= replayed[0].start_ns + tolerance_ns(backend)
    assert marks[3][ACTIVE_LAST] >= replayed[0].end_ns - tolerance_ns(backend)
    assert any("CUDA-graph capture" in text for text in notices.texts)


def test_event_sets_of_dropped_steps_go_back_to_the_pool(two_gpus: SimGpu) -> None:
    """200 steps that fail inside ``gw.step()`` (begun, never ended) on a pool of 8 sets: the
    next step still gets device marks, and nothing is counted as skipped."""
    backend = CudaEventBackend(depth=8)
    for s in range(200):
        backend.begin(s)
        backend.mark(0)
        backend.mark(1)
    truth = step(two_gpus, backend, 200)
    assert_close(drain(backend)[200], truth, backend)
    assert backend.skipped == 0


def test_a_full_pool_is_counted_by_reason(two_gpus: SimGpu) -> None:
    backend = CudaEventBackend(depth=2)
    torch.cuda._sleep(1_000 * WORK)  # one second of work ahead of every marker
    for s in range(5):
        step(two_gpus, backend, s)
    assert backend.skips.pool_empty == 3
    assert backend.skips.describe().startswith("3 while the device was")


def test_nvtx_ranges_are_start_end_and_leave_the_users_stack_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, object]] = []
    ids = iter(range(100, 200))

    def start(name: str) -> int:
        rid = next(ids)
        calls.append(("start", (name, rid)))
        return rid

    monkeypatch.setattr(torch.cuda.nvtx, "range_start", start)
    monkeypatch.setattr(torch.cuda.nvtx, "range_end", lambda rid: calls.append(("end", rid)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda n: calls.append(("push", n)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append(("pop", None)))
    backend = NvtxPhases(HostBackend())
    torch.cuda.nvtx.range_push("user:epoch")  # the user's range, open across our marks
    backend.begin(0)
    for index in range(N_MARKS):
        backend.mark(index)
    backend.end()
    torch.cuda.nvtx.range_pop()
    assert [c for c in calls if c[0] in ("push", "pop")] == [("push", "user:epoch"), ("pop", None)]
    started = [c[1] for c in calls if c[0] == "start"]
    assert [name for name, _ in started] == list(RANGE_NAMES)
    assert [c[1] for c in calls if c[0] == "end"] == [rid for _, rid in started]


def test_poll_keeps_sets_in_order_across_devices(two_gpus: SimGpu) -> None:
    backend = follow(Notices())
    torch.ones(1, device="cuda")
    for s in range(6):
        torch.cuda.set_device(s % 2)
        step(two_gpus, backend, s)
    assert [s for s, _ in backend.poll(wait=True)] == list(range(6))
    torch.cuda.set_device(0)
