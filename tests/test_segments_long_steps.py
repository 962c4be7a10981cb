"""Steady figures for steps of every length: 1 ms, 100 ms and 6 s (docs/knobs.md §3).

A 6 s step never shares a 1 s rate window with another one, so such steps are rated one by one
and fewer of them make a figure; until then a row says how many steady steps it has and needs.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_segments import change, make_steps

from gpuwatch.core.figures.segments import (
    MIN_LONG_STEADY_STEPS,
    MIN_STEADY_STEPS,
    Scoreboard,
    SteadyWait,
    segment_stats,
)
from gpuwatch.core.model.store import SeriesStore, StepStore

WARMUP = 3


def _store(step_ms: float, steady: int, *, data_ms: float, samples: int = 32) -> StepStore:
    """Three slow warm-up steps (twice as long, half of them waiting for data), then
    ``steady`` steps of ``step_ms``."""
    store = StepStore(4096)
    store.set_device_is_host(True)
    slow = {i: 2 * step_ms for i in range(WARMUP)}
    make_steps(
        store,
        0,
        WARMUP + steady,
        0,
        0,
        step_ms=step_ms,
        data_ms=data_ms,
        samples=samples,
        slow=slow,
    )
    return store


@pytest.mark.parametrize(
    ("step_ms", "needed", "basis"),
    [(1, MIN_STEADY_STEPS, "window"), (100, MIN_STEADY_STEPS, "window"), (6000, 3, "step")],
)
def test_a_row_measures_until_it_has_its_steady_steps_then_gives_figures(
    step_ms: float, needed: int, basis: str
) -> None:
    data_ms = step_ms / 6
    waiting = segment_stats(
        _store(step_ms, needed - 1, data_ms=data_ms).snapshot(),
        change(0, 0, WARMUP, 0),
        None,
        live=True,
    )
    assert waiting.samples_per_s is None and waiting.busy_share is None
    assert waiting.waiting == SteadyWait(needed - 1, needed, live=True)
    assert waiting.waiting.text() == f"measuring ({needed - 1} of {needed} steady steps)"

    row = segment_stats(
        _store(step_ms, needed, data_ms=data_ms).snapshot(), change(0, 0, WARMUP, 0), None
    )
    assert row.waiting is None and row.steady
    assert row.rate_basis == basis
    assert row.samples_per_s == pytest.approx(32 / (step_ms / 1000), rel=1e-6)
    assert row.step_ms_p50 == pytest.approx(step_ms)
    assert row.input_wait_share == pytest.approx(1 / 6, rel=1e-3)
    # CPU: compute phases from data_end to optimizer_end are 4/5 of the non-data time.
    assert row.busy_share == pytest.approx(5 / 6 * 4 / 5, rel=1e-3)


def test_long_steps_use_the_median_of_per_step_rates_and_leave_out_profiled_steps() -> None:
    store = StepStore(64)
    store.set_device_is_host(True)
    end = make_steps(store, 0, WARMUP, 0, 0, step_ms=9000, data_ms=4000)
    for i, seconds in enumerate((5, 7, 6, 30)):  # step 6 ran under a kernel capture: 30 s
        end = make_steps(store, WARMUP + i, 1, 0, end, step_ms=seconds * 1000, data_ms=500)
    view = store.snapshot()
    profiled = view.step == 6
    row = segment_stats(view, change(0, 0, WARMUP, 0), None, profiled=profiled)
    assert row.steady_steps == 3 and row.rate_basis == "step"
    assert row.window_rates == pytest.approx((32 / 5, 32 / 7, 32 / 6))
    assert row.samples_per_s == pytest.approx(32 / 6)
    assert row.step_ms_p95 < 7000  # neither the warm-up steps nor the profiled one


def test_a_finished_segment_that_stayed_too_short_says_so() -> None:
    store = _store(6000, 2, data_ms=1000)
    row = segment_stats(store.snapshot(), change(0, 0, WARMUP, 0), None, live=False)
    assert row.waiting == SteadyWait(2, MIN_LONG_STEADY_STEPS, live=False)
    assert row.waiting.text() == "n/a (only 2 of 3 steady steps)"


def test_a_row_still_in_its_warm_up_measures_from_zero() -> None:
    store = StepStore(64)
    store.set_device_is_host(True)
    make_steps(store, 0, 2, 0, 0, step_ms=10, data_ms=2)
    rows = Scoreboard().rows(
        store,
        [change(0, 0, WARMUP, 0)],
        SeriesStore(),
        device_kind="cpu",
        cores=2,
        baseline_id=None,
        running=True,
    )
    assert rows[0].waiting == SteadyWait(0, MIN_STEADY_STEPS, live=True)


def test_steps_near_the_window_length_keep_window_rates() -> None:
    """0.9 s steps still share windows now and then: the 1 s window rule stays, and so does
    its need for five steady steps."""
    store = _store(900, MIN_STEADY_STEPS - 1, data_ms=100)
    row = segment_stats(store.snapshot(), change(0, 0, WARMUP, 0), None)
    assert row.waiting == SteadyWait(MIN_STEADY_STEPS - 1, MIN_STEADY_STEPS, live=False)
    store = _store(900, 12, data_ms=100)
    row = segment_stats(store.snapshot(), change(0, 0, WARMUP, 0), None)
    assert row.rate_basis == "window"
    assert row.samples_per_s == pytest.approx(32 / 0.9, rel=0.01)
    assert np.all(np.asarray(row.window_rates) > 0)
