"""The first-launch check: which system libraries Qt's platform plugin lacks, named as the
packages to install, before Qt would abort with "Reinstalling the application may fix this
problem"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwatch import qt_preflight
from gpuwatch.qt_preflight import (
    DEB_DEPENDS,
    PACKAGES,
    Missing,
    distribution_family,
    find_missing,
    missing_libraries_reason,
    not_found,
    platforms_to_check,
)

#: ``ldd`` on a PySide6 xcb plugin on a Debian without two of the xcb-util libraries.
LDD_XCB = """\
\tlinux-vdso.so.1 (0x00007ffd5f3e2000)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/plugins/platforms/../../lib/libQt6XcbQpa.so.6 (0x1)
\tlibxcb-cursor.so.0 => /lib/x86_64-linux-gnu/libxcb-cursor.so.0 (0x2)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x3)
\tlibxcb-icccm.so.4 => not found
\t/lib64/ld-linux-x86-64.so.2 (0x4)
"""
LDD_ALL_FOUND = "\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x3)\n"
LDD_WAYLAND = "\tlibwayland-cursor.so.0 => not found\n"
DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12"\nID=debian\n'
UBUNTU = "ID=ubuntu\nID_LIKE=debian\n"
FEDORA = 'ID=fedora\nVERSION_ID="40"\n'


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    """A platforms folder holding (empty) xcb and wayland plugin files."""
    folder = tmp_path / "platforms"
    folder.mkdir()
    for name in ("libqxcb.so", "libqwayland.so"):
        (folder / name).write_bytes(b"\x7fELF")
    return folder


def fake_ldd(outputs: dict[str, str | None]):
    """An ``ldd`` that answers per plugin file name and records what it was asked."""
    asked: list[str] = []

    def ldd(path: Path) -> str | None:
        asked.append(path.name)
        return outputs[path.name]

    ldd.asked = asked  # type: ignore[attr-defined]
    return ldd


def test_ldd_output_gives_each_missing_library_once():
    assert not_found(LDD_XCB) == ("libxcb-icccm.so.4", "libxcb-keysyms.so.1")
    assert not_found(LDD_ALL_FOUND) == ()


@pytest.mark.parametrize(
    ("os_release", "install"),
    [
        (DEBIAN, "sudo apt install libxcb-icccm4 libxcb-keysyms1 (Debian/Ubuntu)"),
        (UBUNTU, "sudo apt install libxcb-icccm4 libxcb-keysyms1 (Debian/Ubuntu)"),
        (FEDORA, "sudo dnf install xcb-util-wm xcb-util-keysyms (Fedora)"),
    ],
)
def test_one_sentence_names_the_packages_of_the_family(plugins, os_release, install):
    ldd = fake_ldd({"libqxcb.so": LDD_XCB})
    reason = missing_libraries_reason(
        {"DISPLAY": ":0"}, platform="linux", folder=plugins, ldd=ldd, os_release=os_release
    )
    assert reason == (
        "the window cannot open: Qt's platform plugin lacks system libraries (X11 needs "
        f"libxcb-icccm.so.4, libxcb-keysyms.so.1); install them with: {install}"
    )
    assert "\n" not in reason
    assert ldd.asked == ["libqxcb.so"]


def test_an_unknown_distribution_gets_both_families():
    reason = qt_preflight.describe([Missing("xcb", ("libxcb-cursor.so.0",))], None)
    assert reason.endswith(
        "sudo apt install libxcb-cursor0 (Debian/Ubuntu) or sudo dnf install xcb-util-cursor "
        "(Fedora)"
    )


def test_qt_falling_back_to_x11_is_no_error(plugins):
    """In a Wayland session Qt tries Wayland, then X11: one that loads is enough."""
    env = {"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}
    assert platforms_to_check(env) == ("wayland", "xcb")
    both_ok = fake_ldd({"libqwayland.so": LDD_WAYLAND, "libqxcb.so": LDD_ALL_FOUND})
    assert find_missing(plugins, ("wayland", "xcb"), both_ok) is None
    neither = fake_ldd({"libqwayland.so": LDD_WAYLAND, "libqxcb.so": LDD_XCB})
    reason = missing_libraries_reason(
        env, platform="linux", folder=plugins, ldd=neither, os_release=DEBIAN
    )
    assert reason is not None
    assert "Wayland needs libwayland-cursor.so.0; X11 needs libxcb-icccm.so.4" in reason
    assert "libwayland-cursor0 libxcb-icccm4 libxcb-keysyms1" in reason


@pytest.mark.parametrize("chosen", ["offscreen", "minimal", "vnc", "xcb;offscreen"])
def test_self_contained_platforms_are_not_checked(plugins, chosen):
    ldd = fake_ldd({"libqxcb.so": LDD_XCB})
    env = {"QT_QPA_PLATFORM": chosen, "DISPLAY": ":0"}
    assert missing_libraries_reason(env, platform="linux", folder=plugins, ldd=ldd) is None
    assert ldd.asked == []


def test_an_explicit_platform_with_options_is_checked(plugins):
    assert platforms_to_check({"QT_QPA_PLATFORM": "xcb:nomitshm"}) == ("xcb",)
    ldd = fake_ldd({"libqxcb.so": LDD_XCB})
    env = {"QT_QPA_PLATFORM": "xcb"}
    assert missing_libraries_reason(env, platform="linux", folder=plugins, ldd=ldd, os_release="")


@pytest.mark.parametrize("platform", ["win32", "darwin"])
def test_other_systems_are_not_checked(plugins, platform):
    ldd = fake_ldd({"libqxcb.so": LDD_XCB})
    assert missing_libraries_reason({}, platform=platform, folder=plugins, ldd=ldd) is None
    assert ldd.asked == []


def test_what_cannot_be_told_is_no_error(plugins, tmp_path):
    """No ldd, or no plugin file: Qt will say what it says; gpuwatch does not guess."""
    no_ldd = fake_ldd({"libqxcb.so": None})
    assert missing_libraries_reason({}, platform="linux", folder=plugins, ldd=no_ldd) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    ldd = fake_ldd({})
    assert missing_libraries_reason({}, platform="linux", folder=empty, ldd=ldd) is None
    assert ldd.asked == []


def test_distribution_families():
    assert distribution_family(DEBIAN) == "debian"
    assert distribution_family(UBUNTU) == "debian"
    assert distribution_family('ID="rocky"\nID_LIKE="rhel centos fedora"\n') == "fedora"
    assert distribution_family("ID=arch\n") is None


def test_the_deb_depends_on_the_x11_packages_it_names():
    """The .deb's Depends come from the same table (packaging/linux/build.sh reads it)."""
    script = (Path(__file__).resolve().parents[1] / "packaging/linux/build.sh").read_text()
    assert "DEB_DEPENDS" in script and "Depends: libc6 (>= $glibc), $qt_depends" in script
    for soname in ("libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"):
        assert PACKAGES[soname][0] in DEB_DEPENDS
    assert not any(name.startswith("libwayland") for name in DEB_DEPENDS)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux plugins")
def test_the_real_plugin_needs_only_libraries_the_table_knows():
    """Every X11/xkb library the installed PySide6's xcb plugin loads has its packages in the
    table, so a missing one is always named."""
    folder = qt_preflight.plugins_dir()
    assert folder is not None and (folder / "libqxcb.so").is_file()
    output = qt_preflight.run_ldd(folder / "libqxcb.so")
    if output is None:
        pytest.skip("no ldd here")
    names = {line.split("=>")[0].strip() for line in output.splitlines() if "=>" in line}
    windowing = {n for n in names if n.startswith(("libxcb", "libX", "libxkb", "libGL", "libEGL"))}
    assert windowing, output
    assert windowing <= set(PACKAGES), windowing - set(PACKAGES)


def test_the_real_check_passes_offscreen_without_running_anything():
    """This test run's own offscreen setup: the real plugins folder, no ldd started."""
    asked: list[Path] = []

    def spy(path: Path) -> str | None:
        asked.append(path)
        return qt_preflight.run_ldd(path)

    assert os.environ.get("QT_QPA_PLATFORM") == "offscreen"
    assert missing_libraries_reason(ldd=spy) is None
    assert missing_libraries_reason() is None
    assert asked == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 variables")
def test_gpuwatch_prints_the_packages_instead_of_a_qt_abort(tmp_path):
    """The command itself: an ``ldd`` that reports libxcb-icccm.so.4 missing makes
    ``gpuwatch`` print one line naming the package and exit 1, before Qt is loaded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ldd = bin_dir / "ldd"
    ldd.write_text("#!/bin/sh\nprintf '\\tlibxcb-icccm.so.4 => not found\\n'\n")
    ldd.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=":99", PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}")
    done = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "--no-start"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("gpuwatch: the window cannot open: ")
    assert "libxcb-icccm.so.4" in done.stderr
    assert "libxcb-icccm4" in done.stderr or "xcb-util-wm" in done.stderr
    assert done.stderr.count("\n") == 1
    assert "Reinstalling" not in done.stderr
