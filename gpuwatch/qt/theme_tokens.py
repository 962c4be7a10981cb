"""Colour roles and the four themes' tables: every colour the window paints, by meaning.

A view names a role (``Role.NOTE_TEXT``, ``Role.DEVICE_ACTIVE``), never a colour; each theme
maps every role to a colour. Style sheets are templates with ``$role`` fields
(``"color: $note_text;"``), filled from the current theme by ``Theme.fill``.

Colours are Qt colour names: ``#RRGGBB``, or ``#AARRGGBB`` for a translucent tint (Qt's
order, https://doc.qt.io/qt-6/qcolor.html#fromString); translucent roles are drawn on plots
only, never in style sheets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from string import Template
from types import MappingProxyType

from PySide6.QtGui import QColor


class Role(str, Enum):
    """What a colour means; its value is the field name in style-sheet templates."""

    # The Qt palette (Fusion): window, fields, buttons, selection.
    WINDOW = "window"
    BASE = "base"
    ALTERNATE = "alternate"
    TEXT = "text"
    BUTTON = "button"
    HIGHLIGHT = "highlight"
    HIGHLIGHTED_TEXT = "highlighted_text"
    BRIGHT_TEXT = "bright_text"
    PLACEHOLDER_TEXT = "placeholder_text"
    LINK = "link"
    # Plots.
    PLOT_BACKGROUND = "plot_background"
    PLOT_FOREGROUND = "plot_foreground"
    GRID_LINE = "grid_line"
    LANE_SHADE = "lane_shade"
    DEVICE_ACTIVE = "device_active"
    GAP = "gap"
    COARSE = "coarse"
    MARKER = "marker"
    TRANSITION = "transition"
    KERNEL_LABEL = "kernel_label"
    # Host phases: the Okabe-Ito colour-blind-safe set (see ``_PHASES``).
    PHASE_DATA = "phase_data"
    PHASE_H2D = "phase_h2d"
    PHASE_FORWARD = "phase_forward"
    PHASE_BACKWARD = "phase_backward"
    PHASE_OPTIMIZER = "phase_optimizer"
    PHASE_SYNC = "phase_sync"
    PHASE_OTHER = "phase_other"
    # Text.
    NOTE_TEXT = "note_text"
    COST_TEXT = "cost_text"
    ERROR_TEXT = "error_text"
    WARNING_TEXT = "warning_text"
    NA_TEXT = "na_text"
    # Banners and the tour's caption: white text on a strong colour.
    BANNER_ERROR_BG = "banner_error_bg"
    BANNER_WARNING_BG = "banner_warning_bg"
    BANNER_INFO_BG = "banner_info_bg"
    BANNER_TEXT = "banner_text"
    TOUR_BG = "tour_bg"
    TOUR_TEXT = "tour_text"
    # The interpreter check's verdicts.
    BADGE_OK = "badge_ok"
    BADGE_WARN = "badge_warn"
    BADGE_BAD = "badge_bad"
    BADGE_CHECKING = "badge_checking"


#: The roles a plot item may be drawn in: a theme recognises an item's role by its light
#: colour (``Theme.color``), so these must be distinct in ``LIGHT`` (a test checks).
PLOT_ROLES: tuple[Role, ...] = (
    Role.PLOT_FOREGROUND,
    Role.GRID_LINE,
    Role.LANE_SHADE,
    Role.DEVICE_ACTIVE,
    Role.GAP,
    Role.COARSE,
    Role.MARKER,
    Role.TRANSITION,
    Role.KERNEL_LABEL,
    Role.PHASE_DATA,
    Role.PHASE_H2D,
    Role.PHASE_FORWARD,
    Role.PHASE_BACKWARD,
    Role.PHASE_OPTIMIZER,
    Role.PHASE_SYNC,
    Role.PHASE_OTHER,
    Role.NOTE_TEXT,
    Role.COST_TEXT,
    Role.ERROR_TEXT,
    Role.WARNING_TEXT,
    Role.NA_TEXT,
)


@dataclass(frozen=True)
class Theme:
    """One theme: a colour for every role."""

    name: str
    tokens: Mapping[Role, str]

    def __getitem__(self, role: Role) -> str:
        return self.tokens[role]

    @property
    def dark(self) -> bool:
        return QColor(self[Role.WINDOW]).lightness() < 128

    def qcolor(self, role: Role) -> QColor:
        return QColor(self[role])

    def fill(self, template: str) -> str:
        """A style sheet from a template with ``$role`` fields (an unknown role: KeyError)."""
        return Template(template).substitute({role.value: self[role] for role in Role})

    def color(self, base: QColor | str) -> QColor:
        """This theme's colour for a plot item drawn in ``base``, a role's light colour (alpha
        kept); a colour that is no role's stays as it is."""
        c = QColor(base)
        role = _LIGHT_PLOT_ROLES.get(c.rgb() | 0xFF000000)
        if role is None:
            return c
        out = self.qcolor(role)
        out.setAlpha(c.alpha())
        return out


def _theme(name: str, inherited: Mapping[Role, str], /, **changes: str) -> Theme:
    """A theme: ``inherited``'s colours with ``changes`` (role value = colour)."""
    tokens = {**inherited, **{Role(k): v for k, v in changes.items()}}
    return Theme(name, MappingProxyType(tokens))


#: Host phases: Okabe and Ito's colour-blind-safe set ("Color Universal Design",
#: https://jfly.uni-koeln.de/color/), the same hues in every theme. The idle gaps of the device
#: lane borrow the colours of the data, h2d, sync, forward and other phases, and the transition
#: colour (``gpuwatch.qt.gap_tint``), drawn translucent: blended with the plot background,
#: every pair of them, the device-active colour and the background itself differ by a CIEDE2000
#: ΔE of at least 20 in every theme (tests/test_legend_contrast.py). Two shades are adjusted for
#: that: sync is a darker vermillion (Okabe-Ito's #D55E00 is ΔE 17 from its orange once both
#: are blended with white), and the grey of other is dark on a light plot, light on a dark one.
_PHASES = {
    Role.PHASE_DATA: "#E69F00",  # orange: waiting on the input pipeline
    Role.PHASE_H2D: "#56B4E9",  # sky blue: issuing host-to-device copies
    Role.PHASE_FORWARD: "#009E73",  # bluish green
    Role.PHASE_BACKWARD: "#0072B2",  # blue
    Role.PHASE_OPTIMIZER: "#CC79A7",  # reddish purple
    Role.PHASE_SYNC: "#C13B00",  # dark vermillion: .item(), logging, explicit syncs
    Role.PHASE_OTHER: "#616161",  # dark grey: loop overhead outside the marks
}

#: The same in every theme: strong backgrounds under white text, and the plots' tints that
#: read on white and on black alike.
_SHARED = {
    **_PHASES,
    Role.HIGHLIGHTED_TEXT: "#FFFFFF",
    Role.BRIGHT_TEXT: "#FF5252",
    Role.PLACEHOLDER_TEXT: "#888888",
    Role.GAP: "#6EE53935",  # red at alpha 110: idle gaps under the active spans
    # Purple at alpha 45: the stretch after a config change (and, more opaque, the
    # "reconfigure" idle gaps). Paul Tol's muted purple (https://personal.sron.nl/~pault/,
    # colour-blind safe): a hue no phase has; an amber or a yellow is too close to "input".
    Role.TRANSITION: "#2DAA4499",
    Role.KERNEL_LABEL: "#888888",  # text items on the light and the dark plot alike
    Role.BANNER_ERROR_BG: "#C62828",
    Role.BANNER_WARNING_BG: "#8D6E00",
    Role.BANNER_INFO_BG: "#1E3A5F",
    Role.BANNER_TEXT: "#FFFFFF",
    Role.TOUR_BG: "#1E3A5F",
    Role.TOUR_TEXT: "#FFFFFF",
    Role.BADGE_OK: "#2E7D32",
    Role.BADGE_WARN: "#B26A00",
    Role.BADGE_BAD: "#C62828",
    Role.BADGE_CHECKING: "#9E9E9E",
}

LIGHT = _theme(
    "light",
    _SHARED,
    window="#EFEFEF",
    base="#FFFFFF",
    alternate="#F5F5F5",
    text="#202020",
    button="#E8E8E8",
    highlight="#2D6CC0",
    link="#1A5DB8",
    plot_background="#FFFFFF",
    plot_foreground="#303030",
    # Reference lines: opaque and light. pyqtgraph's translucent axis grid costs ~15 ms a
    # frame in software rendering (measured offscreen), more than everything else together.
    grid_line="#E4E4E4",
    lane_shade="#0A000000",  # black at alpha 10: a faint band behind every other lane
    device_active="#2D3A8C",
    coarse="#8E24AA",
    marker="#455A64",
    note_text="#666666",
    cost_text="#2E7D32",
    error_text="#C62828",
    warning_text="#B26A00",
    na_text="#8A5A00",
)

#: Dark: every colour that would vanish on a dark background gets a lighter twin.
DARK = _theme(
    "dark",
    LIGHT.tokens,
    window="#2B2B2B",
    base="#1E1E1E",
    alternate="#262626",
    text="#E6E6E6",
    button="#353535",
    highlight="#4A8FE7",
    link="#8AB4F8",
    plot_background="#1A1A1A",
    plot_foreground="#DCDCDC",
    grid_line="#3C3C3C",
    lane_shade="#0AFFFFFF",  # the faint black band becomes a faint white one
    phase_other="#E0E0E0",  # light grey: the dark one would vanish into the background
    device_active="#B3BEFF",  # lighter than a periwinkle: ΔE ≥ 20 from the sky-blue copy tint
    coarse="#E1A6F0",
    marker="#B0BEC5",
    note_text="#B4B4B4",
    cost_text="#81C784",
    error_text="#FF8A80",
    warning_text="#FFB74D",
    na_text="#FFB74D",
)

#: Presentation mode's high-contrast variants: pure black on white, or white on black.
LIGHT_CONTRAST = _theme(
    "light-contrast",
    LIGHT.tokens,
    window="#FFFFFF",
    base="#FFFFFF",
    alternate="#F0F0F0",
    text="#000000",
    button="#F0F0F0",
    highlight="#0050B0",
    plot_background="#FFFFFF",
    plot_foreground="#000000",
    note_text="#202020",
    grid_line="#C8C8C8",
)
DARK_CONTRAST = _theme(
    "dark-contrast",
    DARK.tokens,
    window="#000000",
    base="#000000",
    alternate="#141414",
    text="#FFFFFF",
    button="#1A1A1A",
    highlight="#4A8FE7",
    plot_background="#000000",
    plot_foreground="#FFFFFF",
    note_text="#E0E0E0",
)

THEMES: tuple[Theme, ...] = (LIGHT, DARK, LIGHT_CONTRAST, DARK_CONTRAST)

#: A plot role by its light colour (opaque RGB), for ``Theme.color``.
_LIGHT_PLOT_ROLES: dict[int, Role] = {
    QColor(LIGHT[role]).rgb() | 0xFF000000: role for role in PLOT_ROLES
}
