"""KernelWindow figures on constructed windows with known answers.

The CUDA windows here are SIMULATED event lists (no GPU on this machine): kernels, copies,
streams, launch times and geometry are written by hand to give exact expected figures.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from gpuwatch import protocol
from gpuwatch.core.figures.kernel_window import (
    KERNEL_WAIT_NS,
    KernelWindow,
    KernelWindowError,
    describe,
)

K, CPY, SET, OP = (protocol.KERNEL_KINDS.index(k) for k in ("kernel", "memcpy", "memset", "cpu_op"))


def window(
    events: list[tuple[int, int, int, int, int | None, float | None]],
    *,
    device: str = "cuda",
    t0: int = 0,
    t1: int = 1000,
    **extra: Any,
) -> dict[str, Any]:
    """A ``kernels`` message from ``(kind, stream, start, end, launch, blocks_per_sm)`` rows."""
    message = {
        "kind": "kernels",
        "status": "ok",
        "device": device,
        "steps": [3, 4],
        "perturbed": [2, 3, 4],
        "t0_ns": t0,
        "t1_ns": t1,
        "names": ["a", "b"],
        "type": [e[0] for e in events],
        "name": [i % 2 for i in range(len(events))],
        "stream": [e[1] for e in events],
        "start": [e[2] for e in events],
        "end": [e[3] for e in events],
        "launch": [e[4] for e in events],
        "blocks_per_sm": [e[5] for e in events],
        "grid": [None] * len(events),
        "block": [None] * len(events),
        "dropped": 0,
        **extra,
    }
    return message


def test_simulated_cuda_busy_is_the_union_over_streams_and_gaps_per_stream() -> None:
    # SIMULATED: stream 7 has kernels [100,200], [150,300] (overlap), [400,500];
    # stream 9 a memcpy [250,450]. Union: [100,500] = 400 ns of a 1000 ns window.
    w = KernelWindow.from_message(
        window(
            [
                (K, 7, 100, 200, 90, 2.0),
                (K, 7, 150, 300, 95, 0.5),
                (K, 7, 400, 500, 350, None),
                (CPY, 9, 250, 450, 240, None),
            ]
        )
    )
    s = w.summary()
    assert s.busy_ns == 400 and s.busy_fraction == pytest.approx(0.4)
    assert s.kernels == 3 and s.copies == 1
    assert s.stream_busy_ns == {7: 300, 9: 200}
    # One gap on stream 7: 300 -> 400; its kernel was launched at 350 > 300: host wait.
    assert (s.launch_gaps, s.launch_gap_total_ns) == (1, 100)
    assert s.idle.host_wait_ns == 100 and s.idle.kernel_wait_ns == 0 and s.idle.other_ns == 0
    # Geometry known for two kernels; the 0.5 blocks/SM one is under-filled: 150 of 400 ns.
    assert s.geometry_known == 2 and s.underfilled == 1
    assert s.underfilled_busy_share == pytest.approx(150 / 400)
    assert "under-filled" in describe(s, "cuda")


def test_simulated_cuda_idle_categories_follow_hta() -> None:
    # SIMULATED one stream: gap 1 (launched before the previous ended, short) = kernel wait;
    # gap 2 (launched in time, long) = other; gap 3 (launched after the end) = host wait;
    # gap 4 (launch unknown, long) = other.
    us = 1000
    short, long = KERNEL_WAIT_NS - 10, KERNEL_WAIT_NS + 20 * us
    s2 = 100 * us + short
    s3 = s2 + 100 * us + long
    s4 = s3 + 100 * us + 200 * us
    s5 = s4 + 100 * us + long
    w = KernelWindow.from_message(
        window(
            [
                (K, 1, 0, 100 * us, 0, None),
                (K, 1, s2, s2 + 100 * us, 50 * us, None),
                (K, 1, s3, s3 + 100 * us, s3 - long - 10 * us, None),
                (K, 1, s4, s4 + 100 * us, s4 - 150 * us, None),
                (K, 1, s5, s5 + 100 * us, None, None),
            ],
            t1=s5 + 100 * us,
        )
    )
    idle = w.summary().idle
    assert idle.kernel_wait_ns == short
    assert idle.other_ns == 2 * long
    assert idle.host_wait_ns == 200 * us
    assert w.summary().underfilled_busy_share is None  # no geometry: n/a, not 0


def test_back_to_back_kernels_microseconds_apart_are_kernel_wait() -> None:
    # Real A100 traces (tests/fixtures/gpu_traces) put 1-16 µs between kernels queued in time,
    # and HTA calls those kernel wait: its threshold of 30 applies to the trace's µs.
    us = 1000
    w = KernelWindow.from_message(
        window(
            [
                (K, 1, 0, 50 * us, 0, None),
                (K, 1, 52 * us, 90 * us, 1 * us, None),
                (K, 1, 106 * us, 150 * us, 2 * us, None),
                (K, 1, 181 * us, 200 * us, 3 * us, None),
            ],
            t1=200 * us,
        )
    )
    idle = w.summary().idle
    assert idle.kernel_wait_ns == (2 + 16) * us
    assert idle.other_ns == 31 * us and idle.host_wait_ns == 0


def test_cpu_window_counts_ops_and_every_gap_is_host_wait() -> None:
    w = KernelWindow.from_message(
        window([(OP, 11, 100, 300, None, None), (OP, 11, 350, 600, None, None)], device="cpu")
    )
    s = w.summary()
    assert s.kernels == 2 and s.copies == 0
    assert s.busy_ns == 450 and s.busy_fraction == pytest.approx(0.45)
    assert s.idle.host_wait_ns == 50 and s.idle.total_ns == 50
    assert "CPU ops" in describe(s, "cpu") and "geometry" not in describe(s, "cpu")
    assert w.top_names(1) == [("b", 1, 250)]


def test_events_are_clipped_to_the_covered_window() -> None:
    w = KernelWindow.from_message(
        window(
            [(OP, 1, 0, 400, None, None), (OP, 1, 500, 900, None, None)],
            device="cpu",
            t0=100,
            t1=1000,
            covered_t1_ns=600,
            dropped=3,
        )
    )
    s = w.summary()
    assert s.window_ns == 500 and s.busy_ns == 300 + 100 and s.dropped == 3
    assert "3 events dropped" in describe(s, "cpu")


def test_failed_window_has_no_events_and_keeps_its_reason() -> None:
    w = KernelWindow.from_message(window([], status="failed", error="the profiler could not start"))
    assert not w.ok and w.error == "the profiler could not start" and len(w) == 0
    assert w.summary().busy_ns == 0


@pytest.mark.parametrize(
    "change", [{"status": "maybe"}, {"name": [5]}, {"type": [9]}, {"grid": [None, None]}]
)
def test_malformed_windows_are_refused_with_one_message(change: dict[str, Any]) -> None:
    message = {**window([(K, 1, 0, 10, None, None)]), **change}
    with pytest.raises(KernelWindowError, match="malformed 'kernels' message"):
        KernelWindow.from_message(message)


def test_protocol_checks_the_columns_of_a_kernels_message() -> None:
    message = window([(K, 1, 0, 10, None, None), (K, 1, 20, 30, None, None)])
    assert protocol.decode(protocol.json.dumps(message).encode())["status"] == "ok"
    broken = {**message, "end": [10]}
    with pytest.raises(protocol.ProtocolError, match="columns differ in length"):
        protocol.decode(protocol.json.dumps(broken).encode())


def test_profiled_steps_are_left_out_of_every_scoreboard_figure() -> None:
    from gpuwatch.core.figures.segments import Scoreboard
    from gpuwatch.core.model.messages import ConfigChange
    from gpuwatch.core.model.store import SeriesStore, StepStore

    ms = 1_000_000
    store = StepStore(4096)
    store.set_device_is_host(True)
    ids = list(range(300))
    slow = set(range(100, 120))  # a capture window: the profiler made these steps 5x slower
    host, t = [], 0
    for step in ids:
        total = (50 if step in slow else 10) * ms
        host.append([t, t + 2 * ms, *(t + 2 * ms + (total - 2 * ms) * k // 5 for k in range(1, 6))])
        t += total
    store.append(ids, [0] * 300, [32] * 300, host)
    change = ConfigChange(id=0, values={}, changed={}, t_ns=0, first_step=0, warmup_steps=5)
    board = Scoreboard()
    before = board.rows(
        store, [change], SeriesStore(), device_kind="cpu", cores=2, baseline_id=None, running=True
    )[0]
    board.mark_profiled(sorted(slow), [0])
    after = board.rows(
        store, [change], SeriesStore(), device_kind="cpu", cores=2, baseline_id=None, running=True
    )[0]
    assert before.step_ms_p95 is not None and before.step_ms_p95 > 10.5
    assert after.step_ms_p95 == pytest.approx(10.0)
    assert after.steady_steps == before.steady_steps - len(slow)
    assert after.samples_per_s == pytest.approx(3200.0)  # 32 samples per 10 ms, exactly
    assert min(before.window_rates) < 3000  # the window with the capture in it, now left out


def test_nsight_command_runs_the_workload_headless_with_nvtx() -> None:
    from gpuwatch.commands.nsight_command import nsight_command
    from gpuwatch.core.run.session import LaunchSpec

    cmd = nsight_command(
        LaunchSpec(workload="mlp", device="cpu"),
        ["/opt/py 3/bin/python", "-m", "gpuwatch"],
        windows=False,
    )
    assert cmd == (
        "nsys profile --trace=cuda,nvtx,osrt --sample=none --force-overwrite=true "
        "--output=gpuwatch-mlp '/opt/py 3/bin/python' -m gpuwatch bench "
        "--workload mlp --device cuda --seconds 20"
    )


def test_nsight_command_for_a_script_keeps_its_arguments_and_quotes_for_windows() -> None:
    from gpuwatch.commands.nsight_command import nsight_command
    from gpuwatch.core.run.session import LaunchSpec

    spec = LaunchSpec(
        script="C:\\work\\my train.py",
        script_args=("--lr", "0.1"),
        device="cuda:1",
        python="C:\\py\\python.exe",
        seconds=30,
    )
    cmd = nsight_command(spec, ["C:\\apps\\gpuwatch.exe"], windows=True)
    assert cmd.startswith("nsys profile --trace=cuda,nvtx,osrt ")
    assert "--output=gpuwatch-my_train" in cmd
    assert cmd.endswith(
        "C:\\apps\\gpuwatch.exe run --headless --device cuda:1 --python "
        'C:\\py\\python.exe --seconds 30 "C:\\work\\my train.py" -- --lr 0.1'
    )


@pytest.mark.parametrize("late", [False, True], ids=["from-start", "started-mid-run"])
def test_windows_are_recorded_replayed_and_exported(tmp_path, late: bool) -> None:
    from waiting import wait_until

    from gpuwatch.core.files.export_perfetto import KERNEL_TID, perfetto_trace
    from gpuwatch.core.files.recording import Recorder
    from gpuwatch.core.files.recording_reader import kernel_windows, open_recording
    from gpuwatch.core.files.replay import ReplaySession
    from gpuwatch.core.run.session import Session

    session = Session(sample_coarse=False)
    path = tmp_path / "k.gpuwatch"
    recorder = Recorder(path, session, flush_s=0.05)
    if not late:
        recorder.start()
    session._dispatch(
        {
            "kind": "hello",
            "protocol": 1,
            "pid": 1,
            "workload": "mlp",
            "device": {"kind": "cuda", "name": "simulated GPU"},
            "versions": {},
            "knobs": [],
            "config": {"values": {}, "warmup_steps": 0},
        }
    )
    t0 = session.t0_ns
    marks = [[t0 + i * 1000 + k * 100 for k in range(7)] for i in range(8)]
    session._dispatch(
        {
            "kind": "steps",
            "step": list(range(8)),
            "config": [0] * 8,
            "samples": [4] * 8,
            "host": marks,
        }
    )
    # SIMULATED CUDA window over steps 3..4 on two streams (overlapping across streams).
    message = window(
        [
            (K, 7, t0 + 3100, t0 + 3300, t0 + 3050, 0.5),
            (CPY, 9, t0 + 3200, t0 + 3600, t0 + 3150, None),
            (K, 7, t0 + 4100, t0 + 4400, t0 + 3900, 8.0),
        ],
        t0=t0 + 3000,
        t1=t0 + 5000,
    )
    session._dispatch(message)
    if late:
        recorder.start()
    wait_until(lambda: recorder.steps_written == 8, 10, "the steps written")
    recorder.close()

    recording = open_recording(path)
    [stored] = kernel_windows(recording)
    live = session.kernel_windows()[0]
    assert stored.summary() == live.summary()
    assert stored.perturbed == (2, 3, 4)
    replay = ReplaySession(recording)
    assert [w.summary() for w in replay.kernel_windows()] == [live.summary()]

    trace = perfetto_trace(recording)["traceEvents"]
    names = {e["args"]["name"] for e in trace if e.get("name") == "thread_name"}
    assert {"kernel capture windows (profiled)", "kernels: stream 7", "kernels: stream 9"} <= names
    kernels = [e for e in trace if e.get("ph") == "X" and e["tid"] >= KERNEL_TID]
    assert sorted(e["name"] for e in kernels) == ["a", "a", "b"]
    by_track: dict[int, list[dict[str, Any]]] = {}
    for e in kernels:
        by_track.setdefault(e["tid"], []).append(e)
    for events in by_track.values():
        for a, b in itertools.pairwise(events):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6


def test_op_table_self_time_subtracts_direct_children_on_the_same_thread() -> None:
    # Thread 1: a [0,100] holds b [10,40] (which holds d [20,30]) and c [50,60]; e [90,120]
    # starts inside a but ends after it (not a child); a second a [200,250] has no children.
    # Thread 2: b [20,90] overlaps a in time but runs on another thread (not a child).
    rows = [  # (name, thread, start, end)
        (0, 1, 0, 100),
        (1, 1, 10, 40),
        (3, 1, 20, 30),
        (2, 1, 50, 60),
        (4, 1, 90, 120),
        (0, 1, 200, 250),
        (1, 2, 20, 90),
    ]
    message = window([(OP, t, s, e, None, None) for _, t, s, e in rows], device="cpu", t1=300)
    message.update(names=["a", "b", "c", "d", "e"], name=[r[0] for r in rows])
    table = {r.name: r for r in KernelWindow.from_message(message).op_table()}
    assert {n: (r.calls, r.total_ns, r.self_ns) for n, r in table.items()} == {
        "a": (2, 150, 150 - 30 - 10),
        "b": (2, 100, 30 - 10 + 70),
        "c": (1, 10, 10),
        "d": (1, 10, 10),
        "e": (1, 30, 30),
    }
    assert [r.name for r in KernelWindow.from_message(message).op_table()][:2] == ["a", "b"]
    assert table["a"].kind == "cpu_op" and table["a"].mean_ns == 75


def test_op_table_of_a_cuda_window_keeps_device_activities_only() -> None:
    # SIMULATED: kernels a, b, a on stream 7 one after another, a memcpy (b) on stream 9,
    # and a CPU op that a CUDA window's figures leave out.
    message = window(
        [
            (K, 7, 100, 200, 90, None),
            (K, 7, 210, 260, 205, None),
            (K, 7, 300, 340, 280, None),
            (CPY, 9, 100, 400, 95, None),
            (OP, 1, 0, 900, None, None),
        ]
    )
    table = KernelWindow.from_message(message).op_table()
    assert [(r.name, r.kind, r.calls, r.total_ns, r.self_ns) for r in table] == [
        ("b", "memcpy", 1, 300, 300),
        ("a", "kernel", 2, 140, 140),
        ("b", "kernel", 1, 50, 50),
    ]
    assert KernelWindow.from_message(window([], t1=10)).op_table() == []
