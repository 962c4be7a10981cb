"""Colours and style-sheet templates shared by the views, so one meaning keeps one colour.

The constants are the light theme's colour of a role (``theme_tokens``): views draw their
plot items in them and the theme manager recolours each item by its role. Style sheets are
templates with ``$role`` fields, set with ``set_style`` and filled from the current theme;
the theme manager fills them again whenever the theme changes.
"""

from __future__ import annotations

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QWidget

from gpuwatch.qt.theme_tokens import LIGHT, Role, Theme

PHASE_COLORS: dict[str, str] = {
    "data": LIGHT[Role.PHASE_DATA],
    "h2d": LIGHT[Role.PHASE_H2D],
    "forward": LIGHT[Role.PHASE_FORWARD],
    "backward": LIGHT[Role.PHASE_BACKWARD],
    "optimizer": LIGHT[Role.PHASE_OPTIMIZER],
    "sync": LIGHT[Role.PHASE_SYNC],
    "other": LIGHT[Role.PHASE_OTHER],
}

#: Device stream active / compute spans, and the busy % computed from them.
DEVICE_ACTIVE = LIGHT[Role.DEVICE_ACTIVE]
#: Idle gaps of our stream, drawn tinted under the active spans.
GAP = LIGHT.qcolor(Role.GAP)
#: The coarse figure (NVML utilization, or process CPU on a CPU device).
COARSE = LIGHT[Role.COARSE]

BACKGROUND = LIGHT[Role.PLOT_BACKGROUND]
FOREGROUND = LIGHT[Role.PLOT_FOREGROUND]
LANE_SHADE = LIGHT.qcolor(Role.LANE_SHADE)
GRID_LINE = LIGHT[Role.GRID_LINE]

ERROR_TEXT = LIGHT[Role.ERROR_TEXT]
WARNING_TEXT = LIGHT[Role.WARNING_TEXT]
NA_TEXT = LIGHT[Role.NA_TEXT]
#: Config-change markers on the time axis, and the transition stretch after each change
#: (left out of the scoreboard's figures), shaded so "transition excluded" is visible.
MARKER = LIGHT[Role.MARKER]
TRANSITION = LIGHT.qcolor(Role.TRANSITION)
#: Small explanatory text (disabled knob reasons, what a change cost).
NOTE_TEXT = LIGHT[Role.NOTE_TEXT]
COST_TEXT = LIGHT[Role.COST_TEXT]
#: The kernel lane's window labels (text items on the plot).
KERNEL_LABEL = LIGHT[Role.KERNEL_LABEL]

#: The tour's stage caption: prominent, but not the red of a failure.
TOUR_STYLE = (
    "QLabel { background: $tour_bg; color: $tour_text; font-size: 16px; "
    "padding: 6px 10px; border-radius: 3px; }"
)
_BANNER = (
    "QLabel {{ background: ${bg}; color: $banner_text; font-weight: bold; "
    "padding: 6px 10px; border-radius: 3px; }}"
)
#: A banner's look per level: red only for a failure.
BANNER_STYLES: dict[str, str] = {
    "error": _BANNER.format(bg=Role.BANNER_ERROR_BG.value),
    "warning": _BANNER.format(bg=Role.BANNER_WARNING_BG.value),
    "info": _BANNER.format(bg=Role.BANNER_INFO_BG.value),
}

#: Qt dynamic properties on a styled widget: its template, and the sheet last filled from it
#: (a different sheet means the code set a plain one since, which then counts as the template).
TEMPLATE_PROPERTY = "gpuwatch_style_template"
SHOWN_PROPERTY = "gpuwatch_shown_style"

#: The theme that templates and legend swatches are filled from (set by the theme manager).
_theme: Theme = LIGHT


def use_theme(theme: Theme) -> None:
    """Fill later templates and swatches from ``theme`` (the application's, one at a time)."""
    global _theme  # noqa: PLW0603 - one theme per application
    _theme = theme


def text_style(role: Role, extra: str = "") -> str:
    """A template for text in ``role``'s colour, e.g. ``text_style(Role.NOTE_TEXT)``."""
    return f"color: ${role.value}; {extra}".strip()


def set_style(widget: QWidget, template: str) -> None:
    """Give ``widget`` a style-sheet template (``$role`` fields), filled from the current
    theme now and again on every theme change."""
    shown = _theme.fill(template)
    widget.setProperty(TEMPLATE_PROPERTY, template)
    widget.setProperty(SHOWN_PROPERTY, shown)
    widget.setStyleSheet(shown)


def pale(color: str, alpha: int = 55) -> QColor:
    """The same hue, translucent: a backdrop that says "present" without shouting."""
    c = QColor(color)
    c.setAlpha(alpha)
    return c


def current_theme() -> Theme:
    """The theme the application draws in now (what ``swatch`` colours follow)."""
    return _theme


def seen_on_plot(color: str | QColor, theme: Theme | None = None) -> QColor:
    """The opaque colour seen where a plot item drawn in ``color`` (a role's light colour,
    perhaps translucent) covers ``theme``'s plot background (default: the current theme)."""
    theme = theme or _theme
    c = theme.color(color)
    a = c.alphaF()
    bg = theme.qcolor(Role.PLOT_BACKGROUND)
    return QColor(
        *(
            round(x * a + b * (1 - a))
            for x, b in ((c.red(), bg.red()), (c.green(), bg.green()), (c.blue(), bg.blue()))
        )
    )


def swatch(color: str | QColor, text: str) -> str:
    """Rich-text legend entry: a square in the colour the plot shows, then its meaning."""
    return f'<span style="color:{seen_on_plot(color).name()}">&#9632;</span>&nbsp;{text}'
