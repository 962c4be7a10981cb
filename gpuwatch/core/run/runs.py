"""Every run a window has watched: each start, restart or tour, kept for the window's life.

A restart used to drop the earlier run's scoreboard rows, and a second tour re-pinned the
baseline, so every speedup silently changed meaning. Here each run (a start of the session, or
a tour within it) keeps its own rows, and every row is compared with one baseline row that only
the user changes (``choose_baseline``; by default the first row of the first run).

Only figures are kept: a finished run holds its ``SegmentStats`` (a few numbers and its 1-s
window rates per configuration), never its raw steps, so memory grows with the number of
configurations the window has seen, not with their length. No Qt, thread or file here: the
window feeds ``follow`` from its scoreboard refresh.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.figures.speed_noise import noise_band

#: What a run is: a start of a built-in workload or of a script, a tour, or a recording.
WORKLOAD, SCRIPT, TOUR, RECORDING = "workload", "script", "tour", "recording"
#: A session's first run owns every configuration until a tour claims the later ones.
FROM_THE_START = -1
#: The run id of a baseline from outside the list (``Runs.set_reference``).
OUTSIDE = 0


@dataclass(frozen=True)
class RunInfo:
    """What the window knows of a run when it begins: its kind, what it runs and where."""

    kind: str
    what: str
    device: str = ""


@dataclass(frozen=True)
class RowRef:
    """One scoreboard row of one run: what a baseline is."""

    run_id: int
    config_id: int


@dataclass(frozen=True)
class Run:
    """A run in the list: its name, what it ran, where and when, and its rows' figures.

    ``first_config``: the session's configurations from this id on are this run's (a tour
    claims the ones it made); None while a tour has not reached its first stage yet.
    """

    run_id: int
    kind: str
    what: str
    device: str
    started_at: float
    label: str
    session_key: object = None
    first_config: int | None = FROM_THE_START
    rows: tuple[SegmentStats, ...] = ()
    live: bool = True
    renamed: bool = False

    def describe(self) -> str:
        """``vision · cpu · 06:41``: what, where and when, beside the label."""
        when = time.strftime("%H:%M", time.localtime(self.started_at))
        return " · ".join(part for part in (self.what, self.device, when) if part)


@dataclass(frozen=True)
class ScoredRow:
    """A row as the scoreboard shows it: its speedup against the chosen baseline and the
    noise band that speedup is judged within (``speed_noise.noise_band``)."""

    run_id: int
    row: SegmentStats
    is_baseline: bool = False
    noise: float | None = None
    #: False for a run of another program than the baseline's (``Runs.comparable``).
    comparable: bool = True

    @property
    def ref(self) -> RowRef:
        return RowRef(self.run_id, self.row.config_id)

    @property
    def within_noise(self) -> bool:
        """A speedup whose difference from 1 is inside its noise band: no change."""
        speedup = self.row.speedup
        if self.is_baseline or speedup is None or self.noise is None:
            return False
        return abs(speedup - 1.0) <= self.noise


@dataclass(frozen=True)
class RunGroup:
    """One run and its rows, as the scoreboard groups them."""

    run: Run
    rows: tuple[ScoredRow, ...]


@dataclass(frozen=True)
class SpeedChange:
    """The live configuration's samples/s against the baseline: what a stage headline leads
    with."""

    samples_per_s: float
    baseline_per_s: float
    noise: float
    baseline_label: str

    @property
    def ratio(self) -> float:
        return self.samples_per_s / self.baseline_per_s

    @property
    def within_noise(self) -> bool:
        return abs(self.ratio - 1.0) <= self.noise

    def text(self) -> str:
        """``1.81× samples/s vs “run 1 · baseline” (691 → 1,253/s)``; "≈" marks a change
        within its noise band."""
        mark = "≈ " if self.within_noise else ""
        return (
            f"{mark}{speedup_text(self.ratio)} samples/s vs “{self.baseline_label}” "
            f"({rate_text(self.baseline_per_s)} → {rate_text(self.samples_per_s)}/s)"
        )


def speedup_text(ratio: float) -> str:
    """A speed ratio as every view writes it: ``1.81×``."""
    return f"{ratio:.2f}×"


def rate_text(samples_per_s: float) -> str:
    """Samples per second as the scoreboard writes them: ``1,253`` (``78.5`` below 100)."""
    return f"{samples_per_s:,.0f}" if samples_per_s >= 100 else f"{samples_per_s:.1f}"


def noise_text(noise: float) -> str:
    """The band beside a speedup: ``±5%``."""
    return f"±{100 * noise:.0f}%"


def file_stem(label: str) -> str:
    """A recording's file name from a run's label: ``run 2 · train.py`` → ``run-2-train.py``
    (letters, digits, dot, dash and underscore only, so every file system takes it)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.")
    return stem[:80] or "run"


class Runs:
    """The window's runs, oldest first, and the baseline every speedup is measured against."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._runs: list[Run] = []
        self._next_id = 1
        self._numbers: dict[str, int] = {}
        self._live_key: object = None
        self._live_rows: tuple[SegmentStats, ...] = ()
        #: The user's choice (None: the first row of the first run).
        self._chosen: RowRef | None = None
        #: A row of another run (another recording) that is the baseline unless one is chosen.
        self._reference: tuple[str, SegmentStats] | None = None
        #: Bumped by every change the views should show.
        self.revision = 0

    # ---- What the views read -------------------------------------------------------------

    @property
    def runs(self) -> list[Run]:
        return list(self._runs)

    def run(self, run_id: int) -> Run | None:
        return next((r for r in self._runs if r.run_id == run_id), None)

    @property
    def live_run(self) -> Run | None:
        """The run that is being watched now (the latest group of the live session)."""
        live = [r for r in self._runs if r.live]
        return live[-1] if live else None

    @property
    def chosen_baseline(self) -> RowRef | None:
        """The baseline the user chose, or None while the default holds."""
        return self._chosen

    def recording_name(self) -> str | None:
        """A recording's default file name (no suffix) for the run watched now, or the last
        one: its label, so a file says which run it holds (``run-2-train.py``)."""
        run = self.live_run or (self._runs[-1] if self._runs else None)
        return file_stem(run.label) if run is not None else None

    def baseline(self) -> RowRef | None:
        """The row every speedup is against: the user's choice, else the first row of the
        first run that has one."""
        if self._chosen is not None and self._row(self._chosen) is not None:
            return self._chosen
        if self._reference is not None:
            outside = self._reference[1]
            for run in self._runs:  # the reference is a row of this list: that row
                if outside in run.rows:
                    return RowRef(run.run_id, outside.config_id)
            return RowRef(OUTSIDE, outside.config_id)
        first = next((r for r in self._runs if r.rows), None)
        return RowRef(first.run_id, first.rows[0].config_id) if first is not None else None

    def baseline_label(self) -> str:
        """``run 1 · baseline``: the baseline's run and row, as the hint names it."""
        ref = self.baseline()
        if ref is None:
            return ""
        if ref.run_id == OUTSIDE and self._reference is not None:
            return self._reference[0]
        run, row = self.run(ref.run_id), self._row(ref)
        assert run is not None and row is not None
        if len(self._runs) == 1:
            return row.label
        return f"{run.label} · {row.label}"

    def comparable(self, run: Run) -> bool:
        """Whether ``run``'s rows can be measured against the baseline: it runs the same
        program (workload or script name; an edited script is still the same one), or the
        baseline is another recording's row (Compare, which the user chose). A ratio of two
        different programs' samples/s says nothing ("0.04×" for a script against the mlp
        demo), so such rows show none until the user pins one of their own rows."""
        ref = self.baseline()
        if ref is None or ref.run_id == OUTSIDE:
            return True
        base_run = self.run(ref.run_id)
        return base_run is None or base_run.what == run.what

    def groups(self) -> list[RunGroup]:
        """Every run with its rows, each row against the baseline (when comparable)."""
        ref = self.baseline()
        base = self._row(ref) if ref is not None else None
        base_rate = base.samples_per_s if base is not None else None
        groups = []
        for run in self._runs:
            scored = []
            same_program = self.comparable(run)
            for row in run.rows:
                is_base = ref is not None and ref == RowRef(run.run_id, row.config_id)
                speedup = noise = None
                if (
                    same_program
                    and base is not None
                    and base_rate
                    and row.samples_per_s is not None
                ):
                    speedup = row.samples_per_s / base_rate
                    noise = None if is_base else noise_band(row, base)
                scored.append(
                    ScoredRow(
                        run.run_id,
                        dataclasses.replace(row, speedup=speedup),
                        is_base,
                        noise,
                        same_program,
                    )
                )
            groups.append(RunGroup(run, tuple(scored)))
        return groups

    def live_change(self) -> SpeedChange | None:
        """The live configuration's samples/s against the baseline, when both are measured
        and the live row is not the baseline itself."""
        run = self.live_run
        ref = self.baseline()
        if run is None or ref is None or not run.rows:
            return None
        row = run.rows[-1]
        base = self._row(ref)
        if (
            base is None
            or not self.comparable(run)
            or ref == RowRef(run.run_id, row.config_id)
            or row.samples_per_s is None
            or not base.samples_per_s
        ):
            return None
        return SpeedChange(
            row.samples_per_s, base.samples_per_s, noise_band(row, base), self.baseline_label()
        )

    # ---- What the window tells it --------------------------------------------------------

    def follow(self, key: object, info: RunInfo, rows: Sequence[SegmentStats]) -> None:
        """The live session's scoreboard rows (call at the scoreboard's rate). A new ``key``
        (the session started again) keeps the runs so far and begins a new one."""
        if not self._runs or key != self._live_key:
            self.finish()
            self._live_key = key
            self._live_rows = ()
            self._add(info.kind, info.what, info.device, key)
        elif info.device:  # known once the runner has said hello
            self._update_session_runs(
                lambda r: r if r.device else dataclasses.replace(r, device=info.device)
            )
        rows = tuple(rows)
        if rows != self._live_rows:
            self._live_rows = rows
            self._assign()

    def finish(self) -> None:
        """The live session's runs are over: they keep their rows as they are now (later
        rows of the same session change nothing; the next session's begin a new run)."""
        if any(r.live for r in self._runs):
            self._runs = [dataclasses.replace(r, live=False) for r in self._runs]
            self.revision += 1

    def begin_tour(self) -> int | None:
        """A tour begins on the live session: a run of its own, which claims configurations
        once ``tour_config`` names its first. Returns its id (None without a live run)."""
        live = self.live_run
        if live is None:
            return None
        run = self._add(TOUR, live.what, live.device, self._live_key, first_config=None)
        return run.run_id

    def tour_config(self, run_id: int, config_id: int) -> None:
        """The tour's first stage runs as ``config_id``: it and later ones are the tour's. If
        the run it began on has nothing of its own left, that run *is* the tour."""
        tour = self.run(run_id)
        if tour is None or tour.first_config is not None:
            return
        before = [
            r
            for r in self._runs
            if r.session_key == tour.session_key
            and r.run_id != run_id
            and r.first_config is not None
            and r.first_config <= config_id
        ]
        previous = before[-1] if before else None
        own = [row for row in self._live_rows if row.config_id < config_id]
        if (
            previous is not None
            and previous.kind in (WORKLOAD, SCRIPT)
            and not previous.renamed
            and not [row for row in own if self._owner_id(row.config_id) == previous.run_id]
        ):
            self._runs = [r for r in self._runs if r.run_id != run_id]
            self._replace(
                dataclasses.replace(previous, kind=TOUR, label=tour.label, what=tour.what)
            )
            self._assign()
            return
        self._replace(dataclasses.replace(tour, first_config=config_id))
        self._assign()

    def rename(self, run_id: int, label: str) -> None:
        run = self.run(run_id)
        label = " ".join(label.split())
        if run is not None and label and label != run.label:
            self._replace(dataclasses.replace(run, label=label, renamed=True))

    def set_reference(self, label: str, row: SegmentStats) -> None:
        """Measure against ``row`` of a run outside this list (Compare: B against A's row),
        called ``label``, unless the user chooses a row of the list."""
        self._reference = (label, row)
        self.revision += 1

    def choose_baseline(self, ref: RowRef | None) -> None:
        """Measure every speedup against ``ref`` (None: back to the first row)."""
        if ref != self._chosen:
            self._chosen = ref
            self.revision += 1

    # ---- Inside ----------------------------------------------------------------------------

    def _add(
        self,
        kind: str,
        what: str,
        device: str,
        key: object,
        first_config: int | None = FROM_THE_START,
    ) -> Run:
        noun = "tour" if kind == TOUR else "recording" if kind == RECORDING else "run"
        number = self._numbers.get(noun, 0) + 1
        self._numbers[noun] = number
        label = what if kind == RECORDING else f"{noun} {number} · {what}"
        run = Run(
            self._next_id,
            kind,
            what,
            device,
            self._clock(),
            label,
            session_key=key,
            first_config=first_config,
        )
        self._next_id += 1
        self._runs.append(run)
        self.revision += 1
        return run

    def _replace(self, run: Run) -> None:
        self._runs = [run if r.run_id == run.run_id else r for r in self._runs]
        self.revision += 1

    def _update_session_runs(self, change: Callable[[Run], Run]) -> None:
        updated = [change(r) if r.live else r for r in self._runs]
        if updated != self._runs:
            self._runs = updated
            self.revision += 1

    def _owner_id(self, config_id: int) -> int | None:
        """The live session's run a configuration belongs to: the latest to claim it."""
        owner = None
        for run in self._runs:
            if run.live and run.first_config is not None and run.first_config <= config_id:
                owner = run.run_id
        return owner

    def _assign(self) -> None:
        by_run: dict[int, list[SegmentStats]] = {}
        for row in self._live_rows:
            owner = self._owner_id(row.config_id)
            if owner is not None:
                by_run.setdefault(owner, []).append(row)
        self._update_session_runs(
            lambda r: dataclasses.replace(r, rows=tuple(by_run.get(r.run_id, ())))
        )

    def _row(self, ref: RowRef) -> SegmentStats | None:
        if ref.run_id == OUTSIDE:
            return self._reference[1] if self._reference is not None else None
        run = self.run(ref.run_id)
        if run is None:
            return None
        return next((row for row in run.rows if row.config_id == ref.config_id), None)
