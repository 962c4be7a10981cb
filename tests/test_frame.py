"""The frame presenter: the timeline, utilization and headline figures the views draw.

Runs here are SIMULATED (synthetic marks; "CUDA" device marks are host marks plus a lag,
some never harvested; NVML-like samples made up): never a GPU measurement. Headline figures
are checked against numbers worked out by hand, and against a plain reference computation
(every stored step, no incremental state).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from gpuwatch.core.figures.analysis import (
    active_spans,
    busy_percent_over,
    gaps,
    headline,
    phase_spans,
)
from gpuwatch.core.figures.frame import (
    HEADLINE_MAX_STEPS,
    FramePresenter,
    HeadlineFigures,
    RunData,
    choose_coarse,
    clip_to_window,
    dense_lanes,
    headline_figures,
    steps_frame,
    weighted_mean,
    whole_run_figures,
)
from gpuwatch.core.figures.gap_causes import CAUSES, caused_idle, reconfiguring_steps
from gpuwatch.core.figures.timeline_bins import columns_of
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.model.metrics import NVML_GPU_UTIL, PROC_CPU
from gpuwatch.core.model.store import MetricStatus, SeriesStore, StepStore
from gpuwatch.protocol import N_MARKS

MS = 1_000_000
S = 1_000_000_000
T0 = 50 * S
#: A 10 ms step: data, h2d, forward, backward, optimizer, sync (ms), then 0.1 ms overhead.
PHASE_MS = (3.0, 0.5, 2.0, 3.0, 1.0, 0.4)
STEP_MS = 10.0
SAMPLES = 32
FIGURE_KEYS = (
    "window_s",
    "samples_per_s",
    "step_ms_p50",
    "step_ms_p95",
    "busy_pct",
    "coarse_pct",
    "coarse_same_pct",
    "busy_same_pct",
    "coarse_short",
)


def regular_marks(start_ns: int, n: int) -> np.ndarray:
    """Host marks of ``n`` identical 10 ms steps from ``start_ns``."""
    starts = start_ns + np.arange(n, dtype=np.int64) * int(STEP_MS * MS)
    offsets = (np.concatenate(([0.0], np.cumsum(PHASE_MS))) * MS).astype(np.int64)
    return starts[:, None] + offsets[None, :]


def jittered_marks(start_ns: int, n: int, step_ns: float, seed: int = 0) -> np.ndarray:
    """Host marks of ``n`` steps with every phase ±50 % around its share of ``step_ns``."""
    shares = np.array([*PHASE_MS, STEP_MS - sum(PHASE_MS)]) / STEP_MS
    rng = np.random.default_rng(seed)
    lengths = np.maximum((step_ns * shares * rng.uniform(0.5, 1.5, (n, 7))).astype(np.int64), 1)
    ends = start_ns + np.cumsum(lengths.sum(axis=1))
    starts = np.concatenate(([start_ns], ends[:-1]))
    out = np.empty((n, N_MARKS), np.int64)
    out[:, 0] = starts
    out[:, 1:] = starts[:, None] + np.cumsum(lengths[:, :-1], axis=1)
    return out


def change(cid: int, first_step: int, warmup: int = 3) -> ConfigChange:
    return ConfigChange(
        id=cid,
        values={"num_workers": cid},
        changed={"num_workers": cid} if cid else {},
        t_ns=0,
        first_step=first_step,
        warmup_steps=warmup if cid else 0,
    )


@dataclass
class FakeRun:
    """What a session offers the presenter (``RunSource``), without a session."""

    steps: StepStore = field(default_factory=lambda: StepStore(1 << 15))
    coarse: SeriesStore = field(default_factory=SeriesStore)
    t0_ns: int = T0
    device_kind: str | None = "cpu"
    changes: list[ConfigChange] = field(default_factory=lambda: [change(0, 0)])

    def config_changes(self) -> list[ConfigChange]:
        return self.changes

    def data(self) -> RunData:
        return RunData.of(self)


def cpu_run(n: int = 1000) -> FakeRun:
    """``n`` regular CPU steps from T0; runner CPU at 50 % in 1 s periods while they run, and
    a last period at 90 % that reaches past the last mark (our busy % unknown there)."""
    run = FakeRun()
    run.steps.set_device_is_host(True)
    marks = regular_marks(T0, n)
    run.steps.append(list(range(n)), [0] * n, [SAMPLES] * n, marks.tolist())
    run.coarse.set_status(MetricStatus(PROC_CPU, "runner CPU", "%", True, period_s=1.0))
    last = n * int(STEP_MS * MS) // S  # whole seconds of steps
    k = np.arange(last, dtype=np.int64)
    t0s = [*(T0 + k * S).tolist(), T0 + (last - 1) * S]
    t1s = [*(T0 + (k + 1) * S).tolist(), T0 + last * S]
    run.coarse.append_many(PROC_CPU, t0s[:-2], t1s[:-2], [50.0] * (len(t0s) - 2))
    run.coarse.append_many(PROC_CPU, t0s[-1:], t1s[-1:], [90.0])
    return run


def cuda_run(n: int, step_ns: float, *, lag_ns: int = 300_000, unmarked: int = 40) -> FakeRun:
    """A jittered "CUDA" run: device marks lag the host; the newest ``unmarked`` steps and a
    few in the middle have none. NVML-like samples every 1/6 s over the whole run."""
    run = FakeRun(device_kind="cuda", changes=[change(0, 0), change(1, n // 2)])
    host = jittered_marks(T0, n, step_ns)
    config = [int(i >= n // 2) for i in range(n)]
    run.steps.append(list(range(n)), config, [SAMPLES] * n, host.tolist())
    marked = [i for i in range(n - unmarked) if i % 97 != 5]
    run.steps.set_device_marks(marked, (host[marked] + lag_ns).tolist())
    period = S // 6
    t0s = np.arange(T0 - period, int(host[-1, -1]) + period, period, dtype=np.int64)
    rng = np.random.default_rng(3)
    run.coarse.set_status(
        MetricStatus(NVML_GPU_UTIL, "NVML GPU utilization", "%", True, period_s=1 / 6)
    )
    run.coarse.append_many(
        NVML_GPU_UTIL, t0s.tolist(), (t0s + period).tolist(), rng.uniform(30, 95, len(t0s)).tolist()
    )
    return run


def reference_headline(run: FakeRun, now_ns: int, window_ns: int, max_steps: int | None) -> dict:
    """The headline as the window computed it inside its redraw, step by step from the
    stores: the steps that ended in the window (the newest ``max_steps`` at most), the mean
    coarse % over it, and both figures over the coarse periods our marks fully cover."""
    lo = now_ns - window_ns
    newest = run.steps.snapshot(last=max_steps)
    if max_steps is not None and len(newest) == max_steps and int(newest.host[0, 0]) > lo:
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
        busy = busy_percent_over(active_spans(steps), coarse.t0, coarse.t1)
        known = np.isfinite(busy)
        if known.any():
            w0, w1 = coarse.t0[known], coarse.t1[known]
            busy_same = weighted_mean(w0, w1, busy[known], lo, now_ns)
            coarse_same = weighted_mean(w0, w1, coarse.value[known], lo, now_ns)
    return {
        "window_s": round(window_ns / 1e9, 1),
        "samples_per_s": h.samples_per_s,
        "step_ms_p50": h.step_ms_p50,
        "step_ms_p95": h.step_ms_p95,
        "busy_pct": None if h.busy_share is None else 100.0 * h.busy_share,
        "coarse_pct": coarse_pct,
        "coarse_same_pct": coarse_same,
        "busy_same_pct": busy_same,
        "coarse_short": choice.short,
    }


def figures_dict(f: HeadlineFigures) -> dict:
    return {key: getattr(f, key) for key in FIGURE_KEYS}


# ---- Headline -----------------------------------------------------------------------------


def test_headline_figures_of_a_regular_cpu_run_are_the_numbers_worked_out_by_hand() -> None:
    run = cpu_run(1000)  # 10 s of 10 ms steps
    now = int(run.steps.snapshot(last=1).host[-1, -1])
    f = FramePresenter().headline(run.data(), now)

    assert f.window_s == 5.0
    assert f.samples_per_s == pytest.approx(SAMPLES / (STEP_MS / 1e3), rel=1e-3)
    assert f.step_ms_p50 == pytest.approx(STEP_MS)
    # compute busy on a CPU: h2d..optimizer = 6.5 of every 10 ms
    assert f.busy_pct == pytest.approx(65.0, abs=0.01)
    # the last 5 s: 4 s of the 50 % periods, then the 90 % period (past our marks)
    assert f.coarse_pct == pytest.approx((4 * 50 + 90) / 5, abs=0.01)
    # over the periods our marks cover: only the 50 % ones, and 65 % busy in them
    assert f.coarse_same_pct == pytest.approx(50.0)
    assert f.busy_same_pct == pytest.approx(65.0, abs=0.01)
    assert f.coarse_short == "runner CPU" and f.device_kind == "cpu"
    assert [name for name, _ in f.top_phases] == ["data", "backward", "forward"]
    assert dict(f.phase_shares)["data"] == pytest.approx(0.3, abs=1e-3)
    assert sum(s for _, s in f.phase_shares) == pytest.approx(1.0)


def test_headline_figures_equal_the_plain_computation_on_a_simulated_cuda_run() -> None:
    run = cuda_run(3000, 2 * MS)  # ~6 s at ~500 steps/s, a knob change half way
    last = run.steps.snapshot(last=1)
    for now in (int(last.host[-1, -1]), int(last.host[-1, -1]) - 700 * MS):
        f = headline_figures(run.data(), now)
        want = reference_headline(run, now, 5 * S, HEADLINE_MAX_STEPS)
        assert figures_dict(f) == pytest.approx(want)
        assert f.coarse_short == "NVML" and f.busy_same_pct is not None


def test_a_fast_run_narrows_the_headline_to_the_newest_steps_and_says_over_how_long() -> None:
    run = cuda_run(HEADLINE_MAX_STEPS + 5000, 0.25 * MS, unmarked=200)  # ~4,000 steps/s
    now = int(run.steps.snapshot(last=1).host[-1, -1])
    f = headline_figures(run.data(), now)
    first = int(run.steps.snapshot(last=HEADLINE_MAX_STEPS).host[0, 0])

    assert f.window_s == round((now - first) / 1e9, 1) < 5.0
    assert figures_dict(f) == pytest.approx(reference_headline(run, now, 5 * S, HEADLINE_MAX_STEPS))


def test_whole_run_figures_are_the_headline_over_every_stored_step() -> None:
    run = cuda_run(2000, 1 * MS)
    view = run.steps.snapshot()
    end = int(view.host[-1, -1])
    h = headline(view, end, end - int(view.host[0, 0]) + 1)
    f = whole_run_figures(run.data())

    assert f is not None
    assert (f.samples_per_s, f.step_ms_p50, f.step_ms_p95) == (
        h.samples_per_s,
        h.step_ms_p50,
        h.step_ms_p95,
    )
    assert f.busy_pct == 100.0 * h.busy_share
    assert dict(f.phase_shares) == h.phase_shares
    assert whole_run_figures(FakeRun().data()) is None


def test_unknown_headline_figures_stay_unknown() -> None:
    run = FakeRun(device_kind="cuda")
    f = headline_figures(run.data(), T0)
    assert f.samples_per_s is None and f.busy_pct is None and f.coarse_pct is None
    assert f.top_phases == () and f.phase_shares == ()


# ---- Plots --------------------------------------------------------------------------------


def test_a_sparse_view_is_drawn_span_by_span_with_the_idle_time_by_cause() -> None:
    run = cuda_run(300, 10 * MS, unmarked=5)
    data = run.data()
    hi = int(run.steps.snapshot(last=1).host[-1, -1])
    lo = hi - 2 * S
    frame = FramePresenter().plots(data, lo, hi, 1000.0)

    assert frame is not None and frame.timeline.dense is None
    lanes = frame.timeline.sparse
    view = run.steps.snapshot(since_ns=lo)
    for name, (s, e) in phase_spans(view).items():
        np.testing.assert_array_equal(lanes.phases[name][0], clip_to_window(s, e, lo, hi)[0])
    a, b = clip_to_window(*active_spans(view), lo, hi)
    np.testing.assert_array_equal(lanes.active[0], a)
    np.testing.assert_array_equal(lanes.gaps[1], gaps(a, b)[1])
    idle = caused_idle(view, None, reconfiguring_steps(view, run.changes))
    assert lanes.idle is not None and set(lanes.idle) == set(CAUSES)
    for cause in CAUSES:
        np.testing.assert_array_equal(
            lanes.idle[cause][0], clip_to_window(*idle.spans(cause), lo, hi)[0]
        )
    assert frame.timeline.causes_shown and frame.timeline.causes_shown[0] == "input"
    assert frame.timeline.px_ns == (hi - lo) / 1000.0


def test_a_dense_view_is_drawn_per_pixel_column_from_the_bins() -> None:
    run = cuda_run(6000, 0.5 * MS, lag_ns=20_000, unmarked=50)  # 3 s, 2,000 steps/s, 300 px
    hi = int(run.steps.snapshot(last=1).host[-1, -1])
    lo = hi - 2 * S
    frame = FramePresenter().plots(run.data(), lo, hi, 300.0, final=True)

    assert frame is not None and frame.timeline.sparse is None
    dense = frame.timeline.dense
    cols = dense.columns
    assert len(cols.c0) == 300
    want = columns_of(run.steps.snapshot(), run.changes, lo, hi, 300)
    # read from bins a quarter column wide (or finer): off by at most a bin's worth
    np.testing.assert_allclose(cols["backward"], want["backward"], atol=0.25)
    assert abs(cols.n_steps - want.n_steps) <= 1
    on = np.flatnonzero(cols["active"] > 0)
    inside = np.zeros(300, bool)
    inside[on[0] : on[-1] + 1] = True
    np.testing.assert_array_equal(dense.device_idle, inside & (cols["active"] < 1.0))
    shares = np.vstack([cols[f"idle:{c}"] for c in CAUSES])
    has = shares.sum(axis=0) > 0
    np.testing.assert_array_equal(dense.idle_cause[~has], -1)
    np.testing.assert_array_equal(dense.idle_cause[has], np.argmax(shares, axis=0)[has])
    # the legend: causes with a column, the most columns first (columns are equally wide)
    counts = {c: int((dense.idle_cause == i).sum()) for i, c in enumerate(CAUSES)}
    shown = frame.timeline.causes_shown
    assert set(shown) == {c for c, k in counts.items() if k} and shown[0] == "input"
    assert [counts[c] for c in shown] == sorted((counts[c] for c in shown), reverse=True)


def test_utilization_shows_busy_only_over_final_samples() -> None:
    run = cuda_run(3000, 2 * MS, unmarked=100)
    hi = int(run.steps.snapshot(last=1).host[-1, -1])
    lo = hi - 3 * S
    presenter = FramePresenter()
    util = presenter.plots(run.data(), lo, hi, 800.0).utilization

    coarse = run.coarse.snapshot(NVML_GPU_UTIL, since_ns=lo)
    coarse_in = coarse.t0 <= hi
    np.testing.assert_array_equal(util.coarse.t0, coarse.t0[coarse_in])
    assert util.choice.metric == NVML_GPU_UTIL and util.t0_ns == T0
    final = util.coarse.t1 <= presenter.bins.final_before_ns
    assert final.any() and not final.all()  # the newest steps have no device marks yet
    assert np.isnan(util.busy[~final]).all()
    view = run.steps.snapshot(since_ns=int(util.coarse.t0[0]), before=1)
    exact = busy_percent_over(active_spans(view), util.coarse.t0, util.coarse.t1)
    np.testing.assert_allclose(util.busy[final], exact[final])


def test_a_sparse_view_shows_busy_over_final_samples_without_the_dense_bins() -> None:
    """A sparse view is drawn span by span: the bins kept for dense views are not brought up
    to date for it, and its busy % is still known exactly over every final sample (those
    before the first step whose device marks may still come), and unknown after."""
    run = cuda_run(60, 50 * MS, unmarked=6)
    hi = int(run.steps.snapshot(last=1).host[-1, -1])
    lo = hi - 4 * S
    presenter = FramePresenter()
    frame = presenter.plots(run.data(), lo, hi, 800.0)

    assert frame is not None and frame.timeline.sparse is not None
    assert presenter.bins.last_repriced == 0 and presenter.bins.final_before_ns == 0
    util = frame.utilization
    first_unmarked = int(run.steps.snapshot().host[-6, 0])
    final = util.coarse.t1 <= first_unmarked
    assert final.any() and not final.all()
    assert np.isnan(util.busy[~final]).all()
    view = run.steps.snapshot(since_ns=int(util.coarse.t0[0]), before=1)
    exact = busy_percent_over(active_spans(view), util.coarse.t0, util.coarse.t1)
    np.testing.assert_allclose(util.busy[final], exact[final])
    assert np.isfinite(util.busy[final & np.isfinite(exact)]).all()


def test_the_revision_says_whether_anything_drawn_changed() -> None:
    run = cpu_run(400)
    presenter = FramePresenter()
    hi = int(run.steps.snapshot(last=1).host[-1, -1])
    lo = hi - 3 * S
    first = presenter.plots(run.data(), lo, hi, 500.0)
    assert first is not None
    assert presenter.plots(run.data(), lo, hi, 500.0, unless=first.revision) is None
    assert presenter.revision(run.data(), lo, hi, 500.0)[0] == first.revision
    # a new step, a new coarse sample, another range or width: a new frame
    more = regular_marks(hi + int(0.1 * MS), 1)
    run.steps.append([400], [0], [SAMPLES], more.tolist())
    second = presenter.plots(run.data(), lo, hi, 500.0, unless=first.revision)
    assert second is not None and second.revision != first.revision
    run.coarse.append(PROC_CPU, hi, hi + S, 40.0)
    assert presenter.plots(run.data(), lo, hi + S, 500.0, unless=second.revision) is not None
    assert presenter.plots(run.data(), lo, hi, 600.0, unless=second.revision) is not None
    run.changes = [*run.changes, change(1, 401)]
    assert presenter.plots(run.data(), lo, hi, 500.0, unless=second.revision) is not None
    assert hash(second.revision) == hash(replace(second.revision))


def test_steps_frame_turns_dense_past_half_a_step_per_pixel() -> None:
    host = regular_marks(T0, 200)
    store = StepStore(1024)
    store.set_device_is_host(True)
    store.append(list(range(200)), [0] * 200, [1] * 200, host.tolist())
    view = store.snapshot()
    lo, hi = T0, int(host[-1, -1])
    sparse = steps_frame(view, (), t0_ns=T0, lo_ns=lo, hi_ns=hi, width_px=400.0)
    dense = steps_frame(view, (), t0_ns=T0, lo_ns=lo, hi_ns=hi, width_px=399.0)
    assert sparse.sparse is not None and sparse.sparse.idle is None
    assert sparse.causes_shown is None  # nothing said about the tint: it stays as drawn
    assert dense.dense is not None and len(dense.dense.columns.c0) == 399


@pytest.mark.parametrize(
    ("statuses", "kind", "metric", "short"),
    [
        ({NVML_GPU_UTIL: True, PROC_CPU: True}, "cuda", NVML_GPU_UTIL, "NVML"),
        ({NVML_GPU_UTIL: True, PROC_CPU: True}, "cpu", PROC_CPU, "runner CPU"),
        ({NVML_GPU_UTIL: False, PROC_CPU: True}, "cuda", PROC_CPU, "runner CPU"),
        ({PROC_CPU: True}, None, PROC_CPU, "runner CPU"),
    ],
)
def test_the_coarse_metric_shown(statuses, kind, metric, short) -> None:
    got = choose_coarse(
        {
            name: MetricStatus(name, name, "%", ok, reason=None if ok else "no driver")
            for name, ok in statuses.items()
        },
        kind,
    )
    assert (got.metric, got.short) == (metric, short)
    assert (metric == NVML_GPU_UTIL) == (not got.notes)


def test_run_data_reads_a_session_like_source() -> None:
    run = cuda_run(100, 5 * MS)
    data = RunData.of(run)
    assert data.steps is run.steps and data.coarse is run.coarse
    assert data.changes == tuple(run.changes) and data.device_kind == "cuda"


# ---- The window draws what the presenter computes ------------------------------------------


def _drawn(win) -> dict:
    """What the window's timeline, utilization plot and headline show now."""
    timeline, util = win.timeline, win.utilization
    bars = {
        **{f"phase:{n}": b for n, b in timeline.phase_bars.items()},
        **{f"backing:{n}": b for n, b in timeline.phase_backing.items()},
        **{f"cause:{c}": b for c, b in timeline.cause_bars.items()},
        "device": timeline.device_bars,
        "gap": timeline.gap_bars,
    }
    drawn = {name: (b.x0.tolist(), b.x1.tolist()) for name, b in bars.items()}
    drawn["gap visible"] = timeline.gap_bars.isVisible()
    drawn["dense"] = timeline.dense
    drawn["pixels"] = timeline.dense_lanes.pixels.tolist() if timeline.dense else None
    drawn["causes"] = timeline.causes_shown
    for name, curve in (("coarse", util.coarse_curve), ("busy", util.busy_curve)):
        x, y = curve.getData()
        drawn[name] = (np.asarray(x).tolist(), np.asarray(y).tolist())
    drawn["legend"] = util.legend_texts()
    return drawn


def _feed(session, dense: bool) -> None:
    """A finished run with late device marks and NVML readings, written straight into the
    session's stores (no hello: the device kind is unknown, so NVML is shown)."""
    n, step_ns = (40_000, 0.5 * MS) if dense else (300, 50 * MS)
    host = jittered_marks(session.t0_ns + S, n, step_ns)
    session.steps.append(list(range(n)), [0] * n, [SAMPLES] * n, host.tolist())
    marked = [i for i in range(n) if i % 97 != 5]
    session.steps.set_device_marks(marked, (host[marked] + 200_000).tolist())
    period = S // 6
    t0s = np.arange(session.t0_ns, int(host[-1, -1]) + period, period, dtype=np.int64)
    session.coarse.set_status(
        MetricStatus(NVML_GPU_UTIL, "NVML GPU utilization", "%", True, period_s=1 / 6)
    )
    values = np.random.default_rng(5).uniform(30, 95, len(t0s))
    session.coarse.append_many(
        NVML_GPU_UTIL, t0s.tolist(), (t0s + period).tolist(), values.tolist()
    )


@pytest.mark.parametrize("dense", [False, True], ids=["sparse", "dense"])
def test_the_window_draws_and_shows_what_the_presenter_computes(show_window, dense) -> None:
    """The window's own frame and headline, then the same widgets redrawn from a fresh
    presenter's frame: the same pixels, spans, curves and figures."""
    from gpuwatch.core.run.session import Session

    session = Session(sample_coarse=False)
    _feed(session, dense)
    win = show_window(session)
    win.timer.stop()
    for _ in range(8):  # a full round of ticks: the headline is refreshed in one of them
        win.redraw_now()
    assert win.timeline.dense is dense
    seen = _drawn(win)
    shown = win.headline.figures

    run = RunData.of(session)
    last_step = int(session.steps.snapshot(last=1).host[-1, -1])
    now = max(last_step, int(session.coarse.snapshot(NVML_GPU_UTIL).t1[-1]))  # not live
    lo_s, hi_s = win.timeline.getPlotItem().getViewBox().viewRange()[0]
    lo, hi = session.t0_ns + int(lo_s * 1e9), session.t0_ns + int(hi_s * 1e9)
    frame = FramePresenter().plots(run, lo, hi, win.timeline.width_px(), final=True)
    assert frame is not None
    win.timeline.show_frame(frame.timeline)
    win.utilization.show_frame(frame.utilization)

    assert _drawn(win) == seen
    assert shown is not None
    want = headline_figures(run, now)
    assert figures_dict(shown) == figures_dict(want)
    assert shown.top_phases == want.top_phases and shown.coarse_short == "NVML"


# ---- The headless summary reads the same figures ---------------------------------------------


@dataclass
class FinishedRun(FakeRun):
    """A session as the headless summary reads it at the end of a run."""

    instruments_off: list[str] = field(default_factory=list)
    bye: dict | None = None

    def scoreboard(self) -> list:
        return []


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_the_headless_summary_prints_the_whole_run_figures(kind) -> None:
    from gpuwatch.commands.headless import summary_lines

    source = cpu_run(1000) if kind == "cpu" else cuda_run(3000, 2 * MS)
    run = FinishedRun(source.steps, source.coarse, device_kind=kind, changes=source.changes)
    view = run.steps.snapshot()
    h = headline(view, int(view.host[-1, -1]), int(view.host[-1, -1] - view.host[0, 0]) + 1)
    want = (
        f"all steps (warm-up included): samples/s: {h.samples_per_s:,.1f} · "
        f"step p50/p95: {h.step_ms_p50:.1f}/{h.step_ms_p95:.1f} ms · "
        f"busy: {100.0 * h.busy_share:.0f} % · input wait: {100.0 * h.phase_shares['data']:.0f} %"
    )
    lines = summary_lines(run, "The script ended.")  # type: ignore[arg-type]
    assert lines[:3] == ["The script ended.", f"steps: {run.steps.count:,}", want]
    assert summary_lines(FinishedRun(), "Nothing ran.") == ["Nothing ran."]  # type: ignore[arg-type]


def test_the_dense_legend_counts_final_columns_only() -> None:
    """The newest columns' main idle cause changes as device marks arrive: the legend counts
    the columns that ended before the final time, so it stays put while those settle."""
    from gpuwatch.core.figures.timeline_bins import ROW, ROWS, Columns

    n = 10
    c0 = np.arange(n, dtype=np.float64) * 100
    share = np.zeros((len(ROWS), n))
    share[ROW["active"]] = 0.5
    share[ROW["idle:input"], :6] = 0.5  # final columns: input
    share[ROW["idle:copy"], 6:8] = 0.4
    share[ROW["idle:sync"], 8:] = 0.5  # the newest columns, still to settle: sync
    cols = Columns(c0, c0 + 100, share)
    lanes, shown = dense_lanes(cols, final_before_ns=800)
    assert shown == ("input", "copy")
    assert dense_lanes(cols)[1] == ("input", "copy", "sync")  # nothing left to come (a tie:
    # 200 ns each, in the order of CAUSES)
    # The tint itself is drawn from every column, the newest included.
    assert (
        lanes.idle_cause.tolist()
        == [CAUSES.index("input")] * 6 + [CAUSES.index("copy")] * 2 + [CAUSES.index("sync")] * 2
    )
