"""The timeline's incremental bins, the per-sample busy cache and the dense-lane image.

Steps here are SIMULATED (jittered synthetic marks; "CUDA" device marks are host marks plus a
lag, sent a batch late as the runner harvests events): never a GPU measurement. The reference
for every incremental figure is the same figure computed in one go from all the steps.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from jittered_steps import MS, ORIGIN, marks

from gpuwatch.core.figures.analysis import (
    active_spans,
    busy_percent_over,
    coverage_before,
    merge_intervals,
    phase_spans,
)
from gpuwatch.core.figures.gap_causes import CAUSES, caused_idle, reconfiguring_steps
from gpuwatch.core.figures.sample_busy import SampleBusy
from gpuwatch.core.figures.timeline_bins import (
    ROW,
    ROWS,
    TimelineBins,
    bin_width_ns,
    columns_of,
    occupancy_between,
)
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.model.store import SeriesView, StepStore
from gpuwatch.qt.dense_lanes import CLEAR, Lane, render


def change(cid: int, first_step: int, warmup: int = 5) -> ConfigChange:
    return ConfigChange(
        id=cid,
        values={"num_workers": cid},
        changed={"num_workers": cid},
        t_ns=0,
        first_step=first_step,
        warmup_steps=warmup,
    )


def feed(
    store: StepStore,
    host: np.ndarray,
    bins: TimelineBins,
    *,
    cuda: bool,
    batch: int = 50,
    window_ns: int = 2_000 * MS,
    columns: int = 400,
    change_at: int | None = None,
) -> list[ConfigChange]:
    """Append ``host`` in batches (device marks one batch late on "CUDA"), updating the bins
    after each batch over a window that follows the newest step, as the window does."""
    lag = 300_000  # the simulated device runs 0.3 ms behind the host
    changes = [change(0, 0, 0)]
    pending: tuple[list[int], np.ndarray] | None = None
    for lo in range(0, len(host), batch):
        ids = list(range(lo, min(lo + batch, len(host))))
        config = [int(change_at is not None and i >= change_at) for i in ids]
        store.append(ids, config, [8] * len(ids), host[ids].tolist())
        if cuda:
            if pending is not None:
                store.set_device_marks(pending[0], (pending[1] + lag).tolist())
            pending = (ids, host[ids])
        if change_at is not None and lo - 2 * batch <= change_at < lo - batch:
            changes.append(change(1, change_at))  # its config message comes late
        hi_ns = int(host[ids[-1], -1])
        bins.update(
            store, changes, ORIGIN, lo_ns=hi_ns - window_ns, hi_ns=hi_ns, px_ns=window_ns / columns
        )
    if cuda and pending is not None:
        store.set_device_marks(pending[0], (pending[1] + lag).tolist())
    return changes


@pytest.mark.parametrize("cuda", [False, True], ids=["cpu", "simulated-cuda"])
def test_incremental_bins_equal_the_figures_computed_in_one_go(cuda: bool) -> None:
    store = StepStore(capacity=1 << 14)
    store.set_device_is_host(not cuda)
    host = marks(3000, 1 * MS)
    bins = TimelineBins()
    changes = feed(store, host, bins, cuda=cuda, change_at=1700)
    window_ns, columns = 2_000 * MS, 400
    hi = int(host[-1, -1])
    # One more update once the last device marks are in; then compare over column edges that
    # fall on bin edges, where reading the bins is exact.
    bins.update(store, changes, ORIGIN, lo_ns=hi - window_ns, hi_ns=hi, px_ns=window_ns / columns)
    width = bins.width_ns
    assert width == bin_width_ns(window_ns / columns) and width <= window_ns / columns / 4
    lo = ORIGIN + ((hi - window_ns - ORIGIN) // width + 1) * width
    n = 100
    span = ((hi - lo) // (n * width)) * n * width
    got = bins.columns(lo, lo + span, n)
    want = columns_of(store.snapshot(), changes, lo, lo + span, n)
    np.testing.assert_allclose(got.share, want.share, rtol=1e-9, atol=1e-9)
    # The figures are real ones: a third of the time is data, the device idles for input,
    # and the change's transition shows as reconfigure.
    assert got["data"].mean() == pytest.approx(0.30, abs=0.03)
    assert got["idle:input"].sum() > 0 and got.n_steps > 0
    assert got["idle:reconfigure"].sum() > 0
    assert got["steps"].sum() == pytest.approx(
        ((host[:, 0] >= lo) & (host[:, 0] < lo + span)).sum()
    )


@pytest.mark.parametrize("cuda", [False, True], ids=["cpu", "simulated-cuda"])
def test_a_still_view_computes_only_the_columns_over_new_bins(cuda: bool) -> None:
    """A followed view stands still between strides: asked for the same columns again, the
    bins compute only those over bins written since, and the result is what computing every
    column gives (a new ``TimelineBins`` fed the same steps)."""
    store = StepStore(capacity=1 << 14)
    store.set_device_is_host(not cuda)
    host = marks(2400, 1 * MS)
    lag = 300_000
    # The newest steps end near the view's right edge, as while following: 2.4 s of steps
    # in a view to 2.45 s, 5 ms a column.
    lo, hi, n = ORIGIN + 200 * MS, ORIGIN + 2_450 * MS, 450
    px_ns = (hi - lo) / n
    bins = TimelineBins()
    partial = []
    for first in range(0, len(host), 40):
        ids = list(range(first, first + 40))
        store.append(ids, [0] * 40, [8] * 40, host[ids].tolist())
        if cuda and first:
            done = list(range(first - 40, first))
            store.set_device_marks(done, (host[done] + lag).tolist())
        bins.update(store, (), ORIGIN, lo_ns=lo, hi_ns=hi, px_ns=px_ns)
        got = bins.columns(lo, hi, n)
        fresh = TimelineBins()
        fresh.update(store, (), ORIGIN, lo_ns=lo, hi_ns=hi, px_ns=px_ns)
        np.testing.assert_allclose(got.share, fresh.columns(lo, hi, n).share, atol=1e-12)
        partial.append(bins.last_computed)
    assert partial[0] == n  # the first time: every column
    # Then the columns from the newest (or, on CUDA, the still unmarked) steps to the right
    # edge: fewer as the steps near it, a few at the end.
    inside = partial[10:]
    assert all(0 < later <= earlier < n for earlier, later in pairwise(inside))
    assert partial[-1] < n / 10
    bins.update(store, (), ORIGIN, lo_ns=lo + 100 * MS, hi_ns=hi + 100 * MS, px_ns=px_ns)
    bins.columns(lo + 100 * MS, hi + 100 * MS, n)
    assert bins.last_computed == n  # a moved view: every column


@pytest.mark.parametrize("cuda", [False, True], ids=["cpu", "simulated-cuda"])
def test_occupancy_in_one_pass_is_each_lane_merged_and_covered(cuda: bool) -> None:
    """The bins price every phase and every idle cause in one pass each; the reference is
    each lane's spans merged and covered on their own."""
    store = StepStore(capacity=1 << 14)
    store.set_device_is_host(not cuda)
    host = marks(1200, 1 * MS)
    changes = feed(store, host, TimelineBins(), cuda=cuda, change_at=700)
    view = store.snapshot()
    edges = np.linspace(host[100, 0], host[-100, -1], 500)
    got = occupancy_between(view, changes, edges)
    # Within a ns: the reference cuts a span at a (fractional) column edge to whole ns.
    for name, (s, e) in phase_spans(view).items():
        want = np.diff(coverage_before(*merge_intervals(s, e), edges))
        np.testing.assert_allclose(got[ROW[name]], want, rtol=0, atol=1.0, err_msg=name)
    idle = caused_idle(view, None, reconfiguring_steps(view, changes))
    for cause in CAUSES:
        want = np.diff(coverage_before(*idle.spans(cause), edges))
        np.testing.assert_allclose(got[ROW[f"idle:{cause}"]], want, rtol=0, atol=1.0)
    assert got[ROW["idle:reconfigure"]].sum() > 0 and got[ROW["idle:input"]].sum() > 0


def test_a_frame_reprices_only_the_newest_bins() -> None:
    store = StepStore()
    store.set_device_is_host(True)
    bins = TimelineBins()
    feed(store, marks(2000, 1 * MS), bins, cuda=False)
    # ~50 new steps (50 ms) per update, plus the look-back: a small share of the 2 s window.
    assert 0 < bins.last_repriced < 0.25 * (2_000 * MS / bins.width_ns)


def test_late_device_marks_reopen_their_bins_until_they_arrive() -> None:
    store = StepStore()
    host = marks(400, 1 * MS)
    bins = TimelineBins()
    store.append(list(range(400)), [0] * 400, [8] * 400, host.tolist())
    hi = int(host[-1, -1])
    kw = {"lo_ns": hi - 500 * MS, "hi_ns": hi, "px_ns": 1 * MS}
    bins.update(store, [], ORIGIN, **kw)
    # No device marks yet: nothing of them may be final, and the device lane is empty.
    assert bins.final_before_ns <= int(host[0, 0])
    assert bins.columns(hi - 400 * MS, hi, 40)["active"].sum() == 0
    store.set_device_marks(list(range(400)), host.tolist())
    bins.update(store, [], ORIGIN, **kw)
    assert bins.columns(hi - 400 * MS, hi, 40)["active"].mean() == pytest.approx(0.65, abs=0.05)
    assert bins.final_before_ns >= int(host[-1, 0]) - bins.width_ns


def test_bins_keep_what_the_ring_dropped_and_start_over_on_a_new_store() -> None:
    store = StepStore(capacity=500)  # holds 0.5 s of these 1 ms steps
    store.set_device_is_host(True)
    host = marks(3000, 1 * MS)
    bins = TimelineBins()
    feed(store, host, bins, cuda=False, window_ns=2_000 * MS)
    hi = int(host[-1, -1])
    old = bins.columns(hi - 2_000 * MS, hi - 1_000 * MS, 50)
    assert old["data"].mean() == pytest.approx(0.30, abs=0.03)  # older than the ring
    assert len(store.snapshot()) == 500
    other = StepStore()
    bins.update(other, [], ORIGIN, lo_ns=hi - 2_000 * MS, hi_ns=hi, px_ns=2_000 * MS / 400)
    assert bins.columns(hi - 2_000 * MS, hi, 50).share.sum() == 0


def test_sample_busy_is_exact_computed_once_and_unknown_until_final() -> None:
    store = StepStore()
    store.set_device_is_host(True)
    host = marks(2000, 1 * MS)
    store.append(list(range(2000)), [0] * 2000, [8] * 2000, host.tolist())
    t0 = ORIGIN - 100 * MS + np.arange(0, 2_100 * MS, 167 * MS)
    coarse = SeriesView(t0, t0 + 167 * MS, np.full(len(t0), 50.0))
    want = busy_percent_over(active_spans(store.snapshot()), coarse.t0, coarse.t1)
    cache = SampleBusy()
    final = int(host[1000, 0])
    got = cache.over(store, coarse, final, key=1)
    done = coarse.t1 <= final
    np.testing.assert_allclose(got[done], want[done])
    assert np.isnan(got[~done]).all()  # not final yet: not drawn, never a guess
    assert np.isnan(got[0])  # the period starts before the first mark: unknown for good
    assert np.isfinite(got[1:][done[1:]]).all()
    # Cached: a store without those steps still gives the same figures for them.
    again = cache.over(StepStore(), coarse, final, key=1)
    np.testing.assert_allclose(again[done], want[done])
    assert np.isnan(cache.over(StepStore(), coarse, final, key=2)).all()  # a new run


def test_dense_lane_image_stacks_shares_from_the_bottom_with_visible_minimum() -> None:
    n, rows = 4, 20
    a = np.array([0.5, 0.25, 0.0, 0.01])
    b = np.array([0.25, 0.5, 0.0, 0.0])
    back = np.where((a + b) > 0, np.uint32(9), np.uint32(CLEAR))
    pixels = render([Lane([a, b], [1, 2], back), Lane([np.ones(n)], [3])], n, rows, 0.8)
    bar_px = 16  # 0.8 of 20 rows, centred: rows 2..17 of each lane
    lane0 = pixels[:rows]
    assert (lane0[:2] == CLEAR).all() and (lane0[18:] == CLEAR).all()
    bar = lane0[2:18][::-1]  # bottom row first
    assert (bar[:, 0] == 1).sum() == 0.5 * bar_px and (bar[:, 0] == 2).sum() == 0.25 * bar_px
    assert (bar[:8, 0] == 1).all() and (bar[8:12, 0] == 2).all()  # a below b
    assert (bar[12:, 0] == 9).all()  # the pale backing above the bars
    assert (bar[:, 2] == CLEAR).all()  # nothing happened in that column
    assert (bar[:, 3] == 1).sum() == 1  # 1 % of a column is still one pixel
    assert (pixels[rows + 2 : rows + 18] == 3).all() and len(ROWS) == ROW["steps"] + 1


def test_a_view_parked_in_the_past_holds_few_bins_and_catches_up_when_followed() -> None:
    store = StepStore()
    store.set_device_is_host(True)
    host = marks(6000, 1 * MS)
    bins = TimelineBins()
    store.append(list(range(1000)), [0] * 1000, [8] * 1000, host[:1000].tolist())
    park = {"lo_ns": ORIGIN, "hi_ns": ORIGIN + 500 * MS, "px_ns": 500 * MS / 100}
    bins.update(store, [], ORIGIN, **park)
    for lo in range(1000, 6000, 500):  # the run goes on; the view stays where it is
        store.append(list(range(lo, lo + 500)), [0] * 500, [8] * 500, host[lo : lo + 500].tolist())
        bins.update(store, [], ORIGIN, **park)
    assert bins.last_repriced == 0  # nothing visible changed: no work
    held_ns = bins.final_before_ns - ORIGIN
    assert held_ns <= 2 * 500 * MS + bins.width_ns  # one view width to the right at most
    hi = int(host[-1, -1])
    follow = {"lo_ns": hi - 500 * MS, "hi_ns": hi, "px_ns": 500 * MS / 100}
    bins.update(store, [], ORIGIN, **follow)
    assert bins.columns(hi - 400 * MS, hi - 100 * MS, 30)["data"].mean() == pytest.approx(
        0.30, abs=0.03
    )


def test_sample_busy_one_sample_at_a_time_is_never_left_unknown() -> None:
    """As in the window: each frame one more sample becomes final. With slow, input-heavy
    steps a sample often starts inside a data phase; its figure still needs the step before."""
    store = StepStore()
    store.set_device_is_host(True)
    host = marks(300, 250 * MS)  # 250 ms steps, 30 % of each is data
    store.append(list(range(300)), [0] * 300, [8] * 300, host.tolist())
    t0 = ORIGIN + 1_000 * MS + np.arange(0, 60_000 * MS, 1_000 * MS)
    coarse = SeriesView(t0, t0 + 1_000 * MS, np.full(len(t0), 100.0))
    want = busy_percent_over(active_spans(store.snapshot()), coarse.t0, coarse.t1)
    cache = SampleBusy()
    for t1 in coarse.t1:
        got = cache.over(store, coarse, int(t1), key=1)
    np.testing.assert_allclose(got, want)
    assert np.isfinite(got).all()


def test_sample_busy_of_a_view_moving_on_equals_a_fresh_computation() -> None:
    """Frame after frame the view moves on and more becomes final: the figures kept from the
    last frame, shifted with the view, are those a fresh cache computes."""
    store = StepStore()
    store.set_device_is_host(True)
    host = marks(3000, 10 * MS)
    store.append(list(range(3000)), [0] * 3000, [8] * 3000, host.tolist())
    t0 = ORIGIN + np.arange(0, 30_000 * MS, 167 * MS)
    every = SeriesView(t0, t0 + 167 * MS, np.full(len(t0), 50.0))
    cache = SampleBusy()
    for frame, final in enumerate(range(int(host[300, 0]), int(host[-1, -1]), 400 * MS)):
        first = frame // 2  # one sample leaves the view every other frame
        view = SeriesView(every.t0[first:], every.t1[first:], every.value[first:])
        got = cache.over(store, view, final, key=1)
        fresh = SampleBusy().over(store, view, final, key=1)
        np.testing.assert_array_equal(got, fresh)
    assert np.isfinite(got[: len(got) // 2]).all()
