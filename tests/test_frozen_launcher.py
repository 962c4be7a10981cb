"""The launcher inside a frozen build: never itself, the shipped runner source, a clean env.

``sys.frozen``/``sys._MEIPASS`` are set by monkeypatch the way PyInstaller's bootloader sets
them; the bundle is a temporary folder shaped like the real one.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from gpuwatch.core.run import launcher


@pytest.fixture
def frozen(tmp_path, monkeypatch):
    """A fake one-folder bundle with the runner's source where the build puts it."""
    bundle = tmp_path / "gpuwatch" / "_internal"
    source = bundle / launcher.FROZEN_RUNNER_SOURCE / "gpuwatch"
    source.mkdir(parents=True)
    for name in ("__init__.py", "protocol.py", "probe.py"):
        shutil.copy2(launcher.PACKAGE_DIR / name, source / name)
    shutil.copytree(
        launcher.PACKAGE_DIR / "runner",
        source / "runner",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)
    return bundle


def test_frozen_app_never_launches_itself(frozen):
    with pytest.raises(launcher.NoInterpreterError, match="Choose Python"):
        launcher.default_python()


def test_frozen_runner_pythonpath_is_the_shipped_source(frozen, tmp_path):
    path = launcher.runner_pythonpath(sys.executable, tmp_path / "private")
    assert path == str(frozen / launcher.FROZEN_RUNNER_SOURCE)
    assert not (tmp_path / "private").exists()  # no copy made: the build ships it


def test_clean_env_restores_ld_library_path_and_drops_bundle_paths(frozen):
    inside = str(frozen)
    environ = {
        "LD_LIBRARY_PATH": f"{inside}{os.pathsep}/opt/cuda/lib64",
        "LD_LIBRARY_PATH_ORIG": "/opt/cuda/lib64",
        "PATH": os.pathsep.join([inside, str(frozen / "PySide6"), "/usr/bin"]),
        "QT_PLUGIN_PATH": str(frozen / "PySide6" / "plugins"),
        "_PYI_APPLICATION_HOME_DIR": inside,
        "_MEIPASS2": inside,
        "PYTHONHOME": inside,
        "HOME": "/home/u",
        "URL": "http://example.org:8080/x",
    }
    env = launcher.clean_env(environ)
    assert env["LD_LIBRARY_PATH"] == "/opt/cuda/lib64"
    assert env["PATH"] == "/usr/bin"
    for gone in (
        "QT_PLUGIN_PATH",
        "_PYI_APPLICATION_HOME_DIR",
        "_MEIPASS2",
        "PYTHONHOME",
        "LD_LIBRARY_PATH_ORIG",
    ):
        assert gone not in env
    assert env["HOME"] == "/home/u" and env["URL"] == "http://example.org:8080/x"


def test_clean_env_removes_ld_library_path_the_user_never_had(frozen):
    env = launcher.clean_env({"LD_LIBRARY_PATH": str(frozen)})
    assert "LD_LIBRARY_PATH" not in env


def test_source_install_env_is_unchanged(monkeypatch):
    monkeypatch.delattr(sys, "frozen", raising=False)
    environ = {"LD_LIBRARY_PATH": "/x", "LD_LIBRARY_PATH_ORIG": "/y", "PATH": "/usr/bin"}
    assert launcher.clean_env(environ) == environ


def test_frozen_runner_env_is_the_users_and_boot_runs_the_shipped_source(
    frozen, tmp_path, monkeypatch
):
    """The environment and command a frozen Session gives the runner, used for real: the venv's
    Python runs ``gpuwatch.runner`` from the bundle's source folder (``boot_code``), without
    the bundle's libraries on LD_LIBRARY_PATH and with nothing of ours on PYTHONPATH."""
    import json
    import subprocess

    from test_script_environment import REPORTING_MAIN

    monkeypatch.setenv("LD_LIBRARY_PATH", str(frozen))
    monkeypatch.setenv("LD_LIBRARY_PATH_ORIG", "/opt/user-lib")
    monkeypatch.setenv("PYTHONPATH", "/opt/user-python")
    root = launcher.runner_pythonpath(sys.executable, tmp_path)
    assert root == str(frozen / launcher.FROZEN_RUNNER_SOURCE)
    env = launcher.runner_env()
    assert env["LD_LIBRARY_PATH"] == "/opt/user-lib"
    assert env["PYTHONPATH"] == "/opt/user-python"
    cli = Path(root) / "gpuwatch" / "runner" / "cli.py"
    cli.write_text(cli.read_text(encoding="utf-8") + REPORTING_MAIN, encoding="utf-8")
    command = launcher.script_command(
        sys.executable, str(tmp_path / "no-such.sock"), "train.py", [], device="cpu", root=root
    )
    out = subprocess.run(
        command,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["code"] == 3, out.stderr  # no GUI to connect to
    assert Path(seen["cli"]) == cli
    assert seen["path"][-1] == root and seen["path"].count(root) == 1
    assert seen["path"][1] == "/opt/user-python"  # the user's PYTHONPATH, first as usual


def test_frozen_doctor_without_python_is_one_line_not_a_traceback(frozen, capsys):
    from gpuwatch.commands.doctor import run_doctor

    assert run_doctor(None) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [out[0]] and "--python PATH" in out[0]
