"""Hover or click a step on the timeline: its number, duration and per-phase times.

A label over the timeline, fed by its viewport's mouse moves: a move over the plot looks up the
step under the mouse in the step store by time (a binary search over the end marks, three rows
copied), and the label changes only when another step comes under the mouse. The moves are the
viewport's own events, not pyqtgraph's ``sigMouseMoved``, which drops a move that comes within
10 ms of the last one (``mouseRateLimit``) and so could leave the label on the step before the
one the mouse came to rest on. While the mouse is elsewhere no event comes, so an inspector
costs the window nothing then. A click pins the
label on its step (the view can then scroll on); a second click on the same step, or a click
beside every step, unpins it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QLabel

from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST, ALL_PHASES, PHASES
from gpuwatch.qt import palette
from gpuwatch.qt.run_session import RunSession

#: The label sits this far right of and below the mouse (pixels).
OFFSET = QPoint(14, 10)


@dataclass(frozen=True)
class StepDetail:
    """One step as the inspector shows it (times in ns)."""

    step: int
    config: int
    samples: int
    start_ns: int
    end_ns: int
    #: Per phase of ``protocol.ALL_PHASES``; ``other`` (to the next step's start) is None
    #: for the newest step, whose next start is not known yet.
    phases: dict[str, int | None]
    #: Device stream active (CUDA marks ``data_end``..``optimizer_end``), when known.
    device_active_ns: int | None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def step_at(rows: StepsView, t_ns: int, *, device_marks: bool) -> StepDetail | None:
    """The step whose span, or the ``other`` time after it, holds ``t_ns``, from the rows
    ``StepStore.around(t_ns)`` gives; None before the first step or after the last one ends.
    ``device_marks``: the device marks differ from the host marks (a CUDA run)."""
    host = rows.host
    n = len(rows)
    if not n:
        return None
    k = int(np.searchsorted(host[:, -1], t_ns, side="left"))  # first ending at/after t_ns
    if k < n and host[k, 0] <= t_ns:
        i = k
    elif k > 0 and (k < n or t_ns <= host[k - 1, -1]):
        i = k - 1  # between two steps: the earlier one's ``other`` time
    else:
        return None
    marks = host[i]
    phases: dict[str, int | None] = {
        name: int(marks[j + 1] - marks[j]) for j, name in enumerate(PHASES)
    }
    phases["other"] = int(host[i + 1, 0] - marks[-1]) if i + 1 < n else None
    active = None
    if device_marks and rows.has_device[i]:
        active = int(rows.device[i, ACTIVE_LAST] - rows.device[i, ACTIVE_FIRST])
    return StepDetail(
        step=int(rows.step[i]),
        config=int(rows.config[i]),
        samples=int(rows.samples[i]),
        start_ns=int(marks[0]),
        end_ns=int(marks[-1]),
        phases=phases,
        device_active_ns=active,
    )


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.2f} ms"


def describe_step(detail: StepDetail) -> str:
    """The label's rich text: a heading, then one coloured row per phase."""
    rows = []
    for name in ALL_PHASES:
        value = detail.phases[name]
        text = "n/a (newest step)" if value is None else _ms(value)
        rows.append(
            f"<tr><td>{palette.swatch(palette.PHASE_COLORS[name], name)}</td>"
            f"<td align='right'>&nbsp;{text}</td></tr>"
        )
    if detail.device_active_ns is not None:
        rows.append(
            f"<tr><td>{palette.swatch(palette.DEVICE_ACTIVE, 'stream active')}</td>"
            f"<td align='right'>&nbsp;{_ms(detail.device_active_ns)}</td></tr>"
        )
    return (
        f"<b>step {detail.step:,}</b> · {_ms(detail.duration_ns)} "
        f"<small>(config {detail.config}, {detail.samples:,} samples)</small>"
        f"<table cellspacing='0' cellpadding='0'>{''.join(rows)}</table>"
    )


class StepInspector(QObject):
    """The step under the mouse (or the clicked one) in a label over ``plot``."""

    def __init__(self, plot: pg.PlotWidget, session: RunSession) -> None:
        super().__init__(plot)
        self.plot = plot
        self.session = session
        self.label = QLabel(plot)
        self.label.setObjectName("step_inspector")
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setFrameShape(QFrame.Shape.Box)
        self.label.setAutoFillBackground(True)
        self.label.setBackgroundRole(QPalette.ColorRole.ToolTipBase)
        self.label.setForegroundRole(QPalette.ColorRole.ToolTipText)
        self.label.setMargin(4)
        self.label.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.label.hide()
        #: The step shown, and whether a click pinned it.
        self.shown: StepDetail | None = None
        self.pinned = False
        plot.scene().sigMouseClicked.connect(self._on_clicked)
        plot.installEventFilter(self)  # the view's own events (a leave), never its paints
        plot.viewport().installEventFilter(self)  # its mouse moves

    def detail_at_scene(self, pos: QPointF) -> StepDetail | None:
        """The step under scene position ``pos`` (None outside the plot's data area)."""
        view_box = self.plot.getPlotItem().getViewBox()
        if not view_box.sceneBoundingRect().contains(pos):
            return None
        x_s = view_box.mapSceneToView(pos).x()
        t_ns = self.session.t0_ns + round(x_s * 1e9)
        rows = self.session.steps.around(t_ns)
        return step_at(rows, t_ns, device_marks=self.session.device_kind == "cuda")

    def _on_moved(self, pos: QPointF) -> None:
        if self.pinned:
            return
        self._show(self.detail_at_scene(pos), pos)

    def _on_clicked(self, event: object) -> None:
        pos = event.scenePos()  # type: ignore[attr-defined]
        detail = self.detail_at_scene(pos)
        same = detail is not None and self.shown is not None and detail.step == self.shown.step
        if self.pinned and (detail is None or same):
            self.pinned = False
            self._show(detail, pos)
            return
        self.pinned = detail is not None
        self._show(detail, pos, force=True)

    def _show(self, detail: StepDetail | None, pos: QPointF, *, force: bool = False) -> None:
        if detail is None:
            self.shown = None
            self.label.hide()
            return
        if not force and self.shown is not None and detail.step == self.shown.step:
            return  # same step: nothing changes (not even where the label is)
        self.shown = detail
        self.label.setText(describe_step(detail))
        self.label.adjustSize()
        at = self.plot.mapFromScene(pos) + OFFSET
        room = self.plot.rect()
        x = min(at.x(), room.width() - self.label.width())
        if x < at.x():  # no room on the right: left of the mouse
            x = max(at.x() - 2 * OFFSET.x() - self.label.width(), 0)
        y = max(min(at.y(), room.height() - self.label.height()), 0)
        self.label.move(x, y)
        self.label.show()
        self.label.raise_()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.MouseMove and watched is self.plot.viewport():
            position = event.position()  # type: ignore[attr-defined]
            self._on_moved(self.plot.mapToScene(position.toPoint()))
        elif watched is self.plot and event.type() == QEvent.Type.Leave and not self.pinned:
            self.shown = None
            self.label.hide()
        return False
