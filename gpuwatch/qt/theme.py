"""Light and dark themes: the Qt palette (Fusion), the pyqtgraph plots and the labels' colours.

The views are built with the light colours of ``palette``; a theme re-colours what is on
screen by mapping those base colours, so the views need no theme code of their own. Each
widget and plot item keeps its *base* look, so switching back (or leaving presentation
mode, which uses the same machinery with a scale and a high-contrast palette) restores it
exactly. Qt's high-DPI scaling is never touched: sizes scale by fonts and pen widths only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QLabel, QWidget

from gpuwatch.qt import palette

MODES = ("system", "light", "dark")


@dataclass(frozen=True)
class ThemeColors:
    """What one theme paints; ``remap`` turns a light base colour into this theme's."""

    name: str
    window: str
    base: str
    alternate: str
    text: str
    button: str
    highlight: str
    plot_background: str
    plot_foreground: str
    remap: dict[str, str] = field(default_factory=dict)

    @property
    def dark(self) -> bool:
        return QColor(self.window).lightness() < 128

    def color(self, base: QColor | str) -> QColor:
        """This theme's version of a base colour (alpha kept); unknown colours unchanged."""
        c = QColor(base)
        mapped = self.remap.get(c.name().lower())
        if mapped is None:
            return c
        out = QColor(mapped)
        out.setAlpha(c.alpha())
        return out


LIGHT = ThemeColors(
    "light",
    window="#EFEFEF",
    base="#FFFFFF",
    alternate="#F5F5F5",
    text="#202020",
    button="#E8E8E8",
    highlight="#2D6CC0",
    plot_background=palette.BACKGROUND,
    plot_foreground=palette.FOREGROUND,
)

#: Dark: every base colour that would vanish on a dark background gets a lighter twin.
DARK = ThemeColors(
    "dark",
    window="#2B2B2B",
    base="#1E1E1E",
    alternate="#262626",
    text="#E6E6E6",
    button="#353535",
    highlight="#4A8FE7",
    plot_background="#1A1A1A",
    plot_foreground="#DCDCDC",
    remap={
        palette.DEVICE_ACTIVE.lower(): "#8C9EFF",
        palette.COARSE.lower(): "#E1A6F0",
        palette.GRID_LINE.lower(): "#3C3C3C",
        palette.MARKER.lower(): "#B0BEC5",
        palette.FOREGROUND.lower(): "#DCDCDC",
        palette.NOTE_TEXT.lower(): "#B4B4B4",
        "#666": "#B4B4B4",
        palette.NA_TEXT.lower(): "#FFB74D",
        palette.WARNING_TEXT.lower(): "#FFB74D",
        palette.ERROR_TEXT.lower(): "#FF8A80",
        palette.COST_TEXT.lower(): "#81C784",
        "#000000": "#FFFFFF",  # LANE_SHADE: a faint black band becomes a faint white one
    },
)

#: Presentation mode's high-contrast variants: pure black on white, or white on black.
LIGHT_CONTRAST = ThemeColors(
    "light-contrast",
    window="#FFFFFF",
    base="#FFFFFF",
    alternate="#F0F0F0",
    text="#000000",
    button="#F0F0F0",
    highlight="#0050B0",
    plot_background="#FFFFFF",
    plot_foreground="#000000",
    remap={
        palette.FOREGROUND.lower(): "#000000",
        palette.NOTE_TEXT.lower(): "#202020",
        "#666": "#202020",
        palette.GRID_LINE.lower(): "#C8C8C8",
    },
)
DARK_CONTRAST = ThemeColors(
    "dark-contrast",
    window="#000000",
    base="#000000",
    alternate="#141414",
    text="#FFFFFF",
    button="#1A1A1A",
    highlight="#4A8FE7",
    plot_background="#000000",
    plot_foreground="#FFFFFF",
    remap={
        **DARK.remap,
        palette.FOREGROUND.lower(): "#FFFFFF",
        palette.NOTE_TEXT.lower(): "#E0E0E0",
        "#666": "#E0E0E0",
    },
)


def system_is_dark() -> bool:
    """The desktop's colour scheme (Qt ≥ 6.5); "unknown" counts as light."""
    hints = QGuiApplication.styleHints()
    return hints.colorScheme() == Qt.ColorScheme.Dark


def qpalette(colors: ThemeColors) -> QPalette:
    """A full Fusion palette (active and disabled groups) for ``colors``."""
    p = QPalette()
    role = QPalette.ColorRole
    text = QColor(colors.text)
    for r, value in (
        (role.Window, colors.window),
        (role.WindowText, colors.text),
        (role.Base, colors.base),
        (role.AlternateBase, colors.alternate),
        (role.Text, colors.text),
        (role.Button, colors.button),
        (role.ButtonText, colors.text),
        (role.ToolTipBase, colors.base),
        (role.ToolTipText, colors.text),
        (role.Highlight, colors.highlight),
        (role.HighlightedText, "#FFFFFF"),
        (role.BrightText, "#FF5252"),
        (role.PlaceholderText, "#888888"),
        (role.Link, "#8AB4F8" if colors.dark else "#1A5DB8"),
    ):
        p.setColor(r, QColor(value))
    dim = QColor(text)
    dim.setAlpha(110)
    for r in (role.WindowText, role.Text, role.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, r, dim)
    return p


# ---- Re-styling a window -----------------------------------------------------------------

_FONT_SIZE = re.compile(r"font-size:\s*(\d+(?:\.\d+)?)px")
_COLOR = re.compile(r"(?<![-\w])color:\s*(#[0-9a-fA-F]{3,8})")
_BASE_STYLE = "gpuwatch_base_style"
_SHOWN_STYLE = "gpuwatch_shown_style"


def transform_style(
    style: str, colors: ThemeColors, scale: float, base_pt: float | None = None
) -> str:
    """A style sheet with its text colours mapped and its pixel font sizes scaled.

    A style sheet without a font size gets ``base_pt * scale`` points when scaled: Qt does
    not pass a parent's new font on to widgets that have a style sheet of their own.
    """
    style = _COLOR.sub(
        lambda m: "color: " + colors.remap.get(m.group(1).lower(), m.group(1)), style
    )
    if scale != 1.0:
        if _FONT_SIZE.search(style) or not base_pt:
            style = _FONT_SIZE.sub(
                lambda m: f"font-size: {round(float(m.group(1)) * scale)}px", style
            )
        else:
            size = f"font-size: {round(base_pt * scale)}pt;"
            if "{" in style:  # "QLabel { ... }": the size goes inside the first rule
                head, _, tail = style.partition("}")
                style = f"{head.rstrip().rstrip(';')}; {size} }}{tail}"
            else:
                style = f"{style.rstrip().rstrip(';')}; {size}".lstrip("; ")
    return style


def restyle_widgets(
    root: QWidget, colors: ThemeColors, scale: float = 1.0, base_pt: float | None = None
) -> None:
    """Map every child's style sheet from its base (remembered on first visit).

    A style sheet the code has set since (e.g. a banner's new level) becomes the new base.
    """
    for widget in [root, *root.findChildren(QWidget)]:
        current = widget.styleSheet()
        base = widget.property(_BASE_STYLE)
        if base is None or current != widget.property(_SHOWN_STYLE):
            if not current and base is None:
                continue
            base = current
            widget.setProperty(_BASE_STYLE, base)
        shown = transform_style(base, colors, scale, base_pt)
        widget.setProperty(_SHOWN_STYLE, shown)
        if shown != current:
            widget.setStyleSheet(shown)
        else:  # a styled widget keeps the palette of its last polish: take the new one
            widget.style().unpolish(widget)
            widget.style().polish(widget)


def style_plot_widget(plot: pg.PlotWidget, colors: ThemeColors, scale: float = 1.0) -> None:
    """Background, axes (pens, tick fonts, width), and every item's pen/brush for a theme."""
    plot.setBackground(colors.plot_background)
    item = plot.getPlotItem()
    for name in ("left", "bottom"):
        axis = item.getAxis(name)
        # The width the view asked for (setWidth), not the laid-out one: before the first layout
        # pass that is a few pixels, and lane names would no longer fit beside the lanes.
        base = _remember(axis, "width", lambda a: a.fixedWidth or a.width())
        font = _remember(axis, "font", lambda a: QFont(a.style.get("tickFont") or a.font()))
        scaled = QFont(font)
        if font.pointSizeF() > 0:
            scaled.setPointSizeF(font.pointSizeF() * scale)
        axis.setStyle(tickFont=scaled)
        axis.setPen(colors.plot_foreground)
        axis.setTextPen(colors.plot_foreground)
        if axis.label.isVisible():
            axis.label.setFont(scaled)
        if name == "left":
            axis.setWidth(int(base * (1 + (scale - 1) * 0.6)))
        else:
            axis.setHeight(None)
    for child in item.getViewBox().addedItems:
        style_plot_item(child, colors, scale)


def style_new_items(window: QWidget, colors: ThemeColors, scale: float) -> int:
    """Style the plot items added since the window was styled at this look (e.g. a change
    marker born while presenting); returns how many there were."""
    count = 0
    for plot in window.findChildren(pg.PlotWidget):
        for item in plot.getPlotItem().getViewBox().addedItems:
            if item.__dict__.get("_gpuwatch_look") != (colors.name, scale):
                style_plot_item(item, colors, scale)
                count += 1
    return count


def style_plot_item(item: object, colors: ThemeColors, scale: float = 1.0) -> None:
    """Re-colour (and widen) one plot item from its remembered base pen/brush."""
    item.__dict__["_gpuwatch_look"] = (colors.name, scale)
    if isinstance(item, (pg.PlotCurveItem, pg.InfiniteLine)):
        attr = "opts" if isinstance(item, pg.PlotCurveItem) else None
        pen = _remember(item, "pen", lambda i: pg.mkPen(i.opts["pen"] if attr else i.pen))
        new = pg.mkPen(pen)
        new.setColor(colors.color(pen.color()))
        if scale != 1.0:  # a cosmetic 0-width pen is 1 px wide
            new.setWidthF((pen.widthF() or 1.0) * scale)
        item.setPen(new)
        if isinstance(item, pg.InfiniteLine) and getattr(item, "label", None) is not None:
            label = item.label
            base = _remember(label, "color", lambda lb: QColor(lb.color))
            label.setColor(colors.color(base))
            lfont = _remember(label, "font", lambda lb: QFont(lb.textItem.font()))
            f = QFont(lfont)
            if lfont.pointSizeF() > 0:
                f.setPointSizeF(lfont.pointSizeF() * scale)
            label.setFont(f)
    elif isinstance(item, pg.BarGraphItem):
        brush = _remember(item, "brush", lambda i: pg.mkBrush(i.opts.get("brush")))
        if brush.style() != Qt.BrushStyle.NoBrush:
            item.setOpts(brush=pg.mkBrush(colors.color(brush.color())))


def _remember(obj: object, key: str, read: Callable[[Any], Any]) -> Any:
    """The base value of ``key`` on ``obj``, read once (before any theme touched it)."""
    store = obj.__dict__.setdefault("_gpuwatch_base", {})
    if key not in store:
        store[key] = read(obj)
    return store[key]


def style_window(window: QWidget, colors: ThemeColors, scale: float = 1.0) -> None:
    """Everything visible in ``window``: style sheets, plots, their items."""
    restyle_widgets(window, colors, scale, QApplication.font().pointSizeF())
    for plot in window.findChildren(pg.PlotWidget):
        style_plot_widget(plot, colors, scale)


# ---- The application's theme --------------------------------------------------------------


class ThemeManager(QObject):
    """The app's theme mode (system/light/dark); re-styles every registered window."""

    #: The resolved colours changed (a forced mode, or the desktop switched scheme).
    sig_theme_changed = Signal(object)

    def __init__(self, app: QApplication, mode: str = "system") -> None:
        super().__init__(app)
        self.app = app
        self._mode = "system"
        self._windows: list[QWidget] = []
        app.setStyle("Fusion")
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._on_system_change)
        self.set_mode(mode)

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def colors(self) -> ThemeColors:
        dark = self._mode == "dark" or (self._mode == "system" and system_is_dark())
        return DARK if dark else LIGHT

    def set_mode(self, mode: str) -> None:
        """Force ``light`` or ``dark``, or follow the desktop with ``system``."""
        if mode not in MODES:
            raise ValueError(f"theme must be one of {', '.join(MODES)}, not {mode!r}")
        self._mode = mode
        self.apply()

    def attach(self, window: QWidget) -> None:
        """Style ``window`` now and on every later change (until it is destroyed)."""
        if window not in self._windows:
            self._windows.append(window)
            window.destroyed.connect(lambda *_: self._forget(window))
        self.style(window)

    def style(self, window: QWidget) -> None:
        """Apply the theme, unless the window is presenting (it styles itself then)."""
        presenter = getattr(window, "presentation", None)
        if presenter is not None and presenter.active:
            presenter.restyle()
        else:
            style_window(window, self.colors)

    def apply(self) -> None:
        colors = self.colors
        self.app.setPalette(qpalette(colors))
        palette.set_swatch_theme(colors.remap, colors.plot_background)
        for window in list(self._windows):
            self.style(window)
        self.sig_theme_changed.emit(colors)

    def _forget(self, window: QWidget) -> None:
        self._windows = [w for w in self._windows if w is not window]

    def _on_system_change(self, *_: object) -> None:
        if self._mode == "system":
            self.apply()


def theme_manager(app: QApplication | None = None) -> ThemeManager:
    """The one ThemeManager of this QApplication (created on first use, following the system)."""
    app = app or QApplication.instance()  # type: ignore[assignment]
    assert app is not None, "create the QApplication first"
    manager = app.findChild(ThemeManager)
    if manager is None:
        manager = ThemeManager(app)  # type: ignore[arg-type]
    return manager


def apply_label_font_scale(label: QLabel, scale: float) -> None:
    """Scale a label's own font (one set with ``setFont``), remembering its base."""
    base = _remember(label, "font", lambda lb: QFont(lb.font()))
    f = QFont(base)
    if base.pointSizeF() > 0:
        f.setPointSizeF(base.pointSizeF() * scale)
    elif base.pixelSize() > 0:
        f.setPixelSize(round(base.pixelSize() * scale))
    label.setFont(f)
