"""Vectorised interval arithmetic over step marks: stream-active spans, gaps, busy fractions.

Everything here takes and returns numpy arrays on the ``perf_counter_ns`` axis and never
loops over steps in Python: the GUI recomputes these figures ~30 times a second over up to
10^5 steps. The words follow docs/design.md ("A step's marks"): "stream active" is the union
of device spans
between ``ACTIVE_FIRST`` and ``ACTIVE_LAST`` marks (an *upper bound* of busy time); a gap is
the time between two such merged spans (exact idle of our stream).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST, ALL_PHASES, PHASES

Spans = tuple[np.ndarray, np.ndarray]


def _empty_spans(dtype: np.dtype | type = np.int64) -> Spans:
    return np.empty(0, dtype), np.empty(0, dtype)


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> Spans:
    """Union of ``[starts[i], ends[i]]`` as sorted, disjoint spans.

    Overlapping, nested and touching intervals merge (HTA idiom: a new span begins where a
    start lies beyond the running maximum of all earlier ends). Intervals with
    ``end < start`` are corrupt marks and are ignored rather than allowed to shrink a union.
    """
    s = np.asarray(starts)
    e = np.asarray(ends)
    if s.shape != e.shape or s.ndim != 1:
        raise ValueError(f"starts and ends must be 1-d and equal length, got {s.shape}, {e.shape}")
    dtype = np.result_type(s, e)
    valid = e >= s
    if not valid.all():
        s, e = s[valid], e[valid]
    if s.size == 0:
        return _empty_spans(dtype)
    if s.size > 1 and bool(np.any(s[1:] < s[:-1])):  # step marks come sorted: skip the sort
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    s, e = s.astype(dtype, copy=False), e.astype(dtype, copy=False)
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], run_end[last]


def is_merged(s: np.ndarray, e: np.ndarray) -> bool:
    """True if the spans are already sorted, disjoint and non-touching (merge would be a no-op)."""
    return bool(np.all(e >= s) and np.all(s[1:] > e[:-1]))


def active_spans(view: StepsView) -> Spans:
    """Merged "stream active" spans of the steps that have device marks."""
    mask = np.asarray(view.has_device, bool)
    if not mask.any():
        return _empty_spans()
    first, last = view.device[:, ACTIVE_FIRST], view.device[:, ACTIVE_LAST]
    if not mask.all():  # only the two columns are copied, never the whole mark matrix
        first, last = first[mask], last[mask]
    return merge_intervals(first, last)


def phase_spans(view: StepsView) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Host spans ``(start_ns, end_ns)`` per phase, keyed in ``ALL_PHASES`` order.

    ``PHASES[i]`` runs between marks ``i`` and ``i + 1``; ``other`` runs from a step's end
    to the next step's start, only between consecutive step ids (a hole in the ring or a
    restart is not loop overhead).
    """
    host = np.ascontiguousarray(view.host.T)  # one contiguous row per mark: faster slicing
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for i, name in enumerate(PHASES):
        out[name] = (host[i], host[i + 1])  # empty phases are zero-length spans: harmless
    if len(view) > 1:
        keep = np.diff(view.step) == 1
        out["other"] = (host[-1, :-1][keep], host[0, 1:][keep])
    else:
        empty = np.empty(0, np.int64)
        out["other"] = (empty, empty.copy())
    return out


def phase_coverage_before(view: StepsView, t: np.ndarray) -> np.ndarray | None:
    """Per phase (rows in ``ALL_PHASES`` order), the host time before each time ``t``: what
    ``coverage_before`` of each merged ``phase_spans`` gives, for all phases in one pass.

    None when the marks, read step after step, go back in time (clock oddities): then the
    phases' spans overlap and each must be merged on its own.
    """
    n = len(view)
    bounds = view.host.reshape(-1)
    if n == 0:
        return None
    marks = view.host.shape[1]
    # The interval after boundary j belongs to phase j % marks; the last of a step is the
    # loop overhead ("other") before the next step, only if that step follows it.
    phase = np.tile(np.arange(marks), n)[:-1]
    if n > 1:
        phase[marks - 1 :: marks][np.diff(view.step) != 1] = -1
    counted = phase >= 0
    return kinds_coverage_before(
        bounds[:-1][counted], bounds[1:][counted], phase[counted], marks, t
    )


def kinds_coverage_before(
    s: np.ndarray, e: np.ndarray, kind: np.ndarray, n_kinds: int, t: np.ndarray
) -> np.ndarray | None:
    """Per kind ``0..n_kinds-1`` (rows), the length of the spans ``(s, e)`` of that kind
    before each time ``t``; None unless the spans are sorted and disjoint (touching is fine).

    What ``coverage_before`` gives for each kind's merged spans, in one pass over all of
    them: a dozen array operations instead of a merge and a coverage per kind, which is most
    of what pricing a few new steps into the dense bins costs.
    """
    if len(s) and bool(np.any(e < s) or np.any(s[1:] < e[:-1])):
        return None
    lengths = np.zeros((n_kinds, len(s) + 1), np.result_type(s, e))
    lengths[kind, np.arange(1, len(s) + 1)] = e - s
    before = np.cumsum(lengths, axis=1)  # column k: each kind's length in the first k spans
    k = np.searchsorted(s, t, side="right") - 1  # the last span starting at or before t
    out = before[:, k + 1].astype(np.result_type(before, t), copy=False)
    within = k >= 0
    # The span k itself counts up to t (or its end).
    out[kind[k[within]], np.flatnonzero(within)] -= np.maximum(e[k[within]] - t[within], 0)
    return out


def gaps(s: np.ndarray, e: np.ndarray, min_ns: int = 0) -> Spans:
    """Idle time between consecutive *merged* spans, keeping gaps of at least ``min_ns``."""
    if len(s) < 2:
        return _empty_spans(np.result_type(s, e))
    g0, g1 = e[:-1], s[1:]
    keep = (g1 - g0) >= min_ns
    return g0[keep], g1[keep]


def coverage_before(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the *merged* spans ``(s, e)`` that lies before each time ``t``.

    Monotone in ``t``, so the busy time of any window is a difference of two values: one call
    over all pixel-column edges prices every column of a lane at once.
    """
    return _coverage(s, e, t)


def _coverage(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the merged spans that lies before each time ``t`` (monotone in ``t``)."""
    cum = np.concatenate(([0], np.cumsum(e - s)))
    k = np.searchsorted(s, t, side="right")  # spans starting at or before t
    partial = np.zeros(t.shape, cum.dtype)
    started = k > 0
    # The k-th span (index k-1) may still be running at t: take off its unfinished part.
    partial[started] = np.maximum(e[k[started] - 1] - t[started], 0)
    return cum[k] - partial


def busy_fraction(s: np.ndarray, e: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Fraction of each window ``[w0[i], w1[i]]`` covered by the union of spans ``(s, e)``.

    This is "busy % from our marks" over the same windows as an NVML sample series. Spans
    need not be merged (they are merged here if they overlap); windows may overlap and come
    in any order. Zero-length or inverted windows give NaN: no figure, never 0.
    """
    s = np.asarray(s)
    e = np.asarray(e)
    w0 = np.atleast_1d(np.asarray(w0))
    w1 = np.atleast_1d(np.asarray(w1))
    if w0.shape != w1.shape:
        raise ValueError(f"w0 and w1 differ in shape: {w0.shape}, {w1.shape}")
    out = np.full(w0.shape, np.nan)
    if out.size == 0:
        return out
    if not is_merged(s, e):
        s, e = merge_intervals(s, e)
    width = w1 - w0
    ok = width > 0
    if s.size == 0:
        out[ok] = 0.0
        return out
    covered = _coverage(s, e, w1[ok]) - _coverage(s, e, w0[ok])
    out[ok] = covered / width[ok]
    return out


def busy_percent_over(
    active: tuple[np.ndarray, np.ndarray], w0: np.ndarray, w1: np.ndarray
) -> np.ndarray:
    """Busy % from merged ``active`` spans over given windows (e.g. NVML's sample periods).

    Windows not fully covered by the spans we hold (before the first one, or past the last
    device mark still to arrive) are ``NaN``: unknown, never a false 0.
    """
    out = np.full(len(w0), np.nan)
    s, e = active
    if len(s) == 0 or len(w0) == 0:
        return out
    covered = (w0 >= s[0]) & (w1 <= e.max()) & (w1 > w0)
    if covered.any():
        out[covered] = 100.0 * np.asarray(busy_fraction(s, e, w0[covered], w1[covered]))
    return out


def uniform_windows(t0: int, t1: int, width_ns: int) -> Spans:
    """Consecutive windows of ``width_ns`` from ``t0``; the last one is cut at ``t1``."""
    if width_ns <= 0:
        raise ValueError(f"width_ns must be positive, got {width_ns}")
    if t1 <= t0:
        return _empty_spans()
    n = -(-(t1 - t0) // width_ns)  # ceil division on ints
    w0 = t0 + np.arange(n, dtype=np.int64) * width_ns
    w1 = np.minimum(w0 + width_ns, t1)
    return w0, w1


def phase_durations(view: StepsView) -> np.ndarray:
    """Host time per phase, shape ``(n, len(ALL_PHASES))`` in ns, ``other`` last.

    ``PHASES[i]`` lasts from mark i to mark i+1. ``other`` is the loop overhead from a step's
    end to the next step's start; it is 0 for the last row and where the next row is not the
    next step id (a step missing in between would otherwise be booked as overhead).
    Negative values (clock oddities) are clipped to 0.
    """
    n = len(view)
    out = np.zeros((n, len(ALL_PHASES)), np.int64)
    if n == 0:
        return out
    host = view.host
    out[:, : len(PHASES)] = np.diff(host, axis=1)
    if n > 1:
        consecutive = np.diff(view.step) == 1
        other = host[1:, 0] - host[:-1, -1]
        out[:-1, -1] = np.where(consecutive, other, 0)
    np.maximum(out, 0, out=out)
    return out


@dataclass(frozen=True)
class Headline:
    """Figures over the steps that ended in the last window; None means "not computable".

    ``busy_share`` is the stream-active share (an upper bound of device busy time) of the
    time covered by steps with device marks; ``phase_shares`` sum to 1 over ``ALL_PHASES``.
    """

    n_steps: int
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    step_ms_p50: float | None = None
    step_ms_p95: float | None = None
    busy_share: float | None = None
    phase_shares: dict[str, float] | None = None


def headline(view: StepsView, now_ns: int, window_ns: int) -> Headline:
    """Headline numbers over the steps of ``view`` whose host end lies in the last window."""
    if len(view) == 0:
        return Headline(n_steps=0)
    end = view.host[:, -1]
    sel = (end > now_ns - window_ns) & (end <= now_ns)
    n = int(sel.sum())
    if n == 0:
        return Headline(n_steps=0)
    durations = phase_durations(view)  # on the whole view so `other` sees the next step
    rows = durations[sel]
    step_ns = rows.sum(axis=1)
    host = view.host[sel]
    span = int(host[-1, -1] - host[0, 0])
    samples_per_s = steps_per_s = None
    if span > 0:
        samples_per_s = float(view.samples[sel].sum()) * 1e9 / span
        steps_per_s = n * 1e9 / span
    p50, p95 = np.percentile(step_ns, [50, 95]) / 1e6
    total = int(rows.sum())
    shares = None
    if total > 0:
        per_phase = rows.sum(axis=0)
        shares = {name: float(v) / total for name, v in zip(ALL_PHASES, per_phase, strict=True)}
    return Headline(
        n_steps=n,
        samples_per_s=samples_per_s,
        steps_per_s=steps_per_s,
        step_ms_p50=float(p50),
        step_ms_p95=float(p95),
        busy_share=busy_share(view, sel),
        phase_shares=shares,
    )


def busy_share(view: StepsView, sel: np.ndarray) -> float | None:
    """Stream-active share of the device time covered by the selected, device-marked steps.

    Each marked step covers ``[device start, next step's device start]`` when the next step
    is the next id and is marked, else ``[device start, device end]``. Steps without device
    marks (not harvested yet, or skipped when the event pool ran dry) are left out instead
    of being counted as idle.
    """
    has = np.asarray(view.has_device, bool)
    mask = sel & has
    if not mask.any():
        return None
    dev = view.device
    c0 = dev[:, 0].copy()
    c1 = dev[:, -1].copy()
    if len(view) > 1:
        chained = (np.diff(view.step) == 1) & has[1:]
        c1[:-1] = np.where(chained, np.maximum(dev[1:, 0], c1[:-1]), c1[:-1])
    c0, c1 = c0[mask], c1[mask]
    width = c1 - c0
    total = int(width[width > 0].sum())
    if total <= 0:
        return None
    s, e = active_spans(view)
    frac = busy_fraction(s, e, c0, c1)
    busy = float(np.nansum(frac * width))
    return min(max(busy / total, 0.0), 1.0)
