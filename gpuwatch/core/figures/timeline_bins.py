"""The timeline's lanes aggregated into fine time bins, kept up to date incrementally.

At 1,000-10,000 steps/s a 30 s view holds 30,000-300,000 steps, far more than its ~1,500
pixel columns can show. Re-deriving every lane, the device's active spans and the idle time
by cause from all of them on every frame cost 40-90 ms here (``bench/render.py``). Instead,
each lane's occupancy (ns covered) is summed into bins of ``width_ns`` as steps arrive, and a
frame only re-prices the *tail*: the bins that steps still in flight can change. A frame then
costs the new steps plus one pass over the visible bins, whatever the step rate.

Bins are exact (each holds the ns the lane covered inside it); pixel columns are made from
them by interpolating the running total at the column edges, so a column's share is off by at
most what one bin's content could shift. Bins are 1/4 of a pixel column or finer.

What makes a bin final: every step that can still change (the newest step, whose loop
overhead ``other`` runs until the next step starts; and, on CUDA, steps whose device marks
have not come yet, up to ``DEVICE_MARK_WAIT_NS`` old) starts after it. A new knob change
re-opens the bins from its first step (its transition is *reconfigure* idle). A change of
the session, the bin width, or the store itself (a replay's seek rebuilds it) starts over.

Bins outlive the step ring: at 10,000 steps/s the ring holds 13 s, but a 30 s view keeps the
bins of the steps the ring has dropped since (until one of those changes starts over).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuwatch.core.figures.analysis import (
    active_spans,
    coverage_before,
    kinds_coverage_before,
    merge_intervals,
    phase_coverage_before,
    phase_spans,
)
from gpuwatch.core.figures.gap_causes import CAUSES, caused_idle, reconfiguring_steps
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.model.store import StepStore, StepsView
from gpuwatch.protocol import ALL_PHASES

#: Rows of the bins: host phases, the device's active time, idle time per cause, step starts.
ROWS: tuple[str, ...] = (*ALL_PHASES, "active", *(f"idle:{c}" for c in CAUSES), "steps")
ROW = {name: i for i, name in enumerate(ROWS)}
#: The phase rows and the idle-cause rows, each contiguous in ``ROWS``.
_PHASE_ROWS = slice(ROW[ALL_PHASES[0]], ROW[ALL_PHASES[-1]] + 1)
_IDLE_ROWS = slice(ROW[f"idle:{CAUSES[0]}"], ROW[f"idle:{CAUSES[-1]}"] + 1)
#: Bins per pixel column at least (the width is a power of two of ns at or below this).
BINS_PER_COLUMN = 4
#: Steps before the first bin to re-price are read too: a step's device work (CUDA runs
#: behind the host) reaches past its host end by about this much (and one step more is read
#: for a loop overhead longer than that).
LOOKBACK_NS = 100_000_000
#: A step whose device marks have not come after this long never gets them (the event pool
#: ran dry and the runner skipped it): its bins become final, its device time unknown.
DEVICE_MARK_WAIT_NS = 2_000_000_000

#: What the bins were built for: the store's identity, the time origin and the bin width.
_BinsKey = tuple[int, int, int]
#: A knob change as far as the reconfigure cause goes: id, changed, first step, warm-up steps.
_Transition = tuple[int, bool, int, int]


def bin_width_ns(px_ns: float) -> int:
    """The bin width for a pixel column of ``px_ns``: a power of two (so small zooms and
    window resizes keep the bins), at least ``BINS_PER_COLUMN`` bins per column."""
    target = max(px_ns / BINS_PER_COLUMN, 1.0)
    return 1 << int(np.floor(np.log2(target)))


@dataclass(frozen=True)
class Columns:
    """Per pixel column of ``[lo, hi]``: the share of the column each row covered.

    ``share[ROW[name]]`` is in 0..1 for the time rows; the ``steps`` row holds step starts
    per column (a count, not a share).
    """

    c0: np.ndarray
    c1: np.ndarray
    share: np.ndarray  # (len(ROWS), n_columns)

    def __getitem__(self, name: str) -> np.ndarray:
        row: np.ndarray = self.share[ROW[name]]
        return row

    @property
    def n_steps(self) -> int:
        return round(float(self["steps"].sum()))


class TimelineBins:
    """Lane occupancy in bins of one width, updated from a ``StepStore`` frame by frame."""

    def __init__(self) -> None:
        self._key: _BinsKey | None = None
        self._transitions: tuple[_Transition, ...] = ()
        self.width_ns = 1
        self._origin = 0
        self._k0 = 0  # index of the first bin held
        self._occ = np.zeros((len(ROWS), 0))
        self._end = 0  # bins of ``_occ`` ever written (the rest of it is zeros)
        self._clean_k = 0  # bins before this index are final
        self._seen = 0  # the store's step count at the last update
        #: Bins re-priced by the last ``update`` (for tests and the bench).
        self.last_repriced = 0
        #: The last ``columns`` asked for and returned, and the first bin written since.
        self._read: tuple[tuple[int, int, int, int, int, int], Columns] | None = None
        self._written_k: int | None = None
        #: Columns computed by the last ``columns`` (the others were kept; for tests).
        self.last_computed = 0

    @property
    def final_before_ns(self) -> int:
        """Everything before this time is final (no arriving data changes it)."""
        return self._origin + self._clean_k * self.width_ns

    def update(
        self,
        store: StepStore,
        changes: Sequence[ConfigChange],
        origin_ns: int,
        *,
        lo_ns: int,
        hi_ns: int,
        px_ns: float,
        final: bool = False,
    ) -> None:
        """Bring the bins covering ``[lo_ns, hi_ns]`` up to date with ``store``.

        ``final``: no more data will come (the run ended, or a replay): every bin is final.
        """
        width = bin_width_ns(px_ns)
        # What decides the reconfigure cause (ConfigChange holds dicts: not hashable).
        transitions = tuple((c.id, bool(c.changed), c.first_step, c.warmup_steps) for c in changes)
        key = (id(store), origin_ns, width)
        count = store.count
        k_lo = (lo_ns - origin_ns) // width
        added = transitions[len(self._transitions) :]
        if (
            key != self._key
            or count < self._seen
            or k_lo < self._k0
            or transitions[: len(self._transitions)] != self._transitions
        ):
            self._reset(key, origin_ns, width, k_lo)
        elif added:  # a knob change: its transition re-prices from its first step on
            self._reopen_from(store, min(first for _, _, first, _ in added))
        self._transitions = transitions
        self._seen = count
        visible = (hi_ns - lo_ns) // width + 1
        self._trim(k_lo, visible)
        start_k = max(self._clean_k, self._k0)
        # Bins are kept up to one view width right of the view: a view parked in the past
        # while the run goes on costs nothing and holds a bounded number of bins.
        limit_k = (hi_ns - origin_ns) // width + visible
        self.last_repriced = 0
        if start_k >= limit_k:
            return
        view = store.snapshot(since_ns=origin_ns + start_k * width - LOOKBACK_NS, before=1)
        later = view.host[:, 0] >= origin_ns + limit_k * width
        if later.any():
            view = view.rows(~later)
        if len(view):
            self._reprice(view, changes, start_k)
        # Steps past the limit exist: the last one before it is complete (its successor is in).
        final_k = self._final_bin(view, final, complete=bool(later.any()))
        self._clean_k = max(self._clean_k, min(final_k, limit_k))

    def columns(self, lo_ns: int, hi_ns: int, n_columns: int) -> Columns:
        """Shares per pixel column of ``[lo_ns, hi_ns]`` (zero where no bin is held).

        Asked for the same columns again (a followed view standing still between strides),
        only the columns over bins written since are computed; the others are kept.
        """
        n = max(int(n_columns), 1)
        key = (lo_ns, hi_ns, n, self._origin, self.width_ns, self._k0)
        read, self._read = self._read, None
        written, self._written_k = self._written_k, None
        edges = np.linspace(lo_ns, hi_ns, n + 1)
        if read is not None and read[0] == key:
            kept = read[1]
            # A column reads the bins under it: those before the first written bin are kept.
            start_ns = self._origin + written * self.width_ns if written is not None else hi_ns
            first = int(np.searchsorted(edges[1:], start_ns, side="right"))
            share = kept.share.copy()
            if first < n:
                share[:, first:] = self._shares(edges[first:])
            cols = Columns(kept.c0, kept.c1, share)
            self.last_computed = n - first
        else:
            cols = Columns(edges[:-1], edges[1:], self._shares(edges))
            self.last_computed = n
        self._read = (key, cols)
        return cols

    def _shares(self, edges: np.ndarray) -> np.ndarray:
        """Each row's share of the columns between consecutive ``edges`` (steps: a count)."""
        n = len(edges) - 1
        widths = np.diff(edges)
        nb = self._occ.shape[1]
        if nb == 0 or edges[-1] <= edges[0]:
            return np.zeros((len(ROWS), n))
        # Only the bins under the columns: the running total at each of their edges, read at
        # the column edges (linear inside a bin).
        pos = np.clip((edges - self._origin) / self.width_ns - self._k0, 0.0, float(nb))
        b0 = min(int(pos[0]), nb - 1)
        b1 = max(min(int(np.ceil(pos[-1])), nb), b0 + 1)
        occ = self._occ[:, b0:b1]
        local = np.clip(pos - b0, 0.0, float(b1 - b0))
        idx = np.minimum(local.astype(np.int64), b1 - b0 - 1)
        cum = np.zeros((len(ROWS), b1 - b0 + 1))
        np.cumsum(occ, axis=1, out=cum[:, 1:])
        at = cum[:, idx] + (local - idx) * occ[:, idx]
        share = np.diff(at, axis=1)
        time_rows = slice(0, ROW["steps"])
        share[time_rows] = np.clip(share[time_rows] / widths, 0.0, 1.0)
        return share

    # ---- internals --------------------------------------------------------------------

    def _reset(self, key: _BinsKey, origin_ns: int, width: int, k_lo: int) -> None:
        self._key = key
        self._origin = origin_ns
        self.width_ns = width
        self._k0 = self._clean_k = int(k_lo)
        self._occ = np.zeros((len(ROWS), 0))
        self._end = 0
        self._read = None  # the same range may be asked for again: nothing of it is kept
        self._seen = 0
        self._transitions = ()

    def _reopen_from(self, store: StepStore, first_step: int) -> None:
        """Bins from step ``first_step`` on are no longer final (if it has arrived)."""
        view = store.snapshot(since_ns=self.final_before_ns - LOOKBACK_NS)
        later = np.flatnonzero(view.step >= first_step)
        if len(later):
            start = int(view.host[later[0], 0])
            self._clean_k = max(
                min(self._clean_k, (start - self._origin) // self.width_ns), self._k0
            )

    def _trim(self, k_lo: int, visible_bins: int) -> None:
        """Drop bins more than one view width left of the view (follow mode moves right)."""
        drop = int(k_lo - visible_bins - self._k0)
        if drop > 0:
            drop = min(drop, self._occ.shape[1])
            self._occ = self._occ[:, drop:]
            self._end = max(self._end - drop, 0)
            self._k0 += drop
            self._clean_k = max(self._clean_k, self._k0)

    def _reprice(self, view: StepsView, changes: Sequence[ConfigChange], start_k: int) -> None:
        """Recompute every bin from ``start_k`` on from ``view`` (which reaches back far
        enough that nothing before ``start_k`` is missing from those bins)."""
        width, origin = self.width_ns, self._origin
        t_end = int(
            max(
                view.host[:, -1].max(),
                view.device[view.has_device, -1].max() if view.has_device.any() else 0,
            )
        )
        end_k = max(-(-(t_end - origin) // width), start_k + 1)
        edges = origin + width * np.arange(start_k, end_k + 1, dtype=np.int64)
        rows = occupancy_between(view, changes, edges)
        self._store(rows, start_k)
        self.last_repriced = rows.shape[1]

    def _store(self, rows: np.ndarray, start_k: int) -> None:
        """Write ``rows`` as bins ``start_k...``, growing the held range to the right."""
        begin = start_k - self._k0
        need = begin + rows.shape[1]
        if need > self._occ.shape[1]:
            grown = np.zeros((len(ROWS), max(need, 2 * self._occ.shape[1])))
            grown[:, : self._occ.shape[1]] = self._occ
            self._occ = grown
        self._occ[:, begin:need] = rows
        self._occ[:, need : self._end] = 0.0  # nothing beyond the newest data (yet)
        self._end = need
        written = self._written_k
        self._written_k = start_k if written is None else min(written, start_k)

    def _final_bin(self, view: StepsView, final: bool, *, complete: bool = False) -> int:
        """First bin that data still to come may change. ``final``: nothing more comes;
        ``complete``: the newest step of ``view`` has a successor (only device marks still
        to come keep bins open)."""
        if not len(view):
            return self._clean_k
        if final:
            return self._k0 + self._occ.shape[1]
        first_open = first_open_ns(view, complete=complete)
        if first_open is None:
            return self._k0 + self._occ.shape[1]
        return int((first_open - self._origin) // self.width_ns)


def first_open_ns(view: StepsView, *, complete: bool = False) -> int | None:
    """Where the first step that data still to come may change starts: the first step whose
    device marks may still come (``DEVICE_MARK_WAIT_NS``), else the newest step (its loop
    overhead runs until the next one starts); None when ``complete`` (the newest step of
    ``view`` has a successor) and no marks are awaited. ``view`` must hold every step that
    ended in the last ``DEVICE_MARK_WAIT_NS`` before its newest step's end."""
    host_start = view.host[:, 0]
    newest_end = int(view.host[-1, -1])
    pending = ~np.asarray(view.has_device, bool) & (
        view.host[:, -1] > newest_end - DEVICE_MARK_WAIT_NS
    )
    if pending.any():
        return int(host_start[np.argmax(pending)])
    if complete:
        return None
    return int(host_start[-1])


def steps_final_before_ns(store: StepStore, *, final: bool) -> int:
    """Everything before this time is final, read from the newest steps (``first_open_ns``),
    without bins: for a view drawn span by span. ``final``: nothing more comes."""
    newest = store.snapshot(last=1)
    if not len(newest):
        return 0
    end = int(newest.host[-1, -1])
    if final:
        return end + 1
    opened = first_open_ns(store.snapshot(since_ns=end - DEVICE_MARK_WAIT_NS))
    return opened if opened is not None else int(newest.host[-1, 0])


def occupancy_between(
    view: StepsView, changes: Sequence[ConfigChange], edges: np.ndarray
) -> np.ndarray:
    """ns of each row of ``ROWS`` between consecutive ``edges`` (step starts: a count)."""
    rows = np.zeros((len(ROWS), len(edges) - 1))
    phases = phase_coverage_before(view, edges)
    if phases is not None:
        rows[_PHASE_ROWS] = np.diff(phases, axis=1)
    else:
        for name, (s, e) in phase_spans(view).items():
            rows[ROW[name]] = np.diff(coverage_before(*merge_intervals(s, e), edges))
    a, b = active_spans(view)
    rows[ROW["active"]] = np.diff(coverage_before(a, b, edges))
    idle = caused_idle(view, None, reconfiguring_steps(view, changes))
    causes = kinds_coverage_before(idle.start, idle.end, idle.cause, len(CAUSES), edges)
    if causes is not None:
        rows[_IDLE_ROWS] = np.diff(causes, axis=1)
    else:
        for i, cause in enumerate(CAUSES):
            rows[_IDLE_ROWS.start + i] = np.diff(coverage_before(*idle.spans(cause), edges))
    rows[ROW["steps"]] = np.diff(np.searchsorted(view.host[:, 0], edges, side="left"))
    return rows


def columns_of(
    view: StepsView, changes: Sequence[ConfigChange], lo_ns: int, hi_ns: int, n_columns: int
) -> Columns:
    """Shares per pixel column straight from ``view``, without incremental state (for a
    one-off drawing; the window keeps a ``TimelineBins`` instead)."""
    n = max(int(n_columns), 1)
    edges = np.linspace(lo_ns, hi_ns, n + 1)
    share = occupancy_between(view, changes, edges)
    time_rows = slice(0, ROW["steps"])
    share[time_rows] = np.clip(share[time_rows] / np.diff(edges), 0.0, 1.0)
    return Columns(edges[:-1], edges[1:], share)
