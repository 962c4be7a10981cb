"""Headline figures over the last few seconds, each with a one-sentence tooltip.

Figures are refreshed a few times a second, not at the 30 fps redraw rate: numbers that
change every frame cannot be read. Unknown figures read "—", never 0. The figures come from
the frame presenter (``gpuwatch.core.figures.frame.headline_figures``), the same function the
headless summary and the render bench read.

One word, one number: the scoreboard's busy % (a configuration's steady steps) and the
utilization plot (one value per coarse sample) measure the same thing over other windows,
so every busy figure here names its window in its caption ("compute busy %, last 5 s"), and
the runner's CPU figure its unit (% of one core, where the scoreboard divides by the cores).
The wording lives in the functions below, which presentation mode shares.

While a tour stage applies, compiles or warms up, the samples/s figure says so with its
elapsed time (``compiling… 12 s``, ``show_phase``) instead of a dash over an empty timeline;
the live configuration's samples/s against the scoreboard's baseline (``show_change``) is in
its tooltip, and presentation mode leads with it.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QGuiApplication, QMouseEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from gpuwatch.core.figures.frame import HEADLINE_WINDOW_S, HeadlineFigures
from gpuwatch.core.run.runs import SpeedChange
from gpuwatch.qt import palette
from gpuwatch.qt.help_view import HELP_SECTION_PROPERTY, TOOLTIP_HINT

DASH = "—"
#: What the runner's CPU % is a percentage of (the runner CPU sampler: the process tree's CPU
#: time over each sample period, summed over its processes, so 200% is two cores).
CPU_UNIT = "% of one core"


def window_words(window_s: float) -> str:
    """The headline's window as a reader says it: "last 5 s"."""
    return f"last {window_s:g} s"


def fine_name(device_kind: str | None) -> str:
    """The busy figure from our own marks: stream active on CUDA, compute busy elsewhere."""
    return "stream active" if device_kind == "cuda" else "compute busy"


def busy_caption(device_kind: str | None, window_s: float) -> str:
    """ "compute busy %, last 5 s": the figure and the window it covers."""
    return f"{fine_name(device_kind)} %, {window_words(window_s)}"


def coarse_caption(coarse_short: str) -> str:
    """ "runner CPU, % of one core" (its unit, unlike the scoreboard's), or "NVML util %"."""
    return f"runner CPU, {CPU_UNIT}" if coarse_short == "runner CPU" else "NVML util %"


def coarse_value(coarse_short: str, pct: float | None) -> str:
    """ "97% of one core" for the runner's CPU, "80%" for NVML, "—" when unknown."""
    if pct is None:
        return DASH
    unit = CPU_UNIT.removeprefix("%") if coarse_short == "runner CPU" else ""
    return f"{pct:.0f}%{unit}"


def difference_caption(window_s: float) -> str:
    """ "coarse vs fine, same periods, last 5 s"."""
    return f"coarse vs fine, same periods, {window_words(window_s)}"


def same_periods_words(coarse_short: str) -> str:
    """ "the same periods as the runner CPU samples": the difference figure's window."""
    return f"the same periods as the {coarse_short} samples"


class _Figure(QWidget):
    """A small caption (with a "?" button) above a large value; a click on the figure or its
    "?", or F1 over it or with the "?" focused, asks for its section of the guide."""

    sig_clicked = Signal(str)

    def __init__(
        self, caption: str, size_px: int = 18, *, wrap: bool = False, section: str = ""
    ) -> None:
        super().__init__()
        self.setProperty(HELP_SECTION_PROPERTY, section)  # F1 over the figure opens it too
        self.setCursor(Qt.CursorShape.WhatsThisCursor)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 2, 10, 2)
        layout.setSpacing(0)
        self.caption = QLabel(caption)
        palette.set_style(self.caption, "color: $note_text; font-size: 11px;")
        # A long caption (its window named) wraps too, like the sentence under it.
        self.caption.setWordWrap(wrap)
        #: The visible way in for someone who never hovers: Tab reaches it, Space opens help.
        self.help_button = QToolButton()
        self.help_button.setText("?")
        self.help_button.setAutoRaise(True)
        self.help_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.help_button.setToolTip("How to read this figure (opens the guide)")
        self.help_button.setAccessibleName(f"Help: {caption}")
        # Borderless and unpadded: six of them must not widen the bar past a 1280 px screen.
        palette.set_style(
            self.help_button,
            "QToolButton { color: $note_text; font-size: 11px; "
            "font-weight: 600; padding: 0px 1px; border: none; "
            "max-width: 10px; }",
        )
        self.help_button.clicked.connect(
            lambda: self.sig_clicked.emit(self.property(HELP_SECTION_PROPERTY))
        )
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.setSpacing(0)
        top.addWidget(self.caption)
        top.addWidget(self.help_button)
        top.addStretch(1)
        self.value = QLabel(DASH)
        self.value.setStyleSheet(f"font-size: {size_px}px; font-weight: 600;")
        # Not selectable: a selectable label keeps its text in a text document, laid out and
        # drawn anew on every change, the dearest part of painting new figures; and a click
        # is the guide's. Copy is in the figure's context menu.
        self.copy_action = QAction("Copy", self)
        self.copy_action.triggered.connect(self.copy)
        self.addAction(self.copy_action)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        # A sentence-long figure wraps rather than widen the window past a 1280 px screen.
        self.value.setWordWrap(wrap)
        layout.addLayout(top)
        layout.addWidget(self.value)

    def copy(self) -> None:
        """The figure as a reader would quote it: "step time p50 (p95): 10.2 ms (11.0)"."""
        QGuiApplication.clipboard().setText(f"{self.caption.text()}: {self.value.text()}")

    def set(self, text: str, tooltip: str | None = None) -> None:
        self.value.setText(text)
        if tooltip is not None:
            self.setToolTip(tooltip + TOOLTIP_HINT)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.sig_clicked.emit(self.property(HELP_SECTION_PROPERTY))
        super().mouseReleaseEvent(event)


class HeadlineBar(QFrame):
    """samples/s · step time · busy % · coarse % · the difference · where time goes."""

    #: New figures are on show (presentation mode repeats two of them in one big sentence).
    sig_figures_shown = Signal(object)
    #: A figure was clicked: open the guide at this section (gpuwatch.qt.help_view).
    sig_help_requested = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        self.figures: HeadlineFigures | None = None
        #: ``compiling… 12 s`` while a tour stage applies or warms up (None otherwise).
        self.phase: str | None = None
        #: The live configuration's samples/s against the baseline, when known.
        self.change: SpeedChange | None = None
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        self.samples = _Figure("samples/s", section="step")
        self.step = _Figure("step time p50 (p95)", section="step")
        self.busy = _Figure(busy_caption(None, HEADLINE_WINDOW_S), section="busy")
        self.coarse = _Figure(coarse_caption("NVML"), section="nvml")
        self.difference = _Figure(
            difference_caption(HEADLINE_WINDOW_S), 14, wrap=True, section="differ"
        )
        self.phases = _Figure("where step time goes", 14, wrap=True, section="step")
        for fig in (self.samples, self.step, self.busy, self.coarse, self.difference, self.phases):
            layout.addWidget(fig)
            fig.sig_clicked.connect(self.sig_help_requested)
        layout.addStretch(1)
        self.show_figures(HeadlineFigures(window_s=HEADLINE_WINDOW_S))

    def show_figures(self, f: HeadlineFigures) -> None:
        """Show a new set of figures (and tooltips that say what each one measures)."""
        w = f"{f.window_s:g} s"
        last = window_words(f.window_s)
        samples_tip = (
            f"Training samples finished per second over the last {w}, from the runner's step marks."
        )
        if self.phase:
            samples_tip += f" The tour's stage is {self.phase.split('…')[0]}: no steady rate yet."
        if self.change is not None:
            samples_tip += f"\n\nThis configuration: {self.change.text()} (scoreboard)."
        self.samples.set(self.phase or _num(f.samples_per_s, "{:,.0f}"), samples_tip)
        step = _num(f.step_ms_p50, "{:.1f} ms")
        if f.step_ms_p95 is not None:
            step += f" ({f.step_ms_p95:.1f})"
        self.step.set(
            step,
            f"Median (and 95th percentile) step time over the last {w}: from "
            "asking the loader for a batch to asking for the next one.",
        )
        on_cuda = f.device_kind == "cuda"
        self.busy.caption.setText(busy_caption(f.device_kind, f.window_s))
        self.busy.set(
            _num(f.busy_pct, "{:.0f}%"),
            f"Share of the last {w} in which our CUDA stream was active between "
            "marks: an upper bound, since a span can hide bubbles where the GPU "
            "waited for launches."
            if on_cuda
            else f"Share of the last {w} the runner spent in compute phases (host "
            "timestamps from the end of data loading to the end of the optimizer).",
        )
        nvml = f.coarse_short == "NVML"
        self.coarse.caption.setText(coarse_caption(f.coarse_short))
        self.coarse.set(
            _num(f.coarse_pct, "{:.0f}%"),  # the caption has the unit
            f"Mean of NVML's GPU utilization samples over the last {w}: the share "
            "of each sample period in which any kernel of any process ran on the "
            "device."
            if nvml
            else f"Mean CPU use of the runner's process tree (DataLoader workers "
            f"included) over the last {w}, in {CPU_UNIT}: 200% is two cores busy. "
            "The scoreboard's CPU % of all cores divides by the machine's cores instead.",
        )
        self.difference.caption.setText(difference_caption(f.window_s))
        if f.coarse_same_pct is None or f.busy_same_pct is None:
            diff = DASH
        else:
            coarse = coarse_value(f.coarse_short, f.coarse_same_pct)
            diff = (
                f"{f.coarse_short} says {coarse}, {fine_name(f.device_kind)} {f.busy_same_pct:.0f}%"
            )
        self.difference.set(
            diff,
            f"Both figures over {same_periods_words(f.coarse_short)} in the {last}, "
            "where our marks cover the whole period: the coarse one is averaged over its "
            "whole period (and, for NVML, the whole device); ours is exact time between "
            "our marks. So it can differ from the busy figure beside it, which covers the "
            f"whole {last}.",
        )
        self.phases.set(
            " · ".join(f"{n} {100 * s:.0f}%" for n, s in f.top_phases) or DASH,
            f"The host phases that took the largest share of step time over the last {w}.",
        )
        self.figures = f
        self.sig_figures_shown.emit(f)

    def show_phase(self, phase: str | None) -> None:
        """A tour stage applies, compiles or warms up (``compiling… 12 s``), or None."""
        if phase != self.phase:
            self.phase = phase
            self.show_figures(self.figures or HeadlineFigures(window_s=HEADLINE_WINDOW_S))

    def show_change(self, change: SpeedChange | None) -> None:
        """The live configuration's samples/s against the baseline (from the scoreboard)."""
        if change != self.change:
            self.change = change
            self.show_figures(self.figures or HeadlineFigures(window_s=HEADLINE_WINDOW_S))


def _num(value: float | None, fmt: str) -> str:
    return DASH if value is None else fmt.format(value)
