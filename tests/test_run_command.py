"""``gpuwatch run``: real scripts written here, run through the command on the CPU.

Headless runs go through ``python -m gpuwatch run --headless`` in a subprocess (what a user
types); the no-step notice and the window's script mode use a Session / MainWindow directly.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from waiting import wait_until

from gpuwatch.cli import main
from gpuwatch.core.run.outcome import describe, facts_from
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

RUN_TIMEOUT_S = 150

#: An endless loop over a spawn-started DataLoader with 2 workers; its ``finally`` and its
#: workers leave files behind so the test can see a clean stop and look for orphans.
ENDLESS_LOOP = """
import os, sys
import torch
from torch.utils.data import DataLoader, Dataset

OUT = sys.argv[1]

class Squares(Dataset):
    def __len__(self):
        return 256
    def __getitem__(self, i):
        x = torch.full((16,), float(i % 7))
        return x, x.sum(0, keepdim=True)

def note_worker(_):
    open(os.path.join(OUT, f"worker-{os.getpid()}"), "w").close()

if __name__ == "__main__":
    with open(os.path.join(OUT, "main-pid"), "w") as f:
        f.write(str(os.getpid()))
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Squares(), batch_size=32, num_workers=2,
                        worker_init_fn=note_worker)
    try:
        while True:
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        open(os.path.join(OUT, "finally-ran"), "w").close()
"""

#: A finite loop without a DataLoader (the optimizer delimits steps); it records its argv
#: and working directory so the test sees them as ``python SCRIPT ARGS`` would set them.
FINITE_LOOP = """
import json, os, sys
import torch

if __name__ == "__main__":
    with open("seen.json", "w") as f:
        json.dump({"argv": sys.argv, "cwd": os.getcwd()}, f)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(30):
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def _script(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", "run", "--headless", *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )


def _steps(stdout: str) -> int:
    found = re.search(r"^steps: ([\d,]+)", stdout, re.MULTILINE)
    assert found, stdout
    return int(found.group(1).replace(",", ""))


def test_seconds_stops_an_endless_dataloader_loop_cleanly_and_records_it(tmp_path) -> None:
    from gpuwatch.core.files.recording_reader import open_recording

    out = tmp_path / "out"
    out.mkdir()
    script = _script(tmp_path, ENDLESS_LOOP)
    record = tmp_path / "run.gpuwatch"
    done = _run(
        ["--seconds", "5", "--device", "cpu", "--record", str(record), str(script), "--", str(out)],
        cwd=tmp_path,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "train.py was stopped after 5 s" in done.stdout
    assert "(trained on the CPU)" in done.stdout
    steps = _steps(done.stdout)
    assert steps > 0
    figures = re.search(r"samples/s: ([\d,.]+) .*busy: (\d+) % · input wait: (\d+) %", done.stdout)
    assert figures, done.stdout
    assert float(figures.group(1).replace(",", "")) > 0
    assert f"recording: {record}" in done.stdout
    assert (out / "finally-ran").exists(), "the script's finally block ran (a clean stop)"

    workers = [int(p.name.split("-")[1]) for p in out.glob("worker-*")]
    assert len(workers) >= 2, "the DataLoader's spawned workers ran"
    pids = [int((out / "main-pid").read_text()), *workers]
    assert not [
        p
        for p in pids
        if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ], "no process left behind"

    recording = open_recording(record)
    assert len(recording.steps) == steps
    assert recording.bye is not None and recording.bye["reason"] == "stopped"
    assert recording.hello is not None and recording.hello.workload == "train.py"


def test_a_finite_loop_gets_its_argv_cwd_and_a_cpu_summary(tmp_path) -> None:
    script = _script(tmp_path, FINITE_LOOP)
    work = tmp_path / "work"
    work.mkdir()
    done = _run([str(script), "--", "--lr", "0.5"], cwd=work)

    assert done.returncode == 0, done.stdout + done.stderr
    assert _steps(done.stdout) >= 25
    assert "train.py finished after" in done.stdout
    assert "(trained on the CPU)" in done.stdout
    seen = (work / "seen.json").read_text()
    assert f'"argv": ["{script}", "--lr", "0.5"]' in seen
    assert f'"cwd": "{work}"' in seen


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        (
            "import sys\nsys.exit(3)\n",
            3,
            "train.py exited with code 3 after 0 steps: no training step was seen",
        ),
        ("def broken(:\n    pass\n", 1, "train.py has a syntax error: "),
        (
            "print('nothing to train')\n",
            0,
            "train.py ended after 0 steps: no training step was "
            "seen — gpuwatch detects steps from DataLoader",
        ),
    ],
    ids=["sys-exit-3", "syntax-error", "exits-at-once"],
)
def test_bad_scripts_get_their_message_and_exit_code(
    tmp_path, body: str, code: int, says: str
) -> None:
    script = _script(tmp_path, body)
    done = _run([str(script)], cwd=tmp_path)
    assert done.returncode == code, done.stdout + done.stderr
    assert says in done.stdout, done.stdout + done.stderr


def test_a_raising_script_is_named_and_shows_its_traceback(tmp_path) -> None:
    script = _script(tmp_path, "def f():\n    raise KeyError('gone')\nf()\n")
    done = _run([str(script)], cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "train.py raised KeyError: 'gone'" in done.stdout, done.stdout + done.stderr
    assert "line 2, in f" in done.stderr, "the traceback reaches the user"


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p / "missing.py", "no such script: "),
        (lambda p: p, "is a directory, not a Python script"),
    ],
)
def test_a_script_that_cannot_be_run_is_refused_before_anything_starts(
    tmp_path, capsys, make, says: str
) -> None:
    target = make(tmp_path)
    assert main(["run", "--headless", str(target)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], captured.err
    assert captured.out == ""


def test_no_step_notice_while_a_script_never_reaches_a_step(tmp_path) -> None:
    script = _script(tmp_path, "import time\ntime.sleep(3)\n")
    session = Session(sample_coarse=False, no_step_notice_s=1.0)
    try:
        session.start(LaunchSpec(script=str(script), cwd=str(tmp_path), device="cpu"))
        wait_until(
            lambda: session.notice is not None or session.wait_ended(0), 60, "the no-step notice"
        )
        assert session.notice is not None
        assert session.notice.startswith(
            "no training step yet after 1 s: gpuwatch detects "
            "steps from DataLoader iteration and optimizer.step()"
        )
        assert session.wait_ended(60)
    finally:
        session.close()
    assert session.state is SessionState.FINISHED, session.error
    assert "no training step was seen" in describe(facts_from(session)).sentence


def test_window_shows_the_script_and_its_steps(qtbot, tmp_path) -> None:
    from gpuwatch.qt.main_window import MainWindow
    from gpuwatch.qt.window_options import WindowOptions

    # An endless loop that declares a probe knob: the knob panel grows with the schema.
    body = FINITE_LOOP.replace("range(30)", "range(10**9)").replace(
        "        x = torch.randn(16, 8)",
        "        x = torch.randn(gw.knob('batch', default=16, choices=[16, 32]), 8)",
    )
    script = _script(tmp_path, "import gpuwatch.probe as gw\n" + body, name="my_train.py")
    session = Session(sample_coarse=False)
    options = WindowOptions(
        workload="vision",
        device="cpu",
        python=None,
        script=str(script),
        script_args=(),
        cwd=str(tmp_path),
        seconds=4.0,
    )
    window = MainWindow(session, options)
    qtbot.addWidget(window)
    window.show()
    try:
        assert window.script_label is not None and "my_train.py" in window.script_label.text()
        assert window.workload_combo.isHidden() or window.workload_combo.parent() is None
        window.start_run()
        qtbot.waitUntil(lambda: session.steps.count > 0, timeout=60_000)
        qtbot.waitUntil(lambda: "batch" in window.knob_panel.rows, timeout=10_000)
        qtbot.waitUntil(lambda: session.state is SessionState.FINISHED, timeout=60_000)
        qtbot.waitUntil(window.banner.isVisible, timeout=5_000)
        assert window.banner.text().startswith("my_train.py was stopped after 4 s, after ")
        assert session.steps.count > 0, "what was measured stays shown"
    finally:
        window.close()


#: Gradient accumulation: four micro-batches of 64 drawn inside each of 40 optimizer steps;
#: ``--evaluate`` runs the same loader through the model without gradients.
ACCUMULATING_LOOP = """
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATE = 4
if __name__ == "__main__":
    torch.manual_seed(0)
    n = 40 * ACCUMULATE * 64
    data = TensorDataset(torch.randn(n, 16), torch.randn(n, 1))
    loader = DataLoader(data, batch_size=64)
    model = torch.nn.Linear(16, 1)
    if "--evaluate" in sys.argv:
        with torch.no_grad():
            for x, y in loader:
                torch.nn.functional.mse_loss(model(x), y)
        sys.exit(0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATE
        loss.backward()
        if (i + 1) % ACCUMULATE == 0:
            opt.step()
            opt.zero_grad()
"""


def test_an_accumulating_script_counts_optimizer_steps_and_says_so(tmp_path) -> None:
    from gpuwatch.core.files.recording_reader import open_recording

    script = _script(tmp_path, ACCUMULATING_LOOP)
    record = tmp_path / "run.gpuwatch"
    done = _run(["--device", "cpu", "--record", str(record), str(script)], cwd=tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    # The first cycle shows batch by batch (no optimizer had stepped yet), then 39 steps.
    assert _steps(done.stdout) == 4 + 39, done.stdout
    assert "a step = one optimizer.step() over 4 DataLoader batches" in done.stdout
    assert "(trained on the CPU)" in done.stdout
    assert re.search(r"^steady steps \(40 of 43, ", done.stdout, re.MULTILINE), done.stdout
    samples = open_recording(record).steps.samples.tolist()
    assert samples == [64] * 4 + [256] * 39


def test_an_evaluation_only_run_is_not_called_training(tmp_path) -> None:
    script = _script(tmp_path, ACCUMULATING_LOOP)
    done = _run(["--device", "cpu", str(script), "--", "--evaluate"], cwd=tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "train.py finished after 160 steps (evaluated on the CPU)" in done.stdout
    assert "a step = one DataLoader batch" in done.stdout
