"""The stop's interrupt reaches a script even when gpuwatch started with SIGINT ignored.

A shell starts a background job (``gpuwatch run … &``) or a ``nohup`` command with SIGINT
ignored, the runner inherits that, and Python installs no Ctrl-C handler: the SIGINT the stop
aims at a script stuck between two step boundaries was dropped, and the run ended only when the
stop gave up and terminated the runner. The runner now installs ``signal.default_int_handler``
before the script runs when SIGINT was ignored (``script_control.make_interruptible``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from waiting import wait_until

from gpuwatch.core.run import session as session_module
from gpuwatch.core.run.outcome import EXIT_HUNG
from gpuwatch.core.run.session import stop_grace_s
from gpuwatch.runner.script_control import make_interruptible

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signal dispositions")

RUN_TIMEOUT_S = 150  # the runner imports torch first; the machine may be busy
#: What a loaded machine may add to an interrupted runner's own exit (its bye, torch's teardown).
RUNNER_EXIT_S = 3.0
#: ``--seconds``: the stop comes this long after the runner's hello.
SECONDS = 3
#: SIGINT's bit in /proc/PID/status's SigIgn mask.
SIGINT_BIT = 1 << (signal.SIGINT - 1)

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    OUT = sys.argv[1]
    handler = signal.getsignal(signal.SIGINT)
    open(os.path.join(OUT, f"sigint-{getattr(handler, '__name__', handler)}"), "w").close()
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.ones(64, 4)), batch_size=4)
    for step, (x,) in enumerate(loader):
        loss = model(x).pow(2).mean()
        loss.backward()
        if step == 2:
            time.sleep(600)  # stuck: this step reaches no boundary before the stop gives up
        opt.step()
        opt.zero_grad()
        open(os.path.join(OUT, f"done-{step}"), "w").close()
        print(f"step {step} done", flush=True)
""")

#: Starts ``argv`` with SIGINT ignored, as a non-interactive shell starts ``cmd &``.
IGNORING_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # it ended: the test then fails on what it printed
        return [b"", b"-m", b"gpuwatch"]


def _sigint_ignored(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = re.search(r"^SigIgn:\s*([0-9a-f]+)$", status, re.MULTILINE)
    assert mask, status
    return bool(int(mask.group(1), 16) & SIGINT_BIT)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/PID/status")
def test_headless_with_sigint_ignored_interrupts_a_stuck_script_after_the_grace(
    tmp_path: Path,
) -> None:
    """``--seconds 3`` on a script stuck in its third step, gpuwatch started with SIGINT
    ignored: the stop interrupts it after the grace (not a terminate after the polite window),
    the step it cut is not counted, and the end says so (exit 124)."""
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "stuck.py"
    script.write_text(SCRIPT)
    cmd = [sys.executable, "-m", "gpuwatch", "run", "--headless", "--seconds", str(SECONDS)]
    cmd += ["--device", "cpu", str(script), "--", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-c", IGNORING_SIGINT, *cmd],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    first_step_at: list[float] = []  # just after hello, from which --seconds counts
    err_lines: list[str] = []
    out_parts: list[str] = []

    # One reader per pipe and nobody else: communicate() would read stderr too, and a line it
    # took (the first step's) would never reach read_err.
    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err_lines.append(line)
            if line.startswith("step 0 done") and not first_step_at:
                first_step_at.append(time.monotonic())

    def read_out() -> None:
        assert proc.stdout is not None
        out_parts.append(proc.stdout.read())

    readers = [threading.Thread(target=f, daemon=True) for f in (read_err, read_out)]
    for reader in readers:
        reader.start()
    try:
        wait_until(lambda: _cmdline(proc.pid)[1:3] == [b"-m", b"gpuwatch"], 30, "the exec")
        assert _sigint_ignored(proc.pid), "the precondition: gpuwatch runs with SIGINT ignored"
        proc.wait(timeout=RUN_TIMEOUT_S)
        ended_at = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for reader in readers:
        reader.join(10)
    stdout = "".join(out_parts)
    err = "".join(err_lines)

    assert proc.returncode == EXIT_HUNG, stdout + err
    assert "stuck.py was stopped after 3 s, after 2 steps, but reached no step boundary in " in (
        stdout
    ), stdout
    assert "gpuwatch interrupted it mid-step (that step is not counted)" in stdout, stdout
    assert "terminated it" not in stdout and "did not stop in time" not in err, stdout + err
    assert re.search(r"^steps: 2 ", stdout, re.MULTILINE), stdout
    assert sorted(p.name for p in out.glob("done-*")) == ["done-0", "done-1"]
    # What the script saw: the handler the stop's interrupt needs (python SCRIPT & would show
    # SIG_IGN; make_interruptible's docstring says why that is the price).
    assert (out / "sigint-default_int_handler").exists(), sorted(p.name for p in out.iterdir())

    # The stop comes SECONDS after hello, the interrupt a grace later; the margin, a second
    # grace and RUNNER_EXIT_S, is for the interrupted runner's exit. Before, the stop waited out
    # its polite window and then terminated the runner.
    assert first_step_at, err
    grace = stop_grace_s(None)
    bound = SECONDS + 2 * grace + RUNNER_EXIT_S
    assert bound < SECONDS + grace + session_module.POLITE_STOP_S
    took = ended_at - first_step_at[0]
    assert took < bound, f"the run took {took:.1f} s after its first step (bound {bound:.1f} s)"


def test_make_interruptible_restores_only_an_ignored_sigint() -> None:
    """Ignored at start: Python's Ctrl-C handler is installed; any other handler (a script's
    own, the default one) is left as it is."""
    before = signal.getsignal(signal.SIGINT)

    def own(signum, frame) -> None:
        pass

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        make_interruptible()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        signal.signal(signal.SIGINT, own)
        make_interruptible()
        assert signal.getsignal(signal.SIGINT) is own
    finally:
        signal.signal(signal.SIGINT, before)
