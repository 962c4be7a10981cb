"""Busy % from our marks over each coarse sample's period, computed once per sample.

The utilization panel draws, beside NVML's (or the process tree's CPU) samples, the busy %
our own marks give over *the same* periods. Re-deriving it every frame needs the device's
active spans of every visible step (30,000-300,000 at 1,000-10,000 steps/s). A sample's
figure cannot change once every step that could touch its period is final
(``TimelineBins.final_before_ns``), so it is computed then, once, and kept.
"""

from __future__ import annotations

import numpy as np

from gpuwatch.core.figures.analysis import active_spans, busy_percent_over
from gpuwatch.core.model.store import SeriesView, StepStore


class SampleBusy:
    """Busy % per coarse sample, cached by the sample's period."""

    def __init__(self) -> None:
        self._key: object = None
        self._cache: dict[tuple[int, int], float] = {}
        #: The samples of the last call and the figures it returned.
        self._last: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def over(
        self, store: StepStore, coarse: SeriesView, final_before_ns: int, key: object
    ) -> np.ndarray:
        """Busy % for each sample of ``coarse``; NaN where not final yet or not covered by
        marks (unknown, never 0). ``key`` names the run: a new key forgets the cache."""
        if key != self._key:
            self._key = key
            self._cache.clear()
            self._last = None
        out = np.full(len(coarse), np.nan)
        self._known_from_last(coarse, out)
        asked = np.flatnonzero(np.isnan(out))  # the others: known last time
        periods = dict(
            zip(
                asked.tolist(),
                zip(coarse.t0[asked].tolist(), coarse.t1[asked].tolist(), strict=True),
                strict=True,
            )
        )
        todo = []
        for i, period in periods.items():
            value = self._cache.get(period)
            if value is not None:
                out[i] = value
            elif period[1] <= final_before_ns:
                todo.append(i)
        if todo:
            idx = np.asarray(todo)
            w0, w1 = coarse.t0[idx], coarse.t1[idx]
            view = store.snapshot(since_ns=int(w0.min()), before=1)  # spans from before w0
            active = active_spans(view)
            busy = busy_percent_over(active, w0, w1)
            out[idx] = busy
            # Unknown stays unknown only where the marks begin after the period's start;
            # other unknowns (marks still to come) are asked again next time.
            first = int(active[0][0]) if len(active[0]) else None
            keep = np.isfinite(busy) | ((w0 < first) if first is not None else False)
            self._cache.update(
                (periods[i], v)
                for i, v, k in zip(todo, busy.tolist(), keep.tolist(), strict=True)
                if k
            )
        if len(self._cache) > 4 * max(len(coarse), 256):  # scrolled out of every view
            oldest = int(coarse.t0[0]) if len(coarse) else 0
            self._cache = {p: v for p, v in self._cache.items() if p[1] >= oldest}
        self._last = (coarse.t0, coarse.t1, out.copy())
        return out

    def _known_from_last(self, coarse: SeriesView, out: np.ndarray) -> None:
        """Copy into ``out`` the figures the last call returned for the same samples (the
        view moves on a few samples at a time): every one of them is final (a figure still
        to come was NaN), so only the rest is looked up."""
        last = self._last
        if last is None or not len(coarse):
            return
        t0, t1, values = last
        j = int(np.searchsorted(t0, coarse.t0[0]))
        m = min(len(t0) - j, len(coarse))
        same = m > 0 and np.array_equal(t0[j : j + m], coarse.t0[:m])
        if same and np.array_equal(t1[j : j + m], coarse.t1[:m]):
            out[:m] = values[j : j + m]
