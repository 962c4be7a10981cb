"""New steps of a followed live run share frames: a frame waits until the oldest new step
ended ``NEW_STEPS_HOLD_S`` ago, and the window ticks when that wait ends rather than on its
next regular tick, so the wait never adds a tick to the step end → drawn latency (and the
ticks before it, which would draw nothing, are not made)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from PySide6.QtCore import Qt

from gpuwatch.core.figures.frame import (
    HOLD_FULL_TICK_MS,
    HOLD_MAX_NEW_STEPS,
    HOLD_NONE_TICK_MS,
    NEW_STEPS_FRAME_S,
    NEW_STEPS_HOLD_S,
    earliest_hold_end_ns,
    hold_for_tick_s,
    hold_new_steps_s,
)
from gpuwatch.core.model.messages import DeviceInfo, Hello
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.protocol import N_MARKS
from gpuwatch.qt.main_window import REDRAW_MS
from gpuwatch.qt.plots_redraw import FOLLOW_STRIDES

S = 1_000_000_000
MS = 1_000_000
WAIT_MS = 60_000


def test_the_hold_is_the_rest_of_its_time_and_none_for_an_old_or_future_step() -> None:
    now = 50 * S
    assert hold_new_steps_s(now - 30 * MS, now) == pytest.approx(NEW_STEPS_HOLD_S - 0.03)
    assert hold_new_steps_s(now, now) == pytest.approx(NEW_STEPS_HOLD_S)
    assert hold_new_steps_s(now - int(NEW_STEPS_HOLD_S * S), now) == 0.0
    assert hold_new_steps_s(now - 5 * S, now) == 0.0  # waited long enough (or a backlog)
    assert hold_new_steps_s(now + 10 * MS, now) == 0.0  # another clock: never wait on it
    assert hold_new_steps_s(now - 30 * MS, now, hold_s=0.05) == pytest.approx(0.02)
    # Thousands of steps a frame: a frame spared saves little, the wait only adds latency.
    many = HOLD_MAX_NEW_STEPS + 1
    assert hold_new_steps_s(now - 30 * MS, now, new_steps=HOLD_MAX_NEW_STEPS) > 0
    assert hold_new_steps_s(now - 30 * MS, now, new_steps=many) == 0.0


def test_the_next_hold_ends_a_shortest_step_and_a_hold_after_the_newest_drawn_step() -> None:
    now = 50 * S
    end = now - 30 * MS
    assert earliest_hold_end_ns(end, 20 * MS, now) == end + 20 * MS + int(NEW_STEPS_HOLD_S * S)
    assert earliest_hold_end_ns(end, 20 * MS, now, hold_s=0.05) == end + 20 * MS + 50 * MS
    assert earliest_hold_end_ns(end, -5, now) == end + int(NEW_STEPS_HOLD_S * S)  # odd marks
    # No wait to expect: thousands of steps a frame, no hold, or another clock.
    assert earliest_hold_end_ns(end, 20 * MS, now, drawn_steps=HOLD_MAX_NEW_STEPS + 1) is None
    assert earliest_hold_end_ns(end, 20 * MS, now, hold_s=0.0) is None
    assert earliest_hold_end_ns(now + MS, 20 * MS, now) is None


def test_dear_frames_wait_less_and_the_dearest_not_at_all() -> None:
    assert hold_for_tick_s(5.0) == hold_for_tick_s(HOLD_FULL_TICK_MS) == NEW_STEPS_HOLD_S
    between = (HOLD_FULL_TICK_MS + HOLD_NONE_TICK_MS) / 2
    assert hold_for_tick_s(between) == pytest.approx(NEW_STEPS_HOLD_S / 2)
    assert hold_for_tick_s(HOLD_NONE_TICK_MS) == hold_for_tick_s(60.0) == 0.0


def _append(session: Session, step: int, end_ns: int) -> None:
    marks = np.linspace(end_ns - 20 * MS, end_ns, N_MARKS).astype(np.int64)
    session.steps.append([step], [0], [32], [marks.tolist()])


@pytest.fixture
def live_window(show_window, qtbot):
    session = Session(sample_coarse=False)
    session.t0_ns = time.perf_counter_ns() - 10 * S
    session._state = SessionState.RUNNING  # as if launched: the window follows "now"
    session.hello = Hello(workload="mlp", device=DeviceInfo(kind="cpu", name="test CPU"))
    session.steps.set_device_is_host(True)
    for step in range(20):  # steps that ended long ago: drawn at once
        _append(session, step, session.t0_ns + (step + 1) * 100 * MS)
    window = show_window(session)
    qtbot.waitUntil(lambda: window.frame.frames_drawn > 0, timeout=WAIT_MS)
    yield window, session
    session._state = SessionState.FINISHED  # nothing was launched: nothing to stop


def test_a_new_step_waits_for_more_and_the_window_ticks_when_its_frame_is_due(
    live_window, qtbot
) -> None:
    window, session = live_window
    frame = window.frame
    drawn = frame.frames_drawn
    frame.drawn_at = -1e9  # the pacing between frames is not what this tests
    end = time.perf_counter_ns()
    _append(session, 20, end)
    frame.clock_ns = lambda: end + 80 * MS  # the step ended 80 ms ago, however slow this is
    lo, hi = window.frame.visible_window(time.perf_counter_ns(), True, 30.0)
    assert not frame.plots(True, lo, hi, follow=True)  # held: more may come for its frame
    assert frame.due_in_s == pytest.approx(NEW_STEPS_HOLD_S - 0.08)
    # The hold ends before the next regular tick: the window ticks then instead. (A tick that
    # cost more shortens the hold, hold_for_tick_s: the ticks a loaded machine made before
    # this line must not decide it.)
    window._tick_cost_ms = 0.0
    window._tick()
    assert window.timer.interval() == math.ceil((NEW_STEPS_HOLD_S - 0.08) * 1e3)
    frame.clock_ns = time.perf_counter_ns
    qtbot.waitUntil(lambda: frame.frames_drawn > drawn, timeout=WAIT_MS)
    assert frame.last_key is not None and frame.last_key.steps_count == 21


def test_the_window_ticks_when_a_frame_can_be_due_not_on_regular_ticks_before_it(
    live_window,
) -> None:
    """Ticks that could draw nothing are not made: after a frame the next tick waits for the
    pacing (``NEW_STEPS_FRAME_S``), and held steps wait for their frame even when their wait
    is longer than a regular tick."""
    window, session = live_window
    frame = window.frame
    # A coarse timer may fire up to 5 % early: a tick before the frame is due draws nothing.
    assert window.timer.timerType() == Qt.TimerType.PreciseTimer
    frame.drawn_at = -1e9
    window._tick_cost_ms = 0.0
    _append(session, 20, time.perf_counter_ns() - 2 * int(NEW_STEPS_HOLD_S * S))
    drawn = frame.frames_drawn
    window._tick()
    ticked = time.monotonic()
    assert frame.frames_drawn == drawn + 1
    # The next tick comes when the pacing lets the next frame be drawn, not before.
    assert ticked + window.timer.interval() / 1e3 >= frame.drawn_at + NEW_STEPS_FRAME_S
    lo, hi = frame.visible_window(time.perf_counter_ns(), True, 30.0)
    assert not frame.plots(True, lo, hi, follow=True)  # just drawn: no frame can be due yet
    assert frame.due_in_s is not None and 0 < frame.due_in_s <= NEW_STEPS_FRAME_S
    frame.drawn_at = -1e9
    end = time.perf_counter_ns()
    _append(session, 21, end)
    frame.clock_ns = lambda: end + 10 * MS  # waits 90 ms: longer than a regular tick
    window._tick_cost_ms = 0.0
    window._tick()
    assert frame.frames_drawn == drawn + 1
    assert window.timer.interval() == math.ceil((NEW_STEPS_HOLD_S - 0.01) * 1e3) > REDRAW_MS


def test_steps_that_waited_long_enough_or_a_view_not_following_are_drawn_at_once(
    live_window,
) -> None:
    window, session = live_window
    frame = window.frame
    frame.drawn_at = -1e9
    _append(session, 20, time.perf_counter_ns() - 2 * int(NEW_STEPS_HOLD_S * S))
    lo, hi = frame.visible_window(time.perf_counter_ns(), True, 30.0)
    assert frame.plots(True, lo, hi, follow=True) and frame.due_in_s is None
    frame.drawn_at = -1e9
    _append(session, 21, time.perf_counter_ns())  # just ended, but the user looks elsewhere
    assert frame.plots(True, lo, hi, follow=False) and frame.due_in_s is None


def test_a_followed_view_moves_in_whole_strides_and_stands_still_between_them(
    live_window,
) -> None:
    window, session = live_window
    frame = window.frame
    width_px = frame.timeline.width_px()
    stride_s = round(width_px / FOLLOW_STRIDES) * 30.0 / width_px
    px_s = 30.0 / width_px
    start = session.t0_ns + 100 * S
    edges = []
    for ms in range(0, 3000, 37):  # three seconds of ticks
        now = start + ms * MS
        lo, hi = frame.visible_window(now, True, 30.0)
        assert hi - lo == pytest.approx(30.0)
        assert 0 <= hi - (now - session.t0_ns) / S < stride_s + 1e-9  # "now" is in view
        assert hi / px_s == pytest.approx(round(hi / px_s))  # on a whole pixel
        edges.append(hi)
    moves = np.diff(edges)[np.diff(edges) > 0]
    assert len(moves) >= 2 and np.allclose(moves, stride_s)  # never a pixel at a time


def test_after_a_frame_the_window_ticks_when_the_next_steps_can_be_due(live_window) -> None:
    """The steps after a frame end at least as long after the newest one drawn as the
    shortest of the last steps took, and then wait the hold: the tick after the frame comes
    then (not at the pacing's end, only to find them held), and draws them."""
    window, session = live_window
    frame = window.frame
    frame.drawn_at = -1e9
    window._tick_cost_ms = 0.0
    now = time.perf_counter_ns()
    # 20 ms steps (``_append``'s), the oldest new one ended a hold ago: drawn at once.
    for i in range(5):
        _append(session, 20 + i, now - int(NEW_STEPS_HOLD_S * S) + i * 20 * MS)
    drawn = frame.frames_drawn
    window._tick()
    assert frame.frames_drawn == drawn + 1
    newest_end = now - int(NEW_STEPS_HOLD_S * S) + 4 * 20 * MS
    due_ns = newest_end + 20 * MS + int(NEW_STEPS_HOLD_S * S)  # the next step's hold ends
    wait_s = (due_ns - time.perf_counter_ns()) / S
    assert wait_s > NEW_STEPS_FRAME_S  # later than the pacing alone would tick
    assert window.timer.interval() / 1e3 == pytest.approx(wait_s, abs=0.02)
    # That step came: at the tick, its hold is over and it is drawn.
    _append(session, 25, newest_end + 20 * MS)
    frame.clock_ns = lambda: due_ns + MS
    frame.drawn_at = -1e9  # as if the pacing had passed too
    window._tick()
    assert frame.frames_drawn == drawn + 2
    # A view the user moved does not wait for the run's steps.
    frame.drawn_at = time.monotonic()
    lo, hi = frame.visible_window(time.perf_counter_ns(), True, 30.0)
    _append(session, 26, newest_end + 40 * MS)
    frame.drawn_at = -1e9
    assert frame.plots(True, lo, hi, follow=False)
    assert frame.next_frame_in_s(time.monotonic()) == pytest.approx(
        frame.pacing_left_s(time.monotonic()), abs=0.005
    )
