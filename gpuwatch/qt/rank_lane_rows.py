"""The rank lanes' rows without Qt: which rows there are, and the spans each one paints.

A run of up to ``MAX_LANES`` ranks has a row per rank (each step's phases,
or each step in the colour of its longest phase when steps are narrow); a rank's group can be
expanded into one row per phase under it. A run of more ranks has one merged row per phase
instead: for each step number, the phase's spread over all ranks (the earliest start to the
latest end, pale) and the median rank's span of that phase (full colour). Everything here is
numpy over whole arrays: a redraw costs a few array operations per row, never a Python step
per step.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from gpuwatch.core.model.store import StepsView
from gpuwatch.protocol import PHASES

#: Rows drawn one per rank at most; a job with more ranks gets the merged rows.
MAX_LANES = 16
#: Below this many pixels a step, a rank's row shows each step in the colour of its longest
#: phase: phases a pixel wide each would paint over one another.
DOMINANT_BELOW_PX = 6.0
#: A rank's label ends with the group's state, as in a tree view.
COLLAPSED, EXPANDED = "▸", "▾"

#: ``Row.kind``: a rank's row (all its phases), one phase of a rank, the merged group's
#: header, one merged phase, the note counting ranks not drawn.
RANK, PHASE, MERGED_HEADER, MERGED, NOTE = "rank", "phase", "merged header", "merged", "note"


@dataclass(frozen=True)
class Row:
    """One row of the lanes, top to bottom: what it draws and its label."""

    kind: str
    label: str
    #: The rank whose group the row belongs to (None for the merged rows and the note).
    rank: int | None = None
    #: Index into ``PHASES`` for a phase row (a rank's or a merged one).
    phase: int | None = None

    @property
    def is_header(self) -> bool:
        """A group's first row (a rank's, the merged one's): its label stands out to the left
        of its phases'."""
        return self.kind in (RANK, MERGED_HEADER)


def rank_rows(ranks: Sequence[int], expanded: Collection[int]) -> list[Row]:
    """A row per rank in ``ranks`` (in order); a rank in ``expanded`` has its phase rows
    under it."""
    rows = []
    for rank in ranks:
        if rank in expanded:
            rows.append(Row(RANK, f"rank {rank} {EXPANDED}", rank))
            rows.extend(Row(PHASE, name, rank, i) for i, name in enumerate(PHASES))
        else:
            rows.append(Row(RANK, f"rank {rank} {COLLAPSED}", rank))
    return rows


def merged_rows(n_ranks: int) -> list[Row]:
    """The header ``all N ranks`` and one merged row per phase under it."""
    return [
        Row(MERGED_HEADER, f"all {n_ranks} ranks"),
        *(Row(MERGED, name, None, i) for i, name in enumerate(PHASES)),
    ]


def note_row(left_out: int) -> Row:
    """The last row: how many of the job's ranks are not drawn yet (``RankLanes``)."""
    return Row(NOTE, f"+{left_out} more (Ranks tab)")


Spans = tuple[np.ndarray, np.ndarray]


def _seconds(marks: np.ndarray, t0_ns: int) -> np.ndarray:
    return (marks - t0_ns) / 1e9


def phase_spans(steps: StepsView, t0_ns: int, px_s: float) -> list[Spans]:
    """A rank's row: per phase, the ``(x0, x1)`` seconds it paints in that phase's colour:
    each phase where it ran (a pixel wide at least) when steps are wide enough, else each
    whole step in the colour of its longest phase."""
    host = steps.host
    if not len(host):
        return [(np.empty(0), np.empty(0)) for _ in PHASES]
    start, end = _seconds(host[:, 0], t0_ns), _seconds(host[:, -1], t0_ns)
    if float(np.median(end - start)) < DOMINANT_BELOW_PX * px_s:
        longest = np.argmax(np.diff(host, axis=1), axis=1)
        return [(start[longest == i], end[longest == i]) for i in range(len(PHASES))]
    return [one_phase_spans(steps, i, t0_ns, px_s) for i in range(len(PHASES))]


def one_phase_spans(steps: StepsView, phase: int, t0_ns: int, px_s: float) -> Spans:
    """A rank's phase row: where ``PHASES[phase]`` ran, each span a pixel (``px_s``) wide at
    least (a row of one phase has nothing to paint over)."""
    s = _seconds(steps.host[:, phase], t0_ns)
    return s, np.maximum(_seconds(steps.host[:, phase + 1], t0_ns), s + px_s)


@dataclass(frozen=True)
class MergedSteps:
    """Many ranks' steps aligned by step number: ``(G, len(PHASES))`` arrays, seconds since
    the origin, one row per step number (``step``, ascending) that any rank has."""

    step: np.ndarray
    #: How many ranks sent each step (the newest may not have reached every rank's lane yet).
    ranks: np.ndarray
    #: The spread: the earliest start and the latest end of the phase over the ranks.
    lo: np.ndarray
    hi: np.ndarray
    #: The span of the rank whose phase took the median time (the lower median).
    mid0: np.ndarray
    mid1: np.ndarray
    #: The rank whose phase took longest, how long (s), and the median time (s).
    slowest: np.ndarray
    slowest_s: np.ndarray
    median_s: np.ndarray

    def __len__(self) -> int:
        return len(self.step)

    def spread(self, phase: int, px_s: float) -> Spans:
        lo = self.lo[:, phase]
        return lo, np.maximum(self.hi[:, phase], lo + px_s)

    def median(self, phase: int, px_s: float) -> Spans:
        lo = self.mid0[:, phase]
        return lo, np.maximum(self.mid1[:, phase], lo + px_s)

    def at(self, phase: int, x: float, px_s: float = 0.0) -> int | None:
        """The index of the step whose spread of ``phase`` holds ``x`` (seconds, give or take
        ``px_s``), or None."""
        lo, hi = self.lo[:, phase], self.hi[:, phase]
        i = int(np.searchsorted(lo, x + px_s, side="right")) - 1
        if 0 <= i < len(lo) and x <= max(float(hi[i]), float(lo[i]) + px_s) + px_s:
            return i
        return None

    def describe(self, phase: int, i: int) -> str:
        """What the merged row of ``phase`` says about step index ``i`` (the hover text)."""
        return (
            f"step {int(self.step[i])}, {PHASES[phase]}: slowest rank "
            f"{int(self.slowest[i, phase])} ({self.slowest_s[i, phase] * 1e3:.1f} ms; median "
            f"{self.median_s[i, phase] * 1e3:.1f} ms over {int(self.ranks[i])} ranks)"
        )


def merge_steps(views: Sequence[StepsView], ranks: Sequence[int], t0_ns: int) -> MergedSteps:
    """The ranks' steps (``views[k]`` is rank ``ranks[k]``'s) aligned by step number.

    A dense ``(step number, rank, mark)`` grid, NaN where a rank has not got that step: the
    spread is a min/max over the ranks, the slowest rank an argmax and the median rank a
    partition along the rank axis (a sort for the few step numbers that not every rank has,
    the newest ones as they arrive)."""
    n_phases, n_ranks = len(PHASES), len(views)
    counts = np.array([len(v) for v in views], dtype=np.int64)
    if not counts.sum():
        empty, none = np.empty((0, n_phases)), np.empty(0, np.int64)
        return MergedSteps(none, none, empty, empty, empty, empty, empty, empty, empty)
    step = np.concatenate([v.step for v in views])
    first, last = int(step.min()), int(step.max())
    if last - first < 4 * len(step):  # step numbers are consecutive: they index the grid
        numbers, group = np.arange(first, last + 1), step - first
    else:
        numbers, group = np.unique(step, return_inverse=True)
    n_groups = len(numbers)
    who = np.repeat(np.arange(n_ranks), counts)
    marks = np.full((n_groups * n_ranks, len(PHASES) + 1), np.nan)
    marks[group * n_ranks + who] = _seconds(np.concatenate([v.host for v in views]), t0_ns)
    # (step number, mark, rank): the rank axis last and contiguous, as the reductions run
    grid = np.ascontiguousarray(marks.reshape(n_groups, n_ranks, -1).transpose(0, 2, 1))
    present = np.bincount(group, minlength=n_groups)
    if (present == 0).any():  # numbers no rank has (a gap in the numbering): no row
        grid, numbers, present = grid[present > 0], numbers[present > 0], present[present > 0]
        n_groups = len(numbers)
    start, end = grid[:, :-1], grid[:, 1:]
    took = end - start  # NaN where the rank lacks the step
    missing = np.isnan(took)
    median_rank = np.empty((n_groups, n_phases, 1), np.int64)
    full = present == n_ranks
    if full.any():
        kth = (n_ranks - 1) // 2
        median_rank[full] = np.argpartition(took[full], kth, axis=2)[:, :, kth : kth + 1]
    if not full.all():
        partial = ~full
        order = np.argsort(np.where(missing[partial], np.inf, took[partial]), axis=2)
        at = np.broadcast_to(
            ((present[partial] - 1) // 2)[:, None, None], (len(order), n_phases, 1)
        )
        median_rank[partial] = np.take_along_axis(order, at, axis=2)
    slowest_rank = np.argmax(np.where(missing, -1.0, took), axis=2)[:, :, None]

    def pick(values: np.ndarray, index: np.ndarray) -> np.ndarray:
        return np.take_along_axis(values, index, axis=2)[:, :, 0]

    return MergedSteps(
        step=numbers,
        ranks=present,
        lo=np.fmin.reduce(start, axis=2),
        hi=np.fmax.reduce(end, axis=2),
        mid0=pick(start, median_rank),
        mid1=pick(end, median_rank),
        slowest=np.asarray(ranks, dtype=np.int64)[slowest_rank[:, :, 0]],
        slowest_s=pick(took, slowest_rank),
        median_s=pick(took, median_rank),
    )
