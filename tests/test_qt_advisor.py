"""The Advisor dock over a fake session (findings, Apply sends the set, refused/applied,
outcome, locked), gaps tinted by cause on the window's timeline, and the one-click flow in the
real window over a real CPU runner on the naive ``vision`` workload."""

from __future__ import annotations

import dataclasses

import pytest
from fake_knob_session import FakeSession
from test_advisor import row

from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt.advisor_view import HINT_NO_RUN, AdvisorView

#: Torch import and the dataset build take seconds here; a machine loaded by others, more.
RUN_TIMEOUT_MS = 240_000


@pytest.fixture
def advisor(qtbot):
    session = FakeSession()
    view = AdvisorView(session)
    qtbot.addWidget(view)
    view.resize(320, 600)
    view.show()
    qtbot.waitExposed(view)
    return session, view


def naive_rows():
    return [dataclasses.replace(row(0, data=62, kernel=38), label="baseline")]


def test_shows_the_input_finding_and_apply_sends_the_set(advisor, qtbot) -> None:
    session, view = advisor
    view.refresh(naive_rows())
    card = view.cards[0]
    assert card.isVisible()
    assert card.title.text() == (
        "▶ 62% of each step waits for input; try num_workers=2 (this machine has 2 cores)"
    )
    assert "input wait: 62% of each step" in card.evidence.text()
    assert "rule input-bound" in card.evidence.text()
    assert "of 62.0 ms idle per step: 62.0 input" in view.summary.text()
    assert "62.0 data loading, 38.0 compute" in view.summary.text()
    assert card.apply_button.text() == "Apply: num_workers=2"
    card.apply_button.click()
    assert session.sent == [(1, {"num_workers": 2}, None)]
    assert card.status.text().startswith(
        "Sent num_workers=2: the new workers start while training goes on"
    )
    assert card.why.text() == "Why: worker processes prepare batches while the model trains."
    assert not card.apply_button.isEnabled()  # one request at a time

    change = session.apply(1)
    new = dataclasses.replace(
        row(change.id, data=8, kernel=92, rate=170),
        label="num_workers=2",
        changed={"num_workers": 2},
        settings={**row().settings, "num_workers": 2},
    )
    measuring = dataclasses.replace(new, samples_per_s=None, breakdown=None, idle_causes=None)
    view.refresh([*naive_rows(), measuring])
    assert view.applied == {change.id: "input wait"}
    assert "Measuring <b>num_workers=2</b>" in view.summary.text()
    assert not any(c.isVisible() for c in view.cards)

    view.refresh([*naive_rows(), new])
    top = view.cards[0]
    assert top.title.text() == "✔ num_workers 0→2: 1.70× samples/s; input wait 62%→8%"
    assert top.apply_button.isHidden() and top.why.isHidden()


def test_a_refused_apply_says_why(advisor) -> None:
    session, view = advisor
    view.refresh(naive_rows())
    view.cards[0].apply_button.click()
    session.refuse(1, "num_workers must be at most 1 here")
    view.refresh(naive_rows())
    assert view.cards[0].status.text() == "Refused: num_workers must be at most 1 here"


def test_locked_sends_nothing_and_no_run_shows_the_hint(advisor) -> None:
    session, view = advisor
    view.set_locked("The tour is driving the knobs")
    view.refresh(naive_rows())
    button = view.cards[0].apply_button
    assert not button.isEnabled() and button.toolTip() == "The tour is driving the knobs"
    view.apply(view.findings[0])
    assert session.sent == []
    empty = AdvisorView(FakeSession(knobs=None))
    empty.refresh([])
    assert empty.summary.text() == HINT_NO_RUN and empty.findings == []


def test_window_has_an_advisor_dock_in_the_view_menu_and_tints_gaps(show_window, qtbot):
    from test_qt_window import feed_cpu_run

    win = show_window(Session(sample_coarse=False))
    dock = win.advisor.parentWidget()
    assert dock.windowTitle() == "Advisor" and dock.isVisible()
    view_menu = next(a.menu() for a in win.menuBar().actions() if a.text() == "&View")
    panels = next(a.menu() for a in view_menu.actions() if a.text() == "Panels")
    assert "Advisor" in [a.text() for a in panels.actions()]

    feed_cpu_run(win.session)
    timeline = win.timeline
    # 100 synthetic CPU steps: data (input) and sync/overhead gaps around each compute span.
    qtbot.waitUntil(lambda: timeline.cause_bars["input"].count() == 100, timeout=10_000)
    assert timeline.causes_shown[0] == "input"
    assert not timeline.gap_bars.isVisible()  # the cause tint replaces the plain one
    qtbot.waitUntil(lambda: "idle, by cause:" in win.timeline_caption.text(), timeout=10_000)
    assert "input" in win.timeline_caption.text()


def test_scoreboard_tooltip_shows_the_breakdown_and_idle_causes(qtbot) -> None:
    from PySide6.QtCore import Qt

    from gpuwatch.qt.scoreboard_view import COLUMNS, ScoreboardView

    session = FakeSession()
    view = ScoreboardView(session)
    qtbot.addWidget(view)
    view.show_rows(naive_rows())
    column = [c.title for c in COLUMNS].index("input wait %")
    tip = view.model.data(view.model.index(0, column), Qt.ItemDataRole.ToolTipRole)
    assert "of 100.0 ms per step: 62.0 data loading, 38.0 compute" in tip
    assert "of 62.0 ms idle per step: 62.0 input" in tip


def test_a_layout_saved_before_the_advisor_existed_does_not_hide_it(show_window, qtbot):
    from gpuwatch.qt.settings import Settings

    old = show_window(Session(sample_coarse=False))
    dock = old.advisor.parentWidget()
    dock.setObjectName("not_yet_invented")  # the layout an older gpuwatch saved
    dock.hide()
    Settings().save_window(old)
    upgraded = show_window(Session(sample_coarse=False))
    assert upgraded.advisor.parentWidget().isVisible()
    upgraded.advisor.parentWidget().hide()  # the user closes it: that is remembered
    Settings().save_window(upgraded)
    again = show_window(Session(sample_coarse=False))
    assert not again.advisor.parentWidget().isVisible()


def test_a_new_run_forgets_applied_changes_but_a_grown_schema_does_not(advisor) -> None:
    session, view = advisor
    session.hello = dataclasses.replace(session.hello, pid=1)
    view.refresh(naive_rows())
    view.applied[1] = "input wait"
    session.hello = dataclasses.replace(session.hello, knobs=session.hello.knobs[:])  # schema grew
    view.refresh(naive_rows())
    assert view.applied == {1: "input wait"}
    session.hello = dataclasses.replace(session.hello, pid=2)  # the next run
    view.refresh(naive_rows())
    assert view.applied == {}


@pytest.mark.timeout(600)
def test_one_click_on_naive_vision_closes_the_input_gap_and_reports_it(show_window, qtbot):
    """As a new user meets it: start the naive vision loop on the CPU, the advisor
    says unprompted that it waits for input and offers num_workers; one click on Apply, and
    once the new configuration is steady the advisor reports what it measured, the
    scoreboard has the row with its speedup and the input gaps have shrunk."""
    win = show_window(Session())
    session = win.session
    win.start_action.trigger()

    def input_finding_offered() -> None:
        assert session.state is SessionState.RUNNING, session.error
        assert win.advisor.findings and win.advisor.findings[0].rule == "input-bound", [
            f.title for f in win.advisor.findings
        ]
        assert win.advisor.cards[0].apply_button.isEnabled()

    qtbot.waitUntil(input_finding_offered, timeout=RUN_TIMEOUT_MS)
    cores = session.hello.device.cores
    workers = min(cores, 16)
    card = win.advisor.cards[0]
    assert card.isVisible() and "waits for input; try num_workers=" in card.title.text()
    assert card.apply_button.text() == f"Apply: num_workers={workers}"
    assert card.why.isVisible() and "evidence: input wait:" in card.evidence.text()
    card.apply_button.click()
    assert card.status.text().startswith(f"Sent num_workers={workers}")

    def outcome_shown() -> None:
        assert session.state is SessionState.RUNNING, session.error
        top = win.advisor.findings[0] if win.advisor.findings else None
        assert top is not None and top.rule in ("change-outcome", "change-worse"), [
            f.title for f in win.advisor.findings
        ]

    qtbot.waitUntil(outcome_shown, timeout=RUN_TIMEOUT_MS)
    top = win.advisor.cards[0]
    assert top.isVisible()
    before, after = win.scoreboard.model.rows[:2]
    assert after.changed == {"num_workers": workers} and after.speedup is not None
    # The outcome names the applied finding's quantity before → after (not just samples/s);
    # a machine loaded by others can make the workers cost more than they save (change-worse).
    if win.advisor.findings[0].rule == "change-outcome":
        assert top.title.text().startswith(f"✔ num_workers 0→{workers}: ")
        assert "input wait " in top.title.text() and "%→" in top.title.text()
    else:
        assert f"made things worse: num_workers 0→{workers}" in top.title.text()
    assert "samples/s" in top.evidence.text()
    assert after.input_wait_share < before.input_wait_share  # the input gaps closed
