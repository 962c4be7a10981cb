"""The other ranks' GPUs in the utilization plot: one NVML utilization curve per GPU.

The plot's own coarse curve is the run's (rank 0's GPU). A run of many ranks on one machine
trains on more GPUs, and a GPU that idles while the others are busy is the device-side face of
a straggler; so each GPU the other ranks train on gets a thin dashed step series of its NVML
utilization, in the coarse curve's colour, on the same time axis and periods, named in a legend
line under the plot's own ("cuda:1 of rank 1"). Redrawn with the rank rows (about twice a
second), never per frame; hidden for a run of one process, on stage, and while no other GPU is
sampled (a CPU run, another machine's ranks).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout

from gpuwatch.core.figures.rank_figures import GpuSeries
from gpuwatch.qt import palette
from gpuwatch.qt.step_curve import StepCurve
from gpuwatch.qt.utilization_view import UtilizationView

#: One dash pattern per GPU, in rank order (they repeat beyond four).
DASHES = (
    Qt.PenStyle.DashLine,
    Qt.PenStyle.DotLine,
    Qt.PenStyle.DashDotLine,
    Qt.PenStyle.DashDotDotLine,
)


@runtime_checkable
class RankGpuSource(Protocol):
    """What the curves read of a session (a live Session or a replay)."""

    @property
    def t0_ns(self) -> int: ...

    def rank_gpu_series(self, since_ns: int) -> list[GpuSeries]: ...


class RankGpuCurves:
    """The curves and their legend line in ``view`` (see the module docstring)."""

    def __init__(self, view: UtilizationView) -> None:
        self._plot = view.plot
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.legend.setToolTip(
            "NVML utilization of the GPUs the other ranks train on, each over its own sample "
            "periods; the solid coarse curve is rank 0's GPU"
        )
        self.legend.hide()
        layout = view.layout()
        if isinstance(layout, QVBoxLayout):
            layout.insertWidget(1, self.legend)  # under the plot's own legend
        #: Each repaints only what its new samples change (``StepCurve``).
        self.curves: list[StepCurve] = []
        #: The labels drawn, in curve order (tests read them).
        self.labels: tuple[str, ...] = ()

    def sync(self, session: object, presenting: bool) -> None:
        """Redraw from ``session``'s GPU series over the plot's visible range."""
        gpus: list[GpuSeries] = []
        if isinstance(session, RankGpuSource) and not presenting:
            lo, _ = self._plot.getPlotItem().getViewBox().viewRange()[0]
            gpus = session.rank_gpu_series(session.t0_ns + int(lo * 1e9))
        t0_ns = session.t0_ns if isinstance(session, RankGpuSource) else 0
        while len(self.curves) < len(gpus):
            dash = DASHES[len(self.curves) % len(DASHES)]
            curve = StepCurve(pen=pg.mkPen(palette.COARSE, width=1, style=dash))
            self._plot.addItem(curve)
            self.curves.append(curve)
        for curve, gpu in zip(self.curves, gpus, strict=False):
            series = gpu.util
            curve.show_samples(series.t0, series.t1, series.value, t0_ns)
            curve.setVisible(True)
        for curve in self.curves[len(gpus) :]:
            curve.set_points(np.empty(0), np.empty(0), np.empty(0, bool))
            curve.setVisible(False)
        labels = tuple(gpu.label for gpu in gpus)
        if labels != self.labels:
            self.labels = labels
            marks = ("- - -", "· · ·", "-·-·", "-··-")
            self.legend.setText(
                "Other ranks' GPUs (NVML utilization, dashed): "
                + ", ".join(f"{marks[i % len(marks)]} {label}" for i, label in enumerate(labels))
            )
            self.legend.setVisible(bool(labels))
