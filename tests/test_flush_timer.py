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
