"""Is there a screen for the window? Checked before Qt is loaded.

Without one, Qt aborts the process with a plugin error; users should instead get one line
that says what to do.
"""

from __future__ import annotations

import os
import sys

NO_DISPLAY = (
    "no display found (DISPLAY and WAYLAND_DISPLAY are unset): start gpuwatch from "
    "a desktop session, or run it headless with QT_QPA_PLATFORM=offscreen and "
    "--demo-seconds N --screenshot PNG"
)


def missing_display_reason() -> str | None:
    """Why the window cannot open here, or None when it can (as far as can be told)."""
    if os.environ.get("QT_QPA_PLATFORM"):
        return None  # the user chose a platform plugin (offscreen, vnc, ...)
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return NO_DISPLAY
    return None


def describe_display() -> str:
    """One line for ``gpuwatch doctor``."""
    platform_env = os.environ.get("QT_QPA_PLATFORM")
    if platform_env:
        return f"QT_QPA_PLATFORM={platform_env}"
    reason = missing_display_reason()
    if reason:
        return reason
    found = [v for v in ("WAYLAND_DISPLAY", "DISPLAY") if os.environ.get(v)]
    return ", ".join(f"{v}={os.environ[v]}" for v in found) or "desktop session"
