"""Render ``assets/gpuwatch.svg`` to the PNG sizes installers and the window use.

Run from the repository root after editing the SVG, and commit the outputs:

    QT_QPA_PLATFORM=offscreen .venv/bin/python assets/render_icons.py

Writes ``assets/png/gpuwatch-{N}.png`` and copies the SVG and the PNGs into
``gpuwatch/qt/assets/`` (the package data the running app loads its icon from).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

SIZES = (16, 32, 48, 64, 128, 256, 512)
HERE = Path(__file__).resolve().parent
PACKAGE_ASSETS = HERE.parent / "gpuwatch" / "qt" / "assets"


def render(svg: Path, size: int, out: Path) -> None:
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: {svg} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    if not image.save(str(out), "PNG"):
        raise SystemExit(f"render_icons: cannot write {out}")


def main() -> int:
    _app = QGuiApplication(sys.argv[:1])
    svg = HERE / "gpuwatch.svg"
    PACKAGE_ASSETS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(svg, PACKAGE_ASSETS / svg.name)
    for size in SIZES:
        out = HERE / "png" / f"gpuwatch-{size}.png"
        out.parent.mkdir(exist_ok=True)
        render(svg, size, out)
        shutil.copyfile(out, PACKAGE_ASSETS / out.name)
    print(f"wrote {len(SIZES)} PNGs to {HERE / 'png'} and {PACKAGE_ASSETS}")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
