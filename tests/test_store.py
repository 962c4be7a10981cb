"""Ring buffers: wrap-around keeps the newest rows, snapshots are copies, marks find steps."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwatch.core.model.store import MetricStatus, SeriesStore, StepStore, StepsView
from gpuwatch.protocol import N_MARKS


def _batch(ids: range, t0: int = 1_000, step_ns: int = 100) -> tuple[list, list, list, list]:
    """Steps with marks 10 ns apart, each step ``step_ns`` long; step i starts at t0+i*step_ns."""
    host = [[t0 + i * step_ns + 10 * k for k in range(N_MARKS)] for i in ids]
    return list(ids), [0] * len(ids), [32] * len(ids), host


def _ends(i: int, t0: int = 1_000, step_ns: int = 100) -> int:
    return t0 + i * step_ns + 10 * (N_MARKS - 1)


def test_empty_snapshot() -> None:
    view = StepStore(8).snapshot()
    assert len(view) == 0
    assert view.host.shape == (0, N_MARKS)
    assert len(StepsView.empty()) == 0


def test_wrap_keeps_newest_in_order() -> None:
    store = StepStore(capacity=8)
    store.append(*_batch(range(5)))
    store.append(*_batch(range(5, 13)))
    view = store.snapshot()
    assert store.count == 13
    assert view.step.tolist() == list(range(5, 13))
    assert view.host[:, -1].tolist() == [_ends(i) for i in range(5, 13)]
    assert view.samples.tolist() == [32] * 8


def test_batch_larger_than_capacity() -> None:
    store = StepStore(capacity=4)
    store.append(*_batch(range(10)))
    assert store.count == 10
    assert store.snapshot().step.tolist() == [6, 7, 8, 9]


def test_snapshot_since_and_last() -> None:
    store = StepStore(capacity=16)
    store.append(*_batch(range(10)))
    assert store.snapshot(since_ns=_ends(6)).step.tolist() == [6, 7, 8, 9]
    assert store.snapshot(since_ns=_ends(6) + 1).step.tolist() == [7, 8, 9]
    assert store.snapshot(since_ns=_ends(9) + 1).step.tolist() == []
    assert store.snapshot(last=3).step.tolist() == [7, 8, 9]
    assert store.snapshot(since_ns=_ends(2), last=2).step.tolist() == [8, 9]
    assert store.snapshot(last=0).step.tolist() == []


def test_snapshot_is_a_copy() -> None:
    store = StepStore(capacity=4)
    store.append(*_batch(range(2)))
    view = store.snapshot()
    view.host[:] = -1
    store.append(*_batch(range(2, 6)))  # overwrites the ring rows the view came from
    assert store.snapshot().step.tolist() == [2, 3, 4, 5]
    assert view.step.tolist() == [0, 1]


def test_device_marks_attach_by_step_id() -> None:
    store = StepStore(capacity=8)
    store.append(*_batch(range(4)))
    assert not store.snapshot().has_device.any()
    marks = [[5_000 + 7 * k for k in range(N_MARKS)], [6_000 + 7 * k for k in range(N_MARKS)]]
    assert store.set_device_marks([1, 3], marks) == 2
    view = store.snapshot()
    assert view.has_device.tolist() == [False, True, False, True]
    assert view.device[1].tolist() == marks[0]
    assert view.device[3].tolist() == marks[1]


def test_device_marks_after_wrap_and_for_evicted_steps() -> None:
    store = StepStore(capacity=4)
    store.append(*_batch(range(7)))  # rows 0..2 evicted; ring positions of 4..6 wrapped
    marks = [[100 * s + k for k in range(N_MARKS)] for s in (1, 4, 6, 9)]
    assert store.set_device_marks([1, 4, 6, 9], marks) == 2  # 1 evicted, 9 never stored
    view = store.snapshot()
    assert view.step.tolist() == [3, 4, 5, 6]
    assert view.has_device.tolist() == [False, True, False, True]
    assert view.device[1].tolist() == marks[1]
    assert view.device[3].tolist() == marks[2]


def test_device_marks_on_empty_store() -> None:
    assert StepStore(4).set_device_marks([1], [[0] * N_MARKS]) == 0
    assert StepStore(4).set_device_marks([], []) == 0


def test_device_is_host_mirrors_host_marks() -> None:
    store = StepStore(capacity=8)
    store.append(*_batch(range(2)))
    store.set_device_is_host(True)
    store.append(*_batch(range(2, 4)))
    view = store.snapshot()
    assert view.has_device.tolist() == [False, False, True, True]
    np.testing.assert_array_equal(view.device[2:], view.host[2:])


def test_clear_forgets_rows() -> None:
    store = StepStore(capacity=8)
    store.append(*_batch(range(3)))
    store.clear()
    assert len(store.snapshot()) == 0
    store.append(*_batch(range(2)))
    assert store.snapshot().step.tolist() == [0, 1]


def test_series_wrap_and_since() -> None:
    series = SeriesStore(capacity=4)
    for i in range(6):
        series.append("m", i * 10, i * 10 + 10, float(i))
    view = series.snapshot("m")
    assert view.value.tolist() == [2.0, 3.0, 4.0, 5.0]
    assert view.t0.tolist() == [20, 30, 40, 50]
    assert view.t1.tolist() == [30, 40, 50, 60]
    assert series.snapshot("m", since_ns=45).value.tolist() == [4.0, 5.0]
    series.append_many(
        "m", [60, 70, 80, 90, 100], [70, 80, 90, 100, 110], [6.0, 7.0, 8.0, 9.0, 10.0]
    )
    assert series.snapshot("m").value.tolist() == [7.0, 8.0, 9.0, 10.0]


def test_series_unknown_metric_and_statuses() -> None:
    series = SeriesStore(capacity=4)
    assert len(series.snapshot("nope")) == 0
    assert series.names() == []
    series.set_status(MetricStatus("m", "M", "%", available=False, reason="why"))
    assert series.statuses()["m"].reason == "why"
    assert "m" not in series.names()  # a status alone never creates samples


@pytest.mark.parametrize("capacity", [1, 3])
def test_series_small_capacity(capacity: int) -> None:
    series = SeriesStore(capacity=capacity)
    series.append_many("m", list(range(5)), list(range(1, 6)), [float(v) for v in range(5)])
    assert series.snapshot("m").value.tolist() == [float(v) for v in range(5 - capacity, 5)]
