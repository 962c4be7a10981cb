"""``WindowOptions``: the CLI builds one typed value for the window (no Qt, no window opened)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from gpuwatch import cli
from gpuwatch.core.run.session import LaunchSpec
from gpuwatch.qt.window_options import WindowOptions

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def opened(monkeypatch) -> list[WindowOptions]:
    """What the CLI would open the window with (the window itself is replaced)."""
    seen: list[WindowOptions] = []

    def run_window(options: WindowOptions) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(cli, "_window_kit", lambda: (WindowOptions, run_window))
    return seen


def test_plain_gpuwatch_passes_its_options(opened, tmp_path):
    shot = tmp_path / "w.png"
    argv = ["--workload", "mlp", "--device", "cpu", "--no-start", "--tour", "--theme", "dark"]
    argv += ["--window-size", "800x600", "--demo-seconds", "2", "--screenshot", str(shot)]
    assert cli.main(argv) == 0
    assert opened == [
        WindowOptions(
            workload="mlp",
            device="cpu",
            autostart=False,
            tour=True,
            demo_seconds=2.0,
            screenshot=shot,
            theme="dark",
            window_size=(800, 600),
        )
    ]
    assert opened[0].script_spec() is None


def test_run_gives_the_script_its_arguments_and_folder(opened, tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--seconds", "3", "--presentation", "--record", str(tmp_path / "r.gpuwatch")]
    assert cli.main([*argv, str(script), "--lr", "1"]) == 0
    [options] = opened
    assert (options.script, options.script_args, options.cwd) == (
        str(script),
        ("--lr", "1"),
        str(tmp_path),
    )
    assert options.autostart and options.presentation and options.seconds == 3.0
    assert options.record == tmp_path / "r.gpuwatch" and options.recording is None
    assert options.script_spec() == LaunchSpec(
        script=str(script), script_args=("--lr", "1"), cwd=str(tmp_path), seconds=3.0
    )


def test_a_bad_script_opens_no_window(opened, tmp_path, capsys):
    assert cli.main(["run", str(tmp_path / "missing.py")]) == cli.EXIT_USAGE
    assert opened == []
    assert "missing.py" in capsys.readouterr().err


def test_options_are_frozen():
    options = WindowOptions(python="/usr/bin/python3")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.python = None  # type: ignore[misc]
    assert dataclasses.replace(options, python=None).python is None


def test_the_options_module_imports_no_qt():
    """The CLI builds the options; their module must not need Qt to exist."""
    tree = ast.parse((ROOT / "gpuwatch" / "qt" / "window_options.py").read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert imported, "the module's imports were found"
    assert not {m for m in imported if m and m.split(".")[0] in ("PySide6", "pyqtgraph")}
    assert not {m for m in imported if m and m.startswith("gpuwatch.qt")}
