"""Drawing maths of the views (numpy only, no Qt): samples as step series.

Kept apart from the widgets so it is testable without a display. The figures the views
draw (spans cut to the view, when a view is dense, time-weighted means) are the frame
presenter's (``gpuwatch.core.figures.frame``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: A view's first spans may be cut differently as its start moves: this many are tried to
#: find where the previous frame's spans go on.
LEFT_EDGE_SPANS = 4


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


def changed_between(
    old: Sequence[np.ndarray], new: Sequence[np.ndarray]
) -> list[tuple[float, float]]:
    """Where drawing ``new`` spans instead of ``old`` ones can change a pixel: x intervals
    (``inf`` ends for "from here on"). A span is its ``x0, x1`` (the first two arrays) and
    anything else it is drawn from (further arrays, compared too).

    A followed view's spans are the previous ones minus some that left on the left (the
    first one or two may be cut differently by the view's new start), with the newest ones
    changed or added on the right: the old run is found by one of the first new spans, and
    only the spans before it and everything from the first difference on are changed.
    """
    o0, o1, n0, n1 = old[0], old[1], new[0], new[1]
    if len(o0) == 0 and len(n0) == 0:
        return []
    if len(o0) == 0 or len(n0) == 0:
        both0, both1 = np.concatenate([o0, n0]), np.concatenate([o1, n1])
        return [(float(both0.min()), float(both1.max()))]
    for k in range(min(LEFT_EDGE_SPANS, len(n0))):
        found = np.flatnonzero(o0 == n0[k])
        if len(found):
            break
    else:
        return [(min(float(o0.min()), float(n0.min())), np.inf)]
    i0 = int(found[0])
    out: list[tuple[float, float]] = []
    left = [(a[:i], b[:i]) for a, b, i in ((o0, o1, i0), (n0, n1, k)) if i]
    if left:
        out.append((min(float(a.min()) for a, _ in left), max(float(b.max()) for _, b in left)))
    m = min(len(n0) - k, len(o0) - i0)
    differ = np.zeros(m, bool)
    for a, b in zip(old, new, strict=True):
        differ |= a[i0 : i0 + m] != b[k : k + m]
    first = np.flatnonzero(differ)
    j = int(first[0]) if len(first) else m
    rest = [a[i:] for a, i in ((o0, i0 + j), (n0, k + j)) if len(a) > i]
    if rest:
        out.append((float(min(r.min() for r in rest)), np.inf))
    return out
