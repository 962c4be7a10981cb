"""The doctor's ground-truth script calibrates ``torch.cuda._sleep`` against timed events on
a SIMULATED device (``tests/simcuda``): a launch slowed by a loaded host must not count as
kernel time, or every kernel the check sizes from the calibration comes out short."""

from __future__ import annotations

import time

import pytest
import torch
from simcuda.fixtures import installed
from simcuda.model import SimConfig

from gpuwatch.runner import ground_truth

CLOCK_HZ = 1.41e9
#: A loaded machine: each launch reaches the device this much later than the host asked.
SLOW_LAUNCH_S = 0.001


def test_a_slow_launch_does_not_count_as_kernel_time(monkeypatch) -> None:
    with installed(SimConfig(sleep_clock_hz=CLOCK_HZ)):
        sleep = torch.cuda._sleep

        def slow_sleep(cycles: int) -> None:
            time.sleep(SLOW_LAUNCH_S)  # the host is preempted between the calls
            sleep(cycles)

        monkeypatch.setattr(torch.cuda, "_sleep", slow_sleep)
        cycles_per_ms = ground_truth.calibrate(torch)
    assert cycles_per_ms == pytest.approx(CLOCK_HZ / 1e3, rel=0.01)
