"""``gpuwatch run -m MODULE ARGS``: a package written here, run as ``python -m`` runs it.

Each headless run is compared with a plain ``python -m`` of the same module in the same folder:
argv, ``__name__``, ``sys.path`` (gpuwatch's one trailing entry aside) and exit code must match,
and the steps must be recorded.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.cli import main
from gpuwatch.commands.nsight_command import nsight_command
from gpuwatch.core.run.session import LaunchSpec
from gpuwatch.runner.script_environment import ModuleNotFound, module_file

RUN_TIMEOUT_S = 150
REPO = Path(__file__).parents[1]

#: A tiny training loop over a DataLoader (8 batches, the steps) with a spawned worker, which
#: imports the module again through the ``sys.path`` it was given; it writes what it saw to the
#: file named by its first argument and exits with its last argument. The update is SGD by
#: hand: making a ``torch.optim`` optimizer imports ``torch._dynamo`` (seconds in each run, at
#: start and at exit), and nothing here is about the optimizer.
TRAIN = """
import json, sys
import torch
from torch.utils.data import DataLoader, TensorDataset

def main(name):
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    model = torch.nn.Linear(4, 1)
    loader = DataLoader(data, batch_size=8, num_workers=1, multiprocessing_context="spawn")
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None
    with open(sys.argv[1], "w") as f:
        json.dump({"argv": sys.argv, "path": sys.path, "name": name}, f)
    sys.exit(int(sys.argv[-1]))

if __name__ == "__main__":
    main(__name__)
"""

#: The package's ``__main__``: ``python -m pkg`` runs it.
MAIN = """
from pkg.train import main

if __name__ == "__main__":
    main(__name__)
"""


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """``work/pkg``: ``__init__`` (leaves a mark when imported), ``__main__`` and ``train``."""
    package = tmp_path / "work" / "pkg"
    package.mkdir(parents=True)
    files = {
        "__init__.py": "open('init-ran', 'w').close()\n",
        "__main__.py": MAIN,
        "train.py": TRAIN,
    }
    for name, text in files.items():
        (package / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return package.parent


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return {**env, "PYTHONPATH": str(REPO)}


def _python(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=_env(),
    )


def _seen(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _steps(stdout: str) -> int:
    found = re.search(r"^steps: ([\d,]+)", stdout, re.MULTILINE)
    assert found, stdout
    return int(found.group(1).replace(",", ""))


def _same_but_one_trailing_entry(plain: list[str], watched: list[str]) -> None:
    if watched == plain:
        return
    assert watched[:-1] == plain, (plain, watched)
    assert (Path(watched[-1]) / "gpuwatch" / "probe.py").is_file(), watched[-1]


def test_a_submodule_runs_as_python_m_runs_it_and_its_steps_are_recorded(work: Path) -> None:
    from gpuwatch.core.files.recording_reader import open_recording

    plain = _python(["-m", "pkg.train", "plain.json", "--lr", "3", "7"], cwd=work)
    assert plain.returncode == 7, plain.stderr
    record = work / "run.gpuwatch"
    watched = _python(
        [
            *("-m", "gpuwatch", "run", "--headless", "--device", "cpu", "--record", str(record)),
            *("-m", "pkg.train", "watched.json", "--lr", "3", "7"),
        ],
        cwd=work,
    )

    assert watched.returncode == 7, watched.stdout + watched.stderr
    assert "pkg.train exited with code 7 after 8 steps" in watched.stdout, watched.stdout
    assert _steps(watched.stdout) == 8
    before, after = _seen(work / "plain.json"), _seen(work / "watched.json")
    assert after["argv"] == [str(work / "pkg" / "train.py"), "watched.json", "--lr", "3", "7"]
    assert after["name"] == before["name"] == "__main__"
    assert after["path"][0] == before["path"][0] == str(work), "sys.path[0] is the cwd"
    _same_but_one_trailing_entry(before["path"], after["path"])

    recording = open_recording(record)
    assert len(recording.steps) == 8
    assert recording.hello is not None and recording.hello.workload == "pkg.train"
    assert recording.hello.script is not None
    assert recording.hello.script["module"] == "pkg.train"


def test_a_package_runs_its_main_module(work: Path) -> None:
    done = _python(
        ["-m", "gpuwatch", "run", "--headless", "--device", "cpu", "-m", "pkg", "seen.json", "0"],
        cwd=work,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "pkg finished after 8 steps" in done.stdout, done.stdout
    seen = _seen(work / "seen.json")
    assert seen["argv"] == [str(work / "pkg" / "__main__.py"), "seen.json", "0"]
    assert seen["name"] == "__main__"


def test_a_missing_module_is_one_sentence_and_exit_1_before_any_of_it_runs(work: Path) -> None:
    done = _python(["-m", "gpuwatch", "run", "--headless", "-m", "pkg.nope", "x"], cwd=work)

    assert done.returncode == 1, done.stdout + done.stderr  # as plain python -m exits
    says = f"no module named pkg.nope on sys.path (working directory {work})"
    assert f"pkg.nope could not be run: {says}" in done.stdout, done.stdout
    assert not (work / "init-ran").exists(), "the package was looked up, not imported"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--headless", "-m"], "-m needs a module name"),
        (["--headless", "-m", "2pkg.train"], "'2pkg.train' is not a module name"),
        (["--headless"], "give a SCRIPT to run, or -m MODULE"),
        (["--headless", "-m", "pkg", "--", "train.py"], "give a SCRIPT or -m MODULE, not both"),
    ],
    ids=["no-name", "bad-name", "nothing", "both"],
)
def test_usage_errors_are_one_line_and_exit_2(capsys, argv: list[str], says: str) -> None:
    assert main(["run", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], captured.err
    assert captured.out == ""


def test_module_file_finds_without_importing(work: Path, monkeypatch) -> None:
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    (work / "pkg" / "data").mkdir()
    (work / "pkg" / "data" / "__init__.py").write_text("", encoding="utf-8")

    assert module_file("pkg") == str(work / "pkg" / "__main__.py")
    assert module_file("pkg.train") == str(work / "pkg" / "train.py")
    with pytest.raises(ModuleNotFound, match=re.escape("pkg.data is a package without a __main__")):
        module_file("pkg.data")
    with pytest.raises(ModuleNotFound, match=re.escape("no module named pkg.train.x")):
        module_file("pkg.train.x")
    assert "pkg" not in sys.modules and not (work / "init-ran").exists()


def test_a_launch_spec_is_a_script_or_a_module() -> None:
    spec = LaunchSpec(module="pkg.train", script_args=("--lr", "3"))
    assert spec.name == "pkg.train" and spec.user_code
    with pytest.raises(ValueError, match="not both"):
        LaunchSpec(script="train.py", module="pkg.train")
    command = nsight_command(spec, ["gpuwatch"], windows=False)
    assert command.endswith("run --headless --device auto -m pkg.train --lr 3"), command


def test_the_window_runs_a_module_as_gpuwatch_run_m_asks(work: Path, show_window, qtbot) -> None:
    """``gpuwatch run -m pkg ARGS`` without ``--headless``: the window's Start runs the module
    (named by it in the toolbar, the title and the scoreboard's run) in the folder it was
    asked from."""
    from gpuwatch.core.run.session import Session, SessionState
    from gpuwatch.qt.main_window import MainWindow
    from gpuwatch.qt.window_options import WindowOptions

    options = WindowOptions(
        device="cpu", module="pkg", script_args=("seen.json", "0"), cwd=str(work)
    )
    spec = options.script_spec()
    assert spec is not None and spec.module == "pkg" and spec.script is None
    session = Session(sample_coarse=False)
    win = MainWindow(session, options)
    qtbot.addWidget(win)
    win.show()
    try:
        assert win.windowTitle() == "gpuwatch — pkg"
        win.start_run()
        qtbot.waitUntil(
            lambda: session.state is SessionState.FINISHED, timeout=RUN_TIMEOUT_S * 1000
        )
        assert session.steps.count == 8, session.error
        seen = _seen(work / "seen.json")
        assert seen["argv"] == [str(work / "pkg" / "__main__.py"), "seen.json", "0"]
        assert seen["path"][0] == str(work)
        assert "<b>pkg</b>" in win.run_bar.script_label.text()
        assert "-m pkg seen.json 0" in win.run_bar.script_label.toolTip()
    finally:
        win.close()
