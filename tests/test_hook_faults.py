"""gpuwatch's failures never raise into a watched script (docs/design.md, "Watched = unwatched").

A real script runs under a real runner subprocess (CPU). The script itself injects the fault:
through ``gpuwatch.probe``'s agent it reaches the runner's step recorder, its timing backend
and its controls, and makes one of them raise ``RuntimeError`` from its Nth call on. Each run
must end as the same script run plain does (same result file, its own exit code 3), with
exactly one notice naming the instrument that switched itself off, no traceback, and the
steps measured before the fault kept. A script's own exception keeps every one of its frames.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
from multiprocessing.connection import Listener
from pathlib import Path
from typing import Any

import pytest
from test_runner_script import KEY, REPO, Run, _read_all, run_script
from waiting import wait_until

from gpuwatch.commands.headless import summary_lines
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState
from gpuwatch.protocol import AUTHKEY_ENV
from gpuwatch.runner import script_session

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="AF_UNIX listener")

#: A loader loop (2 epochs of 8 batches, or gw.step() around each step with ``probe``) that
#: writes its final weights to result.json and exits 3. argv: fault targets (joined by ``+``),
#: calls before each raises, ``probe`` or ``hooks``, and a file that, when given, the loop waits
#: for at its end.
SCRIPT = """
    import contextlib, json, os, sys, time
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    import gpuwatch.probe as gw

    TARGET, AFTER, MODE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    RELEASE = sys.argv[4] if len(sys.argv) > 4 else None


    def inject(owner, name, answer=None):
        original = getattr(owner, name)
        calls = [0]

        def faulty(*args, **kwargs):
            calls[0] += 1
            if calls[0] > AFTER:
                raise RuntimeError(f"injected fault in {name}")
            result = original(*args, **kwargs)
            return result if answer is None else answer

        setattr(owner, name, faulty)


    agent = gw._agent  # the runner's ProbeAgent; None when run plain
    if agent is not None and TARGET != "none":
        recorder = agent.recorder
        for target in TARGET.split("+"):
            if target == "backend":  # a backend that records (CUDA's), not the CPU's inert one
                inject(recorder.backend.inner, "mark")
                recorder.backend.on = True
            elif target == "capture":  # the ScriptControl's kernel capture, as if a window
                control = recorder._boundary.__self__  # were open at every boundary
                inject(control.capture, "at_boundary", answer=True)
                control._capture_due = True
            else:
                inject(recorder, target)

    step = gw.step if MODE == "probe" else contextlib.nullcontext
    phase = gw.phase if MODE == "probe" else lambda name: contextlib.nullcontext()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for x, y in loader:
            with step():
                with phase("forward"):
                    loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    while RELEASE and not os.path.exists(RELEASE):
        time.sleep(0.02)
    with open("result.json", "w") as f:
        json.dump([p.tolist() for p in model.parameters()], f)
    sys.exit(3)
"""

#: (fault targets, calls before each fault, mode, the instruments that must switch off). Step
#: detection off ends what the others measure, so its faults run one at a time; the device
#: marks and the kernel capture fail in one run, each switching only itself off.
FAULTS = [
    ("backend+capture", 9, "hooks", ("device_marks", "kernel_capture")),
    ("next_called", 5, "hooks", ("step_detection",)),
    ("forward_started", 5, "hooks", ("step_detection",)),
    ("backward_returned", 5, "hooks", ("step_detection",)),
    ("optimizer_stepped", 5, "hooks", ("step_detection",)),
    ("step_exit", 5, "probe", ("step_detection",)),
    ("phase_enter", 5, "probe", ("step_detection",)),
]


def write_script(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))


@pytest.fixture(scope="module")
def plain_result(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The weights the script computes run plain, with ``python train.py``."""
    folder = tmp_path_factory.mktemp("plain")
    write_script(folder)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run(
        [sys.executable, "train.py", "none", "0", "hooks"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    return json.loads((folder / "result.json").read_text())


def run_runner(tmp_path: Path, python_args: list[str], *script_args: str) -> Run:
    """``run_script`` with the runner started as ``python *python_args`` (e.g. ``-c CODE``)."""
    messages: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gw-") as private:
        address = os.path.join(private, "link.sock")
        listener = Listener(address, family="AF_UNIX", authkey=KEY)
        env = dict(os.environ, PYTHONPATH=str(REPO), **{AUTHKEY_ENV: KEY.hex()})
        proc = subprocess.Popen(
            [
                sys.executable,
                *python_args,
                "--connect",
                address,
                "--device",
                "cpu",
                "--script",
                "train.py",
                "--",
                *script_args,
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            conn = listener.accept()
            reader = threading.Thread(target=_read_all, args=(conn, messages), daemon=True)
            reader.start()
            _, stderr = proc.communicate(timeout=120)
            reader.join(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            listener.close()
    return Run(messages, proc.returncode, stderr.decode())


def notices(run: Run) -> list[dict[str, Any]]:
    return [m for m in run.kinds("log") if "off" in m]


@pytest.mark.parametrize("fault", FAULTS, ids=[f[0] for f in FAULTS])
def test_a_failing_instrument_switches_off_and_the_script_ends_as_its_own(
    tmp_path: Path, plain_result: Any, fault: tuple[str, int, str, tuple[str, ...]]
) -> None:
    target, after, mode, instruments = fault
    write_script(tmp_path)
    run = run_script(tmp_path, None, target, str(after), mode)
    assert run.returncode == 3, run.stderr
    assert json.loads((tmp_path / "result.json").read_text()) == plain_result
    assert run.bye["reason"] == "script_exit" and run.bye["code"] == 3
    assert not run.kinds("error")
    assert "Traceback" not in run.stderr, run.stderr
    said = notices(run)
    assert sorted(n["off"] for n in said) == sorted(instruments), said
    for notice in said:
        assert notice["level"] == "warning"
        assert "RuntimeError: injected fault in" in notice["text"]
    steps = len(run.steps())
    if instruments == ("step_detection",):
        assert 0 < steps < 16, "the steps before the fault are kept, none after it"
    else:
        assert steps == 16, "the other instruments keep measuring"


def test_without_a_fault_no_notice_and_every_step(tmp_path: Path, plain_result: Any) -> None:
    write_script(tmp_path)
    run = run_script(tmp_path, None, "none", "0", "hooks")
    assert run.returncode == 3, run.stderr
    assert json.loads((tmp_path / "result.json").read_text()) == plain_result
    assert not notices(run) and len(run.steps()) == 16


def test_a_stop_still_ends_a_script_whose_instruments_failed(tmp_path: Path) -> None:
    """Device marks off: the stop's KeyboardInterrupt still reaches the script at a boundary."""
    write_script(tmp_path)
    release = tmp_path / "never"

    def stop_after_the_notice(conn: Any, messages: list[dict[str, Any]], proc: Any) -> None:
        from gpuwatch.protocol import encode

        wait_until(
            lambda: any(m["kind"] == "log" and "off" in m for m in list(messages)),
            60,
            "the device-marks notice",
        )
        conn.send_bytes(encode("stop", grace_s=30.0))

    source = textwrap.dedent(SCRIPT).replace("for epoch in range(2):", "for epoch in range(10**6):")
    run = run_script(
        tmp_path, source, "backend", "3", "hooks", str(release), drive=stop_after_the_notice
    )
    assert run.returncode == 0, run.stderr
    assert run.bye["reason"] == "stopped"
    assert len(notices(run)) == 1


USER_ERRORS = """
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Broken(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, index):
            return check_sample(index)


    def check_sample(index):
        if index == 5:
            raise KeyError(f"sample {index} is missing")
        return torch.ones(4)


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def forward(self, x):
            if x.shape[0] == 3:
                raise_in_forward()
            return self.layer(x)


    def raise_in_forward():
        raise ValueError("three is not a batch size")


    model = Net()
    model(torch.ones(2, 4)).sum().backward()
    for batch in DataLoader(Broken(), batch_size=2):
        model(batch).sum().backward()
"""


@pytest.mark.parametrize("where", ["dataset", "forward"])
def test_the_scripts_own_exception_keeps_its_frames(tmp_path: Path, where: str) -> None:
    source = USER_ERRORS
    if where == "forward":
        source = source.replace("model(torch.ones(2, 4))", "model(torch.ones(3, 4))")
    run = run_script(tmp_path, source)
    assert run.returncode == 1
    (error,) = run.kinds("error")
    trace = error["traceback"]
    if where == "dataset":
        assert error["type"] == "KeyError"
        frames = ["<module>", "__getitem__", "check_sample"]
    else:
        assert error["type"] == "ValueError"
        frames = ["<module>", "forward", "raise_in_forward"]
    for frame in frames:
        assert f"in {frame}\n" in trace, trace
    assert "torch/nn/modules/module.py" in trace or where == "dataset"
    assert "gpuwatch" not in trace and "runpy" not in trace
    assert not [m for m in run.kinds("log") if "off" in m], "a user's error is no fault of ours"


def test_traceback_trimming_keeps_the_users_frames_in_chains_and_files_named_runpy(
    tmp_path: Path,
) -> None:
    ours = os.path.join(script_session._GPUWATCH_DIR, "runner", "not_a_real_module.py")
    namespace: dict[str, Any] = {}
    exec(
        compile("def hook():\n    raise RuntimeError('inside gpuwatch')\n", ours, "exec"), namespace
    )
    users = str(tmp_path / "runpy.py")  # the user's own file that happens to be named so
    exec(compile("def helper(call):\n    call()\n", users, "exec"), namespace)

    def users_loop() -> None:
        try:
            namespace["helper"](namespace["hook"])
        except RuntimeError as exc:
            raise ValueError("second") from exc

    with pytest.raises(ValueError, match="second") as caught:
        users_loop()
    trace = script_session.script_traceback(caught.value)
    assert "in users_loop" in trace and "in helper" in trace and users in trace
    assert "not_a_real_module" not in trace
    assert "RuntimeError: inside gpuwatch" in trace and "ValueError: second" in trace


def test_script_mode_starts_where_os_has_no_register_at_fork(tmp_path: Path) -> None:
    """As on Windows: the attribute is gone after torch is imported."""
    write_script(tmp_path)
    boot = (
        "import os, torch\n"
        "del os.register_at_fork\n"
        "from gpuwatch.runner.cli import main\n"
        "raise SystemExit(main())\n"
    )
    run = run_runner(tmp_path, ["-c", boot], "none", "0", "hooks")
    assert run.returncode == 3, run.stderr
    assert len(run.steps()) == 16 and not run.kinds("error")


def test_the_window_and_the_headless_summary_say_it_once(tmp_path: Path) -> None:
    """Session.notice (the window's banner while it runs), the log, and the summary."""
    write_script(tmp_path)
    release = tmp_path / "release"
    session = Session(sample_coarse=False)
    try:
        session.start(
            LaunchSpec(
                script=str(tmp_path / "train.py"),
                cwd=str(tmp_path),
                device="cpu",
                script_args=("backend", "9", "hooks", str(release)),
            )
        )
        wait_until(
            lambda: session.notice is not None or session.wait_ended(0),
            90,
            "the device-marks notice",
        )
        notice = session.notice
        assert notice is not None and notice.startswith("device marks are off"), notice
        assert "RuntimeError: injected fault in mark" in notice
        release.touch()
        assert session.wait_ended(90)
        lines = session.drain_log()
    finally:
        session.close()
    assert session.state is SessionState.FINISHED, session.error
    assert session.exit_code == 3
    assert len([line for line in lines if "device marks are off" in line.text]) == 1
    summary = summary_lines(session, "done")
    assert len([line for line in summary if "device marks are off" in line]) == 1


def test_headless_prints_the_notice_once_and_exits_with_the_scripts_code(tmp_path: Path) -> None:
    write_script(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwatch",
            "run",
            "--headless",
            "train.py",
            "--",
            "backend",
            "9",
            "hooks",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("device marks are off") == 1, done.stderr
    assert done.stdout.count("device marks are off") == 1, done.stdout
    assert "Traceback" not in done.stderr and "raised" not in done.stdout
