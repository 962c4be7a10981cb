"""Presentation mode: the window as seen from the back of a hall.

On: full screen, every font and plot line at ``SCALE``× (window font, style-sheet font
sizes, axis tick fonts, pen widths) on a 720-pixel-high screen and proportionally more on a
taller one, so the stage looks the same on a 1280×720 projector and on 4K; a high-contrast
palette; the secondary panels (log, knobs, advisor, menu and status bars) hidden; the host
phases in three lanes instead of seven; the scoreboard beside the plots with its headline
columns only; and across the top the tour's caption and one big sentence built from the very
figures the headline bar shows. That sentence leads with what the room came for: the samples/s
change against the scoreboard's baseline, or while a stage compiles or warms up, that it does
and for how long. Off (F11 again, or Esc): everything exactly as it was (fonts,
panels, docks, window state, geometry, theme).
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass

from PySide6.QtCore import QByteArray, QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QFont, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QBoxLayout,
    QDockWidget,
    QLabel,
    QMainWindow,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from gpuwatch.core.figures.frame import HEADLINE_WINDOW_S, HeadlineFigures
from gpuwatch.core.run.runs import SpeedChange
from gpuwatch.qt.headline_bar import (
    CPU_UNIT,
    DASH,
    HeadlineBar,
    fine_name,
    window_words,
)
from gpuwatch.qt.help_view import HELP_SECTION_PROPERTY
from gpuwatch.qt.theme import (
    DARK_CONTRAST,
    LIGHT_CONTRAST,
    Theme,
    qpalette,
    style_new_items,
    style_window,
    theme_manager,
)

#: Fonts and lines grow by this much: what "readable from the back" needs on a projector...
SCALE = 2.0
#: ...of this height (logical pixels); a taller screen scales up in proportion, so text keeps
#: its share of the screen's height, which is what the back row sees.
PROJECTOR_HEIGHT = 720
#: Scoreboard columns kept on stage (the rest are desk detail); it sits beside the plots.
STAGE_COLUMNS = ("stage", "samples/s", "speedup")
#: How often items added to the plots while presenting are given its look (ms).
NEWCOMERS_MS = 300
#: The scoreboard's share of the width on stage, at most.
SCOREBOARD_SHARE = 0.4
#: Docks hidden while presenting (by object name): detail for the desk, noise on stage.
SECONDARY_DOCKS = ("log", "knobs", "advisor", "runs", "kernel_ops", "ranks")
#: The big sentence's size relative to the (already scaled) window font...
HEADLINE_FACTOR = 1.6
#: ...and the line of figures under it, relative to the sentence.
DETAIL_PERCENT = 60


def presentation_sentence(f: HeadlineFigures) -> str:
    """ "last 5 s: compute busy 41% · runner CPU says 97%": the headline's fine and coarse
    figures and the window both cover (the coarse one's unit is in ``presentation_detail``:
    this line must fit a 1280-pixel projector at stage size).

    The words are the headline bar's own ("stream active" on CUDA: an upper bound), so the
    stage never shows a figure, a name or a window the desk view does not; and a room that
    sees the scoreboard beside it knows why its busy % may differ (another window).
    """
    busy = DASH if f.busy_pct is None else f"{f.busy_pct:.0f}%"
    coarse = DASH if f.coarse_pct is None else f"{f.coarse_pct:.0f}%"
    return (
        f"{window_words(f.window_s)}: {fine_name(f.device_kind)} {busy} · "
        f"{f.coarse_short} says {coarse}"
    )


def presentation_detail(f: HeadlineFigures) -> str:
    """The line under the sentence: throughput and step time, as the headline bar has them,
    and the runner CPU's unit."""
    rate = DASH if f.samples_per_s is None else f"{f.samples_per_s:,.0f}"
    step = DASH if f.step_ms_p50 is None else f"{f.step_ms_p50:.1f} ms"
    unit = f" · runner CPU in {CPU_UNIT}" if f.coarse_short == "runner CPU" else ""
    return f"{rate} samples/s · step time p50 {step}{unit}"


def presentation_lead(phase: str | None, change: SpeedChange | None) -> str | None:
    """The big sentence's first line, when there is a change to lead with: the stage's
    ``compiling… 12 s``, else ``1.81× samples/s vs “baseline” (691 → 1,253/s)`` (marked
    ``≈`` within noise); None while the live configuration is the baseline itself."""
    if phase:
        return f"{phase} · no steady samples/s yet"
    return change.text() if change is not None else None


def presentation_tooltip(f: HeadlineFigures) -> str:
    """What the big sentence measures, over which window."""
    coarse = (
        f"the runner's CPU in {CPU_UNIT} (its process tree)"
        if f.coarse_short == "runner CPU"
        else "NVML's utilization of the whole device"
    )
    return (
        f"Over the {window_words(f.window_s)}: {fine_name(f.device_kind)} from our own marks "
        f"beside {coarse}, then throughput and step time. The scoreboard's busy % covers "
        "each configuration's steady steps instead.\n\nPress F1 here: how to read it."
    )


def presentation_scale(screen_height: int) -> float:
    """``SCALE`` on a projector's 720 px, proportionally more on a taller screen."""
    return SCALE * max(1.0, screen_height / PROJECTOR_HEIGHT)


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
    hidden_columns: list[int]
    caption_home: tuple[QBoxLayout, int] | None = None  # where the tour caption came from


class PresentationMode(QObject):
    """Toggles presentation mode on one main window (F11 and the toolbar's "Present")."""

    sig_active_changed = Signal(bool)

    def __init__(
        self, window: QMainWindow, headline: HeadlineBar, secondary: tuple[QWidget, ...] = ()
    ) -> None:
        super().__init__(window)
        self.window = window
        self.headline = headline
        self._secondary = secondary
        self._saved: _Saved | None = None
        self.action = QAction("Present", window)
        self.action.setCheckable(True)
        self.action.setShortcut(QKeySequence(Qt.Key.Key_F11))
        self.action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.action.setToolTip(
            "Presentation mode (F11; Esc leaves): full screen, large fonts "
            "and lines, high contrast, secondary panels hidden"
        )
        self.action.toggled.connect(self._on_toggled)
        #: Esc leaves too (only while presenting: elsewhere Esc belongs to whoever has focus).
        self.leave_action = QAction("Leave presentation", window)
        self.leave_action.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        self.leave_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.leave_action.setEnabled(False)
        self.leave_action.triggered.connect(lambda: self.set_active(False))
        window.addAction(self.leave_action)
        #: Font and line scale while presenting (``presentation_scale`` of the screen).
        self.scale = SCALE
        self._watching_rows = False
        #: Plot items born while presenting (change markers, kernel windows) get its look.
        #: When ``on_frame`` next looks for plot items drawn since the last look (monotonic s).
        self._newcomers_due = 0.0
        #: The one big sentence, shown (in the stage dock) only while presenting.
        self.big_headline = QLabel()
        self.big_headline.setObjectName("presentation_headline")
        self.big_headline.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.big_headline.setWordWrap(True)
        self.big_headline.setTextFormat(Qt.TextFormat.RichText)
        self.big_headline.setProperty(HELP_SECTION_PROPERTY, "differ")  # F1 over it
        self.big_headline.setToolTip(
            presentation_tooltip(HeadlineFigures(window_s=HEADLINE_WINDOW_S))
        )
        self._progress_home: tuple[QBoxLayout, int] | None = None
        #: On stage the tour caption and the big sentence span the full width, above the plots
        #: and the scoreboard beside them: a top dock without a title bar, hidden at the desk.
        self.stage_dock = QDockWidget("Stage headline", window)
        self.stage_dock.setObjectName("stage_headline")
        self.stage_dock.setTitleBarWidget(QWidget())
        self.stage_dock.setFeatures(QDockWidget.DockWidgetFeature.NoDockWidgetFeatures)
        body = QWidget()
        self._stage_layout = QVBoxLayout(body)
        self._stage_layout.setContentsMargins(6, 2, 6, 0)
        self._stage_layout.setSpacing(4)
        self._stage_layout.addWidget(self.big_headline)
        self.stage_dock.setWidget(body)
        body.installEventFilter(self)  # its text changed: fit the dock's height to it
        window.addDockWidget(Qt.DockWidgetArea.TopDockWidgetArea, self.stage_dock)
        self.stage_dock.hide()
        self.stage_dock.toggleViewAction().setVisible(False)  # not a panel of View ▸ Panels
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
        table = scoreboard.table if scoreboard is not None else None
        self._saved = _Saved(
            geometry=w.saveGeometry(),
            dock_state=w.saveState(),
            splitter=splitter.sizes() if splitter else [],
            size=w.size(),
            state=w.windowState(),
            font=QFont(w.font()) if own_font else None,
            visible={p: p.isVisible() for p in panels},
            hidden_columns=[]
            if table is None
            else [i for i in range(table.model().columnCount()) if table.isColumnHidden(i)],
        )
        for panel in panels:
            panel.hide()
        self.leave_action.setEnabled(True)
        height = w.screen().geometry().height() if self._fullscreen else w.height()
        self.scale = presentation_scale(height)
        timeline = getattr(w, "timeline", None)
        if timeline is not None:
            timeline.set_merged(True)
        utilization = getattr(w, "utilization", None)
        if utilization is not None:  # "seconds since start": the room goes to the plot
            utilization.plot.getPlotItem().getAxis("bottom").showLabel(False)
            utilization.set_compact(True)
        self._saved.caption_home = self._caption_to_stage()
        tour = getattr(w, "tour", None)
        if tour is not None:
            tour.compact = True
        self.stage_dock.show()
        font = QFont(w.font())
        font.setPointSizeF(font.pointSizeF() * self.scale)
        w.setFont(font)
        self.restyle()
        self.big_headline.show()
        if self.headline.figures is not None:
            self._show_figures(self.headline.figures)
        redraw = getattr(w, "redraw_now", None)
        if redraw is not None:  # regrouped lanes, the short captions (they set min widths)
            redraw()
        if table is not None:
            self._scoreboard_beside_the_plots(scoreboard)
        if self._fullscreen:
            w.showFullScreen()
        elif w.size() != self._saved.size:
            w.resize(self._saved.size)  # a dock moved beside the plots may have widened it
        self._share_the_space()
        # Again once the larger fonts have been laid out (the splitter sizes by old minimums),
        # and whenever the window is resized (a window manager takes a while to go full screen).
        QTimer.singleShot(0, self._share_the_space)
        w.installEventFilter(self)
        self.sig_active_changed.emit(True)

    def _scoreboard_beside_the_plots(self, scoreboard: QWidget) -> None:
        """On stage the scoreboard gets the plots' full height at their side, headline
        columns only: under the plots it squeezed them into strips at 1280×720."""
        w = self.window
        table = scoreboard.table
        titles = [
            table.model().headerData(i, Qt.Orientation.Horizontal)
            for i in range(table.model().columnCount())
        ]
        for i, title in enumerate(titles):
            table.setColumnHidden(i, title not in STAGE_COLUMNS)
        dock = scoreboard.parentWidget()
        if isinstance(dock, QDockWidget):
            w.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
            dock.show()
        if not self._watching_rows:  # a new row (a tour stage) may need wider columns
            self._watching_rows = True
            table.model().modelReset.connect(lambda: QTimer.singleShot(0, self._fit_scoreboard))

    def _caption_to_stage(self) -> tuple[QBoxLayout, int] | None:
        """Move the tour's caption above the big sentence; returns where it was."""
        caption = getattr(getattr(self.window, "tour", None), "caption", None)
        parent = caption.parentWidget() if caption is not None else None
        home = parent.layout() if parent is not None else None
        if not isinstance(home, QBoxLayout) or home is self._stage_layout:
            return None
        index = home.indexOf(caption)
        self._stage_layout.insertWidget(0, caption)  # takes it out of ``home``
        bar = getattr(getattr(self.window, "tour", None), "progress_bar", None)
        if isinstance(bar, QWidget) and home.indexOf(bar) >= 0:
            self._progress_home = (home, home.indexOf(bar))
            self._stage_layout.insertWidget(1, bar)
        return home, index

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if not self.active:
            return False
        if watched is self.window and event.type() == QEvent.Type.Resize:
            QTimer.singleShot(0, self._share_the_space)
        elif watched is self.stage_dock.widget() and event.type() == QEvent.Type.LayoutRequest:
            QTimer.singleShot(0, self._fit_stage)
        return False

    def _fit_stage(self) -> None:
        """The stage dock exactly as tall as its wrapped text (caption and sentence)."""
        if not self.active:
            return
        layout = self.stage_dock.widget().layout()
        width = max(self.stage_dock.width(), 200)
        height = (
            layout.totalHeightForWidth(width)
            if layout.hasHeightForWidth()
            else layout.totalSizeHint().height()
        )
        if height != self.stage_dock.height():
            self.stage_dock.setFixedHeight(height)

    def _leave(self) -> None:
        saved, self._saved = self._saved, None
        assert saved is not None
        w = self.window
        w.removeEventFilter(self)
        self.leave_action.setEnabled(False)
        self.big_headline.hide()
        self.stage_dock.hide()
        tour = getattr(w, "tour", None)
        if tour is not None:
            tour.compact = False
            if saved.caption_home is not None:
                home, index = saved.caption_home
                home.insertWidget(index, tour.caption)
            if self._progress_home is not None:
                home, index = self._progress_home
                home.insertWidget(index, tour.progress_bar)
                self._progress_home = None
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
            timeline.set_merged(False)
        scoreboard = getattr(w, "scoreboard", None)
        if scoreboard is not None:
            table = scoreboard.table
            for i in range(table.model().columnCount()):
                table.setColumnHidden(i, i in saved.hidden_columns)
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
        redraw = getattr(w, "redraw_now", None)
        if redraw is not None:
            redraw()
        self.sig_active_changed.emit(False)

    def _splitter(self) -> QSplitter | None:
        """The splitter of timeline over utilization (None in a window without one)."""
        timeline = getattr(self.window, "timeline", None)
        parent = timeline.parentWidget() if timeline is not None else None
        return parent if isinstance(parent, QSplitter) else None

    def _share_the_space(self) -> None:
        """Timeline and utilization share their height about evenly (four lanes vs one plot);
        the scoreboard beside them is as wide as its columns, up to ``SCOREBOARD_SHARE``."""
        if not self.active:
            return
        self._fit_stage()
        w = self.window
        splitter = self._splitter()
        lanes = splitter.indexOf(w.timeline) if splitter is not None else -1
        plot = splitter.indexOf(getattr(w, "utilization", None)) if splitter is not None else -1
        if lanes >= 0 and plot >= 0:  # other panes (a kernel lane) keep their height
            sizes = splitter.sizes()
            pair = sizes[lanes] + sizes[plot]
            sizes[lanes] = pair * 11 // 20
            sizes[plot] = pair - sizes[lanes]
            splitter.setSizes(sizes)
        self._fit_scoreboard()

    def _fit_scoreboard(self) -> None:
        """The scoreboard dock as wide as its stage columns, up to ``SCOREBOARD_SHARE``."""
        if not self.active:
            return
        w = self.window
        scoreboard = getattr(w, "scoreboard", None)
        dock = scoreboard.parentWidget() if scoreboard is not None else None
        if isinstance(dock, QDockWidget):
            w.layout().activate()  # place the moved dock now, or resizeDocks may be dropped
            table = scoreboard.table
            table.resizeColumnsToContents()
            header = table.horizontalHeader()
            width = (
                sum(
                    header.sectionSize(i)
                    for i in range(header.count())
                    if not table.isColumnHidden(i)
                )
                + table.verticalScrollBar().sizeHint().width()
                + 16
            )
            w.resizeDocks(
                [dock], [min(width, int(w.width() * SCOREBOARD_SHARE))], Qt.Orientation.Horizontal
            )

    def restyle(self) -> None:
        """Apply the high-contrast twin of the current theme at presentation scale."""
        colors = self._colors()
        # The window's own palette: other windows (a replay, a comparison) keep the theme.
        self.window.setPalette(qpalette(colors))
        style_window(self.window, colors, self.scale)
        big = QFont(self.window.font())
        big.setPointSizeF(big.pointSizeF() * HEADLINE_FACTOR)
        big.setWeight(QFont.Weight.Bold)
        self.big_headline.setFont(big)
        # After the window: unscaled, its own font (set above) sizes it.
        self.big_headline.setStyleSheet(colors.fill("color: $text; padding: 4px;"))

    def on_frame(self) -> None:
        """Called by the window's redraw tick: while presenting, plot items drawn since the last
        look (new spans, markers) get the stage look, at most every ``NEWCOMERS_MS``."""
        if not self.active:
            return
        now = time.monotonic()
        if now >= self._newcomers_due:
            self._newcomers_due = now + NEWCOMERS_MS / 1000
            style_new_items(self.window, self._colors(), self.scale)

    def _colors(self) -> Theme:
        return DARK_CONTRAST if theme_manager().colors.dark else LIGHT_CONTRAST

    def _show_figures(self, figures: HeadlineFigures) -> None:
        self.big_headline.setToolTip(presentation_tooltip(figures))
        if self.active:
            # In points: Qt's rich text ignores a percentage font size.
            detail_pt = self.big_headline.font().pointSizeF() * DETAIL_PERCENT / 100
            sentence, detail = presentation_sentence(figures), presentation_detail(figures)
            lead = presentation_lead(self.headline.phase, self.headline.change)
            if lead is not None:  # the change first; the busy sentence joins the detail line
                sentence, detail = lead, f"{sentence} · {detail}"
            text = (
                f"{html.escape(sentence)}<br>"
                f'<span style="font-size: {detail_pt:.1f}pt; font-weight: normal;">'
                f"{html.escape(detail)}</span>"
            )
            if text != self.big_headline.text():
                self.big_headline.setText(text)
