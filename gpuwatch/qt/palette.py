"""Colours and pens shared by the views, so one meaning keeps one colour everywhere.

Phase colours are the Okabe-Ito colour-blind-safe set: a room full of people (or a
projector) must tell ``data`` from ``forward`` at a glance.
"""

from __future__ import annotations

from PySide6.QtGui import QColor

PHASE_COLORS: dict[str, str] = {
    "data": "#E69F00",  # orange: waiting on the input pipeline
    "h2d": "#56B4E9",  # sky blue: issuing host-to-device copies
    "forward": "#009E73",  # green
    "backward": "#0072B2",  # blue
    "optimizer": "#CC79A7",  # pink
    "sync": "#D55E00",  # vermillion: .item(), logging, explicit syncs
    "other": "#9E9E9E",  # grey: loop overhead outside the marks
}

#: Device stream active / compute spans, and the busy % computed from them.
DEVICE_ACTIVE = "#2D3A8C"
#: Idle gaps of our stream, drawn tinted under the active spans.
GAP = QColor(229, 57, 53, 110)
#: The coarse figure (NVML utilization, or process CPU on a CPU device).
COARSE = "#8E24AA"

BACKGROUND = "#FFFFFF"
FOREGROUND = "#303030"
LANE_SHADE = QColor(0, 0, 0, 10)
#: Reference lines: opaque and light. pyqtgraph's translucent axis grid costs ~15 ms a frame
#: in software rendering (measured offscreen), more than everything else together.
GRID_LINE = "#E4E4E4"

ERROR_TEXT = "#C62828"
WARNING_TEXT = "#B26A00"
NA_TEXT = "#8A5A00"
#: Config-change markers on the time axis, and the transition stretch after each change
#: (left out of the scoreboard's figures), shaded so "transition excluded" is visible.
MARKER = "#455A64"
TRANSITION = QColor(255, 193, 7, 45)
#: Small explanatory text (disabled knob reasons, what a change cost).
NOTE_TEXT = "#666666"
COST_TEXT = "#2E7D32"
#: The tour's stage caption: prominent, but not the red of a failure.
TOUR_STYLE = (
    "QLabel { background: #1E3A5F; color: white; font-size: 16px; "
    "padding: 6px 10px; border-radius: 3px; }"
)
BANNER_STYLE = (
    "QLabel { background: #C62828; color: white; font-weight: bold; "
    "padding: 6px 10px; border-radius: 3px; }"
)


def pale(color: str, alpha: int = 55) -> QColor:
    """The same hue, translucent: a backdrop that says "present" without shouting."""
    c = QColor(color)
    c.setAlpha(alpha)
    return c


#: The theme's version of base colours and its plot background, so a legend swatch shows the
#: colour actually drawn (set by ``gpuwatch.qt.theme``; empty = the light base colours).
_swatch_colors: dict[str, str] = {}
_swatch_background = QColor(BACKGROUND)


def set_swatch_theme(colors: dict[str, str], background: str) -> None:
    """Make later ``swatch`` calls use a theme's colours (lower-case ``#rrggbb`` keys)."""
    global _swatch_background  # noqa: PLW0603 - one theme per application
    _swatch_colors.clear()
    _swatch_colors.update(colors)
    _swatch_background = QColor(background)


def swatch(color: str | QColor, text: str) -> str:
    """Rich-text legend entry: a coloured square then its meaning."""
    if isinstance(color, QColor):  # translucent tints: show the colour seen on the plot
        a = color.alphaF()
        bg = _swatch_background
        color = QColor(
            *(
                round(c * a + b * (1 - a))
                for c, b in (
                    (color.red(), bg.red()),
                    (color.green(), bg.green()),
                    (color.blue(), bg.blue()),
                )
            )
        )
    name = color.name() if isinstance(color, QColor) else color
    name = _swatch_colors.get(name.lower(), name)
    return f'<span style="color:{name}">&#9632;</span>&nbsp;{text}'
