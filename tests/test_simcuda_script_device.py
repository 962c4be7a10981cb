"""A REAL runner watching a script on the SIMULATED CUDA device (``tests/simcuda``; a model,
not a GPU): the script chooses its GPUs with ``CUDA_VISIBLE_DEVICES`` in its first line, runs
steps on a side stream, captures a CUDA graph and replays it, then moves to its second GPU with
``torch.cuda.set_device(1)``. gpuwatch must have started no CUDA before the script (else the
variable would be ignored), follow each device, skip the capture, and say what it skipped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from simcuda.model import SimConfig
from simcuda.runner_boot import runner_env
from waiting import wait_until

from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

SCRIPT = """
import os
os.environ["CUDA_VISIBLE_DEVICES"] = "1,2"
import torch

print("visible", torch.cuda.device_count(), torch.cuda.get_device_name(0), flush=True)
model = torch.nn.Linear(32, 32).to("cuda")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 32, device="cuda")
side = torch.cuda.Stream()


def train(steps, stream=None, graph=None):
    for _ in range(steps):
        with torch.cuda.stream(stream):
            if graph is not None:
                graph.replay()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()


train(10)
train(10, side)
graph = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(graph):  # the next step's forward runs in capture
    static = model(x)
train(10, graph=graph)
torch.cuda.set_device(1)
model.to("cuda:1")
x = x.to("cuda:1")
train(10)
print("done", flush=True)
"""


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Session]:
    config = SimConfig(devices=3, kernel_factor=1.5)
    for name, value in runner_env(config).items():
        monkeypatch.setenv(name, value)
    s = Session(sample_coarse=False)
    yield s
    s.close()


def test_script_chooses_its_gpus_and_marks_follow_them(session: Session, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    session.start(LaunchSpec(script=str(script), device="cuda", cwd=str(tmp_path)))
    assert session.wait_ended(240), "the script ran to its end"
    log = "\n".join(line.text for line in session.drain_log())
    assert session.state is SessionState.FINISHED, (session.error, log)
    assert "visible 2 simcuda GPU 1" in log, "CUDA_VISIBLE_DEVICES set by the script held"
    assert "the script trains on cuda:0: simcuda GPU 1" in log
    assert "the script trains on cuda:1: simcuda GPU 2" in log
    assert session.hello is not None
    assert session.hello is not None and session.hello.device.name == "simcuda GPU 1"
    assert (session.hello.device.uuid or "").endswith("000000000001")
    assert "work on other streams is not measured" in log
    assert "CUDA-graph capture" in log
    bye = session.bye
    assert bye is not None and bye["code"] == 0 and bye["cuda_used"] is True
    # One step met the capture, one changed device mid-step; every other one has marks.
    assert bye["device_marks_skipped"] == 2, log
    assert "2 step(s) without device marks" in log
    view = session.steps.snapshot()
    wait_until(
        lambda: int(session.steps.snapshot().has_device.sum()) >= len(view) - 2,
        30,
        "the device marks of every other step",
    )
    view = session.steps.snapshot()
    assert len(view) >= 38
    # A step begins at the previous one's optimizer.step(), so the first side-stream step
    # (step 10) has its first mark on the default stream, which may complete after the rest
    # when the default stream has a backlog (a loaded machine lengthens the simulated
    # kernels); every other step's marks are on one stream, in order.
    one_stream = view.has_device & (view.step != 10)
    marked = view.device[one_stream]
    assert np.all(marked[:, -1] >= marked[:, 0])
