"""The spawn path, as Windows has it, forced and measured here (gpuwatch/runner/worker_start.py).

``GPUWATCH_WORKER_START=spawn`` makes a built-in workload spawn its DataLoader workers; the
wait for their first batch is announced with an estimate and then measured. A watched script
without the ``__main__`` guard whose workers are spawned ends with one message and the fix,
not a traceback per worker. And a script in a folder whose name has spaces and non-ASCII
characters runs through ``gpuwatch run --headless`` as ``python SCRIPT`` would run it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import wait_until

from gpuwatch.core.model.messages import ConfigChange
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState
from gpuwatch.runner import worker_start
from gpuwatch.runner.worker_start import (
    MISSING_GUARD_EXIT,
    WORKER_START_ENV,
    WorkerStart,
    WorkerStarts,
    announce_start,
    guarded_command,
    start_method,
)

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 180


def test_the_start_method_can_be_forced_to_spawn() -> None:
    default = "forkserver" if sys.platform != "win32" else "spawn"
    assert start_method({}) == default
    assert start_method({WORKER_START_ENV: "spawn"}) == "spawn"
    assert start_method({WORKER_START_ENV: " Spawn "}) == "spawn"
    assert start_method({WORKER_START_ENV: "fork"}) == default, "never plain fork"


def test_the_notice_uses_the_last_measured_start_or_a_first_guess() -> None:
    starts = WorkerStarts()
    now = [100.0]
    said: list[str] = []
    start = WorkerStart("spawn", 2, said.append, starts, clock=lambda: now[0])
    assert starts.notice("spawn", 2) == "starting 2 workers (spawn): ~5 s", "a first guess"
    now[0] += 7.4
    start.ready()  # the first batch is in (the helper thread)
    now[0] += 1.0  # the next step boundary: the change is applied
    assert starts.notice("spawn", 2) == "starting 2 workers (spawn): ~5 s", "not before it works"
    start.report()
    assert said == ["2 workers (spawn) delivered the first batch in 7.4 s"]
    assert starts.notice("spawn", 2) == "starting 2 workers (spawn): ~7 s"
    assert starts.notice("spawn", 4) == "starting 4 workers (spawn): ~7 s", "same method"
    assert starts.notice("forkserver", 1) == "starting 1 worker (forkserver): ~0.5 s"
    starts.record("spawn", 4, 12.0)
    assert starts.notice("spawn", 2) == "starting 2 workers (spawn): ~7 s", "its own count first"
    assert starts.notice("spawn", 3) == "starting 3 workers (spawn): ~12 s", "else the newest"


def test_announcing_says_the_estimate_for_the_start_method_in_force(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(WORKER_START_ENV, "spawn")
    said: list[str] = []
    start = announce_start(2, said.append, meanwhile="; training goes on", starts=WorkerStarts())
    assert said == ["starting 2 workers (spawn): ~5 s; training goes on"]
    assert (start.method, start.workers) == ("spawn", 2)


def _child(program: str, marker: Path) -> subprocess.CompletedProcess[str]:
    """A child started as multiprocessing's spawn starts one, through ``guarded_command``."""
    command = guarded_command(
        [sys.executable, "-c", program, "--multiprocessing-fork"], str(marker)
    )
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_a_child_that_fails_for_want_of_the_guard_exits_quietly_and_leaves_the_marker(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "missing-guard"
    bootstrapping = (
        "raise RuntimeError('An attempt has been made to start a new process before the "
        "current process has finished its bootstrapping phase.')"
    )
    done = _child(bootstrapping, marker)
    assert (done.returncode, done.stderr, marker.exists()) == (MISSING_GUARD_EXIT, "", True)

    # A slower worker failing after the run ended: the marker's folder is gone already.
    gone = tmp_path / "removed-with-the-run" / "missing-guard"
    done = _child(bootstrapping, gone)
    assert (done.returncode, done.stderr, gone.exists()) == (MISSING_GUARD_EXIT, "", False)

    other = tmp_path / "other"
    done = _child("raise RuntimeError('something else')", other)
    assert done.returncode == 1 and "something else" in done.stderr and not other.exists()
    done = _child("import sys; print(sys.argv[1:])", other)
    assert done.returncode == 0 and done.stdout.strip() == "['--multiprocessing-fork']"


def test_a_frozen_interpreters_command_is_left_alone() -> None:
    command = ["gpuwatch.exe", "--multiprocessing-fork", "parent_pid=1", "pipe_handle=2"]
    assert guarded_command(command, "marker") == command


def _headless(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", "run", "--headless", "--device", "cpu", *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUTF8": "1"},
    )


#: The usual mistake: everything at top level, spawn workers (as Windows always has them).
UNGUARDED = """
import multiprocessing
import torch
from torch.utils.data import DataLoader, TensorDataset

multiprocessing.set_start_method("spawn", force=True)
data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(data, batch_size=16, num_workers=1, multiprocessing_context="spawn")
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained")
"""


def test_a_script_without_the_main_guard_gets_one_message_and_the_fix(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(UNGUARDED), encoding="utf-8")
    done = _headless([str(script)], tmp_path)
    output = done.stdout + done.stderr

    assert done.returncode == 1, output
    # The summary (stdout) is that one message, the fix included; the run's log (stderr)
    # echoes the runner's error once, and no worker's traceback reaches either.
    guard = 'has no `if __name__ == "__main__":` guard'
    assert done.stdout.startswith("unguarded.py starts worker processes with 'spawn'"), output
    assert done.stdout.count(guard) == 1, output
    assert '    if __name__ == "__main__":\n        main()\n' in done.stdout, output
    assert done.stderr.count(guard) <= 1, output
    assert output.count("finished its bootstrapping phase") <= 2, output
    assert "Traceback" not in output, output
    assert "trained" not in output


#: A short guarded loop that reports what ``python SCRIPT ARGS`` would have set.
FINITE = """
import json, os, sys
import torch

if __name__ == "__main__":
    with open(os.path.join(os.path.dirname(__file__), "seen.json"), "w", encoding="utf-8") as f:
        json.dump({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
                   "file": __file__}, f, ensure_ascii=False)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(12):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_script_in_a_folder_with_spaces_and_non_ascii_characters(tmp_path: Path) -> None:
    folder = tmp_path / "my runs ü" / "Zoë's tests"
    folder.mkdir(parents=True)
    script = folder / "train é.py"
    script.write_text(textwrap.dedent(FINITE), encoding="utf-8")
    work = tmp_path / "work dir ß"
    work.mkdir()
    done = _headless([str(script), "--", "--name", "a b ü"], work)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "train é.py finished after" in done.stdout, done.stdout
    seen = json.loads((folder / "seen.json").read_text(encoding="utf-8"))
    assert seen == {
        "argv": [str(script), "--name", "a b ü"],
        "cwd": str(work),
        "path0": str(folder),
        "file": str(script),
    }


def test_a_spawned_worker_is_announced_with_an_estimate_and_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real runner forced to spawn: ``num_workers`` 0 → 1 says it starts it and what it
    expects, training goes on meanwhile, and the measured time is said when it delivers."""
    monkeypatch.setenv(WORKER_START_ENV, "spawn")
    session = Session(sample_coarse=False)
    try:
        session.start(LaunchSpec(workload="mlp", device="cpu"))
        wait_until(lambda: session.state is not SessionState.STARTING, 120, "the hello")
        assert session.state is SessionState.RUNNING, session.error
        wait_until(lambda: session.steps.count >= 3, 60, "3 steps")
        asked_at_step = session.steps.count
        request = session.set_knobs({"num_workers": 1})
        assert request is not None
        lines: list[str] = []

        def answered() -> bool:
            lines.extend(line.text for line in session.drain_log())
            return session.answer(request) is not None

        wait_until(answered, 120, "the change to a spawned worker")
        answer = session.answer(request)
        assert isinstance(answer, ConfigChange), answer
        text = "\n".join(lines)
        assert "starting 1 worker (spawn): ~5 s; preparing num_workers=1" in text, text
        took = re.search(r"1 worker \(spawn\) delivered the first batch in ([\d.]+) s", text)
        assert took, text
        assert float(took[1]) <= answer.apply_s + 0.5
        assert answer.first_step > asked_at_step, "training went on while the workers started"
        assert answer.warmup_steps >= 1, "the first steps with the new workers are warm-up"
        assert worker_start.FIRST_SPAWN_ESTIMATE_S == 5.0
    finally:
        session.close()
