"""A real runner subprocess on the CPU, driven through the Session as the window drives it."""

from __future__ import annotations

import os
import sys

import numpy as np
import psutil
import pytest
from temp_dirs import sweep_after_kill
from waiting import wait_until

from gpuwatch.core.run import launcher
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState
from gpuwatch.protocol import ACTIVE_FIRST, ACTIVE_LAST


@pytest.fixture
def session():
    s = Session()
    yield s
    s.close()


def test_cpu_run_streams_steps_and_stop_ends_the_whole_tree(session: Session) -> None:
    session.start(LaunchSpec(workload="vision", device="cpu"))
    wait_until(
        lambda: session.state is not SessionState.STARTING,  # RUNNING: hello stored first
        120,
        "the runner's hello",
    )
    assert session.state is SessionState.RUNNING, session.error
    assert session.device_kind == "cpu"
    wait_until(lambda: session.steps.count >= 8, 120, "8 steps")

    view = session.steps.snapshot()
    host = view.host
    assert np.all(np.diff(host, axis=1) >= 0), "marks within a step go forward"
    assert np.all(host[1:, 0] >= host[:-1, -1]), "each step starts after the previous ended"
    assert np.all(np.diff(view.step) == 1)
    assert view.has_device.all(), "on a CPU the host spans are the device truth"
    assert np.array_equal(view.device[:, ACTIVE_FIRST], host[:, ACTIVE_FIRST])
    assert np.array_equal(view.device[:, ACTIVE_LAST], host[:, ACTIVE_LAST])
    assert (view.samples > 0).all()

    # Coarse figures: process-tree CPU is sampled; NVML is n/a with a reason, never 0.
    wait_until(lambda: len(session.coarse.snapshot("proc.cpu")) >= 1, 30, "a CPU sample")
    status = session.coarse.statuses()
    assert status["nvml.gpu_util"].available is False
    assert status["nvml.gpu_util"].reason
    assert len(session.coarse.snapshot("nvml.gpu_util")) == 0

    tree = launcher.tree(session.pid)
    assert tree, "the runner is alive"
    session.stop()
    assert session.wait_ended(30)
    assert session.state is SessionState.FINISHED, session.error
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive, f"left behind: {alive}"
    assert session.bye_reason == "stopped"
    texts = [line.text for line in session.drain_log()]
    assert any("runner exited normally" in t for t in texts)


def test_runner_killed_from_outside_is_reported(session: Session) -> None:
    session.start(LaunchSpec(device="cpu"))
    wait_until(
        lambda: session.steps.count >= 2 or session.state is SessionState.FAILED, 120, "first steps"
    )
    before = session.steps.count
    psutil.Process(session.pid).kill()
    assert session.wait_ended(30)
    assert session.state is SessionState.FAILED
    assert "killed" in (session.error or "")
    assert session.steps.count >= before, "steps received so far are kept"


def test_python_without_torch_fails_with_a_message(session: Session, tmp_path) -> None:
    import venv

    venv.create(tmp_path / "env", with_pip=False)
    python = tmp_path / "env" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    session.start(LaunchSpec(device="cpu", python=str(python)))
    assert session.wait_ended(60)
    assert session.state is SessionState.FAILED
    assert session.error
    logged = "\n".join(line.text for line in session.drain_log())
    assert "torch" in logged, logged


def test_missing_interpreter_fails_at_start(session: Session, tmp_path) -> None:
    session.start(LaunchSpec(python=str(tmp_path / "no-python")))
    assert session.state is SessionState.FAILED
    assert "could not start the runner" in (session.error or "")
    assert session.wait_ended(5)


def test_restart_after_a_run(session: Session) -> None:
    session.start(LaunchSpec(workload="mlp", device="cpu", max_steps=3))
    assert session.wait_ended(120)
    assert session.state is SessionState.FINISHED, session.error
    assert session.hello is not None and session.hello.workload == "mlp"
    view = session.steps.snapshot()
    assert len(view) == 3
    assert np.all(np.diff(view.host, axis=1) >= 0)
    assert (view.samples == session.hello.batch_size).all()
    session.start(LaunchSpec(workload="mlp", device="cpu", max_steps=2))
    assert session.wait_ended(120)
    assert session.state is SessionState.FINISHED, session.error
    assert session.steps.count == 2, "a new run starts from empty buffers"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_gui_process_killed_runner_exits_by_itself(tmp_path) -> None:
    """Kill -9 the process holding the Session: the runner notices the link loss and exits."""
    import subprocess
    import textwrap

    script = tmp_path / "gui.py"
    script.write_text(
        textwrap.dedent("""
        import sys, time
        from gpuwatch.core.run.session import LaunchSpec, Session
        s = Session()
        s.start(LaunchSpec(device="cpu"))
        while s.steps.count < 2:
            time.sleep(0.05)
        print(s.pid, flush=True)
        time.sleep(600)
    """)
    )
    gui = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        runner_pid = int(gui.stdout.readline())
        runner = psutil.Process(runner_pid)
        gui.kill()
        gui.wait(10)
        runner.wait(timeout=60)  # raises TimeoutExpired if the runner lingers
    finally:
        gui.kill()
        for p in launcher.tree(locals().get("runner_pid", 0) or -1):
            p.kill()
        gui.wait(10)
    sweep_after_kill(gui.pid)


@pytest.mark.parametrize(("workload", "steps"), [("gpt", 10)])  # mlp: the restart test
def test_other_builtin_workloads_run_through_the_session(workload: str, steps: int) -> None:
    session = Session(sample_coarse=False)
    try:
        session.start(LaunchSpec(workload=workload, device="cpu", max_steps=steps))
        assert session.wait_ended(120)
        assert session.state is SessionState.FINISHED, session.error
        assert session.hello is not None and session.hello.workload == workload
        view = session.steps.snapshot()
        assert len(view) == steps
        assert np.all(np.diff(view.host, axis=1) >= 0)
        assert (view.samples == session.hello.batch_size).all()
    finally:
        session.close()
