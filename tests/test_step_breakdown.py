"""The step-time breakdown sums to the wall time, with known answers per category
(CPU host marks and SIMULATED CUDA device marks: hand-made, never a GPU measurement)."""

from __future__ import annotations

import numpy as np
import pytest
from test_gap_causes import cpu_steps, view_of

from gpuwatch.core.figures.analysis import phase_durations
from gpuwatch.core.figures.segments import segment_stats
from gpuwatch.core.figures.step_breakdown import (
    CATEGORIES,
    idle_summary,
    step_breakdown,
    summary,
)
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.model.store import StepsView


def test_cpu_breakdown_per_category_and_sum() -> None:
    v = cpu_steps(4)
    b = step_breakdown(v)
    wall_ms = phase_durations(v).sum() / 1e6 / 4
    assert b.wall_ms == pytest.approx(wall_ms)
    assert sum(b.categories.values()) == pytest.approx(b.wall_ms)
    assert b.categories == pytest.approx(
        {"kernel": 12, "memcpy": 1, "data_loading": 10, "cpu_launch": 0, "sync": 3, "other": 3}
    )
    assert b.idle_causes["input"] == pytest.approx(10) and b.idle_ms == pytest.approx(16)
    assert b.host_phases["forward"] == pytest.approx(5)


def test_simulated_cuda_breakdown_device_work_first() -> None:
    host = [[0, 10, 11, 13, 15, 16, 26], [27, 37, 38, 40, 42, 43, 53]]
    device = [[0, 10.5, 11.5, 18, 23, 25.9, 26], [27, 37.5, 38.5, 45, 50, 52.9, 53]]
    b = step_breakdown(view_of(host, device))
    # Per step (2 steps, wall 53 ms): kernel 2 × 14.4, copy span 2 × 1 + host-issued 2 × 0.5
    assert b.wall_ms == pytest.approx(26.5)
    assert b.categories["kernel"] == pytest.approx(14.4)
    assert b.categories["memcpy"] == pytest.approx(1.5)
    assert b.categories["data_loading"] == pytest.approx(10)
    assert b.categories["sync"] == pytest.approx(0.1)
    assert b.categories["other"] == pytest.approx(0.5)
    assert sum(b.categories.values()) == pytest.approx(b.wall_ms)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_timelines_always_sum_to_the_wall_time(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 200
    durations = rng.integers(0, 5_000_000, size=(n, 7))
    starts = np.cumsum(np.r_[0, durations.sum(axis=1)[:-1]])
    host = np.empty((n, 7), np.int64)
    host[:, 0] = starts
    host[:, 1:] = starts[:, None] + np.cumsum(durations[:, :6], axis=1)
    lag = rng.integers(0, 3_000_000, size=(n, 1))  # SIMULATED device lag, marks in order
    device = np.maximum.accumulate((host + lag).reshape(-1)).reshape(n, 7)
    has = rng.random(n) > 0.1
    steps = np.arange(n)
    steps[n // 2 :] += 3  # a hole
    v = StepsView(steps, np.zeros(n, np.int32), np.ones(n, np.int32), host, device, has)
    b = step_breakdown(v)
    assert sum(b.categories.values()) == pytest.approx(phase_durations(v).sum() / 1e6 / n)
    assert sum(b.host_phases.values()) == pytest.approx(b.wall_ms)
    assert all(ms >= 0 for ms in b.categories.values())


def test_empty_and_summaries() -> None:
    b = step_breakdown(StepsView.empty())
    assert b.steps == 0 and b.wall_ms == 0 and set(b.categories) == set(CATEGORIES)
    text = summary(step_breakdown(cpu_steps(3)).categories, "cpu")
    assert text.startswith("of ") and "compute" in text and "data loading" in text
    assert (
        idle_summary({"input": 30.2, "sync": 0.8, "other": 0.0})
        == "of 31.0 ms idle per step: 30.2 input, 0.8 sync"
    )


def test_segment_rows_carry_idle_causes_and_breakdown_without_transition() -> None:
    v = cpu_steps(12)
    change = ConfigChange(
        id=0, values={}, changed={}, t_ns=0, first_step=0, warmup_steps=2, label="baseline"
    )
    row = segment_stats(v, change, None)
    assert row.idle_causes is not None and row.breakdown is not None
    assert row.idle_causes["input"] == pytest.approx(10)
    assert sum(row.breakdown.values()) == pytest.approx(30 - 4 / 10)  # last step: no other
    assert row.to_json()["breakdown"] == row.breakdown
    few = segment_stats(cpu_steps(4), change, None)
    assert few.breakdown is None and few.idle_causes is None  # not steady: n/a, never 0
