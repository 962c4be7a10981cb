"""The plots (timeline over utilization, with their caption and change markers) and one
frame of them and of the headline figures, drawn from the session's stores.

The window calls ``plots`` on every redraw tick and ``headline`` a few times a second;
``plots`` draws only when what it shows changed, and not more often than can be seen
(``frame.frame_due``): a view that only scrolls is moved, not redrawn. Dense windows are drawn
from ``bins`` (lane occupancy per fine time bin, kept up to date as steps arrive), so a frame
costs the new steps and the visible pixels, not every visible step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QBoxLayout, QLabel, QSizePolicy, QSplitter, QWidget

from gpuwatch.core.figures.frame import (
    HOLD_MAX_NEW_STEPS,
    NEW_STEPS_FRAME_S,
    NEW_STEPS_HOLD_S,
    SCROLL_FRAME_S,
    FramePresenter,
    FrameRevision,
    RunData,
    earliest_hold_end_ns,
    frame_due,
    hold_new_steps_s,
)
from gpuwatch.core.figures.timeline_bins import TimelineBins
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.qt import palette
from gpuwatch.qt.change_markers import ChangeMarkers
from gpuwatch.qt.gap_tint import legend as gap_legend
from gpuwatch.qt.headline_bar import HeadlineBar
from gpuwatch.qt.run_session import RunSession
from gpuwatch.qt.timeline_view import TimelineView, settle_before_paint
from gpuwatch.qt.utilization_view import UtilizationView

#: The steps whose shortest duration says how soon the next one can end (the next hold).
HOLD_RECENT_STEPS = 8
#: While following "now", the view moves on in this many strides per width (a 30 s view: a
#: second at a time), standing still between them.
FOLLOW_STRIDES = 30


class SteadyHeight(QWidget):
    """Holds one widget (the headline bar, the timeline's caption) at the height it needs,
    without a layout of its own.

    A label whose text changes asks for a new layout, and Qt passes that request up through
    every layout to the window (``QLayout::activate`` ends in ``updateGeometry``): a new
    number or legend re-laid-out the whole window a few times a second, repainting its dock
    separators and, when a wrapped text took a line more or less, moving the plots below.
    A parent without a layout ends that climb: this box lays the window out again only when
    the widget's height changes, and hides and shows with it. ``hold_tallest``: it never
    shrinks while shown either (figures that take a line more now and then do not move the
    plots up and down).
    """

    def __init__(self, child: QWidget, *, hold_tallest: bool = True) -> None:
        super().__init__()
        self.child = child
        self.hold_tallest = hold_tallest
        child.setParent(self)
        child.installEventFilter(self)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self._held = 0
        self._fit()

    def sizeHint(self) -> QSize:
        return QSize(self.child.sizeHint().width(), self._held)

    def _fit(self) -> None:
        child = self.child
        width = max(self.width(), child.minimumSizeHint().width())
        hinted = max(child.sizeHint().height(), child.minimumSizeHint().height())
        if not child.hasHeightForWidth():
            needed = hinted
        elif self.hold_tallest:
            needed = max(hinted, child.heightForWidth(width))
        else:  # what it needs at this width (a wrapped label's hint is for another width)
            needed = child.heightForWidth(width)
        # Never narrower than the widget can be; it grows only: a minimum that followed each
        # new number's width would lay the window out again as often as the numbers change.
        if child.minimumSizeHint().width() > self.minimumWidth():
            self.setMinimumWidth(child.minimumSizeHint().width())
        if needed > self._held or (needed != self._held and not self.hold_tallest):
            self._held = needed
            self.setFixedHeight(needed)

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # the child asks for room: only here
            self._fit()
            return True
        return super().event(event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        self.child.setGeometry(self.rect())
        self._fit()
        super().resizeEvent(event)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.child:
            kind = event.type()
            if kind == QEvent.Type.HideToParent:
                self.hide()
            elif kind == QEvent.Type.ShowToParent:
                self.show()
        return False


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
        #: The caption's box: a new legend (idle causes come and go as the view moves on)
        #: repaints the caption, never lays the window out again.
        self.caption_box = SteadyHeight(self.timeline_caption, hold_tallest=False)
        layout.addWidget(self.caption_box)
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
        #: The plots' and headline's figures (it keeps the incremental bins and busy cache).
        self.presenter = FramePresenter()
        #: What the last frame was drawn from; unchanged after the run, the frame is skipped.
        self.last_key: FrameRevision | None = None
        #: When the last frame was drawn (``time.monotonic``) and how many have been.
        self.drawn_at = -math.inf
        self.frames_drawn = 0
        #: Seconds until the next frame can be due, when that is known: new steps held for
        #: more (``NEW_STEPS_HOLD_S``), or the pacing after a frame (``NEW_STEPS_FRAME_S``).
        #: The window ticks then, not on its regular ticks before it, which would draw nothing.
        self.due_in_s: float | None = None
        #: The clock the runner's marks are on (this machine's ``perf_counter_ns``).
        self.clock_ns: Callable[[], int] = time.perf_counter_ns
        #: While a live run is followed, when (``clock_ns``) the steps after the last frame
        #: can be due at the earliest (``_next_hold_ends_ns``); None: no such wait is known.
        self._next_hold_ns: int | None = None
        #: The x range and width the plots' items last settled for (``settle_before_paint``).
        self._settled: tuple[float, float, float] | None = None
        #: What the caption was written from: unchanged, its rich text is not rebuilt.
        self._caption_key: tuple[object, ...] | None = None

    @property
    def bins(self) -> TimelineBins:
        """Lane occupancy per fine time bin, kept up to date as steps arrive."""
        return self.presenter.bins

    def plots(
        self,
        live: bool,
        lo_s: float,
        hi_s: float,
        *,
        follow: bool,
        hold_s: float = NEW_STEPS_HOLD_S,
    ) -> bool:
        """Timeline and utilization for ``[lo_s, hi_s]`` (seconds since the origin), drawn
        from the presenter's frame if anything they show changed and the frame is due; the
        view is moved to that range when ``follow``; while following a live run, new steps
        wait for more until the oldest of them ended ``hold_s`` ago (``due_in_s`` says when, and
        when no frame can be due before the pacing allows one).
        Returns whether a frame was drawn.

        Dense windows come from the presenter's bins (lane occupancy kept per fine time bin
        as steps arrive), so a frame costs the new steps and the visible pixels, not every
        visible step; a sparse window draws its few steps span by span. A sparse view that
        only scrolled on with "now" is moved: its spans are in data coordinates already.
        """
        now = time.monotonic()
        since_drawn = now - self.drawn_at
        self.due_in_s = None
        # Scrolling with "now" is paced; a view the user moves is followed at once.
        scroll_gap = SCROLL_FRAME_S if live and follow else NEW_STEPS_FRAME_S
        drawn = self.last_key
        if drawn is not None and since_drawn < NEW_STEPS_FRAME_S:
            self.due_in_s = self.pacing_left_s(now)
            return False  # no frame can be due before then: not even its revision is read
        if (
            drawn is not None
            and since_drawn < scroll_gap
            and self.session.steps.count == drawn.steps_count
        ):
            return False  # only new steps could be drawn yet, and none came
        if live and follow and drawn is not None:
            hold = self._hold_s(drawn, hold_s)
            if hold > 0:
                self.due_in_s = hold
                return False  # more steps are about to come: they share the frame
        t0 = self.session.t0_ns
        lo_ns, hi_ns = t0 + int(lo_s * 1e9), t0 + int(hi_s * 1e9)
        run = RunData.of(self.session)
        width = self.timeline.width_px()
        revised = self.presenter.revision(run, lo_ns, hi_ns, width)
        revision = revised[0]
        if not frame_due(revision, drawn, since_drawn, scroll_gap):
            return False  # nothing new, or not yet worth a frame: an idle window costs ~nothing
        view = self.timeline.getPlotItem().getViewBox()
        if follow and view.state["viewRange"][0] != [lo_s, hi_s]:  # between strides: still
            view.setXRange(lo_s, hi_s, padding=0)
        scrolled_only = (
            live
            and follow
            and drawn is not None
            and not self.timeline.dense
            and revision.same_data(drawn)
            and lo_ns >= drawn.lo_ns
        )
        if scrolled_only:
            self.timeline.shade_lanes(t0, lo_ns, hi_ns)
        else:
            # Nothing more will come: the run is over (a replay only once played to its end).
            final = not live and (self.replay is None or self.replay.at_end)
            frame = self.presenter.plots(run, lo_ns, hi_ns, width, final=final, revised=revised)
            if frame is None:
                return False
            self.timeline.show_frame(frame.timeline)
            self.utilization.show_frame(frame.utilization)
            self.caption(frame.timeline.device_kind, self.timeline.dense)
        self.last_key, self.drawn_at = revision, now
        self.frames_drawn += 1
        self._next_hold_ns = (
            self._next_hold_ends_ns(revision, drawn, hold_s) if live and follow else None
        )
        placed = (lo_s, hi_s, width)
        if placed != self._settled:  # a view standing still between strides has nothing to settle
            self._settled = placed
            for plot in (self.timeline, self.utilization.plot):
                settle_before_paint(plot)  # one paint per frame, not one per item that moved
        return True

    def pacing_left_s(self, now: float) -> float:
        """Seconds from ``now`` (``time.monotonic``) until the pacing allows the next frame
        (``NEW_STEPS_FRAME_S`` after the last; 0 or less: it does)."""
        return NEW_STEPS_FRAME_S - (now - self.drawn_at)

    def next_frame_in_s(self, now: float) -> float:
        """Seconds from ``now`` (``time.monotonic``) until the next frame can be due after the
        last one: the pacing and, while a live run is followed, the hold of the steps still
        to come (a scroll or a new coarse sample waits as long, never more than the hold)."""
        left = self.pacing_left_s(now)
        if self._next_hold_ns is not None:
            left = max(left, (self._next_hold_ns - self.clock_ns()) / 1e9)
        return left

    def _next_hold_ends_ns(
        self, revision: FrameRevision, before: FrameRevision | None, hold_s: float
    ) -> int | None:
        """When the steps after the frame of ``revision`` can be drawn at the earliest
        (``earliest_hold_end_ns`` of the newest steps it drew): the window ticks then, not at
        the pacing's end only to find them held."""
        if revision.steps_count == 0:
            return None
        steps = self.session.steps
        newer = steps.count - revision.steps_count  # stored since the frame's revision
        view = steps.snapshot(last=newer + HOLD_RECENT_STEPS)
        drawn = view.rows(
            slice(max(len(view) - newer - HOLD_RECENT_STEPS, 0), max(len(view) - newer, 0))
        )
        if not len(drawn):
            return None
        return earliest_hold_end_ns(
            int(drawn.host[-1, -1]),
            int((drawn.host[:, -1] - drawn.host[:, 0]).min()),
            self.clock_ns(),
            hold_s,
            drawn_steps=revision.steps_count - (before.steps_count if before is not None else 0),
        )

    def _hold_s(self, drawn: FrameRevision, hold_s: float) -> float:
        """How long the steps that arrived since ``drawn`` wait for more (0: none arrived)."""
        steps = self.session.steps
        new = steps.count - drawn.steps_count
        if new <= 0 or drawn.t0_ns != self.session.t0_ns:
            return 0.0
        # No more rows than the rule can use: past its cap it does not wait at all.
        oldest = steps.snapshot(last=min(new, HOLD_MAX_NEW_STEPS + 1))
        if not len(oldest):
            return 0.0
        end = int(oldest.host[0, -1])
        return hold_new_steps_s(end, self.clock_ns(), hold_s, new_steps=new)

    def headline(self, now_ns: int) -> None:
        """The headline figures over the recent past up to ``now_ns``."""
        self.headline_bar.show_figures(self.presenter.headline(RunData.of(self.session), now_ns))

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
        key = (device, stage, dense, self.timeline.causes_shown, palette.current_theme())
        if key == self._caption_key:
            return  # the same words in the same colours: no rich text to rebuild
        self._caption_key = key
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
        """The x range to draw (seconds since the origin): while following, the last
        ``window_s`` up to ``now_ns`` with the right edge moved on in whole strides of
        ``FOLLOW_STRIDES`` per view width (whole pixels); else wherever the user panned or
        zoomed.

        Between strides the view stands still, so a frame repaints only what its new data
        changed (the newest steps at the right end) instead of every pixel of both plots,
        the time axis and every item's place; the newest data sits in a margin of at most a
        stride at the right.
        """
        if not follow:
            lo_s, hi_s = self.timeline.getPlotItem().getViewBox().viewRange()[0]
            return lo_s, hi_s
        width_px = self.timeline.width_px()
        stride_s = max(round(width_px / FOLLOW_STRIDES), 1) * window_s / width_px
        # A run younger than the view is shown from its start.
        hi_s = max(math.ceil((now_ns - self.session.t0_ns) / 1e9 / stride_s) * stride_s, window_s)
        return hi_s - window_s, hi_s
