"""The knob panel over a fake session: widgets from the schema, typed requests, refusals
snapping back, "applying…", costs, the no-run / ended-run states, and one truth for knob
state: whoever changes a knob (the panel, the advisor, the tour, ``--set``, a replay), the
panel shows the running value and offers Apply only for a value that differs from it."""

from __future__ import annotations

import dataclasses

import pytest
from fake_knob_session import KNOBS, FakeSession, knob, row
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QLabel, QSpinBox

from gpuwatch.core.figures.advisor import Finding
from gpuwatch.core.files.replay import READ_ONLY
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.run.session import SessionState
from gpuwatch.qt import palette
from gpuwatch.qt.advisor_view import AdvisorView
from gpuwatch.qt.knob_panel import HINT_ENDED, HINT_NO_RUN, KnobPanel


def click_box(qtbot, box: QCheckBox) -> None:
    """Click a check box's indicator (its left edge), as a user would."""
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=QPoint(8, box.height() // 2))


@pytest.fixture
def panel_for(qtbot):
    def make(session: FakeSession) -> KnobPanel:
        panel = KnobPanel(session)
        qtbot.addWidget(panel)
        panel.resize(320, 900)
        panel.show()
        qtbot.waitExposed(panel)
        panel.refresh()
        return panel

    return make


def test_one_widget_per_knob_of_the_right_type_grouped(panel_for):
    panel = panel_for(FakeSession())
    assert list(panel.rows) == [k["name"] for k in KNOBS]
    kinds = {"bool": QCheckBox, "int": QSpinBox, "float": QDoubleSpinBox, "choice": QComboBox}
    for spec in KNOBS:
        assert isinstance(panel.rows[spec["name"]].editor, kinds[spec["type"]]), spec["name"]
    workers = panel.rows["num_workers"].editor
    assert (workers.minimum(), workers.maximum()) == (0, 16)
    assert panel.rows["storage_latency_ms"].editor.suffix() == " ms"
    headers = [w.text() for w in panel.findChildren(QLabel) if w.text().startswith("<b>")]
    assert headers == [
        "<b>Loader</b>",
        "<b>Copies</b>",
        "<b>Loop</b>",
        "<b>Precision</b>",
        "<b>Layout</b>",
        "<b>Kernels</b>",
        "<b>Demo dials</b>",
    ]
    assert not panel.hint.isVisible()


def test_disabled_knob_is_greyed_with_its_reason_visible(panel_for):
    panel = panel_for(FakeSession())
    pin = panel.rows["pin_memory"]
    assert not pin.editor.isEnabled()
    assert not pin.label.isEnabled()
    assert pin.note.isVisible() and pin.note.text() == "needs CUDA"
    assert panel.rows["num_workers"].editor.isEnabled()
    assert not panel.rows["num_workers"].note.isVisible()
    # A disabled choice: greyed in the list, its reason as the item's tooltip and as text.
    amp = panel.rows["amp"]
    combo = amp.editor
    fp16 = combo.findData("fp16")
    assert not combo.model().item(fp16).isEnabled()
    assert combo.itemData(fp16, Qt.ItemDataRole.ToolTipRole) == "needs CUDA"
    assert combo.model().item(combo.findData("bf16")).isEnabled()
    assert amp.note.isVisible() and amp.note.text() == "fp16: needs CUDA"


def test_checkbox_sends_a_typed_bool_and_follows_the_answer(panel_for, qtbot):
    session = FakeSession()
    panel = panel_for(session)
    box = panel.rows["persistent_workers"].editor
    click_box(qtbot, box)
    assert session.sent == [(1, {"persistent_workers": True}, None)]
    assert type(session.sent[0][1]["persistent_workers"]) is bool
    assert panel.message.isVisible() and "applying" in panel.message.text()
    assert panel.rows["persistent_workers"].cost.text() == "applying…"
    panel.refresh()  # no answer yet: still asked for, not snapped back
    assert box.isChecked() and "applying" in panel.message.text()
    session.apply(1)
    panel.refresh()
    assert box.isChecked()
    assert not panel.message.isVisible()
    assert panel.pending == {}


def test_choice_sends_the_choice(panel_for, qtbot):
    session = FakeSession()
    panel = panel_for(session)
    combo = panel.rows["amp"].editor
    combo.activated.emit(combo.findData("bf16"))  # what picking an item in the popup emits
    assert session.sent == [(1, {"amp": "bf16"}, None)]


def test_spin_applies_on_enter_not_per_arrow_tick(panel_for, qtbot):
    session = FakeSession()
    panel = panel_for(session)
    spin = panel.rows["num_workers"].editor
    apply_button = panel.rows["num_workers"].apply_button
    panel.activateWindow()
    qtbot.waitActive(panel)
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus)
    for _ in range(3):
        qtbot.keyClick(spin, Qt.Key.Key_Up)
    assert spin.value() == 3
    assert session.sent == []  # arrow ticks edit a draft
    panel.refresh()
    assert spin.value() == 3  # a draft being edited is not overwritten by the value in force
    assert apply_button.isEnabled()
    qtbot.keyClick(spin, Qt.Key.Key_Down)
    qtbot.keyClick(spin, Qt.Key.Key_Return)
    assert session.sent == [(1, {"num_workers": 2}, None)]
    assert type(session.sent[0][1]["num_workers"]) is int
    assert not apply_button.isEnabled()  # pending
    qtbot.keyClick(spin, Qt.Key.Key_Return)  # pressing Enter again sends no duplicate
    assert len(session.sent) == 1


def test_apply_button_sends_the_draft(panel_for, qtbot):
    session = FakeSession()
    panel = panel_for(session)
    latency = panel.rows["storage_latency_ms"]
    latency.editor.setValue(25.0)  # as the mouse wheel or the arrow buttons would
    assert session.sent == []
    assert latency.apply_button.isEnabled()
    qtbot.mouseClick(latency.apply_button, Qt.MouseButton.LeftButton)
    assert session.sent == [(1, {"storage_latency_ms": 25.0}, None)]
    assert type(session.sent[0][1]["storage_latency_ms"]) is float


def test_refusal_shows_the_message_and_snaps_back(panel_for, qtbot):
    session = FakeSession()
    panel = panel_for(session)
    box = panel.rows["channels_last"].editor
    click_box(qtbot, box)
    assert box.isChecked()
    session.refuse(1, "channels_last needs a workload with 4-D image inputs, not 'mlp' <x>")
    with qtbot.waitSignal(panel.status_message) as signal:
        panel.refresh()
    assert not box.isChecked()  # snapped back to the value in force
    assert panel.message.isVisible()
    assert panel.message.textFormat() == Qt.TextFormat.PlainText  # shown verbatim
    assert panel.message.text() == (
        "Refused: channels_last needs a workload with 4-D image inputs, not 'mlp' <x>"
    )
    assert palette.ERROR_TEXT in panel.message.styleSheet()
    assert "4-D image inputs" in signal.args[0]
    panel.refresh()  # shown once, stays visible
    assert panel.message.isVisible()


def test_cost_of_the_last_change(panel_for, qtbot):
    session = FakeSession()
    panel = panel_for(session)
    panel.rows["num_workers"].editor.setValue(2)
    panel.request("num_workers", 2)
    session.apply(1, rebuilt=("loader",))
    session.rows = [
        row(0, "baseline"),
        row(1, "num_workers=2", live=True, transition_s=None, steady=False),
    ]
    panel.refresh(session.rows)
    cost = panel.rows["num_workers"].cost
    assert cost.isVisible() and cost.text() == "loader rebuilt; transition running…"
    session.rows[1] = row(1, "num_workers=2", live=True, transition_s=2.1)
    panel.refresh(session.rows)
    assert cost.text() == "loader rebuilt in 2.1 s"
    assert not panel.rows["compile"].cost.isVisible()  # never changed

    panel.request("compile", "default")
    assert panel.rows["compile"].cost.text() == "applying…"
    session.apply(2, rebuilt=("model",))
    session.rows.append(row(2, "compile=default", live=True, transition_s=41.0))
    panel.refresh(session.rows)
    assert panel.rows["compile"].cost.text() == "compiled in 41.0 s"
    assert cost.text() == "loader rebuilt in 2.1 s"


def test_no_run_then_hello_then_a_new_workload(panel_for):
    session = FakeSession(knobs=None, state=SessionState.IDLE)
    panel = panel_for(session)
    assert panel.hint.isVisible() and panel.hint.text() == HINT_NO_RUN
    assert panel.rows == {}
    session.state = SessionState.RUNNING
    session.new_run(KNOBS)
    panel.refresh()
    assert not panel.hint.isVisible()
    assert len(panel.rows) == len(KNOBS)
    old_editor = panel.rows["num_workers"].editor
    session.new_run(
        [
            knob("num_workers", "int", "loader", 1, min=0, max=16),
            knob("log_every", "int", "loop", 1, min=1, max=1000),
        ],
        workload="mlp",
    )
    panel.refresh()
    assert list(panel.rows) == ["num_workers", "log_every"]
    assert panel.rows["num_workers"].editor is not old_editor
    assert panel.rows["num_workers"].editor.value() == 1


def test_ended_run_disables_the_panel(panel_for, qtbot):
    session = FakeSession()
    panel = panel_for(session)
    panel.request("persistent_workers", True)
    session.state = SessionState.FAILED
    panel.refresh()
    assert panel.hint.isVisible() and panel.hint.text() == HINT_ENDED
    assert all(not r.editor.isEnabled() for r in panel.rows.values())
    assert panel.pending == {}
    assert "run has ended" in panel.message.text()
    click_box(qtbot, panel.rows["channels_last"].editor)
    assert len(session.sent) == 1


def test_locked_panel_sends_nothing(panel_for, qtbot):
    session = FakeSession()
    panel = panel_for(session)
    panel.set_locked("The tour is driving the knobs")
    assert panel.hint.isVisible() and "tour" in panel.hint.text()
    assert not panel.rows["channels_last"].editor.isEnabled()
    panel.set_locked(None)
    assert panel.rows["channels_last"].editor.isEnabled()
    assert not panel.hint.isVisible()


# ---- One truth: whoever changes a knob, the panel shows the value in force ---------------


def focused_workers(panel, qtbot):
    """The workers field with the keyboard focus, as after the user clicked into it."""
    spin = panel.rows["num_workers"].editor
    panel.activateWindow()
    qtbot.waitActive(panel)
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus)
    return spin


def test_advisor_apply_moves_the_panel_and_leaves_nothing_to_revert(panel_for, qtbot):
    """The advisor's "Apply: num_workers=2" while the workers field has the focus: the field
    shows 2 and its Apply is off, so no click can put the run back on 0 workers."""
    session = FakeSession()
    panel = panel_for(session)
    spin = focused_workers(panel, qtbot)
    advisor = AdvisorView(session)
    qtbot.addWidget(advisor)
    finding = Finding("input_wait", "fix", "input-bound", "52 %", "input wait", 0.52)
    advisor.apply(dataclasses.replace(finding, suggestion={"num_workers": 2}))
    assert session.sent == [(1, {"num_workers": 2}, None)]
    session.apply(1)
    panel.refresh()
    apply_button = panel.rows["num_workers"].apply_button
    assert spin.hasFocus() and spin.value() == 2
    assert not apply_button.isEnabled()
    qtbot.mouseClick(apply_button, Qt.MouseButton.LeftButton)
    qtbot.keyClick(spin, Qt.Key.Key_Return)
    assert len(session.sent) == 1  # nothing sent back


def test_a_change_from_elsewhere_replaces_a_draft(panel_for, qtbot):
    """A draft of 5 workers, then the run moves to 2 by another hand: the running value wins,
    and a new draft after that is kept and applies."""
    session = FakeSession()
    panel = panel_for(session)
    spin = focused_workers(panel, qtbot)
    spin.setValue(5)  # the user's draft, not sent
    panel.refresh()
    assert spin.value() == 5 and panel.rows["num_workers"].apply_button.isEnabled()
    request = session.set_knobs({"num_workers": 2}, label="last session")
    session.apply(request)
    panel.refresh()
    assert spin.value() == 2
    assert not panel.rows["num_workers"].apply_button.isEnabled()
    spin.setValue(3)
    panel.refresh()  # the running value did not move: the new draft stays
    assert spin.value() == 3 and panel.rows["num_workers"].apply_button.isEnabled()
    qtbot.keyClick(spin, Qt.Key.Key_Return)
    assert session.sent[-1][1] == {"num_workers": 3}


def test_a_checkbox_and_a_choice_follow_changes_made_elsewhere(panel_for):
    session = FakeSession()
    panel = panel_for(session)
    request = session.set_knobs({"channels_last": True, "amp": "bf16"}, label="tour: AMP")
    session.apply(request)
    panel.refresh()
    assert panel.rows["channels_last"].editor.isChecked()
    assert panel.rows["amp"].editor.currentData() == "bf16"


def test_tour_stages_are_shown_while_the_panel_is_locked(panel_for):
    """The tour drives the knobs: the locked panel sends nothing but shows each stage's
    values, and after the tour its fields hold what the run kept."""
    session = FakeSession()
    panel = panel_for(session)
    panel.set_locked("The tour is driving the knobs")
    for values in ({"num_workers": 2}, {"num_workers": 4, "persistent_workers": True}):
        session.apply(session.set_knobs(values, label="tour"))
        panel.refresh()
        assert panel.rows["num_workers"].editor.value() == values["num_workers"]
    assert panel.rows["persistent_workers"].editor.isChecked()
    panel.set_locked(None)
    assert panel.rows["num_workers"].editor.value() == 4
    assert not panel.rows["num_workers"].apply_button.isEnabled()


def test_values_set_at_start_are_shown_with_apply_off(panel_for):
    """``gpuwatch run --set num_workers=2``: the runner starts with it (config 0)."""
    knobs = [dict(k, default=2) if k["name"] == "num_workers" else k for k in KNOBS]
    session = FakeSession(knobs)
    panel = panel_for(session)
    assert panel.rows["num_workers"].editor.value() == 2
    assert not panel.rows["num_workers"].apply_button.isEnabled()


def test_a_replay_shows_the_configuration_at_its_play_position(panel_for):
    """A recording's configuration changes arrive as the play position passes them."""
    session = FakeSession(state=SessionState.FINISHED)
    panel = panel_for(session)
    panel.set_locked(READ_ONLY)
    base = session.config_changes()[-1]
    session._changes.append(
        ConfigChange(
            1, {**base.values, "num_workers": 2}, {"num_workers": 2}, base.t_ns + 1, 100, 4
        )
    )
    panel.refresh()
    assert panel.rows["num_workers"].editor.value() == 2
    assert not panel.rows["num_workers"].editor.isEnabled()
    assert not panel.rows["num_workers"].apply_button.isEnabled()
