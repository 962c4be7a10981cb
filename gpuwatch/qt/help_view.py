"""The built-in guide (F1, Help menu): how to read the views, the knobs and the keys.

The text is here rather than online because the app is used at talks and on machines
without a network, and it must match the labels of this very version. The scoreboard's
columns and the shortcut table are generated from the tables the window itself uses, so
the guide cannot drift from them. Anchors (``#busy``, ``#nvml`` ...) let a headline figure
open the guide at its own section.
"""

from __future__ import annotations

import html

from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QApplication, QDialog, QTextBrowser, QVBoxLayout, QWidget

from gpuwatch.qt.scoreboard_view import COLUMNS
from gpuwatch.qt.shortcuts import SHORTCUTS
from gpuwatch.qt.timeline_view import MERGED_LANES

#: Sections, in order: (anchor, title). ``HELP_SECTION_PROPERTY`` on a widget names one.
SECTIONS = (
    ("step", "Step and host phases"),
    ("busy", "Busy %: stream active, compute busy, and over which window"),
    ("gaps", "Gaps: exact idle time"),
    ("nvml", "NVML % (and runner CPU, % of one core)"),
    ("differ", "Why busy % and NVML % differ"),
    ("cpu", "On a CPU"),
    ("scoreboard", "The scoreboard"),
    ("transitions", "Transitions"),
    ("knobs", "The knobs"),
    ("advisor", "The advisor: why it waits, what to flip"),
    ("keys", "Keyboard shortcuts"),
)
HELP_SECTION_PROPERTY = "help_section"
#: What every headline figure's tooltip ends with.
TOOLTIP_HINT = '\n\nClick, press F1 here or use its "?": how to read this.'

_TEXT = {
    "step": """A <b>step</b> runs from asking the loader for a batch to asking for the next one.
The host lanes split it into <b>phases</b> from <code>perf_counter</code> marks the runner takes:
<i>data</i> (waiting in <code>next(loader)</code>), <i>h2d</i> (issuing copies to the device),
<i>forward</i>, <i>backward</i>, <i>optimizer</i>, <i>sync</i> (logging, <code>.item()</code>,
explicit syncs) and <i>other</i>. "Where step time goes" in the headline is the phases' share of
step time over the last few seconds.""",
    "busy": """On a GPU, <b>stream active %</b> is the share of time our CUDA stream was active
between CUDA-event marks taken at the phase boundaries. It is an <b>upper bound</b> of busy
time: a span between two marks may hide bubbles where the GPU waited for the host to launch
the next kernel. On a CPU the same figure is <b>compute busy %</b> (see below).
<p>Several busy figures can be on screen at once, each right for its own <b>window</b>, which
its caption or tooltip names:</p><ul>
<li>the headline's <i>compute busy %, last 5 s</i> (<i>stream active %</i> on CUDA): the steps
that ended in the last 5 s (fewer seconds at thousands of steps per second; the caption says);</li>
<li>the headline's <i>coarse vs fine, same periods, last 5 s</i>: only the coarse sample
periods of those 5 s that our marks fully cover, so it can differ from the figure beside it;</li>
<li>the utilization plot: one value per coarse sample, over the same periods as the runner CPU
(or NVML) samples;</li>
<li>presentation mode's sentence: the headline's, "… · last 5 s";</li>
<li>the scoreboard's <i>busy %</i>: this configuration, steady steps (warm-up and profiled
steps left out).</li></ul>""",
    "gaps": """A <b>gap</b> is the time between two consecutive active spans of our stream: it is
<b>exact idle</b> time of our stream. Each gap is tinted by its <b>cause</b>, read from what
the host was doing meanwhile: <i>input</i> (waiting on data → more DataLoader workers, pinned
memory), <i>copy</i> (host-side copy → pinned memory, non_blocking), <i>sync</i> (a
<code>.item()</code> or sync → log less often), <i>launch</i> (host busy launching kernels →
compile, AMP, bigger batches), <i>reconfigure</i> (a knob change being applied), <i>other</i>.""",
    "nvml": """<b>NVML util %</b> is what <code>nvidia-smi</code> shows: the percent of its sample
period (1/6 s to 1 s, by product) in which <b>at least one kernel of any process</b> ran on the
<b>whole device</b>. It is drawn as a step series over its real sample periods, never
interpolated. Where NVML cannot report it, it reads "n/a" with the reason, never 0. On a CPU
the coarse figure is <b>runner CPU, % of one core</b>: the CPU use of the runner's process
tree (DataLoader workers included), sampled every second; 200% is two cores busy. The
scoreboard's coarse column divides the same CPU time by all the machine's cores
(<i>CPU % of all cores</i>): 200% of one core on 4 cores is 50% there.""",
    "differ": """The two figures answer different questions. NVML counts a sample period as
busy if <i>any</i> kernel ran <i>at any moment</i> of it, on the whole device, so a GPU idle
half of the time in short gaps can read 100%. Our marks measure the time our own stream was
active, exactly, between marks. "coarse vs fine, same periods, last 5 s" compares both over
exactly the same sample periods (those of the last 5 s that our marks fully cover): a large
difference means the device looks busy to
<code>nvidia-smi</code> while your loop actually leaves it waiting.""",
    "cpu": """On a CPU device the host timestamps are the device truth: the timeline's device
lane shows <b>compute spans</b> (the end of data loading to the end of the optimizer),
<b>compute busy %</b> is their share of time, and the coarse figure is the runner's CPU %.
Same views, honest labels.""",
    "transitions": """After a knob change the first steps rebuild the loader, recompile or
autotune: they are a segment's <b>transition</b>. They are drawn on the timeline (after the
change marker) but left out of every scoreboard figure; a row still short of steady steps
(5, or 3 when a step lasts a second or more and is rated on its own) reads "measuring (2 of 3
steady steps)", never 0.""",
    "knobs": """The knob panel lists the workload's knobs; a change applies at the next step
boundary, starts a new segment (a marker on the timeline, a row in the scoreboard) and reports
its cost (rebuild or compile seconds). A knob that cannot work here is disabled with the
reason; a refused value snaps back with a message, and training goes on. The tour flips the
usual fixes one after another. Knobs are remembered when the window closes and offered, never
applied silently: Settings → Apply last session's knobs.""",
    "advisor": """The <b>Advisor</b> panel reads the newest configuration's steady steps. On top,
its <b>step-time breakdown</b> (per step: kernel — "compute" on a CPU —, memcpy, data loading,
CPU/launch, sync, other; it sums to the step time) and its <b>idle time by cause</b> ("of 31 ms
idle per step: 30 input, 1 sync"). Below, ranked <b>findings</b>: a plain sentence, the evidence
(the measured quantity and its value, and the rule that fired) and an <b>Apply</b> button that
sends the suggested knob value, as the knob panel would. A knob the runner reports unusable here
is never suggested. Once the new configuration is steady the advisor says what the change
measurably did ("num_workers 0→2: 1.7× samples/s; input wait 62%→8%"), or that it made things
worse, with a Revert button. When the device is idle less than 10% of each step it says so:
nothing is wrong. The rules, thresholds and reasons are in docs/advisor.md.""",
}


def guide_html() -> str:
    """The whole guide as rich text."""
    parts = [
        "<h1>Reading gpuwatch</h1><p>"
        + " · ".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t in SECTIONS)
        + "</p>"
    ]
    for anchor, title in SECTIONS:
        parts.append(f'<h2><a name="{anchor}"></a>{html.escape(title)}</h2>')
        if anchor == "scoreboard":
            parts.append(
                "<p>One row per <b>segment</b> (consecutive steps under one knob "
                "configuration), figures over its steady steps only:</p><ul>"
                + "".join(
                    f"<li><b>{html.escape(c.title)}</b>: {html.escape(c.tip)}</li>" for c in COLUMNS
                )
                + "</ul>"
            )
        elif anchor == "keys":
            parts.append(shortcuts_html())
        else:
            parts.append(f"<p>{_TEXT[anchor]}</p>")
        if anchor == "step":
            parts.append(f"<p>{stage_lanes_html()}</p>")
    return "\n".join(parts)


def stage_lanes_html() -> str:
    """How presentation mode groups the phases (from the timeline's own table)."""
    groups = "; ".join(
        f"<i>{html.escape(name)}</i> = {', '.join(phases)}" for name, phases in MERGED_LANES
    )
    return (
        "In presentation mode (F11) the phases share three taller lanes, each phase keeping "
        f"its colour: {groups}."
    )


def shortcuts_html() -> str:
    """The keyboard shortcuts as an HTML table for the guide."""
    rows = "".join(
        f"<tr><td><b>{html.escape(s.label)}</b>&nbsp;&nbsp;</td><td>{html.escape(s.what)}</td></tr>"
        for s in SHORTCUTS
    )
    return f"<table>{rows}</table>"


class HelpDialog(QDialog):
    """A non-modal window with the guide; ``show_section`` scrolls to an anchor."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("gpuwatch — how to read the views")
        self.resize(640, 720)
        layout = QVBoxLayout(self)
        self.browser = QTextBrowser()
        self.browser.setOpenExternalLinks(True)
        self.browser.setHtml(guide_html())
        layout.addWidget(self.browser)

    def show_section(self, anchor: str | None = None) -> None:
        self.show()
        self.raise_()
        self.activateWindow()
        if anchor:
            self.browser.scrollToAnchor(anchor)


def section_under_cursor() -> str | None:
    """The help section of the widget under the mouse (e.g. a headline figure), else of the
    focused one (e.g. a figure's "?" reached with Tab), if any."""
    for start in (QApplication.widgetAt(QCursor.pos()), QApplication.focusWidget()):
        widget = start
        while widget is not None:
            section = widget.property(HELP_SECTION_PROPERTY)
            if isinstance(section, str) and section:
                return section
            widget = widget.parentWidget()
    return None


def open_help(window: QWidget, section: str | None = None) -> HelpDialog:
    """Show the window's guide (one per window, a child of it) at ``section``."""
    dialog = window.findChild(HelpDialog)
    if dialog is None:
        dialog = HelpDialog(window)
    dialog.show_section(section)
    return dialog
