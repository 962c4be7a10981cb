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
from pathlib import Path

import pytest
from waiting import wait_until

from gpuwatch.core.run.outcome import EXIT_HUNG
from gpuwatch.runner.script_control import make_interruptible

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signal dispositions")

RUN_TIMEOUT_S = 150  # the runner imports torch first; the machine may be busy
#: ``--seconds``: the stop comes this long after the runner's hello, by when the script must be
#: stuck in its third step. Its steps are tiny and it builds no optimizer (whose first use
#: imports Dynamo: seconds of CPU on a loaded machine), so that takes well under a second.
SECONDS = 5
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
    loader = DataLoader(TensorDataset(torch.ones(64, 4)), batch_size=4)
    for step, (x,) in enumerate(loader):  # a step: one batch (no optimizer: see SECONDS)
        loss = model(x).pow(2).mean()
        loss.backward()
        if step == 2:
            time.sleep(600)  # stuck: this step reaches no boundary before the stop gives up
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None
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
    """``--seconds`` on a script stuck in its third step, gpuwatch started with SIGINT
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
    try:
        wait_until(lambda: _cmdline(proc.pid)[1:3] == [b"-m", b"gpuwatch"], 30, "the exec")
        assert _sigint_ignored(proc.pid), "the precondition: gpuwatch runs with SIGINT ignored"
        stdout, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert proc.returncode == EXIT_HUNG, stdout + err
    assert (
        f"stuck.py was stopped after {SECONDS} s, after 2 steps, but reached no step boundary in "
        in stdout
    ), stdout
    assert "gpuwatch interrupted it mid-step (that step is not counted)" in stdout, stdout
    assert "terminated it" not in stdout and "did not stop in time" not in err, stdout + err
    assert re.search(r"^steps: 2 ", stdout, re.MULTILINE), stdout
    assert sorted(p.name for p in out.glob("done-*")) == ["done-0", "done-1"]
    # What the script saw: the handler the stop's interrupt needs (python SCRIPT & would show
    # SIG_IGN; make_interruptible's docstring says why that is the price).
    assert (out / "sigint-default_int_handler").exists(), sorted(p.name for p in out.iterdir())


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
