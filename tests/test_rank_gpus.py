"""The GPUs of a run of many ranks: each one's NVML series reaches the Ranks figures, a
recording and its replay (``core/run/rank_devices``, ``Recorder``, ``ReplaySession``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_recording import WRITE_WAIT_S
from waiting import wait_until

from gpuwatch import protocol
from gpuwatch.core.figures.rank_figures import mean_over
from gpuwatch.core.files.recording import Recorder
from gpuwatch.core.files.recording_reader import open_recording
from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.core.model.messages import RankInfo
from gpuwatch.core.model.metrics import NVML_GPU_UTIL
from gpuwatch.core.model.rank_clock import Pong
from gpuwatch.core.model.store import SeriesStore, SeriesView
from gpuwatch.core.run import link
from gpuwatch.core.run.rank_devices import RankDevices
from gpuwatch.core.run.rank_links import RankRun, RankRuns
from gpuwatch.core.run.run_model import RunModel
from gpuwatch.core.run.session import Session


def test_a_gpus_mean_over_steps_weights_each_sample_by_its_overlap() -> None:
    series = SeriesView(
        np.array([0, 100, 200]), np.array([100, 200, 300]), np.array([10.0, 50.0, 90.0])
    )
    assert mean_over(series, 150, 250) == pytest.approx(70.0)  # half of 50, half of 90
    assert mean_over(series, 0, 300) == pytest.approx(50.0)
    assert mean_over(series, 400, 500) is None


def _hello(rank: int, device: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "hello",
        "protocol": protocol.PROTOCOL_VERSION,
        "pid": 10 + rank,
        "workload": "train.py",
        "device": {"kind": "cuda", **device},
        "versions": {},
        "knobs": [],
        "config": {},
        "role": protocol.ROLE_RANK,
        "rank": {"rank": rank, "local_rank": rank, "world_size": 3},
    }


def _steps(first_ns: int, n: int = 10) -> dict[str, Any]:
    host = [[first_ns + i * 10_000_000 + m * 1_000_000 for m in range(7)] for i in range(n)]
    return {
        "kind": "steps",
        "step": list(range(n)),
        "config": [0] * n,
        "samples": [8] * n,
        "host": host,
    }


def test_the_other_ranks_gpus_are_recorded_and_a_replay_shows_them(tmp_path: Path) -> None:
    session = Session(sample_coarse=False)  # samplers stand in: the series are written here
    devices = RankDevices(lambda store, device: None, session.coarse)
    session._rank_devices = devices
    gpus = [{"index": 0, "uuid": f"GPU-{i}000"} for i in range(2)]
    recorder = Recorder(tmp_path / "ranks.gpuwatch", session, flush_s=0.05)
    recorder.start()
    tell = session._rank_listeners[0]  # how the run's RankRuns tells the recorder
    hellos = [_hello(0, gpus[0]), _hello(1, gpus[1]), _hello(2, gpus[1])]  # 1 and 2 share
    session._dispatch(hellos[0])  # rank 0's hello is the run's
    runs = []
    for rank, hello in enumerate(hellos):
        model = RunModel()
        model.fold(hello)
        run = RankRun(RankInfo(rank, rank, 3), model, pid=None)
        devices.saw(run)
        runs.append(run)
        tell(run.info, hello, 0)
    session._dispatch(_steps(0))
    for rank in (1, 2):
        tell(runs[rank].info, _steps(0), 0)
    for k in range(10):  # rank 0's GPU at 30 %, rank 1's (and 2's) at 70 %
        session.coarse.append(NVML_GPU_UTIL, k * 10_000_000, (k + 1) * 10_000_000, 30.0)
        runs[1].model.coarse.append(NVML_GPU_UTIL, k * 10_000_000, (k + 1) * 10_000_000, 70.0)
    assert runs[2].model.coarse is runs[1].model.coarse
    live = session.rank_gpu_series(0)
    assert [(g.rank, g.label, len(g.util)) for g in live] == [(1, "cuda:0 of ranks 1, 2", 10)]

    wait_until(lambda: recorder.steps_written == 10, 30, "the steps written")
    recorder.close(timeout=WRITE_WAIT_S)
    replay = ReplaySession(open_recording(tmp_path / "ranks.gpuwatch"))
    replay.seek(replay.duration_s)
    [other] = replay.rank_gpu_series(0)
    assert (other.rank, other.label) == (1, "cuda:0 of rank 1")
    assert other.util.value.tolist() == [70.0] * 10
    figures = {f.rank: f.gpu_util for f in replay.rank_figures()}
    assert figures == {0: pytest.approx(30.0), 1: pytest.approx(70.0), 2: pytest.approx(70.0)}


def test_a_rank_on_the_cpu_or_another_machine_has_no_gpu_series() -> None:
    started: list[object] = []
    devices = RankDevices(lambda store, device: started.append(device), SeriesStore())
    model = RunModel()
    model.fold({**_hello(1, {"index": 0, "uuid": "GPU-1"}), "device": {"kind": "cpu"}})
    devices.saw(RankRun(RankInfo(1, 1, 3), model, pid=None))
    model = RunModel()
    model.fold(_hello(2, {"index": 0, "uuid": "GPU-2"}))
    devices.saw(RankRun(RankInfo(2, 2, 3), model, pid=None, remote=True))
    assert started == [] and devices.gpus() == []


def test_a_recording_started_mid_run_keeps_the_ranks_samples_and_round_trips(
    tmp_path: Path,
) -> None:
    """What the ranks' listeners were told before the recorder started (DDP's samples, the
    round trips to another machine's clock) is in its prelude, as the steps are: without the
    pongs a replay would draw that machine's steps on its own clock."""
    session = Session(sample_coarse=False)
    listener = link.LinkListener(tmp_path, link.new_authkey(), many=True)
    runs = RankRuns(
        listener,
        primary=session._dispatch,
        log_line=lambda *a: None,
        spawn_thread=lambda name, target: threading.Thread(target=target),
        primary_steps=session.model.steps,
    )
    session._ranks = runs
    ahead = 5_000_000_000  # rank 1's machine's clock runs 5 s ahead of the window's
    for rank in (0, 1):
        model = RunModel()
        if rank == 0:
            model.steps = session.model.steps
        run = RankRun(RankInfo(rank, rank, 2), model, pid=None, remote=rank == 1)
        model.fold(_hello(rank, {"index": 0, "uuid": f"GPU-{rank}000"}))
        model.fold({"kind": "collective", "source": "ddp", "iteration": 1, "comm_ns": 7_000})
        runs._runs[rank] = run
    session._dispatch(_hello(0, {"index": 0, "uuid": "GPU-0000"}))
    session._dispatch(_steps(0))
    runs._runs[1].model.fold(_steps(ahead))
    runs._runs[1].pongs.append(Pong(100, 300, 200 + ahead))

    recorder = Recorder(tmp_path / "late.gpuwatch", session, flush_s=0.05)
    recorder.start()
    recorder.close(timeout=WRITE_WAIT_S)
    recording = open_recording(tmp_path / "late.gpuwatch")
    assert [len(r.collective) for r in recording.ranks] == [1, 1]
    assert recording.ranks[1].pongs == (Pong(100, 300, 200 + ahead),)
    assert int(recording.ranks[1].steps.host[0, 0]) == 0  # on rank 0's clock again
    runs.close()
    listener.close()
