"""The Tour action: plans, drives a conductor on a timer, shows captions, stops cleanly."""

from __future__ import annotations

from typing import Any

import pytest
from fake_knob_session import FakeSession, row
from PySide6.QtWidgets import QVBoxLayout, QWidget

from gpuwatch.core.run.session import SessionState
from gpuwatch.core.run.tour import Conductor, Skipped, Stage, TourProgress, plan_tour
from gpuwatch.qt.tour_controller import TourController

STAGES = [
    Stage("baseline", {}, "the naive defaults"),
    Stage("workers", {"num_workers": 2}, "2 worker processes decode while training"),
    Stage("compile", {"compile": "default"}, "torch.compile fuses kernels"),
]
SKIPPED = [Skipped("pinned memory", "needs CUDA")]
RATE_500 = {"samples_per_s": 500.0, "window_rates": (500.0, 502.0, 498.0)}
RATE_300 = {"samples_per_s": 300.0, "window_rates": (300.0, 301.0, 299.0)}


class ScriptedConductor:
    """Walks the stages one ``advance()`` at a time (the test decides when a stage is held)."""

    def __init__(
        self, session: Any, stages: list[Stage], *, min_steady_s: float, revert_slower: bool
    ) -> None:
        self.session, self.stages, self.min_steady_s = session, stages, min_steady_s
        self.revert_slower = revert_slower
        self.index = 0
        self.done = False
        self.failed: str | None = None
        self.stopped = False
        self.ticks = 0
        self.note = ""  # the verdict on the stage before, as the real conductor reports it
        self.summary: str | None = None

    def advance(self) -> None:
        if self.index + 1 < len(self.stages):
            self.index += 1
        else:
            self.done = True

    def tick(self) -> TourProgress:
        self.ticks += 1
        state = "done" if self.done else "steady"
        return TourProgress(
            self.index,
            len(self.stages),
            self.stages[self.index],
            state,
            3.0,
            512.0,
            f"stage {self.index + 1}: steady 3.0/10 s",
            self.note,
        )

    def stop(self) -> None:
        self.stopped = True
        self.done = True


@pytest.fixture
def tour(qtbot):
    hosts: list[QWidget] = []  # keeps each host (and so its controller) alive for the test

    def make(session: Any, **kwargs: Any) -> tuple[TourController, list[tuple[str, str]]]:
        host = QWidget()
        qtbot.addWidget(host)
        hosts.append(host)
        lines: list[tuple[str, str]] = []
        kwargs.setdefault("plan", lambda knobs, workload, cores: (list(STAGES), list(SKIPPED)))
        kwargs.setdefault("conductor", ScriptedConductor)
        controller = TourController(
            session, host, lambda level, text: lines.append((level, text)), **kwargs
        )
        QVBoxLayout(host).addWidget(controller.caption)
        host.show()
        return controller, lines

    return make


def test_tour_walks_the_stages_and_shows_captions(tour, qtbot):
    session = FakeSession()
    controller, lines = tour(session, tick_ms=20)
    assert controller.action.text() == "Tour" and controller.action.isEnabled()
    with qtbot.waitSignal(controller.active_changed) as active:
        controller.action.trigger()
    assert active.args == [True]
    assert controller.action.text() == "Stop tour"
    conductor = controller.conductor
    assert conductor.min_steady_s == 10.0 and conductor.revert_slower
    assert ("info", "tour: skipping “pinned memory”: needs CUDA") in lines
    assert controller.caption.isVisible()
    assert "Tour 1/3 · baseline" in controller.caption.text()
    assert "the naive defaults" in controller.caption.text()
    assert "steady 3.0/10 s" in controller.caption.text()  # the conductor's progress line

    def frames_until(done):  # the window's redraw ticks; the conductor's period is 20 ms
        qtbot.waitUntil(lambda: (controller.on_frame(), done())[1], timeout=2000)

    conductor.advance()
    frames_until(lambda: "Tour 2/3 · workers" in controller.caption.text())
    assert "2 worker processes decode" in controller.caption.text()
    assert any("stage 2/3 “workers”" in text for _, text in lines)
    conductor.advance()
    frames_until(lambda: "Tour 3/3 · compile" in controller.caption.text())
    conductor.advance()
    with qtbot.waitSignal(controller.active_changed, timeout=2000) as ended:
        frames_until(lambda: controller.conductor is None)
    assert ended.args == [False]
    assert controller.conductor is None
    assert controller.action.text() == "Tour"
    assert "Tour done: 3 stage(s)" in controller.caption.text()
    assert not session.stopped


def test_stop_tour_keeps_the_run_going(tour, qtbot):
    session = FakeSession()
    controller, lines = tour(session)
    controller.action.trigger()
    conductor = controller.conductor
    controller.action.trigger()  # "Stop tour"
    assert conductor.stopped
    assert controller.conductor is None and not controller.active
    assert not session.stopped and session.state is SessionState.RUNNING
    assert "Tour stopped" in controller.caption.text()
    assert lines[-1] == ("info", "tour stopped; the run goes on with its current knobs")
    assert controller.action.text() == "Tour"


def test_tour_needs_a_running_run(tour):
    session = FakeSession(knobs=None, state=SessionState.IDLE)
    controller, lines = tour(session)
    assert not controller.action.isEnabled()
    controller.start()
    assert controller.conductor is None
    assert lines and lines[-1][0] == "warning"


def test_failed_tour_says_why(tour):
    session = FakeSession()
    controller, lines = tour(session)
    controller.start()
    controller.conductor.failed = "stage 'workers' was refused: no"
    controller.tick()
    assert controller.conductor is None
    assert "Tour failed: stage 'workers' was refused: no" in controller.caption.text()
    assert lines[-1] == ("error", "tour failed: stage 'workers' was refused: no")


def test_real_plan_and_conductor_send_the_workers_stage(tour):
    """The real planner and Conductor against the fake session: the baseline is held until
    steady, then the workers stage is asked for with its label, and its caption shown."""
    session = FakeSession()
    controller, lines = tour(session, plan=plan_tour, conductor=Conductor, min_steady_s=5.0)
    controller.start()
    assert any("skipping “pinned memory”: needs CUDA" in text for _, text in lines)
    assert "Tour 1/6 · baseline" in controller.caption.text()
    session.rows = [row(0, "baseline", live=True)]  # 14 s steady, stable rates
    controller.tick()
    assert session.baseline_id == 0
    assert session.sent == [(1, {"num_workers": 2, "persistent_workers": True}, "workers")]
    assert "Tour 2/6 · workers" in controller.caption.text()
    session.apply(1)
    session.rows = [
        row(0, "baseline"),
        row(1, "workers", live=True, steady=False, transition_s=None),
    ]
    controller.tick()
    assert "workers" in controller.caption.text() and controller.active
    controller.stop()


def test_window_option_starts_the_tour_once_the_run_is_up(qtbot):
    """``gpuwatch --tour``: the window begins the tour by itself as soon as a run has knobs."""
    from gpuwatch.core.run.session import Session
    from gpuwatch.qt.main_window import MainWindow
    from gpuwatch.qt.window_options import WindowOptions

    session = Session(sample_coarse=False)
    fake = FakeSession()
    win = MainWindow(session, WindowOptions(workload="vision", device="cpu", tour=True))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    win._start_pending_tour()  # what each scoreboard refresh does: no run, nothing to tour
    assert not win.tour.active and win._tour_pending
    # The run comes up: a session with knobs in the RUNNING state.
    session.config_values = fake.config_values
    session.config_changes = fake.config_changes
    session.scoreboard = fake.scoreboard
    session.label_segment = fake.label_segment
    session.hello = fake.hello
    session._state = SessionState.RUNNING
    qtbot.waitUntil(lambda: win.tour.active, timeout=5000)
    assert win.tour.caption.isVisible() and not win._tour_pending
    win.tour.stop()
    session._state = SessionState.IDLE
    win.close()


def test_a_reverted_stage_and_the_closing_sentence_are_in_the_caption(tour, qtbot):
    session = FakeSession()
    controller, lines = tour(session)
    controller.start()
    conductor = controller.conductor
    conductor.advance()
    conductor.note = "workers: 0.28× the best so far — reverted"
    controller.tick()
    assert "Tour 2/3 · workers" in controller.caption.text()
    assert "0.28× the best so far — reverted" in controller.caption.text()
    assert ("info", "tour: workers: 0.28× the best so far — reverted") in lines
    controller.compact = True  # presentation mode keeps the verdict: it is the story
    controller.tick()
    assert "reverted" in controller.caption.text() and "steady 3.0" not in controller.caption.text()
    controller.compact = False
    conductor.advance()
    conductor.advance()
    conductor.summary = "2.4× from compile; workers did not help on this CPU and was reverted"
    controller.tick()
    assert controller.conductor is None
    text = controller.caption.text()
    assert "Tour done</b> — 2.4× from compile; workers did not help on this CPU" in text
    assert "skipped: pinned memory: needs CUDA" in text
    assert lines[-1] == ("info", f"tour done: {conductor.summary}")
    # The final configuration goes on measuring: the caption follows its speedup.
    conductor.summary = "2.5× from compile; workers did not help on this CPU and was reverted"
    controller.sync()
    assert "Tour done</b> — 2.5× from compile" in controller.caption.text()
    session.new_run(session.knobs)  # a new run: the closing words go
    controller.sync()
    assert not controller.caption.isVisible()


def test_real_conductor_reverts_a_slower_stage_in_the_window(tour):
    """The real planner and Conductor: a workers stage measured slower than the baseline is
    reverted by the next stage's set, and its scoreboard row is renamed to say so."""
    session = FakeSession()
    controller, _ = tour(session, plan=plan_tour, conductor=Conductor, min_steady_s=5.0)
    controller.start()
    session.rows = [row(0, "baseline", live=True, **RATE_500)]
    controller.tick()
    session.apply(1)
    session.rows = [row(0, "baseline", **RATE_500), row(1, "workers", live=True, **RATE_300)]
    controller.tick()
    assert session.sent[-1] == (
        2,
        {"num_workers": 0, "persistent_workers": False, "log_every": 50},
        "batched logging",
    )
    assert session.config_changes()[1].label == "workers — reverted"
    assert "0.60× the best so far — reverted" in controller.caption.text()
    assert "Tour 3/6 · batched logging" in controller.caption.text()
    controller.stop()


class Clock:
    """The conductor's clock, moved by the test."""

    def __init__(self) -> None:
        self.ns = 10**12

    def __call__(self) -> int:
        return self.ns


def touring_window(show_window, qtbot, **tour_parts: Any):
    """A shown window over a Session whose knob half is a FakeSession, RUNNING; the window's
    own timer stopped, so only the test (and the keys) tick the tour."""
    from gpuwatch.core.run.session import Session

    session = Session(sample_coarse=False)
    fake = FakeSession()
    for name in ("config_values", "config_changes", "scoreboard", "label_segment"):
        setattr(session, name, getattr(fake, name))
    session.set_knobs = fake.set_knobs
    session.answer = fake.answer
    session.hello = fake.hello
    session._state = SessionState.RUNNING
    win = show_window(session)
    win.timer.stop()
    for name, part in tour_parts.items():
        setattr(win.tour, name, part)
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    return win, fake


def test_clicker_keys_move_and_hold_the_stage(show_window, qtbot):
    """Page Down / Page Up, B and "." (a presentation clicker's buttons), and the arrows
    unless a view that uses them has the focus."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    win, fake = touring_window(show_window, qtbot)
    tour = win.tour
    tour.start()
    assert "Tour 1/6 · baseline" in tour.caption.text()
    assert tour.progress_bar.isVisible() and tour.progress_bar.value() == 0
    fake.rows = [row(0, "baseline", live=True)]  # 14 s steady, stable: it would move on
    QTest.keyClick(win, Qt.Key.Key_B)
    assert tour.hold_action.isChecked() and tour.conductor.holding
    tour.tick()
    assert "Tour 1/6 · baseline" in tour.caption.text() and "held" in tour.caption.text()
    assert tour.progress_bar.value() == 100
    QTest.keyClick(win, Qt.Key.Key_PageDown)
    assert "Tour 2/6 · workers" in tour.caption.text()
    assert fake.sent == [(1, {"num_workers": 2, "persistent_workers": True}, "workers")]
    QTest.keyClick(win, Qt.Key.Key_Period)
    assert not tour.hold_action.isChecked() and not tour.conductor.holding
    fake.apply(1)
    QTest.keyClick(win, Qt.Key.Key_PageUp)
    assert "Tour 1/6 · baseline" in tour.caption.text()
    assert fake.sent[-1] == (2, {"num_workers": 0, "persistent_workers": False}, "baseline")
    assert fake.config_changes()[1].label == "workers — skipped"
    fake.apply(2)
    fake.rows = [row(2, "baseline", live=True)]
    QTest.keyClick(win, Qt.Key.Key_B)  # held again: only the keys move it now
    table = win.scoreboard.table
    win.scoreboard.show_rows(fake.rows)
    table.setFocus()
    table.setCurrentIndex(table.model().index(0, 0))
    QTest.keyClick(table, Qt.Key.Key_Right)  # the table's arrow, not the tour's
    assert table.currentIndex().column() == 1
    tour.tick()
    assert "Tour 1/6 · baseline" in tour.caption.text()
    win.headline.samples.help_button.setFocus()
    QTest.keyClick(win, Qt.Key.Key_Right)
    assert "Tour 2/6 · workers" in tour.caption.text()
    tour.stop()
    assert not tour.next_action.isEnabled() and not tour.hold_action.isChecked()
    assert not tour.progress_bar.isVisible()
    win.session._state = SessionState.IDLE


def test_a_compiling_stage_headline_shows_its_growing_elapsed_time(show_window, qtbot):
    from functools import partial

    from gpuwatch.core.run.tour import BASELINE_LABEL, defaults_of

    clock = Clock()
    win, fake = touring_window(show_window, qtbot, _make_conductor=partial(Conductor, clock=clock))
    defaults = defaults_of(fake.knobs)
    compile_stage = Stage(
        "compile", {**defaults, "compile": "default"}, "fuses", {"compile": "default"}
    )
    win.tour._plan = lambda knobs, workload, cores: (
        [Stage(BASELINE_LABEL, defaults, "defaults"), compile_stage],
        [],
    )
    tour, samples = win.tour, win.headline.samples.value
    tour.start()
    fake.rows = [row(0, "baseline", live=True)]
    tour.tick()
    assert "Tour 2/2 · compile" in tour.caption.text()
    assert samples.text() == "compiling… 0 s"
    clock.ns += 12 * 10**9
    tour.tick()
    assert samples.text() == "compiling… 12 s"  # instead of "—" over an empty timeline
    fake.apply(1)
    clock.ns += 5 * 10**9
    tour.tick()
    assert samples.text() == "compiling… 17 s"
    win.presentation.set_active(True, fullscreen=False)
    assert win.presentation.big_headline.text().startswith(
        "compiling… 17 s · no steady samples/s yet<br>"
    )
    win.presentation.set_active(False)
    fake.rows = [row(0, "baseline"), row(1, "compile", live=True, steady=False)]
    tour.tick()
    assert samples.text() == "compiling… 17 s"  # warming up: no steady figures yet
    fake.rows = [row(0, "baseline"), row(1, "compile", live=True)]
    tour.tick()
    assert samples.text() == "—"  # steady: the headline's own figure again
    tour.stop()
    win.session._state = SessionState.IDLE


def test_the_tour_keys_are_in_the_shortcut_list():
    from gpuwatch.qt.help_view import shortcuts_html
    from gpuwatch.qt.shortcuts import SHORTCUTS

    keys = {key: s.action for s in SHORTCUTS for key in s.keys}
    assert keys["PgDown"] == "tour.next_action" and keys["PgUp"] == "tour.back_action"
    assert keys["B"] == keys["."] == "tour.hold_action"
    assert keys["Right"] == "tour.next_arrow_action"
    assert "clicker" in shortcuts_html()


def test_each_tour_is_a_run_of_its_own(tour):
    """A tour begun right away is the run; a second one is a new run from its first stage's
    configuration on, and the first keeps its rows."""
    from gpuwatch.core.run.runs import RunInfo, Runs

    session = FakeSession()
    controller, _ = tour(session, plan=plan_tour, conductor=Conductor, min_steady_s=5.0)
    runs = controller.runs = Runs()
    info = RunInfo("workload", "vision", "fake CPU")
    runs.follow("run", info, [row(0, "baseline", live=True, steady=False)])
    controller.start()
    assert [r.label for r in runs.runs] == ["tour 1 · vision"]
    session.rows = [row(0, "baseline", live=True)]
    controller.tick()
    session.apply(1)
    controller.tick()
    controller.stop()
    rows = [row(0, "baseline"), row(1, "workers", live=True)]
    runs.follow("run", info, rows)
    controller.start()  # back to the defaults: a new configuration, once applied
    assert [r.label for r in runs.runs] == ["tour 1 · vision", "tour 2 · vision"]
    session.apply(2)
    controller.tick()
    runs.follow("run", info, [*rows, row(2, "baseline", live=True)])
    groups = runs.groups()
    assert [[s.row.config_id for s in g.rows] for g in groups] == [[0, 1], [2]]
    controller.stop()
