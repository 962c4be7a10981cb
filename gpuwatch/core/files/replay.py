"""Show a recording in the window as if it were a live run, at a movable play position.

``ReplaySession`` launches nothing: it owns a ``RunModel``, as a live ``Session`` does, and
rebuilds it by folding the recorded runner messages, in arrival order and up to the play
position. One implementation of how messages become steps, segments, refusals and log lines
serves both, so a replay shows exactly what the live window showed. The replay only gives the
model the recorded times as its clock and drops the GUI log lines that the fold would write a
second time (the recording's ``log`` already holds them).

Playing moves forward incrementally; a seek backwards rebuilds from the start: about 1 s for
an hour of 50 ms step batches (72,000 messages) on a 2-core CPU, the test
``test_rebuild_from_the_start_is_fast_for_an_hour_long_file`` prints the figure.
The position advances only in ``tick()``, from an injectable clock, so tests need no sleeps.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuwatch.core.figures.rank_figures import GpuSeries, RankFigures, RankSteps
from gpuwatch.core.figures.segments import SegmentStats
from gpuwatch.core.model.liveness import Liveness
from gpuwatch.core.model.log_buffer import LogBuffer, LogLine
from gpuwatch.core.model.messages import SessionState
from gpuwatch.core.model.metrics import NVML_GPU_UTIL, metric_rank, rank_metric
from gpuwatch.core.model.store import (
    DEFAULT_SERIES_CAPACITY,
    DEFAULT_STEP_CAPACITY,
    SeriesStore,
)
from gpuwatch.core.run.rank_devices import device_key
from gpuwatch.core.run.run_model import ModelAccess, RunModel
from gpuwatch.core.run.session import (
    LOG_LINES_KEPT,
    RANK_FIGURES_STEPS,
    LaunchSpec,
    SessionError,
)

if TYPE_CHECKING:
    from gpuwatch.core.files.recording_reader import Recording

#: Play speeds the replay bar offers (the setter accepts any factor in this range).
SPEEDS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
MIN_SPEED, MAX_SPEED = SPEEDS[0], SPEEDS[-1]
READ_ONLY = "replay: knobs are read-only"


class ReplaySession(ModelAccess):
    """A recorded run, shown up to ``position_s``; starts positioned at the end (whole run).

    It answers what a view asks of a ``Session`` (the names ``ModelAccess`` delegates to
    ``model``, the log, the state); whatever would change a run raises ``SessionError``.
    """

    #: Nothing is launched, so there is no spec, process, notice or capture.
    spec: LaunchSpec | None = None
    pid: int | None = None
    exit_code: int | None = None
    keep_all_output = False
    stop_requested = False
    capturing = False
    stalled_at_stop_s: float | None = None
    stop_escalation: str | None = None
    stopped_after_s: float | None = None
    #: A replay launched no process, so it never ends leftovers.
    leftovers_ended = 0

    def __init__(
        self, recording: Recording, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.recording = recording
        self._clock = clock
        self._now = recording.t0_ns
        self.model = RunModel(
            step_capacity=max(DEFAULT_STEP_CAPACITY, len(recording.steps)),
            clock=lambda: self._now,
            log_line=self._model_log_line,
        )
        self.liveness = Liveness(notice_s=float("inf"), script=False)
        self._log = LogBuffer(LOG_LINES_KEPT)
        # The GUI's own log lines are kept apart from the runner's messages; put them back in
        # time order, ahead of a message of the same time (the live session logged first).
        gui_lines = [
            (
                line.t_ns,
                {"kind": "log", "source": "gpuwatch", "level": line.level, "text": line.text},
            )
            for line in recording.log
            if line.source == "gpuwatch"
        ]
        self._messages = sorted([*gui_lines, *recording.messages()], key=lambda item: item[0])
        self._config0_t_ns = next((c.t_ns for c in recording.configs if c.id == 0), None)
        self._times = [t for t, _ in self._messages]
        self._recorded_labels = {c.id: c.label for c in recording.configs}
        self._coarse_all = {
            name: recording.coarse.snapshot(name) for name in recording.coarse.names()
        }
        self._coarse_statuses = recording.coarse.statuses()
        self._coarse_cut: dict[str, int] = {}
        self._series_capacity = max(
            [DEFAULT_SERIES_CAPACITY, *(len(v) for v in self._coarse_all.values())]
        )
        self._final_state = (
            SessionState.FAILED if recording.error is not None else SessionState.FINISHED
        )
        self._end_ns = max(recording.t1_ns, recording.t0_ns, *self._times[-1:])
        self._applied = 0
        self._position_ns = recording.t0_ns
        self._now = recording.t0_ns
        self._speed = 1.0
        self._playing = False
        self._anchor = (0.0, 0)  # (clock reading, position ns) when play last (re)started
        #: Bumped whenever the stores are rebuilt from the start (a seek backwards): views that
        #: accumulate (the log pane) must start over.
        self.generation = 0
        self._rebuild()
        self._advance_to(self._end_ns)

    # ---- What the window reads ---------------------------------------------------------

    @property
    def state(self) -> SessionState:
        """The recorded outcome (FINISHED, or FAILED with the runner's error), at any position."""
        return self._final_state

    @property
    def duration_s(self) -> float:
        return (self._end_ns - self.recording.t0_ns) / 1e9

    @property
    def position_s(self) -> float:
        return (self._position_ns - self.recording.t0_ns) / 1e9

    @property
    def position_ns(self) -> int:
        """The play position on the recording's perf_counter axis: the window's "now"."""
        return self._position_ns

    @property
    def at_end(self) -> bool:
        return self._position_ns >= self._end_ns

    @property
    def playing(self) -> bool:
        return self._playing

    @property
    def speed(self) -> float:
        return self._speed

    @speed.setter
    def speed(self, factor: float) -> None:
        if not MIN_SPEED <= factor <= MAX_SPEED:
            raise ValueError(
                f"replay speed must be between {MIN_SPEED:g}x and {MAX_SPEED:g}x, not {factor:g}x"
            )
        self.tick()  # keep the time played so far at the old speed
        self._speed = float(factor)
        self._anchor = (self._clock(), self._position_ns)

    @property
    def notice(self) -> str | None:
        """What the recorded run no longer measured (instruments that switched off), or None."""
        return "; ".join(self.instruments_off) or None

    def drain_log(self) -> list[LogLine]:
        """The log lines shown since the last call (see ``Session.drain_log``)."""
        return self._log.drain()

    @property
    def log_dropped(self) -> int:
        return self._log.dropped

    def wait_ended(self, timeout: float | None = None) -> bool:
        """Nothing runs: always ended."""
        return True

    def add_listener(self, listener: Callable[[dict[str, Any], int], None]) -> None:
        """A replay hands no messages on (it is not recorded again)."""

    def remove_listener(self, listener: Callable[[dict[str, Any], int], None]) -> None:
        """Nothing to detach (see ``add_listener``)."""

    def scoreboard(self) -> list[SegmentStats]:
        """The rows as the live window showed them at the play position: the last one is live
        until the recording's last message (the runner's bye) has been played.

        One honest difference: the live window froze a finished segment's row at its next
        2 Hz refresh, maybe before the coarse sample overlapping the segment's end arrived; a
        replay freezes it with every sample that arrived by the play position.
        """
        return self.model.scoreboard(running=self._applied < len(self._messages))

    def rank_figures(self, last: int | None = RANK_FIGURES_STEPS) -> list[RankFigures]:
        """Each recorded rank's figures over its ``last`` newest steps that had ended by the
        play position (the Ranks dock and the advisor, as live)."""
        figures = []
        for rank in self.recording.ranks:
            view = rank.steps
            n = int(np.searchsorted(view.host[:, -1], self._position_ns, side="right"))
            first = 0 if last is None else max(0, n - last)
            info = rank.info
            figures.append(
                RankFigures.of(
                    info.rank,
                    info.local_rank,
                    info.node,
                    view.rows(slice(first, n)),
                    world_size=info.world_size,
                    node_rank=info.node_rank,
                    collective=[c for c in rank.collective if c.t_ns <= self._position_ns],
                    gpu_util=self.coarse.snapshot(self._gpu_metric(info.rank)),
                )
            )
        return figures

    def _gpu_metric(self, rank: int) -> str:
        """The recorded NVML utilization series of ``rank``'s GPU: rank 0's is the run's own,
        and one GPU's series is stored once, under the first rank on it (``RankDevices``)."""
        devices = {r.info.rank: r.hello.device for r in self.recording.ranks}
        mine = devices.get(rank)
        if mine is None or mine.kind != "cuda":
            return rank_metric(rank, NVML_GPU_UTIL)
        for other in sorted(devices):
            metric = NVML_GPU_UTIL if other == 0 else rank_metric(other, NVML_GPU_UTIL)
            if device_key(devices[other]) == device_key(mine) and metric in self._coarse_all:
                return metric
        return rank_metric(rank, NVML_GPU_UTIL)

    def rank_gpu_series(self, since_ns: int) -> list[GpuSeries]:
        """The recorded NVML utilization of the GPUs other ranks trained on, up to the play
        position (as live)."""
        devices = {r.info.rank: r.hello.device for r in self.recording.ranks}
        found = []
        for name in self.coarse.names():
            rank = metric_rank(name, NVML_GPU_UTIL)
            if rank is None:
                continue
            index = devices[rank].index if rank in devices else None
            where = f"cuda:{index}" if index is not None else "GPU"
            found.append(
                GpuSeries(rank, f"{where} of rank {rank}", self.coarse.snapshot(name, since_ns))
            )
        return sorted(found, key=lambda g: g.rank)

    def rank_steps(self, since_ns: int) -> list[RankSteps]:
        """Each recorded rank's steps ending in ``[since_ns, play position]`` (as live)."""
        found = []
        for rank in self.recording.ranks:
            ends = rank.steps.host[:, -1]
            first = int(np.searchsorted(ends, since_ns, side="left"))
            last = int(np.searchsorted(ends, self._position_ns, side="right"))
            found.append(RankSteps(rank.info, rank.steps.rows(slice(first, max(first, last)))))
        return found

    # ---- Play control ------------------------------------------------------------------

    def play(self) -> None:
        """Play from the position (from the start if at the end, like a media player)."""
        if self.at_end:
            self.seek(0.0)
        self._playing = True
        self._anchor = (self._clock(), self._position_ns)

    def pause(self) -> None:
        self.tick()
        self._playing = False

    def tick(self) -> bool:
        """Move the position by the clock time since play × speed; True if it moved.

        Reaching the end pauses. Call it from a timer (the replay bar does, ~30 Hz).
        """
        if not self._playing:
            return False
        since, start_ns = self._anchor
        target = start_ns + int((self._clock() - since) * self._speed * 1e9)
        if target >= self._end_ns:
            target = self._end_ns
            self._playing = False
        if target == self._position_ns:
            return False
        self._advance_to(target)
        return True

    def seek(self, seconds: float) -> None:
        """Show the run up to ``seconds`` after its start (clamped to the recording)."""
        t0 = self.recording.t0_ns
        target = min(max(t0 + round(seconds * 1e9), t0), self._end_ns)
        if target < self._position_ns:
            self._rebuild()
        self._advance_to(target)
        if self._playing:
            self._anchor = (self._clock(), self._position_ns)

    # ---- A replay launches nothing -----------------------------------------------------

    def start(self, spec: LaunchSpec) -> None:
        raise SessionError(
            f"{self.recording.path.name} is a recording: it cannot start a run "
            f"(open the live window to train)"
        )

    def stop(self) -> None:
        raise SessionError(f"{self.recording.path.name} is a recording: there is no run to stop")

    def set_knobs(self, values: dict[str, Any], *, label: str | None = None) -> int | None:
        raise SessionError(READ_ONLY)

    def request_capture(self, steps: int) -> None:
        raise SessionError(
            f"{self.recording.path.name} is a recording: kernels can only be captured in a run"
        )

    def close(self, timeout: float = 15.0) -> None:
        self._playing = False

    # ---- Rebuilding the stores ---------------------------------------------------------

    def _rebuild(self) -> None:
        """Forget everything shown and start again at the recording's start."""
        self._position_ns = self._now = self.recording.t0_ns
        self.model.reset(SeriesStore(self._series_capacity))  # t0_ns: the recording's start
        self._log.clear()
        for status in self._coarse_statuses.values():
            self.coarse.set_status(status)
        self._coarse_cut = dict.fromkeys(self._coarse_all, 0)
        self._applied = 0
        self.generation += 1

    def _advance_to(self, target_ns: int) -> None:
        """Dispatch the messages that arrived by ``target_ns``; add the samples ended by then."""
        end = bisect.bisect_right(self._times, target_ns, lo=self._applied)
        for t_ns, message in self._messages[self._applied : end]:
            self._now = t_ns
            self._dispatch_recorded(message)
        self._applied = end
        for name, view in self._coarse_all.items():
            lo = self._coarse_cut[name]
            hi = max(lo, int(np.searchsorted(view.t1, target_ns, side="right")))
            if hi > lo:
                self.coarse.append_many(name, view.t0[lo:hi], view.t1[lo:hi], view.value[lo:hi])
                self._coarse_cut[name] = hi
        self._position_ns = target_ns
        self.error = self.recording.error if self.at_end else self.error

    def _dispatch_recorded(self, message: dict[str, Any]) -> None:
        kind = message["kind"]
        if kind == "log" and message.get("source") == "gpuwatch":
            level = message["level"] if message["level"] in ("info", "warning", "error") else "info"
            self._log.append(LogLine(self._now, level, "gpuwatch", message["text"]))
            return
        self.model.fold(message)
        if kind == "hello" and self._config0_t_ns is not None:
            self.model.retime_config(0, self._config0_t_ns)
        elif kind == "config":
            label = self._recorded_labels.get(message["id"])
            if label:
                self.model.label_segment(message["id"], label)

    def _model_log_line(self, level: str, source: str, text: str, notice: bool) -> None:
        # The GUI's own lines were recorded as messages; the fold's copies would repeat them.
        if source != "gpuwatch":
            self._log.append(LogLine(self._now, level, source, text, notice))
