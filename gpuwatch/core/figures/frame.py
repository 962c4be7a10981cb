"""What one frame of the window shows, computed without Qt: the frame presenter.

Given the run's stores, the visible range ``[lo_ns, hi_ns]``, the plot's width in pixels and
"now", ``FramePresenter`` returns typed frame data: the timeline's lanes (per pixel column
when the view is dense, span by span when it is sparse), the utilization series (the coarse
samples and our busy % over each of their periods), and the headline figures (the
coarse-vs-fine comparison over the same periods). The views only draw what it returns; the
headless summary and ``bench/render.py`` read their figures from the same functions, so the
window, the bench and the headless summary cannot disagree.

It owns the incremental state behind a cheap frame (``TimelineBins``, ``SampleBusy``; see
docs/design.md, "Drawing a fast run"), and says with a ``FrameRevision`` whether anything
its plots are drawn from changed since a given frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from gpuwatch.core.figures.analysis import (
    Spans,
    active_spans,
    busy_percent_over,
    gaps,
    headline,
    phase_spans,
)
from gpuwatch.core.figures.gap_causes import (
    CAUSES,
    CausedIdle,
    caused_idle,
    reconfiguring_steps,
)
from gpuwatch.core.figures.sample_busy import SampleBusy
from gpuwatch.core.figures.timeline_bins import (
    Columns,
    TimelineBins,
    columns_of,
    steps_final_before_ns,
)
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.model.metrics import NVML_GPU_UTIL, PROC_CPU
from gpuwatch.core.model.store import MetricStatus, SeriesStore, SeriesView, StepStore, StepsView

#: Above this many spans per pixel the timeline draws per-column occupancy, not spans.
DENSE_SPANS_PER_PIXEL = 0.5
#: The headline figures cover this much of the recent past...
HEADLINE_WINDOW_S = 5.0
#: ...from at most this many of the newest steps (at thousands of steps/s the window
#: shrinks to them: plenty for a median, and a frame stays cheap; the figures say how long).
HEADLINE_MAX_STEPS = 10_000
#: A frame that shows new steps (or knob changes) is drawn at most this often (seconds): two
#: ~33 ms redraw ticks, so a step reaches the screen well inside the 150 ms latency budget...
NEW_STEPS_FRAME_S = 0.06
#: ...and one that only scrolls, or shows a new coarse sample, at most this often. A 30 s
#: view scrolls ~50 px a second: redrawing it at 30 Hz costs the run CPU and shows nothing.
SCROLL_FRAME_S = 0.2
#: While a live run is followed, new steps wait until the oldest of them ended this long ago
#: (seconds), so that steps ending close together share one frame: a run's batches (one
#: every ~50 ms) are drawn two to a frame. The 150 ms step end → drawn budget keeps the rest
#: for the frame itself and the event loop.
NEW_STEPS_HOLD_S = 0.1
#: A frame whose own work (its redraw tick, without the paint) takes up to this long (ms)
#: waits the whole hold: with its paint and the event loop, a step is still drawn inside the
#: 150 ms budget. Dearer frames (dense views at thousands of steps a second,
#: a loaded machine) wait less, and from ``HOLD_NONE_TICK_MS`` on not at all: there the frame
#: itself uses the budget, and a frame spared saves less than a dear one adds to the wait.
HOLD_FULL_TICK_MS = 12.0
HOLD_NONE_TICK_MS = 20.0
#: More new steps than this are drawn without waiting: at thousands of steps a second a
#: frame's cost grows with the steps it brings in, so sparing a frame saves little, and the
#: wait only adds to an already dear frame's latency (docs/performance.md §7.4).
HOLD_MAX_NEW_STEPS = 250


# ---- Inputs -------------------------------------------------------------------------------


class RunSource(Protocol):
    """What a frame is computed from: a live ``Session`` or a ``ReplaySession`` has it."""

    @property
    def steps(self) -> StepStore: ...

    @property
    def coarse(self) -> SeriesStore: ...

    @property
    def t0_ns(self) -> int: ...

    @property
    def device_kind(self) -> str | None: ...

    def config_changes(self) -> Sequence[ConfigChange]: ...


@dataclass(frozen=True)
class RunData:
    """The run's stores (shared, read by snapshot), its knob changes, origin and device."""

    steps: StepStore
    coarse: SeriesStore
    changes: Sequence[ConfigChange]
    t0_ns: int
    device_kind: str | None

    @classmethod
    def of(cls, source: RunSource) -> RunData:
        return cls(
            source.steps,
            source.coarse,
            tuple(source.config_changes()),
            source.t0_ns,
            source.device_kind,
        )


# ---- Small figures the views share --------------------------------------------------------


def clip_to_window(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> Spans:
    """Spans overlapping ``[lo, hi]`` (not trimmed: the view clips the drawing)."""
    keep = (e >= lo) & (s <= hi)
    return s[keep], e[keep]


def is_dense(n_spans: int, width_px: float) -> bool:
    """Too many spans to draw one by one: about one per pixel or more."""
    return n_spans > DENSE_SPANS_PER_PIXEL * max(width_px, 1.0)


def weighted_mean(
    w0: np.ndarray, w1: np.ndarray, value: np.ndarray, lo: float, hi: float
) -> float | None:
    """Time-weighted mean of per-window values over the part of each window in [lo, hi]."""
    a, b = np.maximum(w0, lo), np.minimum(w1, hi)
    weight = np.clip(b - a, 0, None).astype(np.float64)
    ok = np.isfinite(value) & (weight > 0)
    if not ok.any():
        return None
    return float(np.average(value[ok], weights=weight[ok]))


def present_causes(spans: dict[str, Spans]) -> tuple[str, ...]:
    """Causes with something drawn, most visible time first (the legend's order)."""
    totals = {c: float(np.sum(e - s)) for c, (s, e) in spans.items() if len(s)}
    return tuple(sorted(totals, key=lambda c: -totals[c]))


@dataclass(frozen=True)
class CoarseChoice:
    """Which coarse metric to show and how to name it and the busy % beside it."""

    metric: str
    coarse_label: str
    busy_label: str
    short: str  # in headline sentences: "NVML", "runner CPU"
    notes: tuple[str, ...]  # honest "n/a — reason" lines


def choose_coarse(statuses: dict[str, MetricStatus], device_kind: str | None) -> CoarseChoice:
    """NVML on a CUDA device when it is readable; otherwise the runner's CPU %."""
    nvml = statuses.get(NVML_GPU_UTIL)
    nvml_ok = nvml is not None and nvml.available
    notes: list[str] = []
    if nvml is not None and nvml_ok and device_kind in ("cuda", None):
        period = f"period {nvml.period_s * 1e3:.0f} ms" if nvml.period_s else "period unknown"
        return CoarseChoice(
            NVML_GPU_UTIL,
            f"NVML GPU util (whole device, {period})",
            "busy % from our marks (stream active, upper bound)",
            "NVML",
            (),
        )
    if nvml is None and device_kind == "cpu":
        notes.append("NVML: n/a — the runner trains on the CPU")
    elif nvml is None:
        notes.append("NVML: n/a — no reading yet (it starts once the runner reports a CUDA device)")
    elif not nvml.available:
        notes.append(f"NVML: n/a — {nvml.reason or 'unsupported here'}")
    else:
        notes.append("NVML: not shown — the runner trains on the CPU")
    cpu = statuses.get(PROC_CPU)
    period = f"period {cpu.period_s:g} s" if cpu is not None and cpu.period_s else "1 s periods"
    if cpu is not None and not cpu.available:
        notes.append(f"runner CPU: n/a — {cpu.reason or 'unsupported here'}")
    busy = (
        "busy % from our marks (stream active, upper bound)"
        if device_kind == "cuda"
        else "compute busy % (host spans)"
    )
    return CoarseChoice(
        PROC_CPU,
        f"runner CPU % (process tree, % of one core, {period})",
        busy,
        "runner CPU",
        tuple(notes),
    )


# ---- Frame data ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DenseLanes:
    """A dense view per pixel column: each row's share (``columns``), which columns of the
    device lane are idle (not fully active, between its first and last activity), and the
    cause with most idle time in each column (an index into ``CAUSES``; -1: none known)."""

    columns: Columns
    device_idle: np.ndarray  # bool per column
    idle_cause: np.ndarray  # int per column


@dataclass(frozen=True)
class SparseLanes:
    """A sparse view span by span, every span overlapping the view (not trimmed).

    ``idle`` holds the device's idle spans per cause; ``None`` leaves the drawn tint as it is.
    """

    phases: dict[str, Spans]
    active: Spans
    gaps: Spans
    idle: dict[str, Spans] | None = None


@dataclass(frozen=True)
class TimelineFrame:
    """The timeline over ``[lo_ns, hi_ns]``: exactly one of ``dense`` and ``sparse``."""

    t0_ns: int
    lo_ns: int
    hi_ns: int
    width_px: float
    device_kind: str | None
    dense: DenseLanes | None = None
    sparse: SparseLanes | None = None
    #: Idle causes drawn, most visible time first (the legend); None: unchanged.
    causes_shown: tuple[str, ...] | None = None

    @property
    def px_ns(self) -> float:
        """Nanoseconds per pixel column (a sparse span is drawn at least this wide)."""
        return (self.hi_ns - self.lo_ns) / self.width_px


@dataclass(frozen=True)
class UtilizationFrame:
    """The coarse samples in view and our busy % over each one's period (NaN: unknown)."""

    choice: CoarseChoice
    coarse: SeriesView
    busy: np.ndarray
    t0_ns: int


@dataclass(frozen=True)
class FrameRevision:
    """Everything the plots are drawn from: equal revisions draw the same frame (after the
    run's end, when no device marks arrive late). Cheap to compare, hashable."""

    t0_ns: int
    steps_count: int
    n_changes: int
    device_kind: str | None
    choice: CoarseChoice
    n_coarse: int
    last_coarse_t1: int
    lo_ns: int
    hi_ns: int
    width_px: float

    def same_data(self, other: FrameRevision) -> bool:
        """Drawn from the same data at the same width: only the visible range differs (the
        coarse count is left out: samples leave the view as it scrolls)."""
        return replace(self, lo_ns=0, hi_ns=0, n_coarse=0) == replace(
            other, lo_ns=0, hi_ns=0, n_coarse=0
        )

    def shows_new_steps(self, other: FrameRevision) -> bool:
        """Steps or knob changes arrived since ``other`` (or the run itself changed)."""
        return (self.t0_ns, self.steps_count, self.n_changes) != (
            other.t0_ns,
            other.steps_count,
            other.n_changes,
        )


def hold_for_tick_s(tick_ms: float) -> float:
    """How long new steps may wait for more when a frame's own work takes ``tick_ms``:
    ``NEW_STEPS_HOLD_S`` up to ``HOLD_FULL_TICK_MS``, down to none at ``HOLD_NONE_TICK_MS``."""
    share = (HOLD_NONE_TICK_MS - tick_ms) / (HOLD_NONE_TICK_MS - HOLD_FULL_TICK_MS)
    return NEW_STEPS_HOLD_S * min(1.0, max(0.0, share))


def hold_new_steps_s(
    oldest_new_end_ns: int, now_ns: int, hold_s: float = NEW_STEPS_HOLD_S, *, new_steps: int = 1
) -> float:
    """How long ``new_steps`` new steps should still wait for more before a frame draws them,
    the oldest of them having ended at ``oldest_new_end_ns`` (the runner's clock, which on one
    machine is the window's ``perf_counter_ns``): the rest of ``hold_s``, or 0 once it has
    passed, when the clocks disagree (an end still in the future) or when more than
    ``HOLD_MAX_NEW_STEPS`` steps are waiting."""
    age_s = (now_ns - oldest_new_end_ns) / 1e9
    if age_s < 0 or age_s >= hold_s or new_steps > HOLD_MAX_NEW_STEPS:
        return 0.0
    return hold_s - age_s


def earliest_hold_end_ns(
    newest_end_ns: int,
    shortest_ns: int,
    now_ns: int,
    hold_s: float = NEW_STEPS_HOLD_S,
    *,
    drawn_steps: int = 1,
) -> int | None:
    """When steps arriving after a frame can be drawn at the earliest under the hold
    (``hold_new_steps_s``): the next step ends at least ``shortest_ns`` (the shortest of the
    last steps) after the newest one drawn, which ended at ``newest_end_ns``, and waits
    ``hold_s`` from its end; a step shorter than all of those is drawn late by the difference
    at most. None where new steps would not wait: the frame drew more than
    ``HOLD_MAX_NEW_STEPS`` (``drawn_steps``), no hold, or an end in the future (another clock).
    """
    if drawn_steps > HOLD_MAX_NEW_STEPS or hold_s <= 0 or newest_end_ns > now_ns:
        return None
    return newest_end_ns + max(shortest_ns, 0) + int(hold_s * 1e9)


def frame_due(
    revision: FrameRevision,
    drawn: FrameRevision | None,
    since_drawn_s: float,
    scroll_gap_s: float = SCROLL_FRAME_S,
) -> bool:
    """Whether a frame of ``revision`` is worth drawing ``since_drawn_s`` after the frame of
    ``drawn`` (None: nothing drawn yet).

    Only what changed is drawn, and not more often than it can be seen: new steps at most
    every ``NEW_STEPS_FRAME_S``, any other change (a scroll, a coarse sample) every
    ``scroll_gap_s`` (a view the user moves is followed faster than one scrolling with "now").
    """
    if drawn is None:
        return True
    if revision == drawn:
        return False
    gap = NEW_STEPS_FRAME_S if revision.shows_new_steps(drawn) else scroll_gap_s
    return since_drawn_s >= gap


@dataclass(frozen=True)
class PlotFrame:
    """The timeline and utilization plots of one frame."""

    revision: FrameRevision
    timeline: TimelineFrame
    utilization: UtilizationFrame


@dataclass(frozen=True)
class HeadlineFigures:
    """What the headline shows; ``None`` means unknown."""

    window_s: float
    samples_per_s: float | None = None
    step_ms_p50: float | None = None
    step_ms_p95: float | None = None
    busy_pct: float | None = None
    coarse_pct: float | None = None
    coarse_short: str = "NVML"  # "NVML" | "runner CPU"
    coarse_same_pct: float | None = None  # coarse % over the periods our marks cover...
    busy_same_pct: float | None = None  # ...and our busy % over exactly those periods
    top_phases: tuple[tuple[str, float], ...] = ()
    device_kind: str | None = None
    #: Every phase's share of step time, largest first (``top_phases`` are its first few).
    phase_shares: tuple[tuple[str, float], ...] = ()


# ---- Building frames ----------------------------------------------------------------------


def dense_lanes(
    cols: Columns, final_before_ns: float = np.inf
) -> tuple[DenseLanes, tuple[str, ...]]:
    """Columns with the device lane's idle columns and their main cause, and the causes
    shown (most columns' time first), counted in the columns that end before
    ``final_before_ns``: the newest columns change as device marks arrive, and a legend that
    followed their main cause changed a few times a second."""
    n = len(cols.c0)
    active = cols["active"]
    idle = np.zeros(n, bool)
    where = np.flatnonzero(active > 0)
    if len(where):
        idle[where[0] : where[-1] + 1] = active[where[0] : where[-1] + 1] < 1.0
    shares = np.vstack([cols[f"idle:{c}"] for c in CAUSES])
    top = np.argmax(shares, axis=0)
    caused = shares.sum(axis=0) > 0
    # The legend's order: the time of the columns each cause tops (one pass, not a run per cause).
    counted = caused & (cols.c1 <= final_before_ns)
    totals = np.bincount(top[counted], (cols.c1 - cols.c0)[counted], len(CAUSES))
    shown = tuple(CAUSES[i] for i in np.argsort(-totals, kind="stable") if totals[i] > 0)
    return DenseLanes(cols, idle, np.where(caused, top, -1)), shown


def steps_frame(
    view: StepsView,
    changes: Sequence[ConfigChange],
    *,
    t0_ns: int,
    lo_ns: int,
    hi_ns: int,
    width_px: float,
    device_kind: str | None = None,
    active: Spans | None = None,
    tint: bool = False,
) -> TimelineFrame:
    """The timeline straight from ``view``: span by span, or per pixel column when it holds
    more steps in ``[lo_ns, hi_ns]`` than half the pixels (``columns_of``).

    ``active`` are the merged device spans of ``view`` (computed when not given); ``tint``:
    a sparse frame carries the device lane's idle spans by cause (else the drawn tint stays).
    """
    in_window = (view.host[:, -1] >= lo_ns) & (view.host[:, 0] <= hi_ns)
    frame = TimelineFrame(t0_ns, lo_ns, hi_ns, width_px, device_kind)
    if is_dense(int(in_window.sum()), width_px):
        cols = columns_of(view, changes, lo_ns, hi_ns, int(np.ceil(width_px)))
        lanes, by_time = dense_lanes(cols)
        return replace(frame, dense=lanes, causes_shown=by_time)
    spans_of = phase_spans(view)
    phases = {name: clip_to_window(s, e, lo_ns, hi_ns) for name, (s, e) in spans_of.items()}
    on = clip_to_window(*(active if active is not None else active_spans(view)), lo_ns, hi_ns)
    idle_spans: dict[str, Spans] | None = None
    shown: tuple[str, ...] | None = None
    if tint:
        idle_spans = idle_in_view(
            caused_idle(view, None, reconfiguring_steps(view, changes)), lo_ns, hi_ns
        )
        shown = present_causes(idle_spans)
    return replace(frame, sparse=SparseLanes(phases, on, gaps(*on), idle_spans), causes_shown=shown)


def idle_in_view(idle: CausedIdle, lo_ns: int, hi_ns: int) -> dict[str, Spans]:
    """Idle spans per cause overlapping ``[lo_ns, hi_ns]``."""
    return {c: clip_to_window(*idle.spans(c), lo_ns, hi_ns) for c in CAUSES}


def coarse_in_view(run: RunData, choice: CoarseChoice, lo_ns: int, hi_ns: int) -> SeriesView:
    """The chosen metric's samples whose period overlaps ``[lo_ns, hi_ns]``."""
    coarse = run.coarse.snapshot(choice.metric, since_ns=lo_ns)
    if len(coarse):
        keep = coarse.t0 <= hi_ns
        coarse = SeriesView(coarse.t0[keep], coarse.t1[keep], coarse.value[keep])
    return coarse


def headline_figures(
    run: RunData,
    now_ns: int,
    window_ns: int = int(HEADLINE_WINDOW_S * 1e9),
    max_steps: int | None = HEADLINE_MAX_STEPS,
) -> HeadlineFigures:
    """The headline over the steps that ended in ``(now_ns - window_ns, now_ns]`` (at most
    the newest ``max_steps``), and the coarse figure beside our busy %: over the whole
    window, and over the same coarse periods that our marks fully cover."""
    lo = now_ns - window_ns
    if max_steps is not None:
        newest = run.steps.snapshot(last=max_steps)
        if len(newest) == max_steps and int(newest.host[0, 0]) > lo:
            lo = int(newest.host[0, 0])
            window_ns = now_ns - lo
    choice = choose_coarse(run.coarse.statuses(), run.device_kind)
    coarse = run.coarse.snapshot(choice.metric, since_ns=lo)
    since = min(lo, int(coarse.t0[0])) if len(coarse) else lo
    steps = run.steps.snapshot(since_ns=since)
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
    shares = tuple(sorted((h.phase_shares or {}).items(), key=lambda kv: -kv[1]))
    return HeadlineFigures(
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
        device_kind=run.device_kind,
        phase_shares=shares,
    )


def whole_run_figures(run: RunData) -> HeadlineFigures | None:
    """The headline over every stored step (an end-of-run summary); None without steps."""
    view = run.steps.snapshot()
    if not len(view):
        return None
    end = int(view.host[-1, -1])
    return headline_figures(run, end, end - int(view.host[0, 0]) + 1, max_steps=None)


class FramePresenter:
    """Frame data for the window: plots every frame, headline figures when asked.

    Holds the incremental state that keeps a frame cheap: lane occupancy per fine time bin
    (``bins``) and busy % per final coarse sample (``sample_busy``).
    """

    def __init__(self) -> None:
        self.bins = TimelineBins()
        self.sample_busy = SampleBusy()

    def revision(
        self, run: RunData, lo_ns: int, hi_ns: int, width_px: float
    ) -> tuple[FrameRevision, SeriesView]:
        """What the plots of ``[lo_ns, hi_ns]`` would be drawn from now, and the coarse
        samples in view (the one copy it takes)."""
        choice = choose_coarse(run.coarse.statuses(), run.device_kind)
        coarse = coarse_in_view(run, choice, lo_ns, hi_ns)
        revision = FrameRevision(
            t0_ns=run.t0_ns,
            steps_count=run.steps.count,
            n_changes=len(run.changes),
            device_kind=run.device_kind,
            choice=choice,
            n_coarse=len(coarse),
            last_coarse_t1=int(coarse.t1[-1]) if len(coarse) else 0,
            lo_ns=lo_ns,
            hi_ns=hi_ns,
            width_px=width_px,
        )
        return revision, coarse

    def plots(
        self,
        run: RunData,
        lo_ns: int,
        hi_ns: int,
        width_px: float,
        *,
        final: bool = False,
        unless: FrameRevision | None = None,
        revised: tuple[FrameRevision, SeriesView] | None = None,
    ) -> PlotFrame | None:
        """Timeline and utilization for ``[lo_ns, hi_ns]`` drawn ``width_px`` wide.

        ``final``: nothing more will come (the run is over). ``unless``: the revision of the
        frame on screen; None is returned (and nothing computed) when it is still current.
        ``revised``: what ``revision`` returned for these arguments, if the caller has it.
        A dense view is read from the bins (a frame costs the new steps and the visible
        pixels, not every visible step); a sparse view's few steps are read span by span.
        """
        revision, coarse = revised or self.revision(run, lo_ns, hi_ns, width_px)
        if revision == unless:
            return None
        steps = run.steps
        # Clearly sparse (the newest steps hold every step in view, and those are too few to
        # be dense): the view is drawn span by span, and the bins (kept for dense views) are
        # left until one comes.
        limit = int(DENSE_SPANS_PER_PIXEL * max(width_px, 1.0))
        newest = steps.snapshot(last=limit + 1)
        all_in_view = (len(newest) <= limit and steps.count <= steps.capacity) or (
            len(newest) > 0 and int(newest.host[0, -1]) < lo_ns
        )
        clearly_sparse = all_in_view and not is_dense(
            int(((newest.host[:, -1] >= lo_ns) & (newest.host[:, 0] <= hi_ns)).sum()), width_px
        )
        if clearly_sparse:
            final_before = steps_final_before_ns(steps, final=final)
            cols = None
        else:
            self.bins.update(
                steps,
                run.changes,
                run.t0_ns,
                lo_ns=lo_ns,
                hi_ns=hi_ns,
                px_ns=(hi_ns - lo_ns) / width_px,
                final=final,
            )
            final_before = self.bins.final_before_ns
            cols = self.bins.columns(lo_ns, hi_ns, int(np.ceil(width_px)))
        if cols is not None and is_dense(cols.n_steps, width_px):
            lanes, shown = dense_lanes(cols, final_before)
            timeline = TimelineFrame(
                run.t0_ns, lo_ns, hi_ns, width_px, run.device_kind, dense=lanes, causes_shown=shown
            )
        else:
            timeline = steps_frame(
                steps.snapshot(since_ns=lo_ns),
                run.changes,
                t0_ns=run.t0_ns,
                lo_ns=lo_ns,
                hi_ns=hi_ns,
                width_px=width_px,
                device_kind=run.device_kind,
                tint=True,
            )
        busy = self.sample_busy.over(steps, coarse, final_before, key=(run.t0_ns, id(steps)))
        return PlotFrame(
            revision, timeline, UtilizationFrame(revision.choice, coarse, busy, run.t0_ns)
        )

    def headline(self, run: RunData, now_ns: int) -> HeadlineFigures:
        """The headline figures over the recent past up to ``now_ns`` (``headline_figures``)."""
        return headline_figures(run, now_ns)
