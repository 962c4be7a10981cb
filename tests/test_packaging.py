"""The installer scripts' logic that runs in seconds: the spec keeps torch out and ships the
runner's source, the per-user install/uninstall of the tarball, the menu entry, the NSIS
script's syntax. (The real build is packaging/smoke.sh: minutes, not a unit test.)"""

from __future__ import annotations

import ast
import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"
SCRIPTS = [
    PACKAGING / "linux" / "build.sh",
    PACKAGING / "linux" / "install.sh",
    PACKAGING / "smoke.sh",
]
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="shell scripts for Linux")


def spec_list(name: str) -> list:
    """A list assigned at the top of the spec (evaluated on its own: no PyInstaller needed)."""
    tree = ast.parse((PACKAGING / "pyinstaller" / "gpuwatch.spec").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not in the spec")


def test_spec_excludes_torch_and_the_runner_from_the_frozen_gui():
    excludes = spec_list("EXCLUDES")
    for heavy in ("torch", "torchvision", "triton", "gpuwatch.runner"):
        assert heavy in excludes


def test_spec_ships_every_runner_module_as_source():
    """The spec takes runner/**.py by glob; the launcher expects them under runner-src."""
    from gpuwatch.core.run import launcher

    text = (PACKAGING / "pyinstaller" / "gpuwatch.spec").read_text()
    assert f'"{launcher.FROZEN_RUNNER_SOURCE}/gpuwatch"' in text
    assert '(PKG / "runner").rglob("*.py")' in text
    assert '"interpreter_survey.py"' in text


@posix_only
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_parse(script):
    assert os.access(script, os.X_OK), f"{script} is not executable"
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_desktop_entry_has_what_menus_need():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(PACKAGING / "linux" / "gpuwatch.desktop")
    desk = entry["Desktop Entry"]
    assert desk["Type"] == "Application" and desk["Icon"] == "gpuwatch"
    assert desk["Exec"] == "@EXEC@" and desk["Terminal"] == "false"


@posix_only
def test_per_user_install_and_uninstall_leave_only_user_data(tmp_path):
    """install.sh from an unpacked tarball (a fake app inside), then its uninstall.sh."""
    unpacked = tmp_path / "gpuwatch-0.1.0"
    app = unpacked / "gpuwatch"
    app.mkdir(parents=True)
    (app / "gpuwatch").write_text("#!/bin/sh\necho gpuwatch 0.1.0\n")
    (app / "gpuwatch").chmod(0o755)
    (app / "_internal").mkdir()
    icons = unpacked / "share" / "icons" / "hicolor"
    for size in ("48x48", "256x256"):
        (icons / size / "apps").mkdir(parents=True)
        shutil.copy(
            ROOT / "assets" / "png" / f"gpuwatch-{size.split('x')[0]}.png",
            icons / size / "apps" / "gpuwatch.png",
        )
    shutil.copy(PACKAGING / "linux" / "gpuwatch.desktop", unpacked / "share")
    shutil.copy(PACKAGING / "linux" / "install.sh", unpacked)
    home = tmp_path / "home"
    other_icon = home / ".local" / "share" / "icons" / "hicolor" / "48x48" / "apps" / "other.png"
    user_data = [
        home / ".config" / "gpuwatch" / "gpuwatch.ini",
        home / "Documents" / "gpuwatch" / "run.gpuwatch",
        other_icon,
    ]
    for path in user_data:
        path.parent.mkdir(parents=True)
        path.write_text("mine")
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}

    subprocess.run(["sh", str(unpacked / "install.sh")], env=env, check=True, capture_output=True)

    local = home / ".local"
    desktop = (local / "share" / "applications" / "gpuwatch.desktop").read_text()
    assert f'Exec="{local}/opt/gpuwatch/gpuwatch"' in desktop
    assert (local / "share" / "icons" / "hicolor" / "256x256" / "apps" / "gpuwatch.png").exists()
    launcher = local / "bin" / "gpuwatch"
    assert (
        subprocess.run([str(launcher)], capture_output=True, text=True, check=True).stdout
        == "gpuwatch 0.1.0\n"
    )

    subprocess.run(
        ["sh", str(local / "opt" / "gpuwatch" / "uninstall.sh")],
        env=env,
        check=True,
        capture_output=True,
    )

    left = sorted(p for p in home.rglob("*") if p.is_file() or p.is_symlink())
    assert left == sorted(user_data)
    # No empty folders of the install either; one holding another app's icon stays.
    icons_left = sorted(p for p in (local / "share" / "icons").rglob("*"))
    assert icons_left == [
        other_icon.parents[2],
        other_icon.parents[1],
        other_icon.parent,
        other_icon,
    ]
    assert not (local / "opt").exists()


@pytest.mark.skipif(shutil.which("makensis") is None, reason="makensis (NSIS) not installed")
def test_nsis_script_compiles(tmp_path):
    dist = tmp_path / "dist" / "gpuwatch"
    (dist / "_internal").mkdir(parents=True)
    for name in ("gpuwatch.exe", "gpuwatch-cli.exe", "_internal/base_library.zip"):
        (dist / name).write_bytes(b"stand-in")
    out = tmp_path / "gpuwatch-test-setup.exe"
    done = subprocess.run(
        [
            "makensis",
            "-V2",
            f"-DDIST={dist}",
            f"-DOUTFILE={out}",
            str(PACKAGING / "windows" / "gpuwatch.nsi"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert out.stat().st_size > 0
