"""The command line as a user meets it: clear one-line errors, a light --version."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuwatch import __version__


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_version_imports_neither_torch_nor_qt() -> None:
    code = (
        "import sys; from gpuwatch.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit as e:\n    code = e.code\n"
        "heavy = [m for m in ('torch', 'PySide6', 'pyqtgraph', 'numpy') if m in sys.modules]\n"
        "print('HEAVY', heavy, code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert f"gpuwatch {__version__}" in done.stdout
    assert "HEAVY [] 0" in done.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--device", "gpu7"], "is not a device"),
        (["--demo-seconds", "soon"], "is not a number of seconds"),
        (["--workload", "nope"], "invalid choice"),
        (["--python", "/no/such/python"], "is not an executable file"),
        (["--screenshot", "x.png"], "--screenshot needs --demo-seconds"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_give_one_clear_line(args: list[str], needle: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert needle in done.stderr
    assert "Traceback" not in done.stderr


def test_doctor_reports_torch_cpu_and_nvml_reason() -> None:
    done = _run("doctor", timeout=180)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "torch" in out and "Traceback" not in out + done.stderr
    assert "NVML" in out
    # This machine has no NVIDIA driver: doctor must say so, not print a number.
    if "cuda:0" not in out:
        assert "not available" in out
        assert "n/a" in out


def test_doctor_with_an_interpreter_without_torch(tmp_path) -> None:
    """A Python without torch is named as unusable, with what to do, and exit 1."""
    import venv

    venv.create(tmp_path / "env", with_pip=False)
    python = tmp_path / "env" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    done = _run("doctor", "--python", str(python), timeout=180)
    assert done.returncode == 1
    assert "install torch" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11/Wayland variables")
def test_no_display_gives_one_line_instead_of_a_qt_abort() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")
    }
    done = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "--no-start"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("gpuwatch: no display found")
    assert done.stderr.count("\n") == 1
