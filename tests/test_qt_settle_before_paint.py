"""The plots paint once per frame: items whose geometry depends on the view's scale settle
before the paint (``settle_before_paint``) instead of queuing another paint inside it."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QEvent, QObject


class _Paints(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.count += 1
        return False


def _paints_per_frame(qtbot, settle: bool) -> float:
    from gpuwatch.qt.timeline_view import settle_before_paint, style_plot

    plot = pg.PlotWidget()
    qtbot.addWidget(plot)
    style_plot(plot)
    plot.resize(800, 300)
    plot.show()
    qtbot.waitExposed(plot)
    x = np.linspace(0, 100, 600)
    plot.addItem(pg.PlotCurveItem(x, np.sin(x), pen=pg.mkPen("r", width=2)))
    for y in (-0.5, 0.5):
        plot.addItem(pg.InfiniteLine(pos=y, angle=0))
    plot.addItem(pg.InfiniteLine(pos=20.0, angle=90))
    box = plot.getPlotItem().getViewBox()
    paints = _Paints()
    plot.viewport().installEventFilter(paints)
    frames = 20
    for frame in range(frames):
        box.setXRange(frame, frame + 30.0, padding=0)
        if settle:
            settle_before_paint(plot)
        for _ in range(4):  # the paint, and any paint it queued
            QCoreApplication.sendPostedEvents()
            QCoreApplication.processEvents()
    return paints.count / frames


def test_a_scrolled_frame_paints_each_plot_once(qtbot) -> None:
    assert _paints_per_frame(qtbot, settle=True) <= 1.0
    assert _paints_per_frame(qtbot, settle=False) > 1.0  # what it prevents
