"""Turn stored steps into drawable spans and step series (numpy only, no Qt).

Kept apart from the widgets so the drawing maths is testable without a display, and so a
window of 10,000 steps/s still draws: spans are cut to the visible window and, when there
are more than a pixel can show, aggregated per pixel column.
"""

from __future__ import annotations

import numpy as np

from gpuwatch.core.analysis import busy_fraction, coverage_before, is_merged, merge_intervals
from gpuwatch.core.store import StepsView
from gpuwatch.protocol import PHASES

#: Above this many spans per pixel the timeline draws per-column occupancy, not spans.
DENSE_SPANS_PER_PIXEL = 0.5


def phase_spans(view: StepsView) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Host spans ``(start_ns, end_ns)`` per phase, keyed in ``ALL_PHASES`` order.

    ``PHASES[i]`` runs between marks ``i`` and ``i + 1``; ``other`` runs from a step's end
    to the next step's start, only between consecutive step ids (a hole in the ring or a
    restart is not loop overhead).
    """
    host = np.ascontiguousarray(view.host.T)  # one contiguous row per mark: faster slicing
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for i, name in enumerate(PHASES):
        out[name] = (host[i], host[i + 1])  # empty phases are zero-length spans: harmless
    if len(view) > 1:
        keep = np.diff(view.step) == 1
        out["other"] = (host[-1, :-1][keep], host[0, 1:][keep])
    else:
        empty = np.empty(0, np.int64)
        out["other"] = (empty, empty.copy())
    return out


def clip_to_window(s: np.ndarray, e: np.ndarray, lo: int, hi: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Spans overlapping ``[lo, hi]`` (not trimmed: the view clips the drawing)."""
    keep = (e >= lo) & (s <= hi)
    return s[keep], e[keep]


def is_dense(n_spans: int, width_px: float) -> bool:
    """Too many spans to draw one by one: about one per pixel or more."""
    return n_spans > DENSE_SPANS_PER_PIXEL * max(width_px, 1.0)


def column_occupancy(s: np.ndarray, e: np.ndarray, lo: int, hi: int, width_px: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Share of each pixel column of ``[lo, hi]`` covered by the spans.

    This is the visible-window aggregation for dense data: 10,000 steps/s become one bar per
    pixel column whose height says how much of that column the phase took, instead of a
    solid block that hides the duty cycle. Returns ``(col_start, col_end, fraction)`` for
    every column, empty ones included.
    """
    n_cols = max(int(np.ceil(width_px)), 1)
    edges = np.linspace(lo, hi, n_cols + 1)
    if not is_merged(s, e):  # a phase's spans are disjoint already; merged device spans too
        s, e = merge_intervals(s, e)
    if hi <= lo or len(s) == 0:
        return edges[:-1], edges[1:], np.zeros(n_cols)
    # One pass over the spans for all columns: busy time before each edge, then differences.
    covered = np.diff(coverage_before(s, e, edges))
    frac = np.clip(covered / np.diff(edges), 0.0, 1.0)
    return edges[:-1], edges[1:], frac


def step_series(t0: np.ndarray, t1: np.ndarray, value: np.ndarray, tolerance: float
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


def weighted_mean(w0: np.ndarray, w1: np.ndarray, value: np.ndarray, lo: float, hi: float
                  ) -> float | None:
    """Time-weighted mean of per-window values over the part of each window in [lo, hi]."""
    a, b = np.maximum(w0, lo), np.minimum(w1, hi)
    weight = np.clip(b - a, 0, None).astype(np.float64)
    ok = np.isfinite(value) & (weight > 0)
    if not ok.any():
        return None
    return float(np.average(value[ok], weights=weight[ok]))


def busy_percent_over(active: tuple[np.ndarray, np.ndarray], w0: np.ndarray, w1: np.ndarray
                      ) -> np.ndarray:
    """Busy % from merged ``active`` spans over given windows (e.g. NVML's sample periods).

    Windows not fully covered by the spans we hold (before the first one, or past the last
    device mark still to arrive) are ``NaN``: unknown, never a false 0.
    """
    out = np.full(len(w0), np.nan)
    s, e = active
    if len(s) == 0 or len(w0) == 0:
        return out
    covered = (w0 >= s[0]) & (w1 <= e.max()) & (w1 > w0)
    if covered.any():
        out[covered] = 100.0 * np.asarray(busy_fraction(s, e, w0[covered], w1[covered]))
    return out
