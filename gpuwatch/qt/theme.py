"""Light and dark themes: the Qt palette (Fusion), the pyqtgraph plots and the style sheets.

Colours come from the roles of ``theme_tokens``. Widgets' style sheets are templates
(``palette.set_style``) that the theme manager fills from the current theme; plot items are
drawn by the views in their role's light colour, and the manager recolours each one from the
base look it recorded, before any theme touched it, in its own registry (``StyledItems``). So
switching back (or leaving presentation mode, which uses the same machinery with a scale and
a high-contrast theme) restores everything exactly. Qt's high-DPI scaling is never touched:
sizes scale by fonts and pen widths only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import pyqtgraph as pg
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QGuiApplication, QPalette, QPen
from PySide6.QtWidgets import QApplication, QWidget

from gpuwatch.qt import palette
from gpuwatch.qt.lane_spans import LaneSpans
from gpuwatch.qt.palette import SHOWN_PROPERTY, TEMPLATE_PROPERTY
from gpuwatch.qt.theme_tokens import DARK, DARK_CONTRAST, LIGHT, LIGHT_CONTRAST, Role, Theme

__all__ = [
    "DARK",
    "DARK_CONTRAST",
    "LIGHT",
    "LIGHT_CONTRAST",
    "MODES",
    "Theme",
    "ThemeManager",
    "qpalette",
    "scale_style",
    "style_new_items",
    "style_plot_item",
    "style_window",
    "theme_manager",
]

MODES = ("system", "light", "dark")


def system_is_dark() -> bool:
    """The desktop's colour scheme (Qt ≥ 6.5); "unknown" counts as light."""
    hints = QGuiApplication.styleHints()
    return hints.colorScheme() == Qt.ColorScheme.Dark


def qpalette(theme: Theme) -> QPalette:
    """A full Fusion palette (active and disabled groups) for ``theme``."""
    p = QPalette()
    role = QPalette.ColorRole
    for r, token in (
        (role.Window, Role.WINDOW),
        (role.WindowText, Role.TEXT),
        (role.Base, Role.BASE),
        (role.AlternateBase, Role.ALTERNATE),
        (role.Text, Role.TEXT),
        (role.Button, Role.BUTTON),
        (role.ButtonText, Role.TEXT),
        (role.ToolTipBase, Role.BASE),
        (role.ToolTipText, Role.TEXT),
        (role.Highlight, Role.HIGHLIGHT),
        (role.HighlightedText, Role.HIGHLIGHTED_TEXT),
        (role.BrightText, Role.BRIGHT_TEXT),
        (role.PlaceholderText, Role.PLACEHOLDER_TEXT),
        (role.Link, Role.LINK),
    ):
        p.setColor(r, theme.qcolor(token))
    dim = theme.qcolor(Role.TEXT)
    dim.setAlpha(110)
    for r in (role.WindowText, role.Text, role.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, r, dim)
    return p


# ---- Re-styling a window -----------------------------------------------------------------

_FONT_SIZE = re.compile(r"font-size:\s*(\d+(?:\.\d+)?)px")


def scale_style(style: str, scale: float, base_pt: float | None = None) -> str:
    """A style sheet with its pixel font sizes scaled.

    A style sheet without a font size gets ``base_pt * scale`` points when scaled: Qt does
    not pass a parent's new font on to widgets that have a style sheet of their own.
    """
    if scale == 1.0:
        return style
    if _FONT_SIZE.search(style) or not base_pt:
        return _FONT_SIZE.sub(lambda m: f"font-size: {round(float(m.group(1)) * scale)}px", style)
    size = f"font-size: {round(base_pt * scale)}pt;"
    if "{" in style:  # "QLabel { ... }": the size goes inside the first rule
        head, _, tail = style.partition("}")
        return f"{head.rstrip().rstrip(';')}; {size} }}{tail}"
    return f"{style.rstrip().rstrip(';')}; {size}".lstrip("; ")


def restyle_widgets(
    root: QWidget, theme: Theme, scale: float = 1.0, base_pt: float | None = None
) -> None:
    """Fill every child's style-sheet template from ``theme`` and scale its font sizes.

    A plain style sheet (set with ``setStyleSheet``, no ``$role`` fields) counts as a template
    without fields: it is remembered on first visit, and again whenever the code sets another.
    """
    for widget in [root, *root.findChildren(QWidget)]:
        current = widget.styleSheet()
        template = widget.property(TEMPLATE_PROPERTY)
        if template is None or current != widget.property(SHOWN_PROPERTY):
            if not current and template is None:
                continue
            template = current.replace("$", "$$")  # literal: no fields to fill
            widget.setProperty(TEMPLATE_PROPERTY, template)
        shown = scale_style(theme.fill(template), scale, base_pt)
        widget.setProperty(SHOWN_PROPERTY, shown)
        if shown != current:
            widget.setStyleSheet(shown)
        else:  # a styled widget keeps the palette of its last polish: take the new one
            widget.style().unpolish(widget)
            widget.style().polish(widget)


@dataclass
class ItemBase:
    """What a plot item, axis or label looked like before any theme touched it."""

    pen: QPen | None = None
    brush: QBrush | None = None
    color: QColor | None = None
    font: QFont | None = None
    width: int | None = None
    #: The (theme name, scale) the item was last styled at.
    look: tuple[str, float] | None = None


class StyledItems:
    """The base look of every item a theme has styled; forgets an item when it is deleted."""

    def __init__(self) -> None:
        self._bases: WeakKeyDictionary[object, ItemBase] = WeakKeyDictionary()

    def base(self, item: object) -> ItemBase:
        found = self._bases.get(item)
        if found is None:
            found = self._bases[item] = ItemBase()
        return found

    def look(self, item: object) -> tuple[str, float] | None:
        found = self._bases.get(item)
        return None if found is None else found.look


#: The application's registry (one theme at a time, so one registry).
STYLED = StyledItems()


def _scaled_font(font: QFont, scale: float) -> QFont:
    out = QFont(font)
    if font.pointSizeF() > 0:
        out.setPointSizeF(font.pointSizeF() * scale)
    return out


def style_plot_widget(plot: pg.PlotWidget, theme: Theme, scale: float = 1.0) -> None:
    """Background, axes (pens, tick fonts, width), and every item's pen/brush for a theme."""
    plot.setBackground(theme[Role.PLOT_BACKGROUND])
    foreground = theme[Role.PLOT_FOREGROUND]
    item = plot.getPlotItem()
    for name in ("left", "bottom"):
        axis = item.getAxis(name)
        base = STYLED.base(axis)
        if base.width is None:
            # The width the view asked for (setWidth), not the laid-out one: before the first
            # layout pass that is a few pixels, and lane names would no longer fit beside them.
            base.width = axis.fixedWidth or axis.width()
        if base.font is None:
            base.font = QFont(axis.style.get("tickFont") or axis.font())
        scaled = _scaled_font(base.font, scale)
        axis.setStyle(tickFont=scaled)
        axis.setPen(foreground)
        axis.setTextPen(foreground)
        if axis.label.isVisible():
            axis.label.setFont(scaled)
        if name == "left":
            axis.setWidth(int(base.width * (1 + (scale - 1) * 0.6)))
        else:
            axis.setHeight(None)
    for child in item.getViewBox().addedItems:
        style_plot_item(child, theme, scale)


def style_new_items(window: QWidget, theme: Theme, scale: float) -> int:
    """Style the plot items added since the window was styled at this look (e.g. a change
    marker born while presenting); returns how many there were."""
    count = 0
    for plot in window.findChildren(pg.PlotWidget):
        for item in plot.getPlotItem().getViewBox().addedItems:
            if STYLED.look(item) != (theme.name, scale):
                style_plot_item(item, theme, scale)
                count += 1
    return count


def style_plot_item(item: object, theme: Theme, scale: float = 1.0) -> None:
    """Re-colour (and widen) one plot item from its recorded base pen/brush."""
    base = STYLED.base(item)
    base.look = (theme.name, scale)
    if isinstance(item, (pg.PlotCurveItem, pg.InfiniteLine)):
        if base.pen is None:
            base.pen = pg.mkPen(
                item.opts["pen"] if isinstance(item, pg.PlotCurveItem) else item.pen
            )
        new = pg.mkPen(base.pen)
        new.setColor(theme.color(base.pen.color()))
        if scale != 1.0:  # a cosmetic 0-width pen is 1 px wide
            new.setWidthF((base.pen.widthF() or 1.0) * scale)
        item.setPen(new)
        label = getattr(item, "label", None) if isinstance(item, pg.InfiniteLine) else None
        if label is not None:
            label_base = STYLED.base(label)
            if label_base.color is None:
                label_base.color = QColor(label.color)
            if label_base.font is None:
                label_base.font = QFont(label.textItem.font())
            label.setColor(theme.color(label_base.color))
            label.setFont(_scaled_font(label_base.font, scale))
    elif isinstance(item, LaneSpans):
        item.recolor(theme.color)  # each layer keeps its own base colour
    elif isinstance(item, pg.BarGraphItem):
        if base.brush is None:
            base.brush = pg.mkBrush(item.opts.get("brush"))
        if base.brush.style() != Qt.BrushStyle.NoBrush:
            item.setOpts(brush=pg.mkBrush(theme.color(base.brush.color())))


def style_window(window: QWidget, theme: Theme, scale: float = 1.0) -> None:
    """Everything visible in ``window``: style sheets, plots, their items."""
    restyle_widgets(window, theme, scale, QApplication.font().pointSizeF())
    for plot in window.findChildren(pg.PlotWidget):
        style_plot_widget(plot, theme, scale)


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
    def colors(self) -> Theme:
        """The resolved theme: the forced mode's, or the desktop's scheme's."""
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
        palette.use_theme(colors)
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
