"""Hovering and clicking a step on the timeline (``qt/step_inspector.py``), on steps fed as the
link thread feeds a Session: 20 CPU steps 10 ms apart, each phase 1 ms, 4 ms ``other``."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt

from gpuwatch.core.model.store import StepStore
from gpuwatch.core.run.session import Session
from gpuwatch.qt.step_inspector import describe_step, step_at

MS = 1_000_000
STEPS = 20


def marks(t0: int, i: int) -> list[int]:
    """Step ``i``: starts at ``t0 + 10 i`` ms, one phase a millisecond, ends 6 ms later."""
    return [t0 + i * 10 * MS + k * MS for k in range(7)]


def feed(session: Session) -> None:
    session._dispatch(
        {
            "kind": "hello",
            "protocol": 1,
            "pid": 1,
            "workload": "mlp",
            "device": {"kind": "cpu", "name": "cpu"},
            "versions": {},
            "knobs": [],
            "config": {"values": {}, "warmup_steps": 0},
        }
    )
    t0 = session.t0_ns
    session._dispatch(
        {
            "kind": "steps",
            "step": list(range(STEPS)),
            "config": [0] * STEPS,
            "samples": [8] * STEPS,
            "host": [marks(t0, i) for i in range(STEPS)],
        }
    )


def test_the_step_under_a_time_by_binary_search_over_the_store() -> None:
    store = StepStore(capacity=8)  # a ring that has wrapped: 12 of 20 steps fell off
    store.append(list(range(STEPS)), [0] * STEPS, [8] * STEPS, [marks(0, i) for i in range(20)])
    detail = step_at(store.around(153 * MS), 153 * MS, device_marks=False)
    assert detail is not None and detail.step == 15 and detail.duration_ns == 6 * MS
    assert detail.phases == {
        "data": MS,
        "h2d": MS,
        "forward": MS,
        "backward": MS,
        "optimizer": MS,
        "sync": MS,
        "other": 4 * MS,
    }
    in_other = step_at(store.around(158 * MS), 158 * MS, device_marks=False)
    assert in_other is not None and in_other.step == 15  # after its end: its other time
    newest = step_at(store.around(192 * MS), 192 * MS, device_marks=False)
    assert newest is not None and newest.step == 19 and newest.phases["other"] is None
    assert step_at(store.around(197 * MS), 197 * MS, device_marks=False) is None  # after all
    assert step_at(store.around(115 * MS), 115 * MS, device_marks=False) is None  # fell off
    assert step_at(StepStore().around(0), 0, device_marks=False) is None
    assert len(store.around(153 * MS)) == 3  # three rows copied, not the ring
    assert "n/a (newest step)" in describe_step(newest)


def test_device_stream_active_is_shown_from_cuda_marks() -> None:
    store = StepStore()
    store.append([0, 1], [0, 0], [8, 8], [marks(0, 0), marks(0, 1)])
    device = np.asarray(marks(0, 0)) + MS // 2  # SIMULATED device marks, 0.5 ms behind
    store.set_device_marks([0], [device.tolist()])
    detail = step_at(store.around(3 * MS), 3 * MS, device_marks=True)
    assert detail is not None and detail.device_active_ns == 4 * MS
    assert "stream active" in describe_step(detail)


@pytest.fixture
def inspected(show_window, qtbot):
    session = Session(sample_coarse=False)
    feed(session)
    win = show_window(session)
    win.follow_action.setChecked(False)
    win.timeline.getPlotItem().getViewBox().setXRange(0.0, 0.2, padding=0)
    win.redraw_now()
    qtbot.waitUntil(lambda: win.timeline.phase_bars["data"].count() == STEPS, timeout=5000)
    return win


def at(win, x_s: float) -> QPoint:
    """The timeline's viewport pixel at ``x_s`` seconds, in the middle of the lanes."""
    view_box = win.timeline.getPlotItem().getViewBox()
    y = view_box.viewRange()[1]
    scene = view_box.mapViewToScene(QPointF(x_s, (y[0] + y[1]) / 2))
    return win.timeline.mapFromScene(scene)


def test_hovering_a_step_shows_its_number_duration_and_phases(inspected, qtbot) -> None:
    win, inspector = inspected, inspected.step_inspector
    viewport = win.timeline.viewport()
    assert not inspector.label.isVisible()
    qtbot.mouseMove(viewport, at(win, 0.0535))
    qtbot.waitUntil(inspector.label.isVisible, timeout=5000)
    text = inspector.label.text()
    assert "step 5</b> · 6.00 ms" in text and "4.00 ms" in text  # its other time
    assert inspector.label.geometry().intersects(win.timeline.rect())
    qtbot.mouseMove(viewport, at(win, 0.0615))
    qtbot.waitUntil(lambda: "step 6<" in inspector.label.text(), timeout=5000)


def click(qtbot, viewport, pos: QPoint) -> None:
    """As a hand does it: the mouse moves there, then clicks (Qt drops a move to where the
    last move already was, so a click without its move would leave the next move unseen)."""
    qtbot.mouseMove(viewport, pos)
    qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton, pos=pos)


def test_a_click_pins_the_step_and_a_second_click_frees_it(inspected, qtbot) -> None:
    win, inspector = inspected, inspected.step_inspector
    viewport = win.timeline.viewport()
    click(qtbot, viewport, at(win, 0.0835))
    qtbot.waitUntil(lambda: inspector.pinned, timeout=5000)
    assert "step 8<" in inspector.label.text() and inspector.label.isVisible()
    qtbot.mouseMove(viewport, at(win, 0.1235))  # pinned: hovering elsewhere changes nothing
    assert "step 8<" in inspector.label.text()
    click(qtbot, viewport, at(win, 0.0835))
    qtbot.waitUntil(lambda: not inspector.pinned, timeout=5000)
    qtbot.mouseMove(viewport, at(win, 0.1235))
    qtbot.waitUntil(lambda: "step 12<" in inspector.label.text(), timeout=5000)


def test_redrawing_without_the_mouse_never_looks_a_step_up(inspected, monkeypatch) -> None:
    win = inspected
    calls = []
    store = win.session.steps
    original = store.around
    monkeypatch.setattr(store, "around", lambda t: calls.append(t) or original(t))
    for x in (0.0, 0.05, 0.1):
        win.timeline.getPlotItem().getViewBox().setXRange(x, x + 0.2, padding=0)
        win.redraw_now()
    assert calls == []
    assert not win.step_inspector.label.isVisible()
