"""Drawing maths of the views (numpy only, no Qt): samples as step series.

Kept apart from the widgets so it is testable without a display. The figures the views
draw (spans cut to the view, when a view is dense, time-weighted means) are the frame
presenter's (``gpuwatch.core.figures.frame``).
"""

from __future__ import annotations

import numpy as np


def step_series(
    t0: np.ndarray, t1: np.ndarray, value: np.ndarray, tolerance: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A step line over each sample's real period, never interpolated.

    Returns ``x, y, connect`` for ``PlotCurveItem(connect=...)``: each sample is a flat
    segment ``[t0, t1]``; neighbours are joined by a vertical edge only when they touch
    (within ``tolerance``), so a missing sample shows as a hole instead of a slope.
    ``NaN`` values are left out.
    """
    ok = np.isfinite(value)
    t0, t1, value = t0[ok], t1[ok], value[ok]
    n = len(value)
    x = np.empty(2 * n, np.float64)
    y = np.empty(2 * n, np.float64)
    x[0::2], x[1::2] = t0, t1
    y[0::2], y[1::2] = value, value
    connect = np.zeros(2 * n, bool)
    connect[0::2] = True  # the flat part of each sample
    if n > 1:
        connect[1:-1:2] = np.abs(t0[1:] - t1[:-1]) <= tolerance
    return x, y, connect
