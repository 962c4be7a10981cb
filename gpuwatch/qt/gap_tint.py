"""Idle gaps tinted by cause: colours, the per-cause spans to draw, and the legend.

Numpy only (no widgets), so the timeline draws it cheaply and tests check it headless. Each
cause borrows the colour of the host phase it comes from (input = ``data``'s orange, sync =
``sync``'s vermillion, ...), translucent like the plain gap tint, so the theme machinery
re-colours it with everything else.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QColor

from gpuwatch.core.gap_causes import CAUSES, CausedIdle
from gpuwatch.qt import palette
from gpuwatch.qt.spans import clip_to_window, column_occupancy

#: Opacity of a tinted gap (the plain gap tint uses 110).
ALPHA = 170
CAUSE_COLORS: dict[str, QColor] = {
    "input": palette.pale(palette.PHASE_COLORS["data"], ALPHA),
    "copy": palette.pale(palette.PHASE_COLORS["h2d"], ALPHA),
    "sync": palette.pale(palette.PHASE_COLORS["sync"], ALPHA),
    "launch": palette.pale(palette.PHASE_COLORS["forward"], ALPHA),
    "reconfigure": palette.pale(palette.TRANSITION.name(), ALPHA),
    "other": palette.pale(palette.PHASE_COLORS["other"], ALPHA),
}
CAUSE_TIPS = {
    "input": "the device waits while the host waits for the next batch",
    "copy": "the device waits while the host issues copies",
    "sync": "the device waits while the host is in .item()/logging",
    "launch": "the device waits while the host runs model code (nothing queued)",
    "reconfigure": "a knob change being applied (and its transition steps)",
    "other": "loop overhead and anything else",
}


def tint_spans(idle: CausedIdle, lo_ns: int, hi_ns: int, *, dense: bool, width_px: float
               ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Spans to draw per cause in ``[lo_ns, hi_ns]``, in ns.

    Sparse: each cause's merged idle spans. Dense (more spans than pixels): one span per
    pixel column that holds idle time, in the colour of the cause with most idle time in it.
    """
    if not dense:
        return {c: clip_to_window(*idle.spans(c), lo_ns, hi_ns) for c in CAUSES}
    fracs = []
    c0 = c1 = np.empty(0)
    for cause in CAUSES:
        c0, c1, frac = column_occupancy(*idle.spans(cause), lo_ns, hi_ns, width_px)
        fracs.append(frac)
    stacked = np.vstack(fracs)
    top = np.argmax(stacked, axis=0)
    any_idle = stacked.sum(axis=0) > 0
    return {c: (c0[any_idle & (top == i)], c1[any_idle & (top == i)])
            for i, c in enumerate(CAUSES)}


def present_causes(spans: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[str, ...]:
    """Causes with something drawn, most visible time first (the legend's order)."""
    totals = {c: float(np.sum(e - s)) for c, (s, e) in spans.items() if len(s)}
    return tuple(sorted(totals, key=lambda c: -totals[c]))


def legend(causes: tuple[str, ...]) -> str:
    """Rich text: "idle, by cause: ■ input ■ sync" (the plain gap swatch when none)."""
    if not causes:
        return palette.swatch(palette.GAP, "idle gap")
    return "idle, by cause: " + "&nbsp;".join(palette.swatch(CAUSE_COLORS[c], c)
                                               for c in causes)
