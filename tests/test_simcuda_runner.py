"""A REAL runner process on the SIMULATED CUDA device (``tests/simcuda``, started through
``boot/sitecustomize.py``), driven through ``Session`` as the window drives it. The simulation
is a model, not a GPU: these tests show that gpuwatch's CUDA path runs and adds no host waits,
not how fast anything is on a GPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from simcuda.model import HostWait, SimConfig
from simcuda.runner_boot import read_waits, runner_env
from waiting import wait_until

from gpuwatch.core.run.session import LaunchSpec, Session, SessionState
from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST

#: Knobs under which a step has no host wait of its own (pinned async copies, the loss read
#: far beyond the run).
SYNC_FREE = {"log_every": 1000, "non_blocking": True, "pin_memory": True}
SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
loader = DataLoader(data, batch_size=64, shuffle=True, pin_memory=True)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 10)).to("cuda")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
print("script device", next(model.parameters()).device, flush=True)
for epoch in range(1000):
    for inputs, labels in loader:
        inputs = inputs.to("cuda", non_blocking=True)
        labels = labels.to("cuda", non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
"""


@pytest.fixture
def session() -> Iterator[Session]:
    s = Session(sample_coarse=False)
    yield s
    s.close()


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimConfig:
    """The runner started by the test boots on simcuda; its host waits land in a file."""
    config = SimConfig(report_path=str(tmp_path / "waits.jsonl"), kernel_factor=1.5)
    for name, value in runner_env(config).items():
        monkeypatch.setenv(name, value)
    return config


def _started(session: Session, spec: LaunchSpec) -> None:
    session.start(spec)
    wait_until(
        lambda: session.state is not SessionState.STARTING,  # RUNNING: hello stored first
        120,
        "the runner's hello",
    )
    assert session.state is SessionState.RUNNING, (session.error, _log(session))
    hello = session.hello
    assert hello is not None
    assert hello.device.kind == "cuda"
    if hello.device.pending:  # a script's device: named at its first step
        assert hello.device.uuid is None
    else:
        assert hello.device.name == "simcuda GPU 0"
    assert hello.timing == "cuda_events"


def _log(session: Session) -> str:
    return "\n".join(line.text for line in session.drain_log())


def _steps_with_device_marks(session: Session, first_step: int) -> np.ndarray:
    """Rows of the steps from ``first_step`` on that have device marks (all of them, in
    order: none was left unmarked)."""
    view = session.steps.snapshot()
    rows = np.flatnonzero((view.step >= first_step) & view.has_device)
    assert np.all(np.diff(view.step[rows]) == 1), "consecutive steps, each with device marks"
    return rows


def _waits_during(waits: list[HostWait], host: np.ndarray) -> list[HostWait]:
    """Host waits that began from the first of these steps' start to the last one's end: the
    steps and the loop's bookkeeping between them (rows of host marks, consecutive steps)."""
    return [w for w in waits if host[0, 0] <= w.t_ns <= host[-1, -1]]


def _check_device_marks(session: Session, rows: np.ndarray) -> None:
    view = session.steps.snapshot()
    device, host = view.device[rows], view.host[rows]
    assert np.all(device[:, ACTIVE_LAST] >= device[:, ACTIVE_FIRST])
    # The device ends its work after the host issued it: the marks are the device's own.
    assert np.all(device[:, ACTIVE_LAST] >= host[:, ACTIVE_LAST] - 1_000_000)
    assert not np.array_equal(device, host)


def test_mlp_workload_on_simulated_cuda_makes_no_sync_in_the_step_loop(
    session: Session, simulated: SimConfig
) -> None:
    _started(session, LaunchSpec(workload="mlp", device="cuda"))
    wait_until(lambda: session.steps.count >= 3, 120, "the first steps")
    request = session.set_knobs(SYNC_FREE)
    assert request is not None
    wait_until(lambda: session.answer(request) is not None, 120, "the knob change")
    change = session.answer(request)
    assert getattr(change, "first_step", None) is not None, change
    first = change.first_step  # type: ignore[union-attr]
    wait_until(
        lambda: len(_steps_with_device_marks(session, first)) >= 15,
        180,
        "15 sync-free steps with device marks",
    )
    session.stop()
    assert session.wait_ended(60)
    assert session.state is SessionState.FINISHED, (session.error, _log(session))

    rows = _steps_with_device_marks(session, first)
    _check_device_marks(session, rows)
    waits = read_waits(simulated)
    host = session.steps.snapshot().host[rows]
    assert _waits_during(waits, host) == [], "no host wait in the sync-free loop"
    naive = _steps_with_device_marks(session, 0)
    naive = naive[session.steps.snapshot().step[naive] < change.first_step]  # type: ignore[union-attr]
    naive_host = session.steps.snapshot().host[naive]
    kinds = {w.kind for w in _waits_during(waits, naive_host)}
    assert {"item", "h2d_copy"} <= kinds, "the naive knobs do wait (the counter sees waits)"


def test_watched_script_on_simulated_cuda_makes_no_sync(
    session: Session, simulated: SimConfig, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    _started(session, LaunchSpec(script=str(script), device="cuda", cwd=str(tmp_path)))
    wait_until(
        lambda: len(_steps_with_device_marks(session, 3)) >= 15, 180, "15 steps with device marks"
    )
    session.stop()
    assert session.wait_ended(60)
    assert session.state is SessionState.FINISHED, (session.error, _log(session))
    log = _log(session)
    assert "script device cuda:0" in log
    assert session.hello is not None and session.hello.device.name == "simcuda GPU 0"
    assert session.bye is not None and session.bye["cuda_used"] is True
    rows = _steps_with_device_marks(session, 3)
    _check_device_marks(session, rows)
    host = session.steps.snapshot().host[rows]
    assert _waits_during(read_waits(simulated), host) == []
