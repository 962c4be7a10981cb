"""``python -m gpuwatch.runner --script``: real scripts, written here, run by a real runner
subprocess against a test-side Listener (CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

import psutil
import pytest
from waiting import wait_until

from gpuwatch.protocol import AUTHKEY_ENV, PHASES, RUNNER_KINDS, decode, encode

REPO = Path(__file__).resolve().parents[1]
KEY = bytes(range(32))
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="AF_UNIX listener")

Message = dict[str, Any]


@dataclass
class Run:
    messages: list[Message]
    returncode: int
    stderr: str

    def kinds(self, kind: str) -> list[Message]:
        return [m for m in self.messages if m["kind"] == kind]

    @property
    def bye(self) -> Message:
        (bye,) = self.kinds("bye")
        return bye

    def steps(self) -> list[tuple[int, int, list[int]]]:
        """(step id, samples, host marks) of every step, in order."""
        rows = []
        for batch in self.kinds("steps"):
            rows += list(zip(batch["step"], batch["samples"], batch["host"], strict=True))
        return rows


def run_script(
    tmp_path: Path,
    source: str | None,
    *args: str,
    drive: Callable[[Connection, list[Message], subprocess.Popen[bytes]], None] | None = None,
    script: str = "train.py",
    timeout: float = 60,
) -> Run:
    """Write ``source`` as ``tmp_path/script`` and run it watched; ``drive`` plays the GUI."""
    if source is not None:
        (tmp_path / script).write_text(textwrap.dedent(source))
    messages: list[Message] = []
    with tempfile.TemporaryDirectory(prefix="gw-") as private:
        address = os.path.join(private, "link.sock")
        listener = Listener(address, family="AF_UNIX", authkey=KEY)
        env = dict(os.environ, PYTHONPATH=str(REPO), **{AUTHKEY_ENV: KEY.hex()})
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuwatch.runner",
                "--connect",
                address,
                "--device",
                "cpu",
                "--script",
                script,
                "--",
                *args,
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
            if drive is not None:
                drive(conn, messages, proc)
            proc.wait(timeout=timeout)
            reader.join(timeout=10)
            assert proc.stderr is not None
            stderr = proc.stderr.read().decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            listener.close()
    return Run(messages, proc.returncode, stderr)


def _read_all(conn: Connection, out: list[Message]) -> None:
    while True:
        try:
            out.append(decode(conn.recv_bytes(), allowed=RUNNER_KINDS))
        except (EOFError, OSError):
            return


def count(messages: list[Message], kind: str) -> int:
    return sum(m["kind"] == kind for m in messages)


def steps_seen(messages: list[Message]) -> int:
    return sum(len(m["step"]) for m in list(messages) if m["kind"] == "steps")


def phase_totals(run: Run) -> dict[str, int]:
    totals = dict.fromkeys(PHASES, 0)
    for _, _, host in run.steps():
        assert host == sorted(host), host  # marks in order
        for index, name in enumerate(PHASES):
            totals[name] += host[index + 1] - host[index]
    return totals


PLAIN_LOOP = """
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Numbers(Dataset):
        def __len__(self):
            return 96

        def __getitem__(self, index):
            x = torch.full((16,), float(index % 7))
            return x, x.sum()


    def mark_when_it_leaves(worker_id):
        import atexit
        atexit.register(lambda: open(f"worker-{worker_id}-left", "w").close())


    if __name__ == "__main__":
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-4)
        loader = DataLoader(Numbers(), batch_size=16, num_workers=2,
                            multiprocessing_context="spawn", persistent_workers=True,
                            worker_init_fn=mark_when_it_leaves)
        for epoch in range(2):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
"""


def test_plain_loop_with_spawned_workers_yields_ordered_steps(tmp_path: Path) -> None:
    run = run_script(tmp_path, PLAIN_LOOP, "--epochs", "2")
    assert run.returncode == 0, run.stderr
    hello = run.messages[0]
    assert hello["kind"] == "hello" and hello["workload"] == "train.py"
    assert hello["script"] == {
        "path": str(tmp_path / "train.py"),
        "args": ["--epochs", "2"],
        "cwd": str(tmp_path),
    }
    assert hello["knobs"] == [] and hello["config"]["id"] == 0
    assert hello["timing"] == "host" and hello["instrumentation"] == "auto"
    steps = run.steps()
    assert [s[0] for s in steps] == list(range(12))  # 2 epochs of 6 batches
    assert all(samples == 16 for _, samples, _ in steps)
    totals = phase_totals(run)
    for name in ("data", "h2d", "forward", "backward", "optimizer"):
        assert totals[name] > 0, totals
    assert run.bye == {
        "kind": "bye",
        "reason": "script_exit",
        "code": 0,
        "steps": 12,
        "cuda_used": False,
        "instrumentation": "auto",
        "interrupted": False,
        "step_definition": "loader",
        "batches_per_step": 1,
        "optimizer_steps": 12,
        "backward_passes": 12,
    }
    # The persistent workers, still up when the script ended, were asked to leave and did
    # (their exit handlers ran): not left to torch's collection-time wait and SIGTERM.
    left = sorted(path.name for path in tmp_path.glob("worker-*-left"))
    assert left == ["worker-0-left", "worker-1-left"], left


def test_loop_without_dataloader_is_delimited_by_the_optimizer(tmp_path: Path) -> None:
    run = run_script(
        tmp_path,
        """
        import torch

        model = torch.nn.Linear(8, 1)
        opt = torch.optim.Adam(model.parameters())
        for _ in range(5):
            x = torch.randn(4, 8)
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            model(torch.randn(2, 8))  # after the last step: no step of its own
    """,
    )
    assert run.returncode == 0, run.stderr
    steps = run.steps()
    assert len(steps) == 5 and run.bye["steps"] == 5
    totals = phase_totals(run)
    assert totals["forward"] > 0 and totals["backward"] > 0 and totals["optimizer"] > 0


def test_eval_loop_steps_collapse_missing_boundaries(tmp_path: Path) -> None:
    run = run_script(
        tmp_path,
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        model = torch.nn.Linear(8, 2)
        loader = DataLoader(TensorDataset(torch.randn(40, 8)), batch_size=10)
        with torch.no_grad():
            for (x,) in loader:
                model(x).argmax(1).tolist()
    """,
    )
    assert run.returncode == 0, run.stderr
    steps = run.steps()
    assert len(steps) == 4 and all(samples == 10 for _, samples, _ in steps)
    for _, _, host in steps:
        assert host[3] > host[2]  # forward
        assert host[3] == host[4] == host[5]  # no backward, no optimizer


PROBE_SCRIPT = """
    import pathlib
    import torch
    import gpuwatch.probe as gw

    assert gw.active()
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    while True:
        workers = gw.knob("num_workers", default=0, choices=[0, 1, 2, 4])
        if workers not in seen:
            seen.append(workers)
            pathlib.Path("observed.txt").write_text(repr(seen))
        if workers == 2:
            raise SystemExit(0)
        with gw.step(samples=4):
            with gw.phase("data"):
                x = torch.randn(4, 8)
            with gw.phase("forward"):
                loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
"""


def test_probe_knob_change_reaches_the_script(tmp_path: Path) -> None:
    def drive(conn: Connection, messages: list[Message], proc: Any) -> None:
        wait_until(
            lambda: count(messages, "knobs") and steps_seen(messages) >= 3,
            60,
            "the knob and some steps",
        )
        conn.send_bytes(encode("set", values={"turbo": True}, request=1))
        conn.send_bytes(encode("set", values={"num_workers": 3}, request=2))
        conn.send_bytes(encode("set", values={"num_workers": 2}, request=3))

    run = run_script(tmp_path, PROBE_SCRIPT, drive=drive)
    assert run.returncode == 0, run.stderr
    knobs, model = run.kinds("knobs")  # the script's knob; then, at the model's first forward,
    assert knobs["values"] == {"num_workers": 0}  # the zero-code amp and channels_last
    assert [entry["name"] for entry in model["knobs"]] == ["num_workers", "amp", "channels_last"]
    (entry,) = knobs["knobs"]
    assert entry["name"] == "num_workers" and entry["type"] == "choice"
    assert entry["choices"] == [0, 1, 2, 4] and entry["default"] == 0
    refusals = {m["request"]: m["message"] for m in run.kinds("refused")}
    assert refusals == {
        1: "unknown knob 'turbo': this script declares num_workers, amp, channels_last",
        2: "num_workers must be one of 0, 1, 2, 4, got 3",
    }
    (config,) = run.kinds("config")
    assert config["id"] == 1 and config["request"] == 3
    assert config["changed"] == {"num_workers": 2} and config["values"]["num_workers"] == 2
    assert (tmp_path / "observed.txt").read_text() == "[0, 2]"
    steps = run.steps()
    assert steps and all(samples == 4 for _, samples, _ in steps)
    assert all(host[2] > host[1] for _, _, host in steps)  # the explicit data phase ended
    assert run.bye["instrumentation"] == "probe" and run.bye["reason"] == "script_exit"
    # Applied at the boundary before a step whose gw.knob() call had already run: that one step
    # still used the old value; at its next gw.knob() call the script saw 2 and ended.
    assert config["first_step"] == run.bye["steps"] - 1


ENDLESS = """
    import pathlib
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Forever(Dataset):
        def __len__(self):
            return 10**9

        def __getitem__(self, index):
            return torch.randn(8)


    if __name__ == "__main__":
        model = torch.nn.Linear(8, 1)
        loader = DataLoader(Forever(), batch_size=8, num_workers=1,
                            multiprocessing_context="spawn")
        try:
            for x in loader:
                model(x).sum().backward()
                with torch.no_grad():  # SGD by hand: torch.optim would import torch._dynamo
                    for p in model.parameters():
                        p -= 0.01 * p.grad
                        p.grad = None
        finally:
            pathlib.Path("finally.txt").write_text("ran")
"""


def test_stop_ends_an_endless_script_cleanly(tmp_path: Path) -> None:
    family: list[psutil.Process] = []

    def drive(conn: Connection, messages: list[Message], proc: Any) -> None:
        wait_until(lambda: steps_seen(messages) >= 5, 60, "some steps")
        runner = psutil.Process(proc.pid)
        family.extend([runner, *runner.children(recursive=True)])
        conn.send_bytes(encode("pause"))
        conn.send_bytes(encode("resume"))
        conn.send_bytes(encode("stop"))

    run = run_script(tmp_path, ENDLESS, drive=drive)
    assert run.returncode == 0, run.stderr
    assert run.bye["reason"] == "stopped" and run.bye["steps"] >= 5
    assert (tmp_path / "finally.txt").read_text() == "ran"
    assert len(family) >= 2  # the runner and its worker
    wait_until(
        lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in family),
        10,
        "every process of the run to end",
    )


def test_missing_script_is_script_not_found(tmp_path: Path) -> None:
    run = run_script(tmp_path, None, script="nope.py")
    assert run.returncode == 2
    assert [m["kind"] for m in run.messages] == ["error", "bye"]
    error = run.messages[0]
    assert error["type"] == "ScriptNotFound"
    assert error["message"] == "cannot read script 'nope.py': No such file or directory"
    assert run.bye["reason"] == "error" and run.bye["steps"] == 0
    assert "gpuwatch runner" not in run.stderr, "gpuwatch says it once, from the error message"


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    run = run_script(tmp_path, "x = 1\ndef broken(:\n    pass\n")
    assert run.returncode == 1
    (error,) = run.kinds("error")
    assert error["type"] == "SyntaxError" and error["line"] == 2
    assert "(train.py, line 2)" in error["message"]
    assert "def broken(:" in error["traceback"]
    assert not run.kinds("hello") and run.bye["code"] == 1


def test_raising_script_sends_its_own_traceback(tmp_path: Path) -> None:
    run = run_script(
        tmp_path,
        """
        def configure(lr):
            raise ValueError(f"bad learning rate {lr}")

        configure(-1)
    """,
    )
    assert run.returncode == 1
    (error,) = run.kinds("error")
    assert error["type"] == "ValueError" and error["message"] == "bad learning rate -1"
    trace = error["traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert "train.py" in trace and "in configure" in trace
    assert "gpuwatch" not in trace and "runpy" not in trace
    assert run.bye["reason"] == "error" and run.bye["code"] == 1
    assert "gpuwatch runner" not in run.stderr, "gpuwatch says it once, from the error message"


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("import sys\nsys.exit(3)\n", 3),
        ("import sys\nprint(sys.argv)\n", 0),
    ],
)
def test_exit_codes_and_scripts_without_steps(tmp_path: Path, source: str, code: int) -> None:
    run = run_script(tmp_path, source)
    assert run.returncode == code, run.stderr
    assert run.messages[0]["kind"] == "hello"
    assert run.bye == {
        "kind": "bye",
        "reason": "script_exit",
        "code": code,
        "steps": 0,
        "cuda_used": False,
        "instrumentation": "auto",
        "interrupted": False,
        "step_definition": "optimizer",
        "batches_per_step": 1,
        "optimizer_steps": 0,
        "backward_passes": 0,
    }
