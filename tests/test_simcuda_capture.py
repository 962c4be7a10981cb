"""The runner's kernel capture on the SIMULATED CUDA device (``tests/simcuda``; a model, not a
GPU): a CUDA-activity ``torch.profiler`` window gets the device's work items as CUPTI would
add them, and the runner's own ``KernelCapture`` turns them into a ``kernels`` message whose
kernels are the ones the device ran, on the host axis."""

from __future__ import annotations

from typing import Any

import torch
from simcuda.fixtures import installed
from simcuda.model import SimConfig

from gpuwatch.core.figures.kernel_window import KernelWindow
from gpuwatch.protocol import KERNEL_KINDS
from gpuwatch.runner.kernel_capture import KernelCapture

CYCLES = 2_000_000  # 2 ms at the config's clock
CONFIG = SimConfig(sleep_clock_hz=1e9)


class Link:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.logs: list[str] = []

    def send(self, kind: str, **fields: Any) -> None:
        self.sent.append({"kind": kind, **fields})

    def log(self, level: str, text: str) -> None:
        self.logs.append(text)


def test_a_capture_window_holds_the_kernels_the_simulated_device_ran() -> None:
    link = Link()
    with installed(CONFIG) as sim:
        capture = KernelCapture(link, device="cuda")
        capture.request(3)
        for step in range(6):
            capture.at_boundary(step)
            torch.cuda._sleep(CYCLES)
            torch.cuda._sleep(CYCLES)
        capture.at_boundary(6)
        torch.cuda.synchronize()
        ran = [k for k in sim.devices[0].kernels if k.name == "spin_kernel"]
        [sim_clock] = torch.profiler.profile.clock_fits  # how the device's times were moved
    [message] = [m for m in link.sent if m["kind"] == "kernels"]
    assert message["status"] == "ok", message.get("error")
    window = KernelWindow.from_message(message)
    names = [window.names[i] for i in window.name]
    assert names.count("spin_kernel") == 6, "two kernels in each of the 3 recorded steps"
    assert set(window.kind.tolist()) == {KERNEL_KINDS.index("kernel")}
    # The recorded steps are 1-3 (step 0 is the profiler's warm-up): their kernels, back on
    # the host axis. The simulator moved them onto Kineto's clock with its marks' offset, the
    # capture moved them back with its markers' one: each is off by at most half of what its
    # marks allow, so together by the sum (and the marks pin the clock well inside a kernel).
    assert capture.offset_source == "markers" and capture.offset_error_ns is not None
    tolerance = capture.offset_error_ns + sim_clock.error_ns
    truth = ran[2:8]
    assert tolerance < truth[0].end_ns - truth[0].start_ns, "the marks tell kernels apart"
    for start, end, kernel in zip(window.start, window.end, truth, strict=True):
        assert abs(int(start) - kernel.start_ns) <= tolerance
        assert int(end) - int(start) == kernel.end_ns - kernel.start_ns
    assert all(int(t) >= 0 for t in window.launch), "each kernel found its launch call"
    summary = window.summary()
    assert summary.kernels == 6 and summary.busy_ns >= 6 * 2_000_000 * 0.99
