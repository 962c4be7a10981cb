"""Save a widget as a PNG: the window's File menu and the ``--screenshot`` option share it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QWidget


def save_screenshot(widget: QWidget, path: Path) -> str | None:
    """Save ``widget.grab()`` as PNG; returns an error sentence, or None on success."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create {path.parent}: {exc.strerror or exc}"
    pixmap = widget.grab()
    if pixmap.isNull() or not pixmap.save(str(path), "PNG"):
        return f"cannot save the screenshot to {path}"
    return None
