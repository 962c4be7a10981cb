"""Idle gaps tinted by cause: colours, tooltips and the legend (no widgets). Each
cause borrows the colour of the host phase it comes from (input = ``data``'s orange, sync =
``sync``'s vermillion, ...), translucent like the plain gap tint, so the theme machinery
re-colours it with everything else.
"""

from __future__ import annotations

from PySide6.QtGui import QColor

from gpuwatch.qt import palette

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


def legend(causes: tuple[str, ...]) -> str:
    """Rich text: "idle, by cause: ■ input ■ sync" (the plain gap swatch when none)."""
    if not causes:
        return palette.swatch(palette.GAP, "idle gap")
    return "idle, by cause: " + "&nbsp;".join(palette.swatch(CAUSE_COLORS[c], c) for c in causes)
