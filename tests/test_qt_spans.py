"""Drawing maths of the Qt views (numpy only): step series, busy % over windows, phase spans."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwatch.core.figures.analysis import busy_percent_over, phase_spans
from gpuwatch.core.figures.frame import is_dense, weighted_mean
from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import N_MARKS
from gpuwatch.qt.spans import step_series


def view_of(host: np.ndarray, step: np.ndarray | None = None) -> StepsView:
    n = len(host)
    return StepsView(
        np.arange(n) if step is None else step,
        np.zeros(n, np.int32),
        np.ones(n, np.int32),
        host,
        host,
        np.ones(n, bool),
    )


def test_step_series_joins_touching_samples_only():
    t0 = np.array([0.0, 1.0, 3.0])
    t1 = np.array([1.0, 2.0, 4.0])  # a missing sample between 2 and 3
    x, y, connect = step_series(t0, t1, np.array([10.0, 20.0, 30.0]), tolerance=0.1)
    assert x.tolist() == [0, 1, 1, 2, 3, 4]
    assert y.tolist() == [10, 10, 20, 20, 30, 30]
    # flat, vertical edge at 1 s, flat, NO slope across the hole, flat
    assert connect[:5].tolist() == [True, True, True, False, True]


def test_step_series_leaves_out_unknown_values():
    x, y, _ = step_series(
        np.array([0.0, 1.0]), np.array([1.0, 2.0]), np.array([np.nan, 5.0]), tolerance=0.1
    )
    assert x.tolist() == [1, 2] and y.tolist() == [5, 5]


def test_dense_means_about_one_span_per_pixel_or_more():
    assert is_dense(10_000, 1000) and not is_dense(100, 1000)


def test_phase_spans_and_other_only_between_consecutive_steps():
    base = np.array([0, 1, 2, 3, 4, 5, 6])
    host = np.stack([base, base + 10, base + 30]).astype(np.int64)
    spans = phase_spans(view_of(host, np.array([0, 1, 3])))
    assert spans["data"][0].tolist() == [0, 10, 30]
    assert spans["sync"][1].tolist() == [6, 16, 36]
    # other: 6→10 between steps 0 and 1; nothing between 1 and 3 (step 2 is missing)
    assert list(zip(*(a.tolist() for a in spans["other"]), strict=True)) == [(6, 10)]
    assert host.shape[1] == N_MARKS


def test_busy_percent_is_nan_where_marks_do_not_cover_the_window():
    active = (np.array([100, 300]), np.array([200, 400]))
    w0 = np.array([0, 100, 200, 300])
    w1 = np.array([100, 200, 300, 500])
    busy = busy_percent_over(active, w0, w1)
    assert np.isnan(busy[0])  # before our first span: unknown, not 0
    assert busy[1] == pytest.approx(100.0)
    assert busy[2] == pytest.approx(0.0)  # a real idle gap
    assert np.isnan(busy[3])  # past the last mark received


def test_weighted_mean_clips_windows_to_the_range():
    mean = weighted_mean(np.array([0, 10]), np.array([10, 20]), np.array([0.0, 100.0]), 5, 20)
    assert mean == pytest.approx(100 * 10 / 15)
    assert weighted_mean(np.array([0]), np.array([10]), np.array([1.0]), 20, 30) is None
