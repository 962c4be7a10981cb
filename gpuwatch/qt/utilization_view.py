"""The coarse figure beside the busy % from our marks, over the same sample periods.

On CUDA the coarse figure is NVML GPU utilization; on a CPU device (or without NVML) it is
the runner process tree's CPU %. Both are drawn as step series over each sample's real
period, never interpolated, because a coarse sample says nothing about where inside its
period the work happened. Which metric is shown (``choose_coarse``) and the busy % beside it
come from the frame presenter (``gpuwatch.core.figures.frame``); this module draws them.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from gpuwatch.core.figures.frame import CoarseChoice, UtilizationFrame
from gpuwatch.core.model.store import SeriesView
from gpuwatch.qt import palette
from gpuwatch.qt.step_curve import StepCurve
from gpuwatch.qt.theme import theme_manager
from gpuwatch.qt.time_axis import TimeAxis
from gpuwatch.qt.timeline_view import style_plot


class UtilizationView(QWidget):
    """Legend and "n/a — reason" lines above a plot of the coarse % and our busy %.

    The legend is a label above the plot rather than a pyqtgraph legend inside it, so it
    never hides the most recent samples.
    """

    def __init__(self) -> None:
        super().__init__()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.legend_label = QLabel()
        # Wraps rather than widen the window past a 1280 px projector in presentation mode.
        self.legend_label.setWordWrap(True)
        self.legend_label.setToolTip(
            "Each step of both curves is one coarse sample: the busy % is over the same "
            "periods as the coarse samples (runner CPU or NVML)."
        )
        layout.addWidget(self.legend_label)
        self.note_label = QLabel()
        palette.set_style(self.note_label, "color: $na_text; padding-left: 4px;")
        self.note_label.setWordWrap(True)
        self.note_label.hide()
        layout.addWidget(self.note_label)
        # The shared time axis of both plots, redrawn by moving its ticks as it scrolls.
        self.plot = pg.PlotWidget(background=palette.BACKGROUND, axisItems={"bottom": TimeAxis()})
        style_plot(self.plot)
        layout.addWidget(self.plot, 1)
        item = self.plot.getPlotItem()
        item.setLabel("left", "%", color=palette.FOREGROUND)
        item.setLabel("bottom", "seconds since start", color=palette.FOREGROUND)
        item.setYRange(0, 105, padding=0)
        # 2 px is affordable here: a few hundred points, unlike the timeline's many spans.
        # New samples repaint the plot's right end only, not the whole plot (``StepCurve``).
        self.coarse_curve = StepCurve(pen=pg.mkPen(palette.COARSE, width=2), name="coarse")
        self.busy_curve = StepCurve(pen=pg.mkPen(palette.DEVICE_ACTIVE, width=2), name="busy")
        self.plot.addItem(self.coarse_curve)
        self.plot.addItem(self.busy_curve)
        self._y_top = 0.0
        self._grid: list[pg.InfiniteLine] = []
        self._set_y_top(105.0)
        self.choice: CoarseChoice | None = None
        #: What the curves show: (origin, sample starts, ends, values, busy).
        self._drawn: tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        #: Presentation mode: a one-line legend and no notes, so the plot keeps its height at
        #: twice the font size on a 1280x720 projector.
        self.compact = False
        # The legend's swatches follow the theme: rebuild it with the next data.
        theme_manager().sig_theme_changed.connect(self._forget_choice)

    def _forget_choice(self, *_: object) -> None:
        self.choice = None

    def set_compact(self, compact: bool) -> None:
        """Short legend without notes (presentation) or the full one; applies at next data."""
        self.compact = compact
        self.choice = None
        if compact:
            self.note_label.hide()

    def show_frame(self, frame: UtilizationFrame) -> None:
        """Draw the utilization of one frame (``FramePresenter.plots``)."""
        self.show_data(frame.choice, frame.coarse, frame.busy, frame.t0_ns)

    def show_data(
        self, choice: CoarseChoice, coarse: SeriesView, busy: np.ndarray, t0_ns: int
    ) -> None:
        """Redraw both step series: the coarse samples, and ``busy`` (our marks' busy % over
        each sample's period, NaN where unknown)."""
        if choice != self.choice:
            self.choice = choice
            self.coarse_curve.opts["name"] = choice.coarse_label
            self.busy_curve.opts["name"] = choice.busy_label
            coarse_label, busy_label = choice.coarse_label, choice.busy_label
            if self.compact:  # "runner CPU % (process tree, …)" -> "runner CPU %"
                coarse_label = coarse_label.split(" (")[0]
                busy_label = busy_label.split(" (")[0]
            self.legend_label.setText(
                "<b>Utilization</b> — "
                + palette.swatch(palette.COARSE, coarse_label)
                + "&nbsp;&nbsp;&nbsp;"
                + palette.swatch(palette.DEVICE_ACTIVE, busy_label)
            )
            self.note_label.setText("\n".join(choice.notes))
            self.note_label.setVisible(bool(choice.notes) and not self.compact)
        drawn = self._drawn
        if (
            drawn is not None
            and drawn[0] == t0_ns
            and all(
                np.array_equal(a, b, equal_nan=True)
                for a, b in zip(drawn[1:], (coarse.t0, coarse.t1, coarse.value, busy), strict=True)
            )
        ):
            return  # the same samples: the curves stay, nothing to lay out or repaint
        self._drawn = (t0_ns, coarse.t0, coarse.t1, coarse.value, busy)
        self.coarse_curve.show_samples(coarse.t0, coarse.t1, coarse.value, t0_ns)
        self.busy_curve.show_samples(coarse.t0, coarse.t1, busy, t0_ns)
        top = float(np.nanmax(coarse.value)) if len(coarse) else 0.0
        y_top = 105.0 if top <= 100 else 100.0 * math.ceil(top / 100.0) + 5
        self._set_y_top(y_top)

    def _set_y_top(self, y_top: float) -> None:
        """Y range 0..y_top with light reference lines at the (explicit) axis ticks."""
        if y_top == self._y_top:
            return
        self._y_top = y_top
        item = self.plot.getPlotItem()
        item.setYRange(0, y_top, padding=0)
        step = 25.0 if y_top <= 105 else 50.0 if y_top <= 205 else 100.0
        levels = np.arange(step, y_top, step)
        item.getAxis("left").setTicks([[(v, f"{v:g}") for v in (0.0, *levels)]])
        for line in self._grid:
            item.removeItem(line)
        self._grid = [
            pg.InfiniteLine(pos=y, angle=0, movable=False, pen=pg.mkPen(palette.GRID_LINE))
            for y in levels
        ]
        for line in self._grid:
            line.setZValue(-10)
            item.addItem(line)

    def legend_texts(self) -> list[str]:
        """The names the legend shows, coarse first (for tests)."""
        return [self.coarse_curve.name() or "", self.busy_curve.name() or ""]


def series_point_count(curve: pg.PlotCurveItem) -> int:
    """Points a curve currently holds (0 before any data)."""
    x, _ = curve.getData()
    return 0 if x is None else len(x)
