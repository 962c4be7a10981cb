"""Interval arithmetic and headline figures on synthetic inputs with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwatch.core.figures.analysis import (
    Headline,
    active_spans,
    busy_fraction,
    coverage_before,
    gaps,
    headline,
    is_merged,
    kinds_coverage_before,
    merge_intervals,
    phase_coverage_before,
    phase_durations,
    phase_spans,
    uniform_windows,
)
from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST, ALL_PHASES, PHASES

MS = 1_000_000
#: Phase lengths (ms) of the synthetic step: data, h2d, forward, backward, optimizer, sync.
PHASE_MS = (4.0, 1.0, 2.0, 2.0, 0.5, 0.5)
OTHER_MS = 1.0
PERIOD_MS = sum(PHASE_MS) + OTHER_MS  # 11 ms from one step's start to the next
assert len(PHASE_MS) == len(PHASES)


def _arr(values: list[int]) -> np.ndarray:
    return np.asarray(values, np.int64)


def _steps(
    n: int,
    t0: int = 10**9,
    *,
    samples: int = 32,
    lag_ns: int = 0,
    marked: np.ndarray | None = None,
    ids: np.ndarray | None = None,
) -> StepsView:
    """A synthetic run: every step has PHASE_MS phases then OTHER_MS of loop overhead.

    Device marks are the host marks shifted by ``lag_ns`` on the ``marked`` steps.
    """
    offsets = np.concatenate(([0.0], np.cumsum(PHASE_MS))) * MS
    starts = t0 + np.arange(n, dtype=np.int64) * int(PERIOD_MS * MS)
    host = starts[:, None] + offsets.astype(np.int64)[None, :]
    has = np.ones(n, bool) if marked is None else marked
    return StepsView(
        step=np.arange(n, dtype=np.int64) if ids is None else ids,
        config=np.zeros(n, np.int32),
        samples=np.full(n, samples, np.int32),
        host=host,
        device=host + lag_ns,
        has_device=has,
    )


# ---- every phase's coverage in one pass -----------------------------------------------------


def test_every_phases_coverage_in_one_pass_is_each_phase_merged_and_covered() -> None:
    rng = np.random.default_rng(3)
    view = _steps(60)
    # Jittered marks (zero-length phases among them), a hole in the step ids (no "other"
    # across it) and a restart: still never back in time.
    host = view.host + np.cumsum(rng.integers(0, 2 * MS, view.host.shape), axis=1)
    host[:, 3] = host[:, 2]
    host += np.cumsum(host[:, -1] - host[:, 0])[:, None]
    ids = np.concatenate((np.arange(30), np.arange(40, 55), np.arange(15)))
    view = StepsView(ids, view.config, view.samples, host, host, view.has_device)
    t = np.sort(rng.integers(int(host[0, 0]) - 5 * MS, int(host[-1, -1]) + 5 * MS, 400))
    t = np.concatenate(([host[0, 0] - 1], t, host[[5, 31], 2], [host[-1, -1] + 1]))
    got = phase_coverage_before(view, np.sort(t))
    assert got is not None
    for row, (name, (s, e)) in enumerate(phase_spans(view).items()):
        assert name == ALL_PHASES[row]
        want = coverage_before(*merge_intervals(s, e), np.sort(t))
        np.testing.assert_array_equal(got[row], want, err_msg=name)
    # Pixel-column edges are floats: the same figures.
    at_floats = phase_coverage_before(view, np.sort(t).astype(np.float64))
    np.testing.assert_allclose(at_floats, got, rtol=0, atol=1e-3)
    # Marks that go back in time: each phase must be merged on its own.
    back = host.copy()
    back[10, 2] = back[10, 0] - MS
    odd = StepsView(ids, view.config, view.samples, back, back, view.has_device)
    assert phase_coverage_before(odd, t) is None


def test_kinds_coverage_in_one_pass_is_each_kinds_merged_coverage() -> None:
    rng = np.random.default_rng(5)
    # Sorted, disjoint spans with gaps between some and touching others, of four kinds.
    edges = np.cumsum(rng.integers(0, 3 * MS, 401))
    s, e = edges[:-1:2], edges[1::2]
    kind = rng.integers(0, 4, len(s)).astype(np.int8)
    t = np.sort(rng.integers(int(s[0]) - MS, int(e[-1]) + MS, 300))
    t = np.concatenate(([s[0] - 1], t, s[[3, 40]], e[[7, 99]], [e[-1] + 1]))
    t.sort()
    got = kinds_coverage_before(s, e, kind, 4, t)
    assert got is not None
    for k in range(4):
        want = coverage_before(*merge_intervals(s[kind == k], e[kind == k]), t)
        np.testing.assert_array_equal(got[k], want, err_msg=f"kind {k}")
    at_floats = kinds_coverage_before(s, e, kind, 4, t.astype(np.float64))
    np.testing.assert_allclose(at_floats, got, rtol=0, atol=1e-3)
    assert np.all(kinds_coverage_before(s[:0], e[:0], kind[:0], 4, t) == 0)
    # Overlapping spans: each kind must be merged on its own.
    assert kinds_coverage_before(_arr([0, 5]), _arr([10, 15]), _arr([0, 1]), 2, t) is None
    assert kinds_coverage_before(_arr([0, 20]), _arr([10, 15]), _arr([0, 1]), 2, t) is None


# ---- merge / gaps -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("starts", "ends", "want_s", "want_e"),
    [
        ([0, 5], [10, 15], [0], [15]),  # overlapping
        ([0, 10], [10, 20], [0], [20]),  # touching
        ([0, 10, 30], [100, 20, 40], [0], [100]),  # nested
        ([50, 0, 20], [60, 10, 30], [0, 20, 50], [10, 30, 60]),  # disjoint, unsorted
        ([0, 5, 30, 35], [10, 8, 40, 50], [0, 30], [10, 50]),
        ([0, 20], [10, 15], [0], [10]),  # end < start: corrupt, ignored
        ([], [], [], []),
    ],
)
def test_merge_intervals(
    starts: list[int], ends: list[int], want_s: list[int], want_e: list[int]
) -> None:
    s, e = merge_intervals(_arr(starts), _arr(ends))
    assert s.tolist() == want_s
    assert e.tolist() == want_e
    assert is_merged(s, e)


def test_merge_matches_brute_force() -> None:
    rng = np.random.default_rng(7)
    starts = rng.integers(0, 500, 60)
    ends = starts + rng.integers(0, 30, 60)
    s, e = merge_intervals(starts, ends)
    grid = np.zeros(600, bool)
    for a, b in zip(starts, ends, strict=True):
        grid[a:b] = True
    merged = np.zeros(600, bool)
    for a, b in zip(s, e, strict=True):
        merged[a:b] = True
    np.testing.assert_array_equal(grid, merged)
    assert is_merged(s, e)


def test_gaps() -> None:
    s, e = _arr([0, 15, 40]), _arr([10, 20, 50])
    g0, g1 = gaps(s, e)
    assert (g0.tolist(), g1.tolist()) == ([10, 20], [15, 40])
    g0, g1 = gaps(s, e, min_ns=10)
    assert (g0.tolist(), g1.tolist()) == ([20], [40])
    assert len(gaps(_arr([0]), _arr([5]))[0]) == 0
    assert len(gaps(_arr([]), _arr([]))[0]) == 0


# ---- busy fraction ----------------------------------------------------------------------


def _brute_busy(starts: np.ndarray, ends: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Unit-cell reference: cell t is busy if some interval covers [t, t+1)."""
    grid = np.zeros(int(max(ends.max(initial=0), w1.max())) + 1, bool)
    for a, b in zip(starts, ends, strict=True):
        grid[a:b] = True
    return np.array(
        [grid[a:b].sum() / (b - a) if b > a else np.nan for a, b in zip(w0, w1, strict=True)]
    )


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_busy_fraction_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, 2_000, 80)
    ends = starts + rng.integers(0, 120, 80)  # overlapping and unsorted: merged inside
    w0 = rng.integers(0, 2_100, 200)
    w1 = w0 + rng.integers(0, 300, 200)  # some zero-length windows
    got = busy_fraction(starts, ends, w0, w1)
    want = _brute_busy(starts, ends, w0, w1)
    np.testing.assert_allclose(got, want, equal_nan=True)
    assert np.isnan(got[w1 == w0]).all()
    assert 0 < np.nanmean(got) < 1  # the case is not trivially all-idle or all-busy


def test_busy_fraction_simple_cases() -> None:
    s, e = _arr([10, 30]), _arr([20, 40])
    frac = busy_fraction(s, e, _arr([0, 10, 15, 20, 0, 45, 5]), _arr([50, 20, 35, 30, 10, 60, 5]))
    np.testing.assert_allclose(frac, [0.4, 1.0, 0.5, 0.0, 0.0, 0.0, np.nan], equal_nan=True)
    # no spans at all: valid windows are idle, zero windows still have no figure
    np.testing.assert_allclose(
        busy_fraction(_arr([]), _arr([]), _arr([0, 3]), _arr([10, 3])),
        [0.0, np.nan],
        equal_nan=True,
    )
    assert busy_fraction(s, e, _arr([]), _arr([])).shape == (0,)


def test_uniform_windows() -> None:
    w0, w1 = uniform_windows(100, 350, 100)
    assert w0.tolist() == [100, 200, 300]
    assert w1.tolist() == [200, 300, 350]
    assert len(uniform_windows(100, 100, 10)[0]) == 0
    with pytest.raises(ValueError, match="positive"):
        uniform_windows(0, 10, 0)


# ---- steps ------------------------------------------------------------------------------


def test_active_spans_use_device_marks_only_where_present() -> None:
    marked = np.array([True, False, True])
    view = _steps(3, t0=0, lag_ns=3 * MS, marked=marked)
    s, e = active_spans(view)
    want_s = view.device[marked, ACTIVE_FIRST]
    want_e = view.device[marked, ACTIVE_LAST]
    assert s.tolist() == want_s.tolist()
    assert e.tolist() == want_e.tolist()
    assert len(active_spans(StepsView.empty())[0]) == 0


def test_active_spans_merge_overlapping_steps() -> None:
    view = _steps(2, t0=0)
    view.device[1] = view.device[0] + MS  # second step's device span overlaps the first
    s, e = active_spans(view)
    assert s.tolist() == [view.device[0, ACTIVE_FIRST]]
    assert e.tolist() == [view.device[1, ACTIVE_LAST]]


def test_phase_durations() -> None:
    view = _steps(3)
    d = phase_durations(view)
    assert d.shape == (3, len(ALL_PHASES))
    want = [*(int(p * MS) for p in PHASE_MS), int(OTHER_MS * MS)]
    assert d[0].tolist() == want
    assert d[1].tolist() == want
    assert d[2].tolist() == [*want[:-1], 0]  # the last step's overhead is not known yet
    assert phase_durations(StepsView.empty()).shape == (0, len(ALL_PHASES))


def test_phase_other_clipped_and_not_across_missing_steps() -> None:
    view = _steps(3, ids=np.array([0, 1, 5]))
    view.host[1, :] -= 2 * MS  # step 1 starts before step 0 ended (clock oddity)
    view.host[1, -1] = view.host[1, -1] + 2 * MS
    d = phase_durations(view)
    assert d[0, -1] == 0  # negative overhead clipped
    assert d[1, -1] == 0  # steps 2..4 are missing: the time is not step 1's overhead
    assert (d >= 0).all()


# ---- headline ---------------------------------------------------------------------------


def test_headline_on_a_synthetic_cpu_run() -> None:
    n, window = 100, 50
    view = _steps(n)  # device marks == host marks: the CPU case
    now = int(view.host[-1, -1])
    period = PERIOD_MS * MS
    # steps whose end lies in (now - window*period, now]: exactly the last 50
    h = headline(view, now, int(window * period))
    assert h.n_steps == window
    span_s = ((window - 1) * PERIOD_MS + sum(PHASE_MS)) / 1e3  # first start .. last end
    assert h.samples_per_s == pytest.approx(window * 32 / span_s)
    assert h.steps_per_s == pytest.approx(window / span_s)
    assert h.step_ms_p50 == pytest.approx(PERIOD_MS)
    assert h.step_ms_p95 == pytest.approx(PERIOD_MS)
    active_ms = sum(PHASE_MS[1:5])  # h2d .. optimizer
    covered_ms = (window - 1) * PERIOD_MS + sum(PHASE_MS)  # last step: up to its end
    assert h.busy_share == pytest.approx(window * active_ms / covered_ms)
    assert h.phase_shares is not None
    assert sum(h.phase_shares.values()) == pytest.approx(1.0)
    total_ms = window * sum(PHASE_MS) + (window - 1) * OTHER_MS
    assert h.phase_shares["data"] == pytest.approx(window * PHASE_MS[0] / total_ms)
    assert h.phase_shares["other"] == pytest.approx((window - 1) * OTHER_MS / total_ms)
    # the step after the window's last one exists: its start bounds the last step's overhead
    h_mid = headline(view, int(view.host[49, -1]), int(window * period))
    assert h_mid.phase_shares is not None
    assert h_mid.phase_shares["other"] == pytest.approx(OTHER_MS / PERIOD_MS)


def test_headline_skips_unmarked_steps_instead_of_counting_them_idle() -> None:
    marked = np.arange(20) % 2 == 0  # the event pool ran dry on odd steps
    view = _steps(20, lag_ns=3 * MS, marked=marked)
    h = headline(view, int(view.host[-1, -1]), 10**12)
    # each marked step covers only its own device span: active / (step without overhead)
    assert h.busy_share == pytest.approx(sum(PHASE_MS[1:5]) / sum(PHASE_MS))


def test_headline_without_device_marks_or_steps() -> None:
    view = _steps(5, marked=np.zeros(5, bool))
    h = headline(view, int(view.host[-1, -1]), 10**12)
    assert h.n_steps == 5
    assert h.busy_share is None
    assert h.samples_per_s is not None
    empty = headline(StepsView.empty(), 0, 10**9)
    assert empty == Headline(n_steps=0)
    assert empty.samples_per_s is None and empty.phase_shares is None
    stale = headline(view, int(view.host[-1, -1]) + 10**10, 10**9)  # nothing ended lately
    assert stale.n_steps == 0 and stale.step_ms_p50 is None


def test_headline_single_step() -> None:
    view = _steps(1)
    h = headline(view, int(view.host[-1, -1]), 10**12)
    assert h.n_steps == 1
    assert h.step_ms_p50 == pytest.approx(sum(PHASE_MS))
    assert h.samples_per_s == pytest.approx(32 / (sum(PHASE_MS) / 1e3))
