"""The plots (timeline over utilization, with their caption and change markers) and one
frame of them and of the headline figures, drawn from the session's stores.

The window calls ``plots`` every frame and ``headline`` a few times a second. Dense windows
are drawn from ``bins`` (lane occupancy per fine time bin, kept up to date as steps arrive),
so a frame costs the new steps and the visible pixels, not every visible step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QBoxLayout, QLabel, QSplitter

from gpuwatch.core.figures.analysis import active_spans, busy_percent_over, headline
from gpuwatch.core.figures.gap_causes import caused_idle, reconfiguring_steps
from gpuwatch.core.figures.sample_busy import SampleBusy
from gpuwatch.core.figures.timeline_bins import TimelineBins
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.qt import palette
from gpuwatch.qt.change_markers import ChangeMarkers
from gpuwatch.qt.gap_tint import legend as gap_legend
from gpuwatch.qt.headline_bar import HeadlineBar, HeadlineFigures
from gpuwatch.qt.run_session import RunSession
from gpuwatch.qt.spans import is_dense, weighted_mean
from gpuwatch.qt.timeline_view import TimelineView, settle_before_paint
from gpuwatch.qt.utilization_view import UtilizationView, choose_coarse

#: The headline figures cover this much of the recent past...
HEADLINE_WINDOW_S = 5.0
#: The headline's figures come from at most this many of the newest steps.
HEADLINE_MAX_STEPS = 10_000


class PlotsRedraw:
    """Timeline, utilization, their caption and the headline bar of one window."""

    def __init__(
        self,
        session: RunSession,
        layout: QBoxLayout,
        headline_bar: HeadlineBar,
        presenting: Callable[[], bool],
    ) -> None:
        """Adds the caption and the plots' splitter to ``layout``. ``presenting()`` says
        whether the window is in presentation mode (a shorter caption, so it fits 1280 px)."""
        self.session = session
        #: The recording, in replay mode: nothing more will come once it is played to its end.
        self.replay = session if isinstance(session, ReplaySession) else None
        self.headline_bar = headline_bar
        self.presenting = presenting
        self.timeline_caption = QLabel()
        self.timeline_caption.setWordWrap(True)  # a long legend wraps, never widens the window
        layout.addWidget(self.timeline_caption)
        self.timeline = TimelineView()
        self.utilization = UtilizationView()
        self.utilization.plot.setXLink(self.timeline)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.timeline)
        self.splitter.addWidget(self.utilization)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setChildrenCollapsible(False)
        layout.addWidget(self.splitter, 1)
        self.timeline_markers = ChangeMarkers(self.timeline, labels=True)
        self.utilization_markers = ChangeMarkers(self.utilization.plot, labels=False)
        #: Lane occupancy per fine time bin and busy % per coarse sample, kept up to date
        #: incrementally (``plots``).
        self.bins = TimelineBins()
        self.sample_busy = SampleBusy()
        #: What the last frame showed; an unchanged key after the run skips the frame.
        self.last_key: tuple | None = None

    def plots(self, live: bool, lo_ns: int, hi_ns: int) -> None:
        """Timeline and utilization for ``[lo_ns, hi_ns]``.

        Dense windows are drawn from ``self.bins`` (lane occupancy kept per fine time bin
        as steps arrive), so a frame costs the new steps and the visible pixels, not every
        visible step; a sparse window draws its few steps span by span.
        """
        session = self.session
        statuses = session.coarse.statuses()
        choice = choose_coarse(statuses, session.device_kind)
        coarse = session.coarse.snapshot(choice.metric, since_ns=lo_ns)
        if len(coarse):
            keep = coarse.t0 <= hi_ns
            coarse = type(coarse)(coarse.t0[keep], coarse.t1[keep], coarse.value[keep])
        width_px = self.timeline.width_px()
        key = (
            session.t0_ns,
            session.steps.count,
            session.device_kind,
            choice,
            len(coarse),
            int(coarse.t1[-1]) if len(coarse) else 0,
            lo_ns,
            hi_ns,
            width_px,
        )
        if not live and key == self.last_key:
            return  # nothing new to draw: an idle window costs (almost) nothing
        self.last_key = key
        changes = session.config_changes()
        # Nothing more will come: the run is over (a replay only once played to its end).
        final = not live and (self.replay is None or self.replay.at_end)
        self.bins.update(
            session.steps,
            changes,
            session.t0_ns,
            lo_ns=lo_ns,
            hi_ns=hi_ns,
            px_ns=(hi_ns - lo_ns) / width_px,
            final=final,
        )
        cols = self.bins.columns(lo_ns, hi_ns, int(np.ceil(width_px)))
        self.timeline.set_device_kind(session.device_kind)
        if is_dense(cols.n_steps, width_px):
            self.timeline.show_columns(cols, session.t0_ns, lo_ns, hi_ns)
        else:
            steps = session.steps.snapshot(since_ns=lo_ns)
            self.timeline.show_steps(
                steps, active_spans(steps), session.t0_ns, lo_ns, hi_ns, changes=changes
            )
            self.timeline.show_gap_causes(
                caused_idle(steps, None, reconfiguring_steps(steps, changes)),
                session.t0_ns,
                lo_ns,
                hi_ns,
            )
        busy = self.sample_busy.over(
            session.steps, coarse, self.bins.final_before_ns, key=(session.t0_ns, id(session.steps))
        )
        self.utilization.show_data(choice, coarse, busy, session.t0_ns)
        self.caption(session.device_kind, self.timeline.dense)
        for plot in (self.timeline, self.utilization.plot):
            settle_before_paint(plot)  # one paint per frame, not one per item that moved

    def headline(self, now_ns: int) -> None:
        session = self.session
        window_ns = int(HEADLINE_WINDOW_S * 1e9)
        lo = now_ns - window_ns
        # At thousands of steps/s the window shrinks to the newest HEADLINE_MAX_STEPS steps
        # (the tooltips say over how long): plenty for a median, and a frame stays cheap.
        newest = session.steps.snapshot(last=HEADLINE_MAX_STEPS)
        if len(newest) == HEADLINE_MAX_STEPS and int(newest.host[0, 0]) > lo:
            lo = int(newest.host[0, 0])
            window_ns = now_ns - lo
        choice = choose_coarse(session.coarse.statuses(), session.device_kind)
        coarse = session.coarse.snapshot(choice.metric, since_ns=lo)
        since = min(lo, int(coarse.t0[0])) if len(coarse) else lo
        steps = session.steps.snapshot(since_ns=since)
        h = headline(steps, now_ns, window_ns)
        coarse_pct = coarse_same = busy_same = None
        if len(coarse):
            coarse_pct = weighted_mean(coarse.t0, coarse.t1, coarse.value, lo, now_ns)
            # The difference compares like with like: only periods our marks fully cover.
            busy = busy_percent_over(active_spans(steps), coarse.t0, coarse.t1)
            known = np.isfinite(busy)
            if known.any():
                w0, w1 = coarse.t0[known], coarse.t1[known]
                busy_same = weighted_mean(w0, w1, busy[known], lo, now_ns)
                coarse_same = weighted_mean(w0, w1, coarse.value[known], lo, now_ns)
        shares = sorted((h.phase_shares or {}).items(), key=lambda kv: -kv[1])
        self.headline_bar.show_figures(
            HeadlineFigures(
                window_s=round(window_ns / 1e9, 1),
                samples_per_s=h.samples_per_s,
                step_ms_p50=h.step_ms_p50,
                step_ms_p95=h.step_ms_p95,
                busy_pct=None if h.busy_share is None else 100.0 * h.busy_share,
                coarse_pct=coarse_pct,
                coarse_short=choice.short,
                coarse_same_pct=coarse_same,
                busy_same_pct=busy_same,
                top_phases=tuple((n, s) for n, s in shares[:3] if s >= 0.005),
                device_kind=session.device_kind,
            )
        )

    def caption(self, kind: str | None, dense: bool) -> None:
        """The timeline's caption: what its lanes are, and the colours of the idle causes."""
        device = (
            "CUDA stream active (upper bound)"
            if kind == "cuda"
            else "compute spans (CPU)"
            if kind == "cpu"
            else "device spans"
        )
        stage = self.presenting()  # on stage: the legend only, so it fits 1280 px
        text = (
            "<b>Timeline</b> — "
            + ("" if stage else "host phases from perf_counter marks; device lane: ")
            + palette.swatch(palette.DEVICE_ACTIVE, device)
            + "&nbsp;&nbsp;"
            + gap_legend(self.timeline.causes_shown)
        )
        if dense and not stage:
            text += "&nbsp;&nbsp;<i>(dense: bar height = share of each pixel column)</i>"
        if self.timeline_caption.text() != text:
            self.timeline_caption.setText(text)

    def now_ns(self, live: bool) -> int:
        """The right edge of "now" outside a replay: the clock while running, else where the
        data ends, so after a run (or for data written straight into the stores) the view and
        the headline stay on the last data instead of scrolling into emptiness."""
        if live:
            return time.perf_counter_ns()
        last = self.session.steps.snapshot(last=1)
        ends = [int(last.host[-1, -1])] if len(last) else []
        coarse = self.session.coarse
        for name in coarse.names():
            view = coarse.snapshot(name)
            if len(view):
                ends.append(int(view.t1[-1]))
        return max(ends) if ends else self.session.t0_ns

    def visible_window(self, now_ns: int, follow: bool, window_s: float) -> tuple[float, float]:
        """The x range to draw (seconds since the origin): the last ``window_s`` up to
        ``now_ns`` while following, else wherever the user panned or zoomed."""
        vb = self.timeline.getPlotItem().getViewBox()
        if not follow:
            lo_s, hi_s = vb.viewRange()[0]
            return lo_s, hi_s
        hi_s = max((now_ns - self.session.t0_ns) / 1e9, window_s)
        vb.setXRange(hi_s - window_s, hi_s, padding=0)
        return hi_s - window_s, hi_s
