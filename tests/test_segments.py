"""Segment statistics on synthetic steps with known figures (docs/knobs.md §3)."""

from __future__ import annotations

import pytest

from gpuwatch.core.figures.segments import (
    Scoreboard,
    coarse_input,
    segment_stats,
    window_rates,
)
from gpuwatch.core.model.messages import ConfigChange, Refusal, describe_change
from gpuwatch.core.model.metrics import NVML_GPU_UTIL, NVML_POWER, PROC_CPU
from gpuwatch.core.model.store import SeriesStore, StepStore, StepsView
from gpuwatch.core.run.session import Session, SessionError

MS = 1_000_000


def make_steps(
    store: StepStore,
    first_id: int,
    count: int,
    config: int,
    t0: int,
    *,
    step_ms: float,
    data_ms: float,
    samples: int = 32,
    slow: dict[int, float] | None = None,
) -> int:
    """Append back-to-back steps; ``slow`` maps a step id to its (longer) duration in ms.

    Returns the time the last step ended.
    """
    t = t0
    ids, configs, counts, host = [], [], [], []
    for step in range(first_id, first_id + count):
        total = int((slow or {}).get(step, step_ms) * MS)
        data = int(data_ms * MS) if step not in (slow or {}) else total - int(step_ms * MS)
        data = max(data, int(data_ms * MS))
        rest = total - data
        marks = [t, t + data]
        for k in range(1, 5):
            marks.append(t + data + rest * k // 5)
        marks.append(t + total)
        ids.append(step)
        configs.append(config)
        counts.append(samples)
        host.append(marks)
        t += total
    store.append(ids, configs, counts, host)
    return t


def change(
    config_id: int, first_step: int, warmup: int, t_ns: int, **changed: object
) -> ConfigChange:
    return ConfigChange(
        id=config_id,
        values={"num_workers": 0, **changed},
        changed=dict(changed),
        t_ns=t_ns,
        first_step=first_step,
        warmup_steps=warmup,
        label="baseline" if config_id == 0 else describe_change(changed),
    )


@pytest.fixture
def two_segments() -> tuple[StepStore, list[ConfigChange], int]:
    store = StepStore(4096)
    store.set_device_is_host(True)
    # Config 0: 3 slow transition steps (100 ms), then 400 steps of 10 ms with 4 ms of data.
    end = make_steps(
        store, 0, 403, 0, 1_000 * MS, step_ms=10, data_ms=4, slow={0: 100, 1: 100, 2: 100}
    )
    # Config 1 at `end`: 2 transition steps of 50 ms, then 800 steps of 5 ms with 0.5 ms data.
    end2 = make_steps(store, 403, 802, 1, end, step_ms=5, data_ms=0.5, slow={403: 50, 404: 50})
    changes = [change(0, 0, 3, 1_000 * MS), change(1, 403, 2, end, num_workers=2)]
    return store, changes, end2


def test_transition_steps_are_excluded_from_every_figure(two_segments) -> None:
    store, changes, _ = two_segments
    rows = Scoreboard().rows(
        store, changes, SeriesStore(), device_kind="cpu", cores=2, baseline_id=None, running=False
    )
    base, workers = rows
    assert (base.steps, base.steady_steps) == (403, 400)
    assert base.step_ms_p50 == pytest.approx(10.0)
    assert base.step_ms_p95 == pytest.approx(10.0)  # the 100 ms steps would show at p95
    assert base.samples_per_s == pytest.approx(3200.0)
    assert base.input_wait_share == pytest.approx(0.4)
    # CPU: host spans from data_end to optimizer_end (4/5 of the 6 non-data ms) of 10 ms.
    assert base.busy_share == pytest.approx(0.48, abs=1e-6)
    assert base.transition_s == pytest.approx(0.3)
    assert workers.label == "num_workers=2"
    assert workers.samples_per_s == pytest.approx(6400.0)
    assert workers.input_wait_share == pytest.approx(0.1)
    assert workers.transition_s == pytest.approx(0.1)
    assert base.speedup == pytest.approx(1.0)
    assert workers.speedup == pytest.approx(2.0)


def test_steps_trained_while_the_next_change_is_prepared_leave_the_old_figures() -> None:
    """New workers start while training goes on (docs/knobs.md §2): those steps run slower
    because the start-up shares the machine. Counted in the baseline they would make the
    change look better than it is."""
    store = StepStore(4096)
    store.set_device_is_host(True)
    end = make_steps(store, 0, 300, 0, 1_000 * MS, step_ms=10, data_ms=4)  # 3,200 samples/s
    # 2 s of preparation: the old configuration trains at a third of its speed.
    end = make_steps(store, 300, 67, 0, end, step_ms=30, data_ms=4)
    make_steps(store, 367, 400, 1, end, step_ms=5, data_ms=0.5)
    prepared = ConfigChange(
        id=1,
        values={"num_workers": 2},
        changed={"num_workers": 2},
        t_ns=end,
        first_step=367,
        warmup_steps=0,
        apply_s=2.015,
    )
    rows = Scoreboard().rows(
        store,
        [change(0, 0, 0, 1_000 * MS), prepared],
        SeriesStore(),
        device_kind="cpu",
        cores=2,
        baseline_id=None,
        running=False,
    )
    base, workers = rows
    assert base.steady_steps == 300 and base.steps == 367
    assert base.samples_per_s == pytest.approx(3200.0)
    assert base.step_ms_p95 == pytest.approx(10.0)
    assert workers.speedup == pytest.approx(2.0)  # not 2.0 × the contaminated baseline


def test_pinned_baseline_changes_speedups(two_segments) -> None:
    store, changes, _ = two_segments
    rows = Scoreboard().rows(
        store, changes, SeriesStore(), device_kind="cpu", cores=2, baseline_id=1, running=False
    )
    assert [r.speedup for r in rows] == pytest.approx([0.5, 1.0])


def test_too_few_steady_steps_give_none_not_zero() -> None:
    store = StepStore(64)
    make_steps(store, 0, 6, 0, 0, step_ms=10, data_ms=4)
    row = segment_stats(store.snapshot(), change(0, 0, 3, 0), None)
    assert row.steady_steps == 3
    assert row.samples_per_s is None and row.step_ms_p50 is None
    assert row.input_wait_share is None and row.busy_share is None
    assert not row.steady


def test_coarse_utilization_and_energy_over_the_steady_range(two_segments) -> None:
    store, changes, _ = two_segments
    coarse = SeriesStore()
    first_steady = 1_000 * MS + 300 * MS
    # One CPU sample inside the steady range at 150 % of a core: on 2 cores that is 0.75.
    coarse.append(PROC_CPU, first_steady, first_steady + 1_000 * MS, 150.0)
    rows = Scoreboard().rows(
        store, changes, coarse, device_kind="cpu", cores=2, baseline_id=None, running=False
    )
    assert rows[0].coarse_util == pytest.approx(0.75)
    assert rows[0].coarse_source == PROC_CPU
    assert rows[0].energy_j_per_step is None
    gpu = SeriesStore()
    gpu.append(NVML_GPU_UTIL, first_steady, first_steady + 4_000 * MS, 40.0)
    gpu.append(NVML_POWER, first_steady, first_steady + 4_000 * MS, 200.0)
    data = coarse_input(gpu, "cuda", 2)
    view = store.snapshot()
    base_only = StepsView(
        view.step[:403],
        view.config[:403],
        view.samples[:403],
        view.host[:403],
        view.device[:403],
        view.has_device[:403],
    )
    row = segment_stats(base_only, changes[0], data)
    assert row.coarse_util == pytest.approx(0.4)
    # 200 W over 400 steps of 10 ms: 2 J per step.
    assert row.energy_j_per_step == pytest.approx(2.0)


def test_window_rates_use_the_median_and_drop_a_partial_last_window() -> None:
    import numpy as np

    starts = [0, 500 * MS, 1000 * MS, 1500 * MS, 2000 * MS]
    ends = [s + 500 * MS for s in starts[:-1]] + [2000 * MS + 100 * MS]
    rates = window_rates(
        np.array(starts), np.array(ends), np.array([10, 10, 20, 20, 5]), 1_000 * MS
    )
    assert rates.tolist() == pytest.approx([20.0, 40.0])


def test_finished_rows_are_frozen_when_old_steps_fall_off_the_ring() -> None:
    store = StepStore(300)
    end = make_steps(store, 0, 200, 0, 0, step_ms=10, data_ms=4)
    changes = [change(0, 0, 3, 0), change(1, 200, 2, end, num_workers=2)]
    board = Scoreboard()
    make_steps(store, 200, 50, 1, end, step_ms=5, data_ms=1)
    first = board.rows(
        store, changes, SeriesStore(), device_kind="cpu", cores=1, baseline_id=None, running=True
    )
    assert first[0].steady_steps == 197 and not first[0].live and first[1].live
    # Config 0 falls off the ring.
    make_steps(store, 250, 290, 1, end + 50 * 5 * MS, step_ms=5, data_ms=1)
    again = board.rows(
        store, changes, SeriesStore(), device_kind="cpu", cores=1, baseline_id=None, running=True
    )
    assert again[0] == first[0]
    assert again[1].steps == 300  # all of config 1 that the ring still holds


def test_segment_json_has_the_contract_fields(two_segments) -> None:
    store, changes, _ = two_segments
    row = Scoreboard().rows(
        store, changes, SeriesStore(), device_kind="cpu", cores=2, baseline_id=None, running=False
    )[1]
    data = row.to_json()
    for key in (
        "label",
        "settings",
        "samples_per_s",
        "step_ms_p50",
        "step_ms_p95",
        "busy_share",
        "input_wait_share",
        "coarse_util",
        "speedup",
    ):
        assert key in data
    assert data["coarse_util"] is None  # no samples: null, never 0
    assert data["settings"]["num_workers"] == 2


def hello(**config: object) -> dict:
    return {
        "kind": "hello",
        "protocol": 1,
        "pid": 1,
        "workload": "vision",
        "device": {"kind": "cpu", "cores": 2},
        "versions": {},
        "knobs": [],
        "config": {"id": 0, "values": {"num_workers": 0, "log_every": 1, **config}},
    }


def test_session_records_configs_answers_and_refusals() -> None:
    session = Session(sample_coarse=False)
    session._dispatch(hello())
    assert session.config_values() == {"num_workers": 0, "log_every": 1}
    assert session.config_changes()[0].label == "baseline"
    session.model._labels[7] = "workers"
    session._dispatch(
        {
            "kind": "config",
            "id": 1,
            "request": 7,
            "values": {"num_workers": 2, "log_every": 1},
            "changed": {"num_workers": 2},
            "t_ns": 5,
            "first_step": 10,
            "warmup_steps": 6,
            "apply_s": 0.01,
            "rebuilt": ["loader"],
        }
    )
    answer = session.answer(7)
    assert isinstance(answer, ConfigChange) and answer.label == "workers"
    assert answer.rebuilt == ("loader",) and answer.first_step == 10
    assert session.config_values()["num_workers"] == 2
    session._dispatch(
        {
            "kind": "refused",
            "request": 8,
            "values": {"num_workers": "two"},
            "message": "num_workers must be an integer",
        }
    )
    refusal = session.answer(8)
    assert isinstance(refusal, Refusal) and "integer" in refusal.message
    assert session.last_refusal is refusal
    assert any("refused" in line.text for line in session.drain_log())
    session.label_segment(1, "four workers")
    assert session.config_changes()[1].label == "four workers"


def test_set_knobs_drops_unchanged_values_and_needs_a_runner() -> None:
    session = Session(sample_coarse=False)
    session._dispatch(hello())
    assert session.set_knobs({"num_workers": 0}) is None  # nothing differs: nothing sent
    with pytest.raises(SessionError, match="start one"):
        session.set_knobs({"num_workers": 2})


def test_listeners_see_every_message_and_a_failing_one_is_detached() -> None:
    session = Session(sample_coarse=False)
    seen: list[tuple[str, int]] = []
    session.add_listener(lambda message, t_ns: seen.append((message["kind"], t_ns)))

    def broken(message: dict, t_ns: int) -> None:
        raise RuntimeError("boom")

    session.add_listener(broken)
    session._dispatch(hello())
    session._dispatch({"kind": "log", "level": "info", "text": "hi"})
    kinds = [kind for kind, _ in seen]
    assert "hello" in kinds and kinds.count("log") >= 2  # runner line + our own lines
    assert broken not in session._listeners
    assert all(t > 0 for _, t in seen)


def test_a_knobs_message_grows_the_schema_and_the_current_values() -> None:
    session = Session(sample_coarse=False)
    session._dispatch(hello())
    lr = {"name": "lr", "type": "float", "default": 0.1, "enabled": True}
    session._dispatch({"kind": "knobs", "knobs": [lr], "values": {"lr": 0.1}})
    assert [k["name"] for k in session.knobs] == ["lr"]
    assert session.config_values()["lr"] == 0.1 and session.config_values()["num_workers"] == 0


def test_a_short_baseline_keeps_its_rate_windows_when_the_next_change_is_prepared() -> None:
    """Applied 1.6 s into the baseline (two rate windows, the second 0.6 s long): cutting the
    steps trained during the preparation off the end must leave both windows. Dropping the
    window the preparation starts in would leave one, and the frozen row could never be
    compared with the change (the advisor needs two windows on each side)."""
    store = StepStore(4096)
    store.set_device_is_host(True)
    end = make_steps(store, 0, 160, 0, 1_000 * MS, step_ms=10, data_ms=4)
    end = make_steps(store, 160, 20, 0, end, step_ms=30, data_ms=4)  # 0.6 s of preparation
    make_steps(store, 180, 400, 1, end, step_ms=5, data_ms=0.5)
    prepared = ConfigChange(
        id=1,
        values={"num_workers": 2},
        changed={"num_workers": 2},
        t_ns=end,
        first_step=180,
        warmup_steps=0,
        apply_s=0.605,
    )
    base, _ = Scoreboard().rows(
        store,
        [change(0, 0, 0, 1_000 * MS), prepared],
        SeriesStore(),
        device_kind="cpu",
        cores=2,
        baseline_id=None,
        running=False,
    )
    assert len(base.window_rates) == 2 and base.samples_per_s == pytest.approx(3200.0)
    assert base.steady_steps == 160
