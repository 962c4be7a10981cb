"""``run_window``: the timed demo saves a real screenshot and reports failures by exit code."""

from __future__ import annotations

from PySide6.QtGui import QImage

from gpuwatch.qt.app import run_window
from gpuwatch.qt.window_options import WindowOptions


def options(tmp_path, **overrides) -> WindowOptions:
    values = {
        "workload": "vision",
        "device": "cpu",
        "python": None,
        "autostart": False,
        "demo_seconds": 0.5,
        "screenshot": tmp_path / "shots" / "window.png",
    }
    values.update(overrides)
    return WindowOptions(**values)


def test_demo_saves_a_screenshot_and_exits_0(qapp, tmp_path, capsys):
    opts = options(tmp_path)
    assert run_window(opts) == 0
    image = QImage(str(opts.screenshot))
    assert not image.isNull()
    assert (image.width(), image.height()) == (1280, 800)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_failed_run_exits_1_with_one_line(qapp, tmp_path, capsys):
    opts = options(
        tmp_path,
        autostart=True,
        demo_seconds=1.0,
        screenshot=None,
        python=str(tmp_path / "no-such-python"),
    )
    assert run_window(opts) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpuwatch: the run failed: ")
    assert err.count("\n") == 1


def test_unsaveable_screenshot_exits_1(qapp, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert run_window(options(tmp_path, screenshot=blocker / "window.png")) == 1
    assert capsys.readouterr().err.startswith("gpuwatch: cannot create ")
