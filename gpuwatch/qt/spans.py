"""Drawing maths of the views (numpy only, no Qt): spans cut to the visible window, when a
window is dense, step series and time-weighted means.

Kept apart from the widgets so it is testable without a display. Dense windows are
aggregated per pixel column by ``gpuwatch.core.figures.timeline_bins``.
"""

from __future__ import annotations

import numpy as np

#: Above this many spans per pixel the timeline draws per-column occupancy, not spans.
DENSE_SPANS_PER_PIXEL = 0.5


def clip_to_window(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Spans overlapping ``[lo, hi]`` (not trimmed: the view clips the drawing)."""
    keep = (e >= lo) & (s <= hi)
    return s[keep], e[keep]


def is_dense(n_spans: int, width_px: float) -> bool:
    """Too many spans to draw one by one: about one per pixel or more."""
    return n_spans > DENSE_SPANS_PER_PIXEL * max(width_px, 1.0)


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


def weighted_mean(
    w0: np.ndarray, w1: np.ndarray, value: np.ndarray, lo: float, hi: float
) -> float | None:
    """Time-weighted mean of per-window values over the part of each window in [lo, hi]."""
    a, b = np.maximum(w0, lo), np.minimum(w1, hi)
    weight = np.clip(b - a, 0, None).astype(np.float64)
    ok = np.isfinite(value) & (weight > 0)
    if not ok.any():
        return None
    return float(np.average(value[ok], weights=weight[ok]))
