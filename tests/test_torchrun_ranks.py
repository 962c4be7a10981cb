"""``gpuwatch run`` of a distributed job on this machine's CPU (gloo): every rank watched.

Each test starts the real thing as a user would (``python -m gpuwatch run --headless ...``):
torchrun in the runner, or a script that calls ``torch.multiprocessing.spawn`` itself; two or
four ranks, each with its own link. A plain run of the same script is the reference: the ranks
see the same argv and compute the same weights.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from gpuwatch.core.run.outcome import describe, facts_from
from gpuwatch.core.run.session import LaunchSpec, Session, SessionError

RUN_TIMEOUT_S = 240
REPO = Path(__file__).parents[1]

#: A small DDP loop over a DataLoader. argv: TAG STEPS (STEPS < 0: until stopped). Each rank
#: writes its pid to ``pids/TAG-RANK`` first and, when it ends by itself, what it saw and its
#: weights to ``out/TAG-RANK.json``. SLOW_RANK/SLOW_S make one rank's loader slow; KILL_RANK and
#: KILL_AT make one rank SIGKILL itself after that many steps.
TRAIN = """
import json, os, signal, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Data(Dataset):
    def __init__(self, delay):
        self.delay = delay

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), torch.randn(1, generator=g)


def main():
    tag, steps = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with open(f"pids/{tag}-{rank}", "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(0)
    mine = lambda name: rank == int(os.environ.get(name, "-1"))
    delay = float(os.environ.get("SLOW_S", "0")) if mine("SLOW_RANK") else 0.0
    kill_at = int(os.environ.get("KILL_AT", "-1")) if mine("KILL_RANK") else -1
    layers = [torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)]
    model = DDP(torch.nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = Data(delay)
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False))
    done = 0
    for x, y in loader:
        if done == steps:
            break
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1
        if done == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    weights = [float(p.detach().double().sum()) for p in model.parameters()]
    with open(f"out/{tag}-{rank}.json", "w") as f:
        json.dump({"argv": sys.argv, "steps": done, "weights": weights,
                   "world": os.environ["WORLD_SIZE"]}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


#: The same kind of loop started by the script itself: ``mp.spawn`` of two processes that join
#: a gloo group on MASTER_PORT (argv: TAG STEPS PORT); rank 1 is slow between its batch and
#: its forward. Each rank writes its weights to ``out/TAG-RANK.json``.
SPAWN = """
import json, os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def worker(index, tag, steps):
    dist.init_process_group("gloo", rank=index, world_size=2)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1))
    done = 0
    for x, y in DataLoader(data, batch_size=8):
        if index == 1:
            time.sleep(0.01)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done += 1
        if done == steps:
            break
    weights = [float(p.detach().double().sum()) for p in model.parameters()]
    with open(f"out/{tag}-{index}.json", "w") as f:
        json.dump({"argv": sys.argv, "weights": weights}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = sys.argv[3]
    mp.spawn(worker, args=(sys.argv[1], int(sys.argv[2])), nprocs=2)
"""


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN), encoding="utf-8")
    (tmp_path / "spawn_train.py").write_text(textwrap.dedent(SPAWN), encoding="utf-8")
    (tmp_path / "pids").mkdir()
    (tmp_path / "out").mkdir()
    return tmp_path


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**base, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **env},
    )


def _watched(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return _run(["-m", "gpuwatch", "run", "--headless", "--device", "cpu", *args], cwd, **env)


def _rank_steps(stdout: str) -> dict[int, int]:
    found = re.findall(r"^rank (\d+) \([^)]*\): ([\d,]+) steps", stdout, re.MULTILINE)
    return {int(rank): int(steps.replace(",", "")) for rank, steps in found}


def _seen(work: Path, tag: str, rank: int) -> dict[str, object]:
    return json.loads((work / "out" / f"{tag}-{rank}.json").read_text(encoding="utf-8"))


def _left_running(work: Path, tag: str) -> list[int]:
    """The ranks' processes still alive a moment after gpuwatch exited (waited for, not raced:
    a process that is ending gets up to 10 s)."""
    pids = [int(p.read_text()) for p in (work / "pids").glob(f"{tag}-*")]
    deadline = time.monotonic() + 10
    while True:
        alive = [pid for pid in pids if _is_rank(pid, work)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _is_rank(pid: int, work: Path) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and proc.cwd() == str(work)
    except psutil.Error:
        return False


def test_ranks_run_as_plain_torchrun_runs_them_and_compute_the_same_weights(work: Path) -> None:
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    plain = _run([*torchrun, "train.py", "plain", "30"], work)
    assert plain.returncode == 0, plain.stderr
    record = work / "ranks.gpuwatch"
    watched = _watched(["--record", str(record), *torchrun, "train.py", "watched", "30"], work)

    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "train.py (torchrun) finished after 30 steps" in watched.stdout, watched.stdout
    assert "ranks: 2 (1 node)" in watched.stdout
    assert _rank_steps(watched.stdout) == {0: 30, 1: 30}
    for rank in (0, 1):
        before, after = _seen(work, "plain", rank), _seen(work, "watched", rank)
        assert after["argv"] == ["train.py", "watched", "30"]
        assert before["argv"] == ["train.py", "plain", "30"]
        assert after["weights"] == before["weights"], "watched = unwatched: the same weights"
    assert not _left_running(work, "watched")
    _check_recording(record)


def _check_recording(record: Path) -> None:
    """Every rank is in the recording, and each is a process of its own in the Perfetto
    export; a replay's Ranks figures come from it."""
    from gpuwatch.core.files.export_perfetto import perfetto_trace
    from gpuwatch.core.files.recording_reader import open_recording
    from gpuwatch.core.files.replay import ReplaySession

    recording = open_recording(record)
    assert [r.info.rank for r in recording.ranks] == [0, 1]
    assert [len(r.steps) for r in recording.ranks] == [30, 30]
    assert recording.ranks[1].bye is not None
    assert recording.hello is not None and recording.hello.rank is not None  # rank 0's
    events = perfetto_trace(recording)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(names) == [1, 2] and names[2].startswith("rank 1 ("), names
    for pid in (1, 2):
        phases = [e for e in events if e.get("pid") == pid and e.get("cat") == "host"]
        assert len(phases) >= 30 * 5, (pid, len(phases))
    figures = ReplaySession(recording).rank_figures()
    assert [(f.rank, f.steps) for f in figures] == [(0, 30), (1, 30)]
    # DDP's own all-reduce samples are recorded for each rank, rank 0's included: each of its
    # first ten iterations once (runner/ddp_timing.py reads the first forwards), and reach a
    # replay's figures
    for rank in recording.ranks:
        iterations = [c.iteration for c in rank.collective]
        assert iterations == sorted(set(iterations)), iterations
        assert set(range(1, 11)) <= set(iterations), iterations
        assert all(c.comm_ns > 0 for c in rank.collective)
    assert all(f.allreduce_samples >= 9 and f.allreduce_ms_p50 for f in figures), figures


def test_four_ranks_with_a_slow_loader_name_the_straggler(work: Path) -> None:
    watched = _watched(
        ["--nproc-per-node", "4", "train.py", "slow", "40"], work, SLOW_RANK="2", SLOW_S="0.004"
    )

    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert _rank_steps(watched.stdout) == {0: 40, 1: 40, 2: 40, 3: 40}
    assert "straggler: rank 2 holds the others back: its input wait is" in watched.stdout, (
        watched.stdout
    )
    assert _seen(work, "slow", 3)["world"] == "4"


def test_a_killed_rank_is_named_and_nothing_of_the_job_is_left(work: Path) -> None:
    watched = _watched(
        ["--nproc-per-node", "2", "train.py", "killed", "-1"], work, KILL_RANK="1", KILL_AT="20"
    )

    assert watched.returncode == 1, watched.stdout + watched.stderr
    assert re.search(
        r"failed: rank 1 was killed by SIGKILL after [\d,]+ steps?; torchrun stopped the other "
        r"ranks",
        watched.stdout,
    ), watched.stdout
    assert len(list((work / "pids").glob("killed-*"))) == 2
    assert not _left_running(work, "killed")


def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def test_ranks_a_script_spawns_itself_are_watched_and_compute_the_same_weights(
    work: Path,
) -> None:
    plain = _run(["spawn_train.py", "plain", "40", _free_port()], work)
    assert plain.returncode == 0, plain.stderr
    watched = _watched(["spawn_train.py", "watched", "40", _free_port()], work)

    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "spawn_train.py finished" in watched.stdout, watched.stdout
    assert _rank_steps(watched.stdout) == {0: 40, 1: 40}
    assert "straggler: rank 1 arrives last at every all-reduce" in watched.stdout, watched.stdout
    assert re.search(r"rank 1 \(.*all-reduce p50: [\d.]+ ms \(DDP's timing", watched.stdout)
    for rank in (0, 1):
        before, after = _seen(work, "plain", rank), _seen(work, "watched", rank)
        assert after["weights"] == before["weights"], "watched = unwatched: the same weights"


def _wait(condition, seconds: float, what: str) -> None:
    """Wait for ``condition`` (a cold machine starts four torch imports: be patient)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_knob_change_and_a_stop_land_on_every_rank_at_the_same_step(work: Path) -> None:
    """One live run of two ranks: a knob change is refused as a whole when a rank lacks the
    knob, else applied by both at the same step; a stop then ends both after the same step
    (none left waiting in an all-reduce), as stopped, not hung."""
    session = Session()
    args = ("--standalone", "--nproc-per-node", "2", "train.py", "live", "-1")
    spec = LaunchSpec(
        module="torch.distributed.run",
        script_args=args,
        device="cpu",
        cwd=str(work),
        env=(("OMP_NUM_THREADS", "1"),),
    )
    session.start(spec)
    try:
        _wait(
            lambda: (
                len(session.ranks()) == 2
                and all(r.model.knobs and r.model.steps.count >= 5 for r in session.ranks())
            ),
            RUN_TIMEOUT_S,
            "both ranks' first steps and their DataLoader knobs",
        )
        with pytest.raises(SessionError, match="rank 0 has no knob nope"):
            session.set_knobs({"nope": 1})
        request = session.set_knobs({"num_workers": 1})
        assert request is not None
        _wait(
            lambda: all(len(r.model.config_changes()) == 2 for r in session.ranks()),
            RUN_TIMEOUT_S,
            "the change on every rank",
        )
        firsts = {r.info.rank: r.model.config_changes()[1].first_step for r in session.ranks()}
        assert firsts[0] == firsts[1], firsts
        assert all(r.model.config_values()["num_workers"] == 1 for r in session.ranks())
        _wait(lambda: session.answer(request) is not None, RUN_TIMEOUT_S, "rank 0's answer")
        assert getattr(session.answer(request), "first_step", None) == firsts[0]
    finally:
        session.stop()
        assert session.wait_ended(RUN_TIMEOUT_S)
    counts = [r.model.steps.count for r in session.ranks()]
    said = [line.text for line in session.drain_log()]
    byes = [r.model.bye for r in session.ranks()]
    # Both ranks stop after the step announced, however long a loaded machine takes them to
    # reach it (a rank is interrupted only when no step boundary comes for the grace).
    assert counts[0] == counts[1] and min(counts) > firsts[0], (counts, byes, said)
    assert [(bye or {}).get("reason") for bye in byes] == ["stopped"] * 2, (byes, said)
    outcome = describe(facts_from(session))
    assert outcome.exit_code == 0 and "was stopped on request" in outcome.sentence, outcome
    assert not _left_running(work, "live")


def test_two_nodes_on_loopback_show_every_rank_in_one_recording(work: Path) -> None:
    """Two torchrun launches with ``--nnodes 2`` (c10d rendezvous on 127.0.0.1): the first
    is watched and listens (``--listen``), the second sends its rank there (``--connect``)."""
    rdzv = [
        *("-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}"),
        *("--rdzv-id", "two-nodes", "train.py", "nodes", "30"),
    ]
    record = work / "nodes.gpuwatch"
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env = {**base, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    home = subprocess.Popen(
        [
            *(sys.executable, "-m", "gpuwatch", "run", "--headless", "--device", "cpu"),
            *("--record", str(record), "--listen", "127.0.0.1:0", *rdzv),
        ],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        said: list[str] = []
        found = None
        assert home.stderr is not None
        for line in home.stderr:  # it prints the address and token before the ranks start
            said.append(line)
            found = re.search(r"--connect (\S+) --token ([0-9a-f]+)", line)
            if found:
                break
        assert found, "".join(said)
        other = _run(
            [
                *("-m", "gpuwatch", "run", "--device", "cpu", "--connect", found[1]),
                *("--token", found[2], *rdzv),
            ],
            work,
        )
        assert other.returncode == 0, other.stdout + other.stderr
        out, rest = home.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if home.poll() is None:
            home.kill()
            home.wait()
    assert home.returncode == 0, out + "".join(said) + rest
    assert "ranks: 2 (2 nodes)" in out, out
    assert _rank_steps(out) == {0: 30, 1: 30}
    from gpuwatch.core.files.recording_reader import open_recording

    recording = open_recording(record)
    assert [(r.info.rank, len(r.steps)) for r in recording.ranks] == [(0, 30), (1, 30)]
    assert {r.info.node_rank for r in recording.ranks} == {0, 1}
    # the rank that came in on TCP had its clock measured by round trips; on one machine both
    # ends read the same clock, so every pong's offset is within half its round trip of 0
    pinged = [r for r in recording.ranks if r.pongs]
    assert len(pinged) == 1, [len(r.pongs) for r in recording.ranks]
    for pong in pinged[0].pongs:
        assert pong.rtt_ns >= 0 and abs(pong.offset_ns) <= pong.rtt_ns // 2 + 1, pong
    ends = [r.steps.host[:, -1] for r in recording.ranks]  # in lockstep, on one time axis
    assert abs(float(np.median(ends[0] - ends[1]))) < 50e6
    assert not _left_running(work, "nodes")


def test_connect_without_a_usable_token_is_one_line_and_exit_2(work: Path) -> None:
    done = _run(
        [
            *("-m", "gpuwatch", "run", "--connect", "127.0.0.1:9", "--token", "not-hex"),
            *("--nproc-per-node", "1", "train.py", "x", "1"),
        ],
        work,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gpuwatch run: --token is the hex string the window printed with its --listen address"
    )
