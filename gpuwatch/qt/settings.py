"""What the window remembers between sessions, in one INI file (QSettings).

The file sits in ``GPUWATCH_SETTINGS_DIR`` when set (tests set it for every test, so they
never read or write the user's real settings), else in the platform's config folder. Knobs
are remembered but never applied silently: a run starts from the workload's defaults and
Settings → "Apply last session's knobs" offers them (a stale knob set would make a run slow
without the user knowing why).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import platformdirs
from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import QDockWidget, QMainWindow, QStatusBar

from gpuwatch.qt.run_session import RunSession

#: Environment variable that overrides the settings folder.
SETTINGS_DIR_ENV = "GPUWATCH_SETTINGS_DIR"
SETTINGS_NAME = "gpuwatch.ini"
THEMES = ("system", "light", "dark")
#: How many scripts File → "Watch a training script…" remembers.
RECENT_SCRIPTS = 8


@dataclass(frozen=True)
class RecentScript:
    """A script (or, with ``module``, a module run as ``python -m`` does, ``script`` then
    empty) watched from the window, with what it ran with (the dialog's fields)."""

    script: str
    args: tuple[str, ...] = ()
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    module: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "script": self.script,
            "args": list(self.args),
            "cwd": self.cwd,
            "env": [list(pair) for pair in self.env],
            **({"module": self.module} if self.module else {}),
        }

    def exists(self) -> bool:
        """Whether it can still be run from here: the script file is there; a module's
        folder is (the module itself only the training Python can find)."""
        if self.module:
            return self.cwd is None or Path(self.cwd).is_dir()
        return Path(self.script).is_file()

    @classmethod
    def from_json(cls, value: object) -> RecentScript | None:
        """None for anything that is not a well-formed entry (a hand-edited file)."""
        if not isinstance(value, dict) or not isinstance(value.get("script"), str):
            return None
        args, cwd, env = value.get("args") or [], value.get("cwd"), value.get("env") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            return None
        if not isinstance(env, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in env
        ):
            return None
        module = value.get("module")
        if module is not None and not (isinstance(module, str) and module):
            return None
        if module is None and not value["script"]:
            return None
        return cls(
            value["script"],
            tuple(args),
            cwd if isinstance(cwd, str) else None,
            tuple((k, v) for k, v in env),
            module,
        )


def settings_dir() -> Path:
    """The folder of the settings file (not created here)."""
    override = os.environ.get(SETTINGS_DIR_ENV)
    if override:
        return Path(override)
    return Path(platformdirs.user_config_dir("gpuwatch", appauthor=False))


class Settings:
    """Typed access to the settings file; every getter tolerates a missing or bad value."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.path = Path(directory or settings_dir()) / SETTINGS_NAME
        self._q = QSettings(str(self.path), QSettings.Format.IniFormat)
        #: After ``reset`` nothing is saved again in this session (the next start is fresh).
        self.was_reset = False

    # ---- Plain values -------------------------------------------------------------------

    def _text(self, key: str) -> str | None:
        value = self._q.value(key)
        return value if isinstance(value, str) and value else None

    def _set_text(self, key: str, value: str | None) -> None:
        if self.was_reset:
            return
        if value:
            self._q.setValue(key, value)
        else:
            self._q.remove(key)
        self._q.sync()

    @property
    def theme(self) -> str:
        """``system`` | ``light`` | ``dark`` (``system`` when unset or unknown)."""
        value = self._text("view/theme")
        return value if value in THEMES else "system"

    @theme.setter
    def theme(self, value: str) -> None:
        if value not in THEMES:
            raise ValueError(f"theme must be one of {', '.join(THEMES)}, not {value!r}")
        self._set_text("view/theme", value)

    @property
    def workload(self) -> str | None:
        return self._text("run/workload")

    @workload.setter
    def workload(self, value: str | None) -> None:
        self._set_text("run/workload", value)

    @property
    def device(self) -> str | None:
        return self._text("run/device")

    @device.setter
    def device(self, value: str | None) -> None:
        self._set_text("run/device", value)

    @property
    def python(self) -> str | None:
        """The interpreter chosen with ``--python``; None if unset or no longer there."""
        value = self._text("run/python")
        return value if value and Path(value).exists() else None

    @python.setter
    def python(self, value: str | None) -> None:
        self._set_text("run/python", value)

    @property
    def knobs(self) -> dict[str, Any]:
        """Knob values the last run ended with that differ from the workload's defaults."""
        text = self._text("run/knobs")
        try:
            value = json.loads(text) if text else {}
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @knobs.setter
    def knobs(self, values: dict[str, Any]) -> None:
        self._set_text("run/knobs", json.dumps(values, sort_keys=True) if values else None)

    @property
    def recent_scripts(self) -> list[RecentScript]:
        """Scripts watched from the window, newest first (at most ``RECENT_SCRIPTS``)."""
        text = self._text("run/recent_scripts")
        try:
            values = json.loads(text) if text else []
        except ValueError:
            return []
        if not isinstance(values, list):
            return []
        entries = (RecentScript.from_json(v) for v in values)
        return [e for e in entries if e is not None][:RECENT_SCRIPTS]

    @recent_scripts.setter
    def recent_scripts(self, entries: list[RecentScript]) -> None:
        text = json.dumps([e.to_json() for e in entries[:RECENT_SCRIPTS]]) if entries else None
        self._set_text("run/recent_scripts", text)

    def remember_script(self, entry: RecentScript) -> None:
        """``entry`` first; an older entry of the same script gives way to it."""
        same = (entry.script, entry.module)
        older = [e for e in self.recent_scripts if (e.script, e.module) != same]
        self.recent_scripts = [entry, *older]

    def present_scripts(self) -> tuple[list[RecentScript], list[RecentScript]]:
        """The recent scripts that still exist, and those that no longer do (dropped from
        the list here, so each is reported once)."""
        entries = self.recent_scripts
        present = [e for e in entries if e.exists()]
        gone = [e for e in entries if not e.exists()]
        if gone:
            self.recent_scripts = present
        return present, gone

    # ---- Window -------------------------------------------------------------------------

    def save_window(self, window: QMainWindow) -> None:
        """Geometry and dock/toolbar layout (Qt's own opaque blobs)."""
        if self.was_reset:
            return
        self._q.setValue("window/geometry", window.saveGeometry())
        self._q.setValue("window/state", window.saveState())
        self._q.sync()

    def restore_window(self, window: QMainWindow) -> bool:
        """Put the window back where it was; False if nothing (valid) was saved."""
        geometry = self._q.value("window/geometry")
        state = self._q.value("window/state")
        restored = isinstance(geometry, QByteArray) and window.restoreGeometry(geometry)
        if isinstance(state, QByteArray):
            restored = window.restoreState(state) and restored
        return bool(restored)

    def show_docks_new_to_the_layout(self, window: QMainWindow, names: tuple[str, ...]) -> None:
        """Restoring a layout saved before a dock existed (the Advisor) hides that dock: show
        the docks in ``names`` that the saved layout does not know, so an upgrade does not
        hide them; a dock the user closed stays closed."""
        state = self._q.value("window/state")
        if not isinstance(state, QByteArray):
            return
        saved = bytes(state.data())  # Qt stores each dock's object name as UTF-16
        for dock in window.findChildren(QDockWidget):
            name = dock.objectName()
            if name in names and name.encode("utf-16-be") not in saved:
                dock.show()

    def has_window(self) -> bool:
        return self._q.contains("window/geometry")

    # ---- Reset --------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything (the next start looks like a first start)."""
        self._q.clear()
        self._q.sync()
        self.was_reset = True

    def keys(self) -> list[str]:
        return list(self._q.allKeys())


# ---- The window's use of the settings ---------------------------------------------------


class KnobsHost(Protocol):
    """What offering the remembered knobs needs of a window: its run and its status bar."""

    @property
    def session(self) -> RunSession: ...

    def statusBar(self) -> QStatusBar: ...


def changed_knobs(session: RunSession) -> dict[str, Any]:
    """The session's current knob values that differ from their schema defaults."""
    defaults = {k.get("name"): k.get("default") for k in session.knobs}
    return {
        name: value
        for name, value in session.config_values().items()
        if name in defaults and value != defaults[name]
    }


def save_on_close(
    settings: Settings,
    window: QMainWindow,
    session: RunSession,
    workload: str | None,
    device: str | None,
) -> None:
    """On close: layout, workload (None in script mode: not remembered), device and the
    knobs the run ended with; nothing after a reset (the next start is fresh)."""
    if settings.was_reset:
        return
    settings.save_window(window)
    if workload is not None:
        settings.workload = workload
    settings.device = device or None
    if session.knobs:
        settings.knobs = changed_knobs(session)


def apply_last_knobs(window: KnobsHost, settings: Settings) -> str:
    """Offer the remembered knobs to the running session; returns what happened."""
    session = window.session
    known = {k.get("name") for k in session.knobs}
    values = {name: value for name, value in settings.knobs.items() if name in known}
    if not settings.knobs:
        text = "no knobs remembered from a last session"
    elif not known:
        text = "start a run first: knobs apply to a running workload"
    elif not values:
        text = "this workload has none of the remembered knobs"
    else:
        session.set_knobs(values, label="last session")
        text = "applied last session's knobs: " + ", ".join(f"{k}={v}" for k, v in values.items())
    window.statusBar().showMessage(text, 15_000)
    return text
