"""Segments (steps under one knob configuration) and their scoreboard rows.

The words follow docs/knobs.md §3: a segment's first ``warmup_steps`` steps are its
*transition* (loader rebuild, recompile, autotune) and are left out of every figure; the rest
are its *steady* steps, less the steps a kernel capture profiled (``Scoreboard.mark_profiled``:
a profiler slows the steps it observes); the steps trained while the next change
was being prepared (``preparing_since``: its workers were starting) end its figures. A
figure that cannot be computed is ``None`` ("n/a"), never 0; a row whose figures wait for
more steady steps says how many it has and needs (``SteadyWait``).

Samples/s is the median of 1 s window rates: a window evens out steps of a millisecond. A
step longer than a window fills one by itself, so steps that long are rated one by one (each
steady step's samples over its own duration), and fewer of them make a figure
(``MIN_LONG_STEADY_STEPS``): at 6 s a step, five steady steps after three warm-up steps would
leave the row empty for 48 s.
Rows of finished segments are frozen (``Scoreboard``), so the step ring dropping old steps
never changes them.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuwatch.core.figures.analysis import busy_share, phase_durations
from gpuwatch.core.figures.step_breakdown import step_breakdown
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.model.metrics import NVML_GPU_UTIL, NVML_POWER, PROC_CPU
from gpuwatch.core.model.store import SeriesStore, SeriesView, StepStore, StepsView
from gpuwatch.protocol import ALL_PHASES

#: Fewer steady steps than this: the segment's figures are "not steady yet" (None).
MIN_STEADY_STEPS = 5
#: Width of the windows whose median rate is the segment's samples/s.
SCORE_WINDOW_S = 1.0
#: Steps whose median lasts at least a rate window are rated per step, from this many on.
MIN_LONG_STEADY_STEPS = 3
BASELINE_LABEL = "baseline"

_DATA = ALL_PHASES.index("data")


@dataclass(frozen=True)
class SteadyWait:
    """A row whose figures wait for steady steps: how many it has, how many they need, and
    whether more can still come (the live row) or the segment ended too short."""

    steady_steps: int
    needed: int
    live: bool

    def text(self) -> str:
        counted = f"{self.steady_steps} of {self.needed} steady steps"
        return f"measuring ({counted})" if self.live else f"n/a (only {counted})"


@dataclass(frozen=True)
class SegmentStats:
    """One scoreboard row; see docs/knobs.md §3 for the exact meaning of every figure."""

    config_id: int
    label: str
    settings: dict[str, Any]
    changed: dict[str, Any]
    t_ns: int
    steps: int
    steady_steps: int
    samples_per_s: float | None = None
    step_ms_p50: float | None = None
    step_ms_p95: float | None = None
    busy_share: float | None = None
    input_wait_share: float | None = None
    coarse_util: float | None = None
    coarse_source: str | None = None
    energy_j_per_step: float | None = None
    speedup: float | None = None
    transition_s: float | None = None
    window_rates: tuple[float, ...] = ()
    steady_since_ns: int | None = None
    steady_until_ns: int | None = None
    live: bool = False
    rebuilt: tuple[str, ...] = ()
    #: ms per steady step: device idle by cause (gap_causes.CAUSES), the step-time breakdown
    #: (step_breakdown.CATEGORIES, sums to the mean step time) and host time per phase.
    idle_causes: dict[str, float] | None = None
    breakdown: dict[str, float] | None = None
    host_phases: dict[str, float] | None = None
    #: Steady steps the figures need: MIN_STEADY_STEPS, or MIN_LONG_STEADY_STEPS for steps
    #: at least a rate window long.
    steady_needed: int = MIN_STEADY_STEPS
    #: How samples/s was rated: "window" (median of 1 s windows) or "step" (median per step).
    rate_basis: str = "window"
    #: A run of many ranks: samples/s summed over the ranks with steady steps in this
    #: configuration, how many they were, and the spread of their step p50s (min, max).
    ranks_samples_per_s: float | None = None
    ranks_counted: int = 0
    rank_step_ms: tuple[float, float] | None = None

    @property
    def steady(self) -> bool:
        return self.samples_per_s is not None

    @property
    def waiting(self) -> SteadyWait | None:
        """Why the figures are not there yet (too few steady steps), or None."""
        if self.steady_steps >= self.steady_needed:
            return None
        return SteadyWait(self.steady_steps, self.steady_needed, self.live)

    @property
    def steady_s(self) -> float:
        if self.steady_since_ns is None or self.steady_until_ns is None:
            return 0.0
        return max(0, self.steady_until_ns - self.steady_since_ns) / 1e9

    def to_json(self) -> dict[str, Any]:
        """The segment object of the ``gpuwatch bench`` JSON contract (docs/knobs.md §5)."""
        return {
            "label": self.label,
            "settings": dict(self.settings),
            "changed": dict(self.changed),
            "samples_per_s": self.samples_per_s,
            "step_ms_p50": self.step_ms_p50,
            "step_ms_p95": self.step_ms_p95,
            "busy_share": self.busy_share,
            "input_wait_share": self.input_wait_share,
            "coarse_util": self.coarse_util,
            "coarse_source": self.coarse_source,
            "energy_j_per_step": self.energy_j_per_step,
            "speedup": self.speedup,
            "steps": self.steps,
            "steady_steps": self.steady_steps,
            "transition_s": self.transition_s,
            "idle_causes": self.idle_causes,
            "breakdown": self.breakdown,
        }


@dataclass(frozen=True)
class CoarseInput:
    """The coarse series a row averages, and how to turn a sample into a 0–1 fraction."""

    util: SeriesView | None
    util_source: str | None
    util_scale: float
    power: SeriesView | None


def coarse_input(
    coarse: SeriesStore, device_kind: str | None, cores: int, since_ns: int | None = None
) -> CoarseInput:
    """NVML utilization on CUDA; on a CPU the runner tree's CPU over all its usable cores."""
    if device_kind == "cuda":
        util_name, scale = NVML_GPU_UTIL, 100.0
    else:
        util_name, scale = PROC_CPU, 100.0 * max(1, cores)
    names = set(coarse.names())
    util = coarse.snapshot(util_name, since_ns) if util_name in names else None
    power = coarse.snapshot(NVML_POWER, since_ns) if NVML_POWER in names else None
    return CoarseInput(util, util_name if util is not None else None, scale, power)


def _overlap_mean(series: SeriesView | None, r0: int, r1: int) -> float | None:
    """Time-weighted mean of the samples over ``[r0, r1]``; None if none overlaps."""
    if series is None or len(series) == 0 or r1 <= r0:
        return None
    overlap = np.minimum(series.t1, r1) - np.maximum(series.t0, r0)
    keep = overlap > 0
    if not keep.any():
        return None
    weights = overlap[keep].astype(np.float64)
    return float(np.dot(series.value[keep], weights) / weights.sum())


def window_rates(
    starts: np.ndarray,
    ends: np.ndarray,
    samples: np.ndarray,
    width_ns: int,
    drop: np.ndarray | None = None,
) -> np.ndarray:
    """Samples/s per consecutive window of steps, cut by step start (docs/knobs.md §3).

    A window runs from its first step's start to the next window's first step's start; the
    last one to its last step's end, and it is dropped when shorter than half a window unless
    it is the only one (a partial window is noise, and it would make a live row jitter).
    A window holding a ``drop`` step (profiled by a kernel capture) is left out as a whole.
    """
    if starts.size == 0:
        return np.empty(0)
    index = (starts - starts[0]) // width_ns
    first = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    bounds = np.r_[starts[first], ends[-1]]
    spans = np.diff(bounds).astype(np.float64)
    sums = np.add.reduceat(samples.astype(np.float64), first)
    keep = spans > 0
    if keep.size > 1 and spans[-1] < width_ns / 2:
        keep[-1] = False
    if drop is not None and drop.any():
        keep &= np.add.reduceat(drop.astype(np.int64), first) == 0
    rates: np.ndarray = sums[keep] * 1e9 / spans[keep]
    return rates


def segment_stats(
    view: StepsView,
    change: ConfigChange,
    coarse: CoarseInput | None,
    *,
    live: bool = False,
    profiled: np.ndarray | None = None,
    until_ns: int | None = None,
) -> SegmentStats:
    """The row of one segment from its steps (``view`` holds only this config's steps).

    ``profiled`` marks the steps a kernel capture slowed down: left out like transition steps
    (a rate window holding one is dropped whole). Steps starting at or after ``until_ns`` (the
    next change being prepared) end the segment: no figure or rate window includes them.
    """
    row = SegmentStats(
        config_id=change.id,
        label=change.label,
        settings=dict(change.values),
        changed=dict(change.changed),
        t_ns=change.t_ns,
        steps=len(view),
        steady_steps=0,
        live=live,
        rebuilt=change.rebuilt,
    )
    if len(view) == 0:
        return row
    warm_until = change.first_step + change.warmup_steps
    transition = view.step < warm_until
    transition_s = None
    if transition.any() and not transition.all():
        last_warm = int(np.flatnonzero(transition)[-1])
        transition_s = max(0, int(view.host[last_warm, -1]) - change.t_ns) / 1e9
    elif not transition.any():
        transition_s = 0.0
    timed = ~transition  # the steps whose time the rate windows cut
    if until_ns is not None:
        timed &= view.host[:, 0] < until_ns
    profiled = np.zeros(len(view), bool) if profiled is None else np.asarray(profiled, bool)
    steady = timed & ~profiled
    n = int(steady.sum())
    # Step time runs to the next step's start (phase_durations books the gap as `other`).
    durations = phase_durations(view)
    all_step_ns = durations.sum(axis=1)
    long_steps = _long_steps(all_step_ns[steady] if n else all_step_ns)
    needed = MIN_LONG_STEADY_STEPS if long_steps else MIN_STEADY_STEPS
    row = dataclasses.replace(row, steady_steps=n, transition_s=transition_s, steady_needed=needed)
    if n == 0:
        return row
    host = view.host[steady]
    r0, r1 = int(host[0, 0]), int(host[-1, -1])
    row = dataclasses.replace(row, steady_since_ns=r0, steady_until_ns=r1)
    if n < needed:
        return row
    durations = durations[steady]
    step_ns = all_step_ns[steady]
    total = float(step_ns.sum())
    if long_steps:
        rates = step_rates(view.samples[steady], step_ns)
    else:
        rates = window_rates(
            view.host[timed, 0],
            view.host[timed, -1],
            view.samples[timed],
            int(SCORE_WINDOW_S * 1e9),
            drop=profiled[timed],
        )
    p50, p95 = np.percentile(step_ns, [50, 95]) / 1e6
    util = power = None
    source = None
    if coarse is not None:
        mean_util = _overlap_mean(coarse.util, r0, r1)
        if mean_util is not None:
            util, source = min(max(mean_util / coarse.util_scale, 0.0), 1.0), coarse.util_source
        mean_power = _overlap_mean(coarse.power, r0, r1)
        if mean_power is not None:
            power = mean_power * (r1 - r0) / 1e9 / n
    split = step_breakdown(view, steady & np.asarray(view.has_device, bool))
    measured = split.steps >= needed
    return dataclasses.replace(
        row,
        idle_causes=split.idle_causes if measured else None,
        breakdown=split.categories if measured else None,
        host_phases=split.host_phases if measured else None,
        samples_per_s=float(np.median(rates)) if rates.size else None,
        step_ms_p50=float(p50),
        step_ms_p95=float(p95),
        busy_share=busy_share(view, steady),
        input_wait_share=float(durations[:, _DATA].sum()) / total if total > 0 else None,
        coarse_util=util,
        coarse_source=source,
        energy_j_per_step=power,
        window_rates=tuple(float(r) for r in rates),
        rate_basis="step" if long_steps else "window",
    )


def _long_steps(step_ns: np.ndarray) -> bool:
    """Steps whose median lasts at least a rate window: each would fill a window alone."""
    return bool(step_ns.size) and float(np.median(step_ns)) >= SCORE_WINDOW_S * 1e9


def step_rates(samples: np.ndarray, step_ns: np.ndarray) -> np.ndarray:
    """Samples/s of each step over its own duration (start to the next step's start)."""
    keep = step_ns > 0
    rates: np.ndarray = samples[keep].astype(np.float64) * 1e9 / step_ns[keep]
    return rates


def preparing_since(change: ConfigChange) -> int:
    """When ``change`` was asked for: from then until it applied (``apply_s``, e.g. new
    DataLoader workers starting while training goes on, docs/knobs.md §2) the previous
    configuration's steps share the machine with that preparation, so they are left out of
    its figures."""
    return change.t_ns - int(change.apply_s * 1e9)


def with_speedups(rows: Sequence[SegmentStats], baseline_id: int | None) -> list[SegmentStats]:
    """Speedup of every row against the pinned baseline, else the first row."""
    base = (
        next((r for r in rows if r.config_id == baseline_id), None)
        if baseline_id is not None
        else None
    )
    if base is None and rows:
        base = rows[0]
    ref = base.samples_per_s if base is not None else None
    out = []
    for r in rows:
        speedup = r.samples_per_s / ref if ref and r.samples_per_s is not None else None
        out.append(dataclasses.replace(r, speedup=speedup))
    return out


class Scoreboard:
    """Rows for a run's configurations; a row is frozen once a later configuration has steps."""

    def __init__(self) -> None:
        self._frozen: dict[int, SegmentStats] = {}
        self._profiled = np.empty(0, np.int64)
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._frozen.clear()
            self._profiled = np.empty(0, np.int64)

    def mark_profiled(self, step_ids: Sequence[int], config_ids: Sequence[int] = ()) -> None:
        """Leave these steps out of every figure; rows of ``config_ids`` are recomputed."""
        with self._lock:
            self._profiled = np.union1d(self._profiled, np.asarray(step_ids, np.int64))
            for config_id in config_ids:
                self._frozen.pop(config_id, None)

    def rows(
        self,
        steps: StepStore,
        changes: Sequence[ConfigChange],
        coarse: SeriesStore,
        *,
        device_kind: str | None,
        cores: int,
        baseline_id: int | None,
        running: bool,
    ) -> list[SegmentStats]:
        with self._lock:
            data = coarse_input(coarse, device_kind, cores)
            return with_speedups(self._rows(steps, changes, data, running=running), baseline_id)

    def _rows(
        self, steps: StepStore, changes: Sequence[ConfigChange], data: CoarseInput, *, running: bool
    ) -> list[SegmentStats]:
        open_changes = [c for c in changes if c.id not in self._frozen]
        if not open_changes:
            return [self._relabelled(c) for c in changes]
        since = min(c.t_ns for c in open_changes)
        view = steps.snapshot(since_ns=since)
        later_ids = set(np.unique(view.config).tolist())
        last_id = max(c.id for c in changes)
        rows = []
        for change, after in zip(changes, [*changes[1:], None], strict=True):
            if change.id in self._frozen:
                rows.append(self._relabelled(change))
                continue
            mask = view.config == change.id
            sub = view.rows(mask)
            finished = not running or any(i > change.id for i in later_ids)
            row = segment_stats(
                sub,
                change,
                data,
                live=running and change.id == last_id,
                profiled=np.isin(sub.step, self._profiled),
                until_ns=None if after is None else preparing_since(after),
            )
            if finished and change.id != last_id:
                self._frozen[change.id] = row
            rows.append(row)
        return rows

    def _relabelled(self, change: ConfigChange) -> SegmentStats:
        row = self._frozen[change.id]
        if row.label != change.label:
            row = dataclasses.replace(row, label=change.label)
            self._frozen[change.id] = row
        return row
