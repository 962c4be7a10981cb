"""The application icon, loaded from the package data (works from a checkout and installed).

The sources live in ``assets/`` at the repository root (the SVG and the installer sizes);
``assets/render_icons.py`` copies them into ``gpuwatch/qt/assets/``, which ships with the
package (``[tool.setuptools.package-data]``).
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from PySide6.QtGui import QIcon

if TYPE_CHECKING:  # 3.11+ location; only the annotation needs it
    from importlib.resources.abc import Traversable

SIZES = (16, 32, 48, 64, 128, 256, 512)


def icon_files() -> list[Traversable]:
    """The SVG and every PNG size, as shipped in the package."""
    folder = resources.files("gpuwatch.qt") / "assets"
    return [folder / "gpuwatch.svg", *(folder / f"gpuwatch-{n}.png" for n in SIZES)]


def app_icon() -> QIcon:
    """gpuwatch's icon at every size (an empty icon, never an error, if files are missing)."""
    icon = QIcon()
    for file in icon_files()[1:]:
        if file.is_file():
            with resources.as_file(file) as path:
                icon.addFile(str(path))
    return icon
