"""The runner's ``CudaEventBackend``, built by its own ``make_backend``, on the SIMULATED device
(``tests/simcuda``; a model, not a GPU measurement): its device marks against the simulation's
ground truth (when each event marker was reached, every kernel's start and end)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import torch
from simcuda.fixtures import installed
from simcuda.model import SimConfig, SimGpu

from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST, N_MARKS
from gpuwatch.runner.nvtx_ranges import NvtxPhases
from gpuwatch.runner.session import DeviceError, make_backend, resolve_device
from gpuwatch.runner.timing import CudaEventBackend, TimingBackend

CLOCK_HZ = 1.0e9
#: Device work per step: forward, backward and optimizer phases (1, 2, 1 ms).
PHASE_CYCLES = {2: 1_000_000, 3: 2_000_000, 4: 1_000_000}
#: float32 milliseconds over a few seconds' offset, and integer rounding.
ROUNDING_NS = 2_000


@dataclass
class Run:
    """Ground truth and what the backend reported, per step."""

    truth: dict[int, list[int]] = field(default_factory=dict)
    host: dict[int, list[int]] = field(default_factory=dict)
    kernels: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    marks: dict[int, list[int]] = field(default_factory=dict)
    max_bracket_ns: int = 0


def _events(backend: TimingBackend) -> CudaEventBackend:
    assert isinstance(backend, NvtxPhases), "on CUDA the event backend has NVTX ranges"
    assert isinstance(backend.inner, CudaEventBackend)
    return backend.inner


def run_steps(
    sim: SimGpu,
    backend: TimingBackend,
    *,
    device: int,
    steps: int,
    host_gap_s: float = 0.0,
    phase_cycles: dict[int, int] = PHASE_CYCLES,
) -> Run:
    """A training loop's calls to the backend, with ``_sleep`` kernels on ``device`` as the
    step's work; the ground truth of each mark is the marker the backend just recorded."""
    events = _events(backend)
    run = Run(max_bracket_ns=events.bracket_ns)
    truth_device = sim.devices[device]
    for step in range(steps):
        backend.begin(step)
        host, truth, kernels = [], [], []
        for index in range(N_MARKS):
            if index in phase_cycles:
                with torch.cuda.device(device):
                    torch.cuda._sleep(phase_cycles[index])
                kernels.append(truth_device.kernels[-1])
            host.append(time.perf_counter_ns())
            backend.mark(index)
            truth.append(truth_device.markers[-1].complete_ns)
        backend.end()
        run.host[step], run.truth[step] = host, truth
        run.kernels[step] = [(k.start_ns, k.end_ns) for k in kernels]
        run.marks.update(backend.poll())
        run.max_bracket_ns = max(run.max_bracket_ns, events.bracket_ns)
        if host_gap_s:
            time.sleep(host_gap_s)  # the host's own work between steps (data loading, ...)
    run.marks.update(backend.poll(wait=True))
    return run


def assert_marks_match(
    run: Run, tolerance_ns: int, drift_ppm: float = 0.0, anchor_age_s: float = 0.0
) -> None:
    """Each mark within ``tolerance_ns`` of the truth; with a drifting clock also within the
    drift over the anchor's age when the step's last marker completed (``anchor_age_s`` plus
    how far the device lagged behind the host at that step)."""
    assert set(run.marks) == set(run.truth), "every step got device marks"
    for step, marks in run.marks.items():
        lag_ns = max(0, run.truth[step][-1] - run.host[step][0])
        step_tolerance = tolerance_ns + round(drift_ppm * 1e-6 * (anchor_age_s * 1e9 + lag_ns))
        errors = [abs(m - t) for m, t in zip(marks, run.truth[step], strict=True)]
        assert max(errors) <= step_tolerance, (step, errors, step_tolerance)
        first_start = min(start for start, _ in run.kernels[step])
        last_end = max(end for _, end in run.kernels[step])
        # The stream-active span [data_end, optimizer_end] covers the step's kernels.
        assert marks[ACTIVE_FIRST] <= first_start + step_tolerance
        assert marks[ACTIVE_LAST] >= last_end - step_tolerance
        assert all(b >= a - step_tolerance for a, b in itertools.pairwise(marks))


@pytest.fixture
def one_gpu() -> Iterator[SimGpu]:
    with installed(SimConfig(sleep_clock_hz=CLOCK_HZ)) as sim:
        yield sim


def test_device_marks_match_the_ground_truth(one_gpu: SimGpu) -> None:
    backend = make_backend(torch, torch.device("cuda", 0))
    assert backend.kind == "cuda_events"
    run = run_steps(one_gpu, backend, device=0, steps=30)
    assert_marks_match(run, run.max_bracket_ns + ROUNDING_NS)
    # The device was the bottleneck: the host ran ahead, so markers completed after the host
    # placed them, and the device marks are not the host's. The first step starts an idle
    # device, which a host slowed by a loaded machine may not outrun: the backlog, not every
    # step, is the evidence.
    late = sorted(run.truth[s][ACTIVE_LAST] - run.host[s][ACTIVE_LAST] for s in run.truth)
    assert late[len(late) // 2] > 1_000_000, late
    assert _events(backend).skipped == 0
    assert not one_gpu.waits or {w.kind for w in one_gpu.waits} == {"device_synchronize"}
    backend.close()


def test_device_marks_follow_a_drifting_device_clock() -> None:
    """A device clock 2000 ppm fast under a sync-free, device-bound loop (15 ms of device work
    per step, 10 ms of host time): the training stream never drains, yet calibration (every
    0.2 s here) keeps the marks within the bracket plus the drift since the last calibration.
    Chaining alone would carry the drift forward: 2 ms off after one second."""
    drift_ppm = 2000
    with installed(SimConfig(sleep_clock_hz=CLOCK_HZ, drift_ppm=drift_ppm)) as sim:
        torch.cuda.set_device(0)
        backend = NvtxPhases(CudaEventBackend(calibrate_every_s=0.2))
        run = run_steps(
            sim,
            backend,
            device=0,
            steps=70,
            host_gap_s=0.01,
            phase_cycles={2: 5_000_000, 3: 7_000_000, 4: 3_000_000},
        )
        events = _events(backend)
        assert events.calibrations >= 3, "re-calibrated while the stream was busy"
        assert events.skipped == 0
        # The anchor of a step is at most one calibration interval (+ a step) old when the
        # step begins; its markers complete later by the device's lag behind the host.
        assert_marks_match(run, run.max_bracket_ns + ROUNDING_NS, drift_ppm, anchor_age_s=0.25)


def test_second_device_marks_land_on_its_stream() -> None:
    """``make_backend`` must make the chosen device current: the events are recorded on that
    device's stream, where its work is (on device 0 they would time an idle stream)."""
    with installed(SimConfig(devices=2, sleep_clock_hz=CLOCK_HZ)) as sim:
        torch.cuda.set_device(0)
        backend = make_backend(torch, torch.device("cuda", 1))
        run = run_steps(sim, backend, device=1, steps=10)
        assert not sim.devices[0].markers, "nothing recorded on device 0"
        assert_marks_match(run, run.max_bracket_ns + ROUNDING_NS)
        torch.cuda.set_device(0)


def test_resolve_device_on_two_devices() -> None:
    with installed(SimConfig(devices=2)):
        assert resolve_device(torch, "auto") == torch.device("cuda", 0)
        assert resolve_device(torch, "cuda:1") == torch.device("cuda", 1)
        with pytest.raises(DeviceError, match="this machine has 2 CUDA device"):
            resolve_device(torch, "cuda:2")
