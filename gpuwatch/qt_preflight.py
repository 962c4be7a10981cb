"""Before Qt starts: does the X11 (or Wayland) platform plugin find its system libraries?

On a Linux without them Qt aborts with "This application failed to start because no Qt
platform plugin could be initialized. Reinstalling the application may fix this problem",
names at most one missing library, and the next one only shows with ``QT_DEBUG_PLUGINS=1``.
This module asks the dynamic loader (``ldd`` on the plugin, which follows its ``RUNPATH`` to
Qt's own libraries) which shared libraries are missing, without importing Qt, and turns them
into one sentence with the packages to install for the distribution family (Debian/Ubuntu apt
names, Fedora dnf names; the libraries are those Qt lists for X11,
https://doc.qt.io/qt-6/linux-requirements.html).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Platform plugins that need no system windowing libraries: nothing to check.
SELF_CONTAINED = ("offscreen", "minimal", "minimalegl", "vnc", "linuxfb", "eglfs", "vkkhrdisplay")
#: The plugin file of each platform this checks.
PLUGIN_FILES = {"xcb": "libqxcb.so", "wayland": "libqwayland.so"}
LDD_TIMEOUT_S = 10.0

#: soname → (Debian/Ubuntu package, Fedora package).
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libXau.so.6": ("libxau6", "libXau"),
    "libXdmcp.so.6": ("libxdmcp6", "libXdmcp"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libGLX.so.0": ("libglx0", "libglvnd-glx"),
    "libGLdispatch.so.0": ("libglvnd0", "libglvnd"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libwayland-client.so.0": ("libwayland-client0", "libwayland-client"),
    "libwayland-cursor.so.0": ("libwayland-cursor0", "libwayland-cursor"),
    "libwayland-egl.so.1": ("libwayland-egl1", "libwayland-egl"),
}
#: Every Debian package the X11 plugin of a PySide6 wheel needs: the .deb's Depends.
DEB_DEPENDS = tuple(
    dict.fromkeys(
        apt for soname, (apt, _) in PACKAGES.items() if not soname.startswith("libwayland")
    )
)

#: Runs ``ldd`` on a file and returns its output (None: no ldd, or it failed).
LddFn = Callable[[Path], "str | None"]


@dataclass(frozen=True)
class Missing:
    """A platform plugin and the shared libraries the loader cannot find for it."""

    platform: str
    libraries: tuple[str, ...]


def run_ldd(path: Path) -> str | None:
    """``ldd PATH``'s output; None when there is no ldd or it fails."""
    ldd = shutil.which("ldd")
    if ldd is None:
        return None
    try:
        done = subprocess.run(
            [ldd, str(path)], capture_output=True, text=True, timeout=LDD_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def not_found(ldd_output: str) -> tuple[str, ...]:
    """The sonames ``ldd`` reports as ``=> not found``, each once, in its order."""
    names = []
    for line in ldd_output.splitlines():
        name, arrow, where = line.strip().partition("=>")
        if arrow and where.strip() == "not found":
            names.append(name.strip())
    return tuple(dict.fromkeys(names))


def plugins_dir() -> Path | None:
    """The installed PySide6's ``Qt/plugins/platforms``, found without importing Qt."""
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        spec = None
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        roots.append(Path(frozen_root) / "PySide6")
    for root in roots:
        folder = root / "Qt" / "plugins" / "platforms"
        if folder.is_dir():
            return folder
    return None


def platforms_to_check(env: Mapping[str, str]) -> tuple[str, ...]:
    """The platform plugins Qt would try, in its order: ``QT_QPA_PLATFORM`` (``a;b``
    falls back; ``xcb:options``), else Wayland in a Wayland session, then X11. Empty when a
    plugin without system libraries is asked for (offscreen, minimal, ...)."""
    chosen = env.get("QT_QPA_PLATFORM", "").strip()
    if chosen:
        names = [part.split(":", 1)[0].strip() for part in chosen.split(";") if part.strip()]
        if any(name not in PLUGIN_FILES for name in names):
            return ()
        return tuple(names)
    wayland = env.get("WAYLAND_DISPLAY") or env.get("XDG_SESSION_TYPE") == "wayland"
    return ("wayland", "xcb") if wayland else ("xcb",)


def find_missing(
    folder: Path, platforms: tuple[str, ...], ldd: LddFn = run_ldd
) -> list[Missing] | None:
    """What each plugin lacks; None when one of them has everything (Qt will use it) or
    nothing can be told (no plugin file, no ldd)."""
    missing: list[Missing] = []
    for platform in platforms:
        plugin = folder / PLUGIN_FILES[platform]
        output = ldd(plugin) if plugin.is_file() else None
        if output is None:
            return None
        libraries = not_found(output)
        if not libraries:
            return None
        missing.append(Missing(platform, libraries))
    return missing or None


def distribution_family(os_release: str) -> str | None:
    """``debian`` or ``fedora`` from the text of /etc/os-release (ID and ID_LIKE)."""
    ids: list[str] = []
    for line in os_release.splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("ID", "ID_LIKE"):
            ids += value.strip().strip("\"'").lower().split()
    for family, members in (
        ("debian", ("debian", "ubuntu")),
        ("fedora", ("fedora", "rhel", "centos")),
    ):
        if any(i in members for i in ids):
            return family
    return None


def install_hint(libraries: tuple[str, ...], family: str | None) -> str:
    """How to install the packages that hold ``libraries``, for ``family`` (None: both)."""
    apt = " ".join(dict.fromkeys(PACKAGES[n][0] for n in libraries if n in PACKAGES))
    dnf = " ".join(dict.fromkeys(PACKAGES[n][1] for n in libraries if n in PACKAGES))
    hints = {
        "debian": f"sudo apt install {apt} (Debian/Ubuntu)" if apt else "",
        "fedora": f"sudo dnf install {dnf} (Fedora)" if dnf else "",
    }
    chosen = [hints[family]] if family in hints else list(hints.values())
    return " or ".join(h for h in chosen if h)


def describe(missing: list[Missing], family: str | None) -> str:
    """One sentence: which libraries the window lacks and the packages that hold them."""
    names = {"xcb": "X11", "wayland": "Wayland"}
    parts = [f"{names[m.platform]} needs {', '.join(m.libraries)}" for m in missing]
    libraries = tuple(dict.fromkeys(n for m in missing for n in m.libraries))
    hint = install_hint(libraries, family)
    text = (
        f"the window cannot open: Qt's platform plugin lacks system libraries ({'; '.join(parts)})"
    )
    return f"{text}; install them with: {hint}" if hint else f"{text}: install them"


def _read_os_release() -> str:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return ""


def missing_libraries_reason(
    env: Mapping[str, str] | None = None,
    *,
    platform: str = sys.platform,
    folder: Path | None = None,
    ldd: LddFn = run_ldd,
    os_release: str | None = None,
) -> str | None:
    """Why Qt's platform plugin will not load here (one sentence), or None when it will (or
    it cannot be told, or the platform needs no system libraries, or this is not Linux)."""
    env = os.environ if env is None else env
    if not platform.startswith("linux"):
        return None
    platforms = platforms_to_check(env)
    if not platforms:
        return None
    folder = folder or plugins_dir()
    if folder is None:
        return None
    missing = find_missing(folder, platforms, ldd)
    if not missing:
        return None
    release = _read_os_release() if os_release is None else os_release
    return describe(missing, distribution_family(release))
