"""The runner's flush timer sends waiting steps without a step boundary, and a loop that is run
again (``TrainingLoop.run`` twice, as ``bench/overhead.py`` does) gets a working timer again."""

from __future__ import annotations

import threading
from typing import Any

from waiting import wait_until

from gpuwatch.runner.step_columns import FlushTimer, StepColumns


class Link:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def send_batch(self, kind: str, **fields: Any) -> None:
        with self.lock:
            self.sent.append((kind, fields))


def _timer(columns: StepColumns, link: Link, logged: list[str]) -> FlushTimer:
    return FlushTimer(columns, lambda: columns.send(link), logged.append, interval_s=0.01)


def test_a_stopped_timer_starts_again_and_sends_the_next_steps() -> None:
    now = [0]
    columns = StepColumns(clock=lambda: now[0])
    link, logged = Link(), []
    timer = _timer(columns, link, logged)
    timer.start()
    now[0] = 10**12  # far past the batch interval: whatever waits is due
    columns.add_step(1, 0, 8, [0] * 7)
    wait_until(lambda: len(link.sent) == 1, 10, "the first step, sent by the timer")
    timer.stop()
    columns.add_step(2, 0, 8, [0] * 7)
    now[0] = 2 * 10**12
    timer.start()  # the loop runs again
    wait_until(lambda: len(link.sent) == 2, 10, "the second step, sent by the restarted timer")
    timer.stop()
    assert [fields["step"] for _, fields in link.sent] == [[1], [2]]
    assert logged == []


def test_starting_a_running_timer_keeps_one_timer() -> None:
    columns = StepColumns()
    timer = _timer(columns, Link(), [])
    before = set(threading.enumerate())
    timer.start()
    timer.start()
    flushers = [t for t in set(threading.enumerate()) - before if t.name == "gpuwatch-flush"]
    timer.stop()
    assert len(flushers) == 1


class ScriptedWaits:
    """Stands for the timer's stop event: each ``wait`` records its timeout and runs the next of
    ``actions`` (what the loop does meanwhile); when none is left, the timer is stopped."""

    def __init__(self, *actions: Any) -> None:
        self.actions = list(actions)
        self.waits: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        if not self.actions:
            return True
        self.actions.pop(0)()
        return False


def test_the_timer_looks_less_often_while_the_loop_sends_and_takes_over_when_it_hangs() -> None:
    now = [0]
    columns = StepColumns(clock=lambda: now[0])
    link = Link()
    timer = FlushTimer(columns, lambda: columns.send(link), [].append, interval_s=0.01, idle_s=0.5)

    def loop_sends(step: int) -> Any:
        def act() -> None:
            now[0] = step * 10**12
            columns.add_step(step, 0, 8, [0] * 7)
            columns.send(link)

        return act

    def loop_hangs() -> None:
        now[0] = 3 * 10**12  # its last step finished long ago, never sent by the loop
        columns.add_step(3, 0, 8, [0] * 7)

    waits = ScriptedWaits(loop_sends(1), loop_sends(2), loop_hangs)
    timer._stopped = waits  # type: ignore[assignment]
    timer._run()
    assert waits.waits == [0.01, 0.5, 0.5, 0.01]
    assert [fields["step"] for _, fields in link.sent] == [[1], [2], [3]]
