"""A run's private directory (link socket, source copy) never outlives the run.

Every path is covered: a run that fails, a headless CLI that ends, one interrupted with Ctrl-C,
and one killed with ``kill -9`` (nothing of it runs at exit: the next gpuwatch removes what a
dead process left).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from temp_dirs import private_dirs
from waiting import wait_until

from gpuwatch.core.run import link
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

START_S = 120  # the runner imports torch first; the machine may be busy

ENDLESS = textwrap.dedent("""
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.ones(64, 4)), batch_size=4)
    while True:
        for (x,) in loader:
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
""")


def test_a_failing_run_leaves_the_temp_folder_as_it_found_it(
    session: Session, tmp_path: Path
) -> None:
    before = private_dirs()
    script = tmp_path / "bad.py"
    script.write_text("raise RuntimeError('boom')\n")
    session.start(LaunchSpec(script=str(script), device="cpu", cwd=str(tmp_path)))
    assert len(private_dirs() - before) == 1, "the run has its private directory"
    assert session.wait_ended(START_S)
    assert session.state is SessionState.FAILED
    assert private_dirs() == before


def _default_sigint() -> None:
    """Ctrl-C at its default in the child, however the suite itself was started: a shell starts
    a background job (``.ci/run &``, ``nohup``) with SIGINT ignored, every child inherits that,
    and a Python started so never installs its KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cli(tmp_path: Path, script: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "run", "--headless", *args, str(script)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,  # noqa: PLW1509 - sets one signal disposition, no locks
    )


def test_the_headless_cli_removes_its_directory_after_a_failing_script(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("raise RuntimeError('boom')\n")
    proc = _cli(tmp_path, script)
    _out, err = proc.communicate(timeout=START_S)
    assert proc.returncode == 1, err
    assert not private_dirs(proc.pid)


def test_ctrl_c_of_the_headless_cli_removes_its_directory(tmp_path: Path) -> None:
    script = tmp_path / "endless.py"
    script.write_text(ENDLESS)
    proc = _cli(tmp_path, script)
    try:
        # Polled finely, so the Ctrl-C lands while the runner is being launched.
        wait_until(
            lambda: private_dirs(proc.pid) or proc.poll() is not None,
            START_S,
            "the CLI's private directory",
            interval=0.001,
        )
        assert private_dirs(proc.pid), "the run has its private directory"
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130
        # A launch interrupted part-way once left a run nobody ended: the CLI waited for it
        # (about a minute) and then said so.
        assert "did not end in time" not in err, err
        assert not private_dirs(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_what_a_killed_gpuwatch_left_is_removed_by_the_next_one(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"gpuwatch-{dead.pid}-abc123"
    (stale / "src").mkdir(parents=True)
    (stale / "link.sock").write_text("")
    ours = tmp_path / f"gpuwatch-{os.getpid()}-def456"
    ours.mkdir()
    other = tmp_path / "gpuwatch-not-a-run"
    other.mkdir()
    assert link.remove_stale_private_dirs(tmp_path) == [stale]
    assert not stale.exists() and ours.exists() and other.exists()


def test_a_new_private_dir_is_named_after_its_maker_and_removed_at_exit() -> None:
    """The at-exit clean-up of a process that never ended its run (an error in the GUI)."""
    code = "from gpuwatch.core.run import link; import sys; print(link.private_dir(), flush=True)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    made = Path(done.stdout.strip())
    assert made.parent == Path(tempfile.gettempdir())
    assert made.name.startswith("gpuwatch-")
    assert not made.exists()


def test_a_private_dir_the_interrupt_caught_before_its_tracking_is_removed_at_exit() -> None:
    """A Ctrl-C between ``mkdtemp`` and the tracking leaves a directory nobody tracks: the
    process's exit still removes it (it is named after the process)."""
    code = (
        "import os, tempfile; from gpuwatch.core.run import link; "
        "print(tempfile.mkdtemp(prefix=f'{link.PRIVATE_PREFIX}{os.getpid()}-'), flush=True)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    made = Path(done.stdout.strip())
    assert made.name.startswith("gpuwatch-")
    assert not made.exists()
