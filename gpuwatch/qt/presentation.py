"""Presentation mode: the window as seen from the back of a hall.

On: full screen, every font and plot line at ``SCALE``× (window font, style-sheet font
sizes, axis tick fonts, pen widths), a high-contrast palette, the secondary panels (log,
knobs, status details) hidden, and one big sentence on top built from the very figures the
headline bar shows. Off: everything exactly as it was (fonts, panels, geometry, theme).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from PySide6.QtCore import QByteArray, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QFont, QKeySequence, QPalette
from PySide6.QtWidgets import QDockWidget, QLabel, QMainWindow, QSplitter, QWidget

from gpuwatch.qt.headline_bar import DASH, HeadlineBar, HeadlineFigures
from gpuwatch.qt.theme import DARK_CONTRAST, LIGHT_CONTRAST, qpalette, style_window, theme_manager

#: Fonts and lines grow by this much: what "readable from the back" needs on a projector.
SCALE = 2.0
#: Docks hidden while presenting (by object name): detail for the desk, noise on stage.
SECONDARY_DOCKS = ("log", "knobs")
#: The big sentence's size relative to the (already scaled) window font...
HEADLINE_FACTOR = 1.6
#: ...and the line of figures under it, relative to the sentence.
DETAIL_PERCENT = 60


def presentation_sentence(f: HeadlineFigures) -> str:
    """"compute busy 41% · runner CPU says 97%": the headline's fine and coarse figures.

    The words are the headline bar's own captions ("stream active" on CUDA: an upper bound),
    so the stage never shows a figure or a name the desk view does not.
    """
    fine = "stream active" if f.device_kind == "cuda" else "compute busy"
    busy = DASH if f.busy_pct is None else f"{f.busy_pct:.0f}%"
    coarse = DASH if f.coarse_pct is None else f"{f.coarse_pct:.0f}%"
    return f"{fine} {busy} · {f.coarse_short} says {coarse}"


def presentation_detail(f: HeadlineFigures) -> str:
    """The line under the sentence: throughput and step time, as the headline bar has them."""
    rate = DASH if f.samples_per_s is None else f"{f.samples_per_s:,.0f}"
    step = DASH if f.step_ms_p50 is None else f"{f.step_ms_p50:.1f} ms"
    return f"{rate} samples/s · step time p50 {step}"


@dataclass
class _Saved:
    """What entering changed, to put back exactly on leaving."""

    geometry: QByteArray
    dock_state: QByteArray
    splitter: list[int]
    size: QSize
    state: Qt.WindowState
    font: QFont | None  # None: the window had no font of its own (it inherited the app's)
    visible: dict[QWidget, bool]


class PresentationMode(QObject):
    """Toggles presentation mode on one main window (F11 and the toolbar's "Present")."""

    sig_active_changed = Signal(bool)

    def __init__(self, window: QMainWindow, headline: HeadlineBar,
                 secondary: tuple[QWidget, ...] = ()) -> None:
        super().__init__(window)
        self.window = window
        self.headline = headline
        self._secondary = secondary
        self._saved: _Saved | None = None
        self.action = QAction("Present", window)
        self.action.setCheckable(True)
        self.action.setShortcut(QKeySequence(Qt.Key.Key_F11))
        self.action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.action.setToolTip("Presentation mode (F11): full screen, large fonts and lines, "
                               "high contrast, secondary panels hidden")
        self.action.toggled.connect(self._on_toggled)
        #: The one big sentence, shown above the headline only while presenting.
        self.big_headline = QLabel()
        self.big_headline.setObjectName("presentation_headline")
        self.big_headline.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.big_headline.setWordWrap(True)
        self.big_headline.setTextFormat(Qt.TextFormat.RichText)
        self.big_headline.hide()
        headline.sig_figures_shown.connect(self._show_figures)
        self._fullscreen = True

    @property
    def active(self) -> bool:
        return self._saved is not None

    def set_active(self, on: bool, *, fullscreen: bool = True) -> None:
        """Enter or leave; ``fullscreen=False`` keeps the window's size (tests, screenshots)."""
        self._fullscreen = fullscreen
        self.action.setChecked(on)  # toggled -> _on_toggled (no-op if unchanged)

    def toggle(self) -> None:
        self.action.toggle()

    def _on_toggled(self, on: bool) -> None:
        if on and not self.active:
            self._enter()
        elif not on and self.active:
            self._leave()
        self._fullscreen = True  # F11 and the toolbar always mean the real full screen

    def _enter(self) -> None:
        w = self.window
        panels = [d for d in w.findChildren(QDockWidget) if d.objectName() in SECONDARY_DOCKS]
        # The headline bar gives way to the big sentence, which repeats its main figures:
        # at twice the size both would leave the plots no room on a 1280x720 projector.
        # The menu bar goes too (F11 and the toolbar's Present button lead back).
        panels += [w.statusBar(), w.menuBar(), self.headline, *self._secondary]
        scoreboard = getattr(w, "scoreboard", None)  # its rows stay; the hint and button go
        if scoreboard is not None:
            panels += [scoreboard.hint, scoreboard.pin_button]
        own_font = w.testAttribute(Qt.WidgetAttribute.WA_SetFont)
        splitter = self._splitter()
        self._saved = _Saved(geometry=w.saveGeometry(), dock_state=w.saveState(),
                             splitter=splitter.sizes() if splitter else [],
                             size=w.size(), state=w.windowState(),
                             font=QFont(w.font()) if own_font else None,
                             visible={p: p.isVisible() for p in panels})
        for panel in panels:
            panel.hide()
        timeline = getattr(w, "timeline", None)
        if timeline is not None:  # the utilization plot below shows the same seconds
            timeline.getPlotItem().hideAxis("bottom")
        utilization = getattr(w, "utilization", None)
        if utilization is not None:  # "seconds since start": the room goes to the plot
            utilization.plot.getPlotItem().getAxis("bottom").showLabel(False)
            utilization.set_compact(True)
        font = QFont(w.font())
        font.setPointSizeF(font.pointSizeF() * SCALE)
        w.setFont(font)
        self.restyle()
        self.big_headline.show()
        if self.headline.figures is not None:
            self._show_figures(self.headline.figures)
        if self._fullscreen:
            w.showFullScreen()
        self._share_the_height()
        # Again once the larger fonts have been laid out (the splitter sizes by old minimums).
        QTimer.singleShot(0, self._share_the_height)
        self.sig_active_changed.emit(True)

    def _leave(self) -> None:
        saved, self._saved = self._saved, None
        assert saved is not None
        w = self.window
        self.big_headline.hide()
        w.setFont(saved.font if saved.font is not None else QFont())
        if saved.font is None:
            w.setAttribute(Qt.WidgetAttribute.WA_SetFont, False)
        w.setPalette(QPalette())  # resolves nothing: the window follows the app's again
        w.setAttribute(Qt.WidgetAttribute.WA_SetPalette, False)
        theme_manager().style(w)
        for panel, visible in saved.visible.items():
            panel.setVisible(visible)
        w.restoreState(saved.dock_state)
        timeline = getattr(w, "timeline", None)
        if timeline is not None:
            timeline.getPlotItem().showAxis("bottom")
        utilization = getattr(w, "utilization", None)
        if utilization is not None:
            utilization.plot.getPlotItem().getAxis("bottom").showLabel(True)
            utilization.set_compact(False)
        splitter = self._splitter()
        if splitter is not None and saved.splitter:
            splitter.setSizes(saved.splitter)
        if w.windowState() != saved.state:
            w.setWindowState(saved.state)
        w.restoreGeometry(saved.geometry)
        if saved.state == Qt.WindowState.WindowNoState and w.size() != saved.size:
            w.resize(saved.size)  # the panels shown again may have nudged the layout
        self.sig_active_changed.emit(False)

    def _splitter(self) -> QSplitter | None:
        """The splitter of timeline over utilization (None in a window without one)."""
        timeline = getattr(self.window, "timeline", None)
        parent = timeline.parentWidget() if timeline is not None else None
        return parent if isinstance(parent, QSplitter) else None

    def _share_the_height(self) -> None:
        """The timeline gets most of the plots' height (eight lanes whose names are twice as
        tall); the scoreboard just tall enough for its rows (up to 7)."""
        if not self.active:
            return
        w = self.window
        splitter = self._splitter()
        if splitter is not None:
            total = sum(splitter.sizes())
            splitter.setSizes([total * 3 // 5, total - total * 3 // 5])
        scoreboard = getattr(w, "scoreboard", None)
        dock = scoreboard.parentWidget() if scoreboard is not None else None
        if isinstance(dock, QDockWidget):
            table = scoreboard.table
            rows = min(max(table.model().rowCount(), 2), 7)
            height = (table.horizontalHeader().sizeHint().height()
                      + rows * table.verticalHeader().defaultSectionSize()
                      + table.horizontalScrollBar().sizeHint().height()
                      + dock.fontMetrics().height() + 24)
            w.resizeDocks([dock], [height], Qt.Orientation.Vertical)

    def restyle(self) -> None:
        """Apply the high-contrast twin of the current theme at presentation scale."""
        colors = DARK_CONTRAST if theme_manager().colors.dark else LIGHT_CONTRAST
        # The window's own palette: other windows (a replay, a comparison) keep the theme.
        self.window.setPalette(qpalette(colors))
        style_window(self.window, colors, SCALE)
        big = QFont(self.window.font())
        big.setPointSizeF(big.pointSizeF() * HEADLINE_FACTOR)
        big.setWeight(QFont.Weight.Bold)
        self.big_headline.setFont(big)
        self.big_headline.setStyleSheet(f"color: {colors.text}; padding: 4px;")

    def _show_figures(self, figures: HeadlineFigures) -> None:
        if self.active:
            self.big_headline.setText(
                f"{html.escape(presentation_sentence(figures))}<br>"
                f'<span style="font-size: {DETAIL_PERCENT}%; font-weight: normal;">'
                f"{html.escape(presentation_detail(figures))}</span>")
