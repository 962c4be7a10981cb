"""Zero-code DataLoader knobs through a real runner (``python -m gpuwatch.runner --script``, CPU):
``num_workers`` 0→2 by a ``set`` as the panel and the advisor's Apply send it, and ``--set`` from
the start. The script's dataset records which process served each index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from gpuwatch import cli
from gpuwatch.protocol import AUTHKEY_ENV, RUNNER_KINDS, decode, encode
from gpuwatch.runner.script_knobs import PRESET_ENV

REPO = Path(__file__).resolve().parents[1]
KEY = bytes(range(32))
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="AF_UNIX listener")
Message = dict[str, Any]

#: Two epochs over 64 samples in batches of 4, no workers, each sample ~5 ms of the dataset's
#: time; the first epoch waits at its 4th batch until the test says "go" (the change is sent
#: while it waits, so it cannot land before).
SCRIPT = """
    import os, pathlib, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Served(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, index):
            time.sleep(0.005)
            with open("served.txt", "a") as out:
                out.write(f"{index} {os.getpid()}\\n")
            return torch.full((8,), float(index))

    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    torch.backends.cudnn.benchmark = True
    loader = DataLoader(Served(), batch_size=4, shuffle=True)
    for epoch in range(2):
        for step, x in enumerate(loader):
            if epoch == 0 and step == 3:
                pathlib.Path("waiting").touch()
                while not pathlib.Path("go").exists():
                    time.sleep(0.01)
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
        with open("served.txt", "a") as out:
            out.write("epoch\\n")
"""


def line_of(text: str) -> int:
    """The line of ``SCRIPT`` (as written to train.py) that contains ``text``."""
    lines = textwrap.dedent(SCRIPT).splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def run_script(
    tmp_path: Path,
    drive: Callable[[Connection, list[Message]], None] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[list[Message], int, str]:
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    messages: list[Message] = []
    with tempfile.TemporaryDirectory(prefix="gw-") as private:
        address = os.path.join(private, "link.sock")
        listener = Listener(address, family="AF_UNIX", authkey=KEY)
        full_env = {**os.environ, "PYTHONPATH": str(REPO), AUTHKEY_ENV: KEY.hex(), **(env or {})}
        command = [sys.executable, "-m", "gpuwatch.runner", "--connect", address]
        proc = subprocess.Popen(
            [*command, "--device", "cpu", "--script", "train.py"],
            cwd=tmp_path,
            env=full_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            conn = listener.accept()
            reader = threading.Thread(target=_read_all, args=(conn, messages), daemon=True)
            reader.start()
            if drive is not None:
                drive(conn, messages)
            proc.wait(timeout=120)
            reader.join(timeout=10)
            assert proc.stderr is not None
            stderr = proc.stderr.read().decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            listener.close()
    return messages, proc.returncode, stderr


def _read_all(conn: Connection, out: list[Message]) -> None:
    while True:
        try:
            out.append(decode(conn.recv_bytes(), allowed=RUNNER_KINDS))
        except (EOFError, OSError):
            return


def kinds(messages: list[Message], kind: str) -> list[Message]:
    return [m for m in list(messages) if m["kind"] == kind]


def served(tmp_path: Path) -> list[list[tuple[int, int]]]:
    """Per epoch: (index, pid of the process that served it), in the order served."""
    epochs: list[list[tuple[int, int]]] = [[]]
    for line in (tmp_path / "served.txt").read_text().splitlines():
        if line == "epoch":
            epochs.append([])
        else:
            index, pid = line.split()
            epochs[-1].append((int(index), int(pid)))
    return epochs[:-1]


def test_num_workers_0_to_2_mid_epoch_every_index_once_then_served_by_workers(
    tmp_path: Path,
) -> None:
    def drive(conn: Connection, messages: list[Message]) -> None:
        wait_until(
            lambda: any("num_workers" in m["values"] for m in kinds(messages, "knobs")),
            90,
            "the loader's knobs",
        )
        wait_until((tmp_path / "waiting").exists, 90, "the script at its 4th batch")
        conn.send_bytes(encode("set", values={"num_workers": 2}, request=7))
        (tmp_path / "go").touch()

    messages, code, stderr = run_script(tmp_path, drive)
    assert code == 0, stderr
    (hello,) = kinds(messages, "hello")
    # the script's own flag, then its loader (first iteration), then its model (first forward)
    owned, announced, model = kinds(messages, "knobs")
    (benchmark,) = [entry for entry in owned["knobs"] if entry["name"] == "cudnn_benchmark"]
    assert owned["values"]["cudnn_benchmark"] is True and not benchmark["enabled"]
    site = f"train.py:{line_of('cudnn.benchmark = True')}"
    assert benchmark["reason"] == f"set by the script at {site}: the script owns this flag"
    assert announced["values"]["num_workers"] == 0
    labels = {entry["name"]: entry["label"] for entry in announced["knobs"]}
    assert labels["num_workers"] == f"DataLoader workers (train.py:{line_of('= DataLoader(')})"
    assert [entry["name"] for entry in model["knobs"]][-2:] == ["amp", "channels_last"]
    (config,) = kinds(messages, "config")
    assert config["request"] == 7 and config["changed"] == {"num_workers": 2}
    assert config["rebuilt"] == ["loader"] and config["values"]["num_workers"] == 2
    epochs = served(tmp_path)
    assert len(epochs) == 2
    for epoch in epochs:
        assert sorted(index for index, _ in epoch) == list(range(64))  # each exactly once
    # The set reaches the next step boundary after "go" (the runner's control thread takes it
    # up while the script trains on), normally in the first epoch.
    runner = hello["pid"]
    by_runner = [pid == runner for epoch in epochs for _, pid in epoch]
    switched = by_runner.index(False)
    assert switched >= 4 * 4 and switched % 64 != 0  # after the 4th batch, mid-epoch
    assert not any(by_runner[switched:])  # from then on, worker processes served every batch


def test_set_from_the_command_line_applies_from_the_start(tmp_path: Path) -> None:
    (tmp_path / "go").touch()
    preset = cli.script_presets(["num_workers=2", "prefetch_factor=3", "amp=bf16"])
    assert json.loads(preset) == {"num_workers": "2", "prefetch_factor": "3", "amp": "bf16"}
    messages, code, stderr = run_script(tmp_path, env={PRESET_ENV: preset})
    assert code == 0, stderr
    (hello,) = kinds(messages, "hello")
    announced = kinds(messages, "knobs")[-1]
    assert announced["values"]["num_workers"] == 2
    assert announced["values"]["prefetch_factor"] == 3
    assert announced["values"]["amp"] == "bf16"
    (workers,) = [entry for entry in announced["knobs"] if entry["name"] == "num_workers"]
    assert workers["default"] == 0  # the script's own value stays the default
    assert not kinds(messages, "config")
    epochs = served(tmp_path)
    assert len(epochs) == 2
    for epoch in epochs:  # two workers each epoch (not persistent), never the runner itself
        workers = {pid for _, pid in epoch}
        assert hello["pid"] not in workers and len(workers) == 2
    for epoch in epochs:
        assert sorted(index for index, _ in epoch) == list(range(64))


def test_run_takes_set_and_hands_it_to_the_runner_environment() -> None:
    args = cli.build_parser().parse_args(
        ["run", "--set", "num_workers=4", "--set", "pin_memory=on", "train.py", "--epochs", "1"]
    )
    assert args.run_set == ["num_workers=4", "pin_memory=on"]
    assert args.script == "train.py" and args.script_args == ["--epochs", "1"]
    assert cli.SCRIPT_SET_ENV == PRESET_ENV
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["run", "--set", "num_workers", "train.py"])


def test_gpuwatch_run_headless_set_reaches_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    (tmp_path / "go").touch()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(PRESET_ENV, raising=False)  # and restored after: run sets it
    code = cli.main(["run", "--headless", "--device", "cpu", "--set", "num_workers=2", "train.py"])
    assert code == 0
    epochs = served(tmp_path)
    assert len(epochs) == 2
    serving = {pid for epoch in epochs for _, pid in epoch}
    assert os.getpid() not in serving and len(serving) == 4  # two workers per epoch
