"""The runner's kernel capture: reading raw Kineto events, the window's life cycle, refusals.

There is no GPU here. The CUDA tests feed SIMULATED events: fake objects with the
``_KinetoEvent`` method names, whose activity types, streams, correlation ids and metadata
follow Kineto's conventions (notes/measurement.md §2.2). The CPU tests use the real profiler.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from gpuwatch import protocol
from gpuwatch.core.kernel_window import KernelWindow
from gpuwatch.runner.kernel_capture import (
    KernelCapture,
    epoch_offset,
    kernel_geometry,
    parse_steps,
    window_message,
)
from gpuwatch.runner.nvtx_ranges import NvtxPhases
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

GEOMETRY = ('"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 41, '
            '"registers per thread": 32, "shared memory": 0, "blocks per SM": 0.25, '
            '"warps per SM": 1.0, "grid": [33, 1, 1], "block": [128, 1, 1], '
            '"est. achieved occupancy %": 3')


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
    message = window_message(events, device="cuda", offset_ns=OFFSET, t0_ns=50, t1_ns=400,
                             steps=[4], perturbed=[3, 4])
    assert [message["names"][i] for i in message["name"]] == [
        "gemm_kernel", "Memcpy HtoD (Pageable -> Device)", "Memset (Device)"]
    assert [protocol.KERNEL_KINDS[t] for t in message["type"]] == ["kernel", "memcpy", "memset"]
    assert message["start"] == [120, 200, 270] and message["end"] == [180, 260, 275]
    assert message["stream"] == [7, 9, 7]
    assert message["launch"] == [100, 150, None]  # the correlated runtime call's start
    assert message["grid"] == [[33, 1, 1], None, None]
    assert message["block"] == [[128, 1, 1], None, None]
    assert message["blocks_per_sm"] == [0.25, None, None]
    window = KernelWindow.from_message(protocol.decode(json.dumps(
        {"kind": "kernels", **message}).encode()))
    summary = window.summary()
    assert summary.kernels == 1 and summary.copies == 2
    assert summary.underfilled == 1 and summary.geometry_known == 1


def test_geometry_is_optional_and_never_guessed() -> None:
    assert kernel_geometry("") == (None, None, None)
    assert kernel_geometry("not json") == (None, None, None)
    assert kernel_geometry('"grid": [1, 2]') == (None, None, None)
    assert kernel_geometry('{"blocks per SM": 4}') == (None, None, 4.0)


def test_cpu_window_keeps_outermost_ops_per_thread_and_caps_the_count() -> None:
    events = [FakeKinetoEvent("aten::linear", "cpu_op", 0, 100, 1),
              FakeKinetoEvent("aten::addmm", "cpu_op", 10, 90, 1),  # nested: dropped
              FakeKinetoEvent("aten::relu", "cpu_op", 100, 150, 1),
              FakeKinetoEvent("autograd::engine", "cpu_op", 20, 60, 2),  # other thread
              FakeKinetoEvent("aten::sum", "cpu_op", 200, 210, 1),
              FakeKinetoEvent("kernel?", "kernel", 0, 1, 7)]  # not on a CPU device
    message = window_message(events, device="cpu", offset_ns=OFFSET, t0_ns=0, t1_ns=300,
                             steps=[1], perturbed=[0, 1], max_events=3)
    assert [message["names"][i] for i in message["name"]] == [
        "aten::linear", "autograd::engine", "aten::relu"]
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
    """Follows ``schedule(wait=0, warmup=1, active=N)``: ``on_ready`` at the N+1-th step()."""

    def __init__(self, steps: int, on_ready: Any, events: list[Any], fail: str = "") -> None:
        self.steps, self.on_ready, self.events, self.fail = steps, on_ready, events, fail
        self.calls = 0
        self.running = False
        self.stopped = 0

    def start(self) -> None:
        if self.fail == "start":
            raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
        self.running = True

    def step(self) -> None:
        self.calls += 1
        if self.calls == self.steps + 1:
            self.on_ready(self)

    def stop(self) -> None:
        self.running = False
        self.stopped += 1

    @property
    def profiler(self) -> Any:
        events = self.events

        class Results:
            def events(self) -> list[Any]:
                return events

        class Inner:
            kineto_results = Results()

        return Inner()


def make_capture(device: str = "cpu", events: list[Any] | None = None, fail: str = ""
                 ) -> tuple[KernelCapture, FakeLink, list[FakeProfiler]]:
    link = FakeLink()
    made: list[FakeProfiler] = []

    def factory(dev: str, steps: int, on_ready: Any) -> FakeProfiler:
        prof = FakeProfiler(steps, on_ready, events or [], fail)
        made.append(prof)
        return prof

    return KernelCapture(link, device=device, profiler_factory=factory), link, made


def test_window_opens_at_a_boundary_records_n_steps_after_a_warmup_and_tears_down() -> None:
    events = [FakeKinetoEvent("aten::mm", "cpu_op", 0, 5)]
    capture, link, made = make_capture(events=events)
    capture.at_boundary(10)  # nothing armed: nothing happens
    assert not made
    capture.request(2)
    assert capture.busy and not made
    for step in range(10, 14):  # boundary before steps 10 (warm-up), 11, 12 and after 12
        capture.at_boundary(step)
    assert not capture.busy and made[0].stopped == 1 and not made[0].running
    [window] = link.kernels()
    assert window["status"] == "ok" and window["steps"] == [11, 12]
    assert window["perturbed"] == [10, 11, 12]
    assert window["t0_ns"] < window["t1_ns"]
    capture.at_boundary(14)
    assert len(made) == 1  # the profiler is not held outside the window


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
    capture, link, _ = make_capture(device="cuda",
                                    events=[FakeKinetoEvent("aten::mm", "cpu_op", 0, 5)])
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
    stack: list[str] = []
    seen: list[str] = []

    def push(name: str) -> None:
        stack.append(name)
        seen.append(name)

    backend = NvtxPhases(HostBackend(), push=push, pop=stack.pop)
    for _ in range(2):
        backend.begin(0)
        for i in range(protocol.N_MARKS):
            backend.mark(i)
            assert len(stack) == (1 if i < protocol.N_MARKS - 1 else 0)
        backend.end()
    assert seen[:len(protocol.PHASES)] == [f"gpuwatch:{p}" for p in protocol.PHASES]
    backend.begin(1)
    backend.mark(0)
    backend.begin(2)  # a dropped step (script mode) must not leave its range open
    assert stack == []
    assert backend.kind == "host"


def test_a_window_too_big_for_one_message_keeps_the_earliest_events_that_fit() -> None:
    from gpuwatch.runner.kernel_capture import fit_message

    events = [FakeKinetoEvent(f"aten::op{i % 50}", "cpu_op", i * 10, i * 10 + 5, 1)
              for i in range(2000)]
    message = fit_message(events, budget=20_000, device="cpu", offset_ns=OFFSET, t0_ns=0,
                          t1_ns=20_000, steps=[1], perturbed=[0, 1])
    kept = len(message["start"])
    assert 0 < kept < 2000 and message["dropped"] == 2000 - kept
    assert len(json.dumps(message, separators=(",", ":"))) <= 20_000
    assert message["covered_t1_ns"] == kept * 10  # the first dropped event's start


def test_simulated_cuda_window_reaches_the_last_kernel_that_ran_after_the_host() -> None:
    events = [FakeKinetoEvent("late_kernel", "kernel", 350, 480, 7, 1)]  # SIMULATED
    message = window_message(events, device="cuda", offset_ns=OFFSET, t0_ns=0, t1_ns=400,
                             steps=[1], perturbed=[0, 1])
    assert message["t1_ns"] == message["covered_t1_ns"] == 480
