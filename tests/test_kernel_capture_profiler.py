"""The script's own ``torch.profiler`` against gpuwatch's kernel capture, with the real torch.

Kineto keeps one session per process and the one prepared last cancels the others
(``runner/profiler_watch.py``). These tests run real ``torch.profiler.profile`` sessions next
to a real capture, in this process and in a script under the real runner, and check that the
script's profiler returns exactly the events it returns alone, and that a capture it
disturbed is reported as failed, never as an ok window.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule
from waiting import wait_until

from gpuwatch.runner.kernel_capture import DISTURBED, KernelCapture
from gpuwatch.runner.profiler_watch import RECORDING, ProfilerWatch


class Link:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.logs: list[tuple[str, str]] = []

    def send(self, kind: str, **fields: Any) -> None:
        self.sent.append(fields)

    def log(self, level: str, text: str) -> None:
        self.logs.append((level, text))


MODEL = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
OPT = torch.optim.SGD(MODEL.parameters(), lr=0.01)


def train_step() -> None:
    MODEL(torch.randn(16, 32)).pow(2).mean().backward()
    OPT.step()
    OPT.zero_grad()


def profiled_events(steps: int, between: Any = None) -> int:
    """Events of the script's own profiler over ``steps`` steps; ``between(i)`` runs at each
    step boundary inside it (where gpuwatch's capture would act)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            if between is not None:
                between(i)
            train_step()
    return len(prof.profiler.kineto_results.events())


@pytest.fixture
def capture():
    for _ in range(3):
        train_step()
    link = Link()
    cap = KernelCapture(link, device="cpu")
    yield cap, link
    cap.close()


def test_capture_requested_while_the_scripts_profiler_records_is_refused(capture) -> None:
    cap, link = capture
    alone = profiled_events(6)

    def request_then_boundary(i: int) -> None:
        if i == 2:
            cap.request(2)
        cap.at_boundary(100 + i)

    assert profiled_events(6, request_then_boundary) == alone
    assert [w["status"] for w in link.sent] == ["refused"]
    assert link.sent[0]["error"] == RECORDING and not cap.busy


def test_capture_while_the_scripts_profiler_warms_up_is_refused(capture) -> None:
    """torch has no query for a prepared (warm-up) session: only the watch sees it."""
    cap, link = capture
    got: list[int] = []
    user = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=2, active=2, repeat=1),
        on_trace_ready=lambda p: got.append(len(p.profiler.kineto_results.events())),
    )
    user.start()  # warm-up: prepared, not recording
    assert not torch._C._autograd._profiler_enabled()
    cap.request(2)
    for i in range(5):
        cap.at_boundary(200 + i)
        train_step()
        user.step()
    user.stop()
    assert [w["status"] for w in link.sent] == ["refused"]
    assert got and got[0] == profiled_events(2) + 2  # + its two ProfilerStep# ranges


@pytest.mark.parametrize("outlives", [False, True])
def test_scripts_profiler_started_in_a_window_gets_all_its_events(capture, outlives: bool) -> None:
    cap, link = capture
    alone = profiled_events(4)
    cap.request(3)
    cap.at_boundary(0)  # warm-up step
    train_step()
    cap.at_boundary(1)  # recording now
    assert torch._C._autograd._profiler_enabled()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(4):
            train_step()
            if outlives or i < 2:
                cap.at_boundary(2 + i)  # the window would have ended at boundary 4
    assert len(prof.profiler.kineto_results.events()) == alone
    assert [(w["status"], w.get("error")) for w in link.sent] == [("failed", DISTURBED)]
    for step in range(6, 9):
        cap.at_boundary(step)
    assert len(link.sent) == 1 and not cap.busy


def test_the_watch_unwraps_torch_when_the_last_listener_leaves() -> None:
    import torch.autograd.profiler as module

    before = {name: getattr(module, name) for name in ("_prepare_profiler", "_disable_profiler")}
    watch = ProfilerWatch()
    heard: list[str] = []
    assert watch.subscribe(heard.append) and watch.installed
    assert module._prepare_profiler is not before["_prepare_profiler"]
    with watch.own():
        profiled_events(1)
    assert heard == []
    profiled_events(1)
    assert heard == ["prepare", "enable", "disable"] and not watch.foreign_open
    watch.unsubscribe(heard.append)
    assert {name: getattr(module, name) for name in before} == before


# ---- a script profiling itself, under the real runner ------------------------------------

SCRIPT = """
import json, os, sys, time
import torch
from torch.profiler import ProfilerActivity, profile

model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
mode, out, flag = sys.argv[1], sys.argv[2], sys.argv[3]

def step():
    loss = model(torch.randn(16, 32)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    time.sleep(0.005)

def events(steps, wait=None):
    # The script's own profiler over `steps` steps, or (wait) until `wait()` says stop.
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        n = 0
        while (n < steps) if wait is None else not wait():
            step()
            n += 1
    return n, len(prof.profiler.kineto_results.events())

for _ in range(20):
    step()
if mode == "profiling_first":  # the test asks for a capture while this profiler records
    open(out + ".in", "w").close()
    n, first = events(0, wait=lambda: os.path.exists(flag))
else:  # "capture_first": profile as soon as gpuwatch's window records, for 6 steps
    while not torch._C._autograd._profiler_enabled():
        step()
    n, first = events(6)
n2, alone = events(n)  # the same steps with no capture anywhere near
with open(out, "w") as f:
    json.dump({"steps": n, "first": first, "alone": alone}, f)
while True:  # the session stops it
    step()
"""


@pytest.fixture
def session():
    from gpuwatch.core.run.session import Session

    s = Session(sample_coarse=False)
    yield s
    s.close()


def start_script(session, tmp_path, mode: str) -> tuple[Any, Any]:
    from gpuwatch.core.run.session import LaunchSpec, SessionState

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out, flag = tmp_path / "counts.json", tmp_path / "flag"
    session.start(
        LaunchSpec(
            script=str(script),
            device="cpu",
            cwd=str(tmp_path),
            script_args=(mode, str(out), str(flag)),
        )
    )
    wait_until(
        lambda: session.steps.count >= 10 or session.state is SessionState.FAILED,
        120,
        "the script's steps",
    )
    assert session.state is SessionState.RUNNING, session.error
    return out, flag


def read_counts(out) -> dict[str, int]:
    wait_until(out.exists, 120, "the script's own profiler counts")
    wait_until(lambda: out.stat().st_size > 0, 10, "the counts written")
    return json.loads(out.read_text())


def test_script_profiling_itself_under_the_runner_refuses_a_capture(session, tmp_path) -> None:
    out, flag = start_script(session, tmp_path, "profiling_first")
    wait_until((tmp_path / "counts.json.in").exists, 120, "the script's profiler")
    session.request_capture(3)
    wait_until(lambda: not session.capturing, 120, "the capture's answer")
    assert session.capture_error == RECORDING and not session.kernel_windows()
    flag.write_text("")
    counts = read_counts(out)
    assert counts["steps"] > 0 and counts["first"] == counts["alone"], counts
    session.stop()
    assert session.wait_ended(60)


def test_script_profiler_started_inside_a_capture_window_wins(session, tmp_path) -> None:
    out, _ = start_script(session, tmp_path, "capture_first")
    session.request_capture(20)
    counts = read_counts(out)
    wait_until(lambda: not session.capturing, 120, "the capture's answer")
    assert session.capture_error == DISTURBED and not session.kernel_windows()
    assert counts["steps"] == 6 and counts["first"] == counts["alone"], counts
    session.stop()
    assert session.wait_ended(60)
