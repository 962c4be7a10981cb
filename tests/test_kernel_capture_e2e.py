"""A real CPU capture window on the ``vision`` workload, through the Session like the window."""

from __future__ import annotations

import numpy as np
import pytest
from waiting import wait_until

from gpuwatch.core.run.session import LaunchSpec, Session, SessionError, SessionState
from gpuwatch.protocol import ACTIVE_LAST, MARKS


@pytest.fixture
def session():
    s = Session(sample_coarse=False)
    yield s
    s.close()


def test_cpu_capture_window_on_vision(session: Session) -> None:
    session.start(LaunchSpec(workload="vision", device="cpu"))
    wait_until(
        lambda: session.state is not SessionState.STARTING,  # RUNNING: hello stored first
        120,
        "the runner's hello",
    )
    assert session.state is SessionState.RUNNING, session.error
    warmup = session.config_changes()[0].warmup_steps
    wait_until(lambda: session.steps.count >= warmup + 1, 120, "the steady steps")

    with pytest.raises(SessionError, match="1 to 50 steps"):
        session.request_capture(0)
    for _ in range(2):  # twice in a row: the profiler is torn down after each window
        before = len(session.kernel_windows())
        session.request_capture(3)
        assert session.capturing
        with pytest.raises(SessionError, match="already running"):
            session.request_capture(3)
        wait_until(
            lambda n=before: len(session.kernel_windows()) > n or session.capture_error is not None,
            120,
            "a kernel window",
        )
        assert session.capture_error is None, session.capture_error
        assert not session.capturing
    windows = session.kernel_windows()
    assert windows[1].steps[0] > windows[0].steps[-1]
    last = max(w.steps[-1] for w in windows)
    wait_until(lambda: session.steps.count > last + 1, 120, "steps after the windows")
    view = session.steps.snapshot()

    for window in windows:
        assert window.ok and window.device == "cpu" and len(window.steps) == 3
        assert window.perturbed == (window.steps[0] - 1, *window.steps)
        rows = np.isin(view.step, window.steps)
        host = view.host[rows]
        # Clock conversion: every op lies inside the recorded steps' host spans.
        assert int(window.start.min()) >= int(host[0, 0])
        assert int(window.end.max()) <= int(host[-1, -1])
        summary = window.summary()
        assert summary.kernels > 20 and any(n.startswith("aten::") for n in window.names)
        assert summary.busy_fraction is not None and 0 < summary.busy_fraction < 1
        # Busy is at most the time inside the steps, and the ops cover most of the compute
        # phases (forward .. optimizer), which are pure CPU work.
        in_steps = int((host[:, -1] - host[:, 0]).sum())
        assert summary.busy_ns <= in_steps
        bs, be = window.busy_spans()
        compute = 0
        covered = 0
        for start, end in zip(
            host[:, MARKS.index("h2d_end")].tolist(), host[:, ACTIVE_LAST].tolist(), strict=True
        ):
            compute += end - start
            covered += int(np.clip(np.minimum(be, end) - np.maximum(bs, start), 0, None).sum())
        assert covered > 0.5 * compute, (covered, compute)

    # The profiled steps (warm-up included) are out of the scoreboard's figures.
    profiled = {s for w in windows for s in w.perturbed}
    assert min(profiled) >= warmup
    row = session.scoreboard()[0]
    assert row.steady_steps == row.steps - warmup - len(profiled)
    # The profiler's harmless C++ start/stop lines are not shown as runner output.
    texts = [line.text for line in session.drain_log()]
    assert any(t.startswith("kernel window over steps") for t in texts)
    assert not any("profiler_start" in t or "gpuGetDeviceCount" in t for t in texts)
    session.stop()
    assert session.wait_ended(60)


def test_bench_capture_adds_a_kernel_window_to_each_stage() -> None:
    import io

    from gpuwatch.commands.bench import BenchOptions, run_bench
    from gpuwatch.commands.bench_report import render

    outcome = run_bench(
        BenchOptions(workload="vision", device="cpu", seconds=3.0, capture=3),
        progress=io.StringIO(),
    )
    assert outcome.exit_code == 0, outcome.error
    report = outcome.report
    assert report is not None
    [segment] = report.to_json()["segments"]
    window = segment["kernel_window"]
    assert window["device"] == "cpu" and len(window["steps"]) == 3
    assert 0 < window["busy_fraction"] < 1 and window["kernels"] > 0
    assert segment["samples_per_s"] is not None  # from the unprofiled steady steps
    assert "## Kernel windows" in render(report, "md")


SCRIPT = """
import torch

model = torch.nn.Linear(32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
while True:  # endless: the session stops it
    loss = model(torch.randn(64, 32)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def test_capture_works_in_script_mode(session: Session, tmp_path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    session.start(LaunchSpec(script=str(script), device="cpu", cwd=str(tmp_path)))
    wait_until(
        lambda: session.steps.count >= 20 or session.state is SessionState.FAILED,
        120,
        "the script's steps",
    )
    assert session.state is SessionState.RUNNING, session.error
    session.request_capture(4)
    wait_until(
        lambda: session.kernel_windows() or session.capture_error is not None,
        120,
        "a kernel window",
    )
    assert session.capture_error is None, session.capture_error
    [window] = session.kernel_windows()
    assert window.ok and len(window.steps) == 4
    assert {"aten::linear", "aten::mean"} & set(window.names)
    wait_until(lambda: session.steps.count > window.steps[-1] + 1, 60, "the window's steps")
    view = session.steps.snapshot()
    host = view.host[np.isin(view.step, window.steps)]
    assert len(host) == 4
    assert int(host[0, 0]) <= int(window.start.min())
    assert int(window.end.max()) <= int(host[-1, -1])
    session.stop()
    assert session.wait_ended(60)
