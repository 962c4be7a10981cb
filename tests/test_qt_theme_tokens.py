"""Colour roles: every theme colours every role, style sheets are templates filled from the
current theme at run time, views name roles rather than colours, and plot items carry no
theme state of their own."""

from __future__ import annotations

import re
from pathlib import Path

import pyqtgraph as pg
import pytest
from PySide6.QtGui import QColor

from gpuwatch.core.run.session import Session
from gpuwatch.qt import palette
from gpuwatch.qt.theme import STYLED, style_plot_item
from gpuwatch.qt.theme_tokens import DARK, LIGHT, PLOT_ROLES, THEMES, Role

QT = Path(__file__).resolve().parents[1] / "gpuwatch" / "qt"
#: A colour literal: "#rgb", "#rrggbb" or "#aarrggbb" (an HTML entity such as "&#9632;" is not).
HEX = re.compile(r"(?<![&\w])#(?:[0-9A-Fa-f]{8}|[0-9A-Fa-f]{6}|[0-9A-Fa-f]{3})\b")
#: Colour literals outside the palette that are known and waiting for their file's owner.
KNOWN_LITERALS: set[tuple[str, str]] = set()


@pytest.mark.parametrize("theme", THEMES, ids=lambda t: t.name)
def test_every_theme_colours_every_role(theme):
    assert set(theme.tokens) == set(Role)
    for role in Role:
        assert QColor(theme[role]).isValid(), (theme.name, role)


def test_plot_roles_are_told_apart_by_their_light_colour():
    rgbs = [QColor(LIGHT[role]).rgb() for role in PLOT_ROLES]
    assert len(set(rgbs)) == len(rgbs)
    # A plot item drawn in a role's light colour (any alpha) gets the theme's colour.
    tint = palette.pale(palette.DEVICE_ACTIVE, 80)
    dark = DARK.color(tint)
    assert dark.name() == DARK[Role.DEVICE_ACTIVE].lower() and dark.alpha() == 80
    assert DARK.color("#123456").name() == "#123456"  # no role: unchanged


@pytest.mark.parametrize("theme", THEMES, ids=lambda t: t.name)
def test_every_palette_template_fills_in_every_theme(theme):
    for template in (palette.TOUR_STYLE, *palette.BANNER_STYLES.values()):
        filled = theme.fill(template)
        assert "$" not in filled and "#" in filled
    assert theme.fill(palette.BANNER_STYLES["warning"]).startswith(
        f"QLabel {{ background: {theme[Role.BANNER_WARNING_BG]}; color: {theme[Role.BANNER_TEXT]};"
    )
    with pytest.raises(KeyError, match="no_such_role"):
        theme.fill("color: $no_such_role;")


def test_switching_theme_restyles_a_banner_a_plot_and_a_label(light, show_window):
    win = show_window(Session())
    palette.set_style(win.banner, palette.BANNER_STYLES["warning"])
    label = win.headline.samples.caption
    busy = win.utilization.busy_curve
    devices = win.timeline.device_bars

    def shows(theme):
        assert win.banner.styleSheet() == theme.fill(palette.BANNER_STYLES["warning"])
        assert f"color: {theme[Role.NOTE_TEXT]};" in label.styleSheet()
        assert busy.opts["pen"].color().name() == theme[Role.DEVICE_ACTIVE].lower()
        assert devices.brush.color().name() == (theme[Role.DEVICE_ACTIVE].lower())

    shows(LIGHT)
    light.set_mode("dark")
    shows(DARK)
    assert LIGHT[Role.NOTE_TEXT] != DARK[Role.NOTE_TEXT]  # so the label really changed
    # A template set while dark is filled dark at once, and light again on the way back.
    palette.set_style(win.banner, palette.BANNER_STYLES["info"])
    assert DARK[Role.BANNER_INFO_BG] in win.banner.styleSheet()
    palette.set_style(win.banner, palette.BANNER_STYLES["warning"])
    light.set_mode("light")
    shows(LIGHT)


def test_a_plain_style_sheet_is_kept_literally(light, show_window):
    win = show_window(Session())
    win.headline.samples.caption.setStyleSheet("color: #123456; margin: $0;")
    light.set_mode("dark")
    assert win.headline.samples.caption.styleSheet() == "color: #123456; margin: $0;"


def test_plot_items_keep_their_base_look_in_the_registry_not_on_themselves(qapp):
    line = pg.InfiniteLine(pos=1.0, pen=pg.mkPen(palette.MARKER, width=1), label="x")
    bars = pg.BarGraphItem(x0=[0], x1=[1], height=1, brush=palette.PHASE_COLORS["data"])
    for item in (line, bars):
        style_plot_item(item, DARK, 2.0)
        assert not [k for k in vars(item) if k.startswith("_gpuwatch")]
        assert STYLED.look(item) == ("dark", 2.0)
    assert line.pen.color().name() == DARK[Role.MARKER].lower() and line.pen.widthF() == 2.0
    style_plot_item(line, LIGHT)
    assert line.pen.color().name() == LIGHT[Role.MARKER].lower() and line.pen.widthF() == 1.0


def test_views_name_roles_not_colours():
    """No colour literal in a view: colours live in ``theme_tokens`` alone."""
    found = set()
    for path in sorted(QT.glob("*.py")):
        if path.name == "theme_tokens.py":
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if HEX.search(line):
                found.add((path.name, line.strip()))
    unexpected = {
        (name, line)
        for name, line in found
        if not any(name == k and snippet in line for k, snippet in KNOWN_LITERALS)
    }
    assert not unexpected
    assert HEX.search('x = "#C62828"') and not HEX.search("&#9632;")  # the pattern bites


def test_a_label_born_after_a_switch_gets_the_current_theme(light):
    """An advisor card made while dark shows dark's note colour, not light's grey on black."""
    from PySide6.QtWidgets import QLabel

    light.set_mode("dark")
    label = QLabel("evidence")
    palette.set_style(label, palette.text_style(Role.NOTE_TEXT))
    assert label.styleSheet() == f"color: {DARK[Role.NOTE_TEXT]};"
