"""The timeline legend's colours can be told apart in every theme.

Each idle cause is drawn as a translucent tint over the plot background, beside the device
lane's active spans: what a reader compares is the blended colour (``palette.seen_on_plot``,
which the legend's swatches show too). Every pair of those, each against the device-active
colour and each against the background itself, must differ by a CIEDE2000 ΔE of at least
``MIN_DELTA_E``.

Why 20: a ΔE00 of about 1 is a just-noticeable difference between two patches side by side.
The legend's small squares and the lane's thin spans are compared apart from each other, at a
glance, on projectors that wash colours out, so the margin must be far larger; 20 is a
"clearly different" margin that the palette reaches in every theme (the closest pair is about
21). The issue's two yellows ("input" #EEBF55 and "reconfigure" #FFD65A as seen on white) were
6 apart.

The conversion is the standard one: sRGB (IEC 61966-2-1) to CIE XYZ under D65, XYZ to
CIELAB, then CIEDE2000 as given by Sharma, Wu and Dalal, "The CIEDE2000 color-difference
formula: implementation notes, supplementary test data, and mathematical observations",
Color Research & Application 30(1), 2005; checked against pairs of their test data.
"""

from __future__ import annotations

import itertools
import math

import pytest
from PySide6.QtGui import QColor

from gpuwatch.core.figures.gap_causes import CAUSES
from gpuwatch.qt import palette
from gpuwatch.qt.gap_tint import CAUSE_COLORS
from gpuwatch.qt.theme_tokens import THEMES, Role, Theme

MIN_DELTA_E = 20.0

#: D65 reference white (CIE 1931 2°), as sRGB defines it.
_WHITE = (0.95047, 1.0, 1.08883)


def srgb_to_lab(color: QColor) -> tuple[float, float, float]:
    """CIELAB (D65) of an opaque sRGB colour."""

    def linear(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = linear(color.red()), linear(color.green()), linear(color.blue())
    xyz = (
        0.4124564 * r + 0.3575761 * g + 0.1804375 * b,
        0.2126729 * r + 0.7151522 * g + 0.0721750 * b,
        0.0193339 * r + 0.1191920 * g + 0.9503041 * b,
    )

    def f(t: float) -> float:
        d = 6 / 29
        return t ** (1 / 3) if t > d**3 else t / (3 * d * d) + 4 / 29

    fx, fy, fz = (f(v / w) for v, w in zip(xyz, _WHITE, strict=True))
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def delta_e_2000(lab1: tuple[float, float, float], lab2: tuple[float, float, float]) -> float:
    """CIEDE2000 colour difference (kL = kC = kH = 1), Sharma et al. 2005, eqs. 1-22."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean**7 / (c_mean**7 + 25**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dl, dc = l2 - l1, c2p - c1p
    dh = 0.0
    if c1p * c2p:
        dh = h2p - h1p
        dh = dh - 360 if dh > 180 else dh + 360 if dh < -180 else dh
    dh_big = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_mean, cp_mean = (l1 + l2) / 2, (c1p + c2p) / 2
    if not c1p * c2p:
        h_mean = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_mean = (h1p + h2p) / 2
    else:
        h_mean = (h1p + h2p + (360 if h1p + h2p < 360 else -360)) / 2
    t = (
        1
        - 0.17 * math.cos(math.radians(h_mean - 30))
        + 0.24 * math.cos(math.radians(2 * h_mean))
        + 0.32 * math.cos(math.radians(3 * h_mean + 6))
        - 0.20 * math.cos(math.radians(4 * h_mean - 63))
    )
    d_theta = 30 * math.exp(-(((h_mean - 275) / 25) ** 2))
    r_c = 2 * math.sqrt(cp_mean**7 / (cp_mean**7 + 25**7))
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    s_c = 1 + 0.045 * cp_mean
    s_h = 1 + 0.015 * cp_mean * t
    r_t = -math.sin(math.radians(2 * d_theta)) * r_c
    return math.sqrt(
        (dl / s_l) ** 2 + (dc / s_c) ** 2 + (dh_big / s_h) ** 2 + r_t * (dc / s_c) * (dh_big / s_h)
    )


@pytest.mark.parametrize(
    ("lab1", "lab2", "expected"),
    [  # Sharma et al. 2005, Table 1: pairs 1, 7, 17 and 25
        ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
        ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
        ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
        ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ],
)
def test_delta_e_2000_matches_the_published_test_data(lab1, lab2, expected):
    assert delta_e_2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)
    assert delta_e_2000(lab2, lab1) == pytest.approx(expected, abs=1e-4)


def test_srgb_to_lab_matches_known_points():
    assert srgb_to_lab(QColor("#FFFFFF")) == pytest.approx((100.0, 0.0, 0.0), abs=0.01)
    assert srgb_to_lab(QColor("#000000")) == pytest.approx((0.0, 0.0, 0.0), abs=0.01)
    # sRGB red in CIELAB D65 (e.g. Bruce Lindbloom's calculator): 53.24, 80.09, 67.20.
    assert srgb_to_lab(QColor("#FF0000")) == pytest.approx((53.24, 80.09, 67.20), abs=0.05)


def legend_colors(theme: Theme) -> dict[str, QColor]:
    """What the reader compares in ``theme``: each cause's tint as seen on the plot, the
    device-active colour and the plot background."""
    seen = {cause: palette.seen_on_plot(CAUSE_COLORS[cause], theme) for cause in CAUSES}
    seen["device active"] = palette.seen_on_plot(palette.DEVICE_ACTIVE, theme)
    seen["plot background"] = theme.qcolor(Role.PLOT_BACKGROUND)
    return seen


@pytest.mark.parametrize("theme", THEMES, ids=lambda t: t.name)
def test_every_pair_of_legend_colours_is_clearly_different(theme):
    assert set(CAUSE_COLORS) == set(CAUSES)  # every cause drawn has a colour checked here
    labs = {name: srgb_to_lab(color) for name, color in legend_colors(theme).items()}
    too_close = [
        f"{a} {legend_colors(theme)[a].name()} vs {b} {legend_colors(theme)[b].name()}: "
        f"ΔE {delta_e_2000(labs[a], labs[b]):.1f}"
        for a, b in itertools.combinations(labs, 2)
        if delta_e_2000(labs[a], labs[b]) < MIN_DELTA_E
    ]
    assert not too_close, f"{theme.name}: " + "; ".join(too_close)


def test_the_issues_two_yellows_would_fail():
    """The check tells the reported pair apart: amber over orange, both as seen on white."""
    white = Role.PLOT_BACKGROUND
    light = THEMES[0]
    assert light[white] == "#FFFFFF"
    orange = palette.seen_on_plot(palette.pale("#E69F00", 170), light)
    amber = palette.seen_on_plot(palette.pale("#FFC107", 170), light)
    assert delta_e_2000(srgb_to_lab(orange), srgb_to_lab(amber)) < MIN_DELTA_E / 2


def test_swatches_show_the_colour_seen_on_the_plot(light):
    """The legend's square is the blended colour this test compares, in the current theme."""
    html = palette.swatch(CAUSE_COLORS["input"], "input")
    assert palette.seen_on_plot(CAUSE_COLORS["input"]).name() in html
