"""Gap causes on constructed timelines with known answers (CPU host marks and SIMULATED
CUDA device marks: hand-made numbers, never a GPU measurement)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuwatch.core.figures.gap_causes import CAUSES, caused_idle, reconfiguring_steps, time_split
from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.model.store import StepsView

MS = 1_000_000


def view_of(
    host_ms: list[list[float]],
    device_ms: list[list[float]] | None = None,
    steps: list[int] | None = None,
    config: list[int] | None = None,
) -> StepsView:
    """Steps from marks in ms (start, data_end, h2d_end, forward_end, backward_end,
    optimizer_end, sync_end). Without ``device_ms`` the device is the host (a CPU)."""
    host = (np.asarray(host_ms, float) * MS).astype(np.int64)
    n = len(host)
    device = (
        host.copy() if device_ms is None else (np.asarray(device_ms, float) * MS).astype(np.int64)
    )
    return StepsView(
        np.asarray(steps if steps is not None else range(n), np.int64),
        np.asarray(config if config is not None else [0] * n, np.int32),
        np.ones(n, np.int32),
        host,
        device,
        np.ones(n, bool),
    )


def cpu_steps(n: int, durations: tuple[float, ...] = (10, 1, 5, 5, 2, 3, 4)) -> StepsView:
    """``n`` identical CPU steps: data, h2d, forward, backward, optimizer, sync; then other."""
    rows, t = [], 0.0
    for _ in range(n):
        marks = [t]
        for d in durations[:6]:
            marks.append(marks[-1] + d)
        rows.append(marks)
        t = marks[-1] + durations[6]
    return view_of(rows)


def totals_ms(idle) -> dict[str, float]:
    return {k: round(v / MS, 6) for k, v in idle.totals_ns().items()}


def test_cpu_idle_is_the_non_compute_host_time_by_phase() -> None:
    idle = caused_idle(cpu_steps(3))
    # per step: data 10 → input, sync 3 → sync, other 4 → other (not after the last step)
    assert totals_ms(idle) == {
        "input": 30,
        "copy": 0,
        "sync": 9,
        "launch": 0,
        "reconfigure": 0,
        "other": 8,
    }


def test_simulated_cuda_gap_is_split_by_the_host_phase_active_then() -> None:
    # SIMULATED marks. Host: data 0-10, h2d 10-11, fwd 11-13, bwd 13-15, opt 15-16, sync
    # 16-26 (waits for the device), then 1 ms overhead; the next step is 27-...
    host = [[0, 10, 11, 13, 15, 16, 26], [27, 37, 38, 40, 42, 43, 53]]
    device = [[0, 10.5, 11.5, 18, 23, 25.9, 26], [27, 37.5, 38.5, 45, 50, 52.9, 53]]
    idle = caused_idle(view_of(host, device))
    got = totals_ms(idle)
    # Inter-step gap 25.9 → 37.5: 0.1 sync, 1 other, 10 input, 0.5 copy (host issuing h2d).
    # Leading idle of step 0 (0 → 10.5): 10 input, 0.5 copy; after the last step 0.1 sync.
    assert got["input"] == pytest.approx(20)
    assert got["copy"] == pytest.approx(1.0)
    assert got["sync"] == pytest.approx(0.2)
    assert got["other"] == pytest.approx(1.0)
    assert got["launch"] == 0 and got["reconfigure"] == 0


def test_device_idle_while_the_host_computes_is_launch() -> None:
    # SIMULATED: in step 1 the stream reaches its data_end/h2d marks only at 12 (the host
    # was busy in Python until then), so the device idles while the host is in forward.
    host = [[0, 1, 2, 4, 5, 6, 6], [6, 7, 8, 14, 15, 16, 16]]
    busy = [[0, 1, 2, 4, 5, 6, 6], [6, 7, 8, 8, 15, 16, 16]]
    assert totals_ms(caused_idle(view_of(host, busy)))["launch"] == 0  # no gap: no launch
    late = [[0, 1, 2, 4, 5, 6, 6], [6, 12, 12.5, 14, 15, 16, 16]]
    got = totals_ms(caused_idle(view_of(host, late)))
    # step 0: 0-1 input; step 1: 6-7 input, 7-8 copy (host issuing h2d), 8-12 launch
    assert got["launch"] == pytest.approx(4)
    assert got["input"] == pytest.approx(2) and got["copy"] == pytest.approx(1)


def test_reconfigure_covers_the_apply_overhead_and_the_transition_steps() -> None:
    v = cpu_steps(5)
    v = StepsView(
        v.step, np.asarray([0, 0, 1, 1, 1], np.int32), v.samples, v.host, v.device, v.has_device
    )
    change = ConfigChange(
        id=1,
        values={"num_workers": 2},
        changed={"num_workers": 2},
        t_ns=0,
        first_step=2,
        warmup_steps=2,
    )
    flags = reconfiguring_steps(v, [change])
    assert flags.tolist() == [False, False, True, True, False]
    got = totals_ms(caused_idle(v, reconfiguring=flags))
    # Steps 2 and 3 (data 10 + sync 3 each) and the overhead just before each of them
    # (4 each: where the change was applied, then inside the transition) are reconfigure.
    assert got["reconfigure"] == pytest.approx(2 * 13 + 2 * 4)
    assert got["input"] == pytest.approx(30) and got["sync"] == pytest.approx(9)
    assert got["other"] == pytest.approx(2 * 4)  # after step 0 and after step 3


def test_config_zero_is_warm_up_not_a_reconfigure() -> None:
    v = cpu_steps(3)
    start = ConfigChange(id=0, values={}, changed={}, t_ns=0, first_step=0, warmup_steps=5)
    assert not reconfiguring_steps(v, [start]).any()


def test_a_missing_step_is_neither_idle_nor_overhead() -> None:
    v = cpu_steps(3)
    v = StepsView(np.asarray([0, 1, 5]), v.config, v.samples, v.host, v.device, v.has_device)
    got = totals_ms(caused_idle(v))
    assert got["other"] == pytest.approx(4)  # only between steps 0 and 1


def test_unmarked_device_time_is_unknown_not_idle() -> None:
    host = [[0, 10, 11, 13, 15, 16, 17], [17, 27, 28, 30, 32, 33, 34]]
    device = [[0, 10, 11, 13, 15, 16, 17], [0] * 7]
    v = view_of(host, device)
    v = StepsView(v.step, v.config, v.samples, v.host, v.device, np.asarray([True, False]))
    got = totals_ms(caused_idle(v))
    assert got["input"] == pytest.approx(10) and got["sync"] == pytest.approx(1)
    assert sum(got.values()) == pytest.approx(11)  # step 1 (no marks) adds nothing


def test_selected_rows_only_and_empty_views() -> None:
    v = cpu_steps(4)
    rows = np.asarray([False, True, True, False])
    assert totals_ms(caused_idle(v, rows))["input"] == pytest.approx(20)
    empty = StepsView.empty()
    assert time_split(empty).wall_ns == 0
    assert set(caused_idle(empty).totals_ns().values()) == {0.0}
    assert len(caused_idle(v, np.zeros(4, bool))) == 0


def test_spans_of_a_cause_merge_touching_pieces() -> None:
    idle = caused_idle(cpu_steps(2))
    s, e = idle.spans("input")
    assert ((e - s) / MS).tolist() == [10, 10]
    s, e = idle.spans("launch")
    assert len(s) == 0
    assert set(CAUSES) == {"input", "copy", "sync", "launch", "reconfigure", "other"}


def test_device_states_partition_the_step_windows_exactly() -> None:
    host = [[0, 10, 11, 13, 15, 16, 26], [27, 37, 38, 40, 42, 43, 53]]
    device = [[0, 10.5, 11.5, 18, 23, 25.9, 26], [27, 37.5, 38.5, 45, 50, 52.9, 53]]
    split = time_split(view_of(host, device))
    assert split.wall_ns == 53 * MS  # step 0 to step 1's start, then step 1
    assert split.device_ns.sum() == pytest.approx(split.wall_ns)
    assert split.device_ns.tolist() == pytest.approx([22.2 * MS, 2 * MS, 28.8 * MS, 0])
    s, e = split.idle_start, split.idle_end
    assert np.all(e > s) and np.all(s[1:] >= e[:-1])  # sorted, disjoint


def test_no_device_marks_yet_is_all_unknown() -> None:
    v = cpu_steps(3)
    v = StepsView(v.step, v.config, v.samples, v.host, v.device * 0, np.zeros(3, bool))
    split = time_split(v)
    assert split.device_ns[3] == split.wall_ns > 0  # all DEVICE_UNKNOWN
    assert len(caused_idle(v)) == 0


def test_pieces_agree_with_a_point_by_point_reference() -> None:
    rng = np.random.default_rng(7)
    n = 40
    durations = rng.integers(0, 4, size=(n, 7)) * MS  # many ties and empty phases
    starts = np.cumsum(np.r_[0, durations.sum(axis=1)[:-1]])
    host = np.empty((n, 7), np.int64)
    host[:, 0] = starts
    host[:, 1:] = starts[:, None] + np.cumsum(durations[:, :6], axis=1)
    device = np.maximum.accumulate((host + rng.integers(0, 3, (n, 1)) * MS).reshape(-1))
    v = StepsView(
        np.arange(n),
        np.zeros(n, np.int32),
        np.ones(n, np.int32),
        host,
        device.reshape(n, 7),
        rng.random(n) > 0.2,
    )
    split = time_split(v)
    hb, db = host.reshape(-1), device.reshape(n, 7)
    marked = set(np.flatnonzero(v.has_device).tolist())
    for t in np.arange(hb[0], hb[-1], MS // 4):  # every quarter ms of the run
        host_k = int(np.searchsorted(hb, t, side="right")) - 1
        rows = [
            r
            for r in marked
            if db[r, 0] <= t < db[r, -1] or (r + 1 in marked and db[r, -1] <= t < db[r + 1, 0])
        ]
        phase = int(np.searchsorted(db[rows[0]], t, side="right")) - 1 if rows else None
        idle_ref = phase in (0, 5, 6)  # data, sync, between steps
        holding = np.flatnonzero((split.idle_start <= t) & (t < split.idle_end))
        assert len(holding) == int(idle_ref), (t, phase)
        if idle_ref:
            assert split.idle_host[holding[0]] == host_k % 7, t


def test_caused_idle_is_time_splits_idle_on_every_kind_of_view() -> None:
    """``caused_idle`` (what every frame prices) skips the busy totals, not any idle piece:
    on a CUDA-like view with unmarked steps, a hole and a transition, on a CPU view and on
    selected rows it gives exactly ``time_split``'s idle intervals."""
    rng = np.random.default_rng(3)
    n = 60
    durations = rng.integers(0, 4, size=(n, 7)) * MS
    starts = np.cumsum(np.r_[0, durations.sum(axis=1)[:-1]])
    host = np.empty((n, 7), np.int64)
    host[:, 0] = starts
    host[:, 1:] = starts[:, None] + np.cumsum(durations[:, :6], axis=1)
    device = np.maximum.accumulate((host + rng.integers(0, 3, (n, 1)) * MS).reshape(-1))
    steps = np.r_[np.arange(30), np.arange(31, 61)]  # one step missing
    cuda = StepsView(
        steps,
        np.r_[np.zeros(40), np.ones(20)].astype(np.int32),
        np.ones(n, np.int32),
        host,
        device.reshape(n, 7),
        rng.random(n) > 0.2,
    )
    change = ConfigChange(1, {"workers": 2}, {"workers": 2}, 0, first_step=41, warmup_steps=5)
    flagged = reconfiguring_steps(cuda, [change])
    assert flagged.any()
    for view, rows, reconf in (
        (cuda, None, flagged),
        (cuda, np.arange(n) % 3 != 0, None),
        (cpu_steps(12), None, None),
        (cuda.rows(slice(0, 0)), None, None),
    ):
        want, got = time_split(view, rows, reconf).idle(), caused_idle(view, rows, reconf)
        for a, b in ((want.start, got.start), (want.end, got.end), (want.cause, got.cause)):
            np.testing.assert_array_equal(a, b)
