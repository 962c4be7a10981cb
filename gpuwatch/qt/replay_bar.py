"""Play/pause, position slider and speed for a ``ReplaySession``.

The bar moves the replay's clock: while playing, the window's redraw tick calls ``advance``
(``session.tick()``, then the slider), so the frame draws the position just reached and the
window keeps one timer.
The slider seeks when released (not on every pixel of a drag): a seek backwards rebuilds the
stores from the start, which takes up to a second for an hour-long recording.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSlider, QStyle, QToolButton, QWidget

from gpuwatch.core.files.replay import SPEEDS, ReplaySession

#: The slider's largest value: QSlider holds a 32-bit int, which in milliseconds covers only
#: 24.8 days; a longer recording gets several milliseconds per slider unit.
SLIDER_MAX = 2**30


def slider_unit_ms(duration_s: float) -> int:
    """Milliseconds per slider unit: 1 (exact) unless the run is too long for a 32-bit slider."""
    return max(1, math.ceil(duration_s * 1000 / SLIDER_MAX))


def format_time(seconds: float) -> str:
    """``12.3 s`` under a minute, else ``m:ss`` or ``h:mm:ss``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def speed_text(factor: float) -> str:
    """A replay speed factor as the speed box shows it, e.g. ``2×``."""
    return f"{factor:g}×"


class ReplayBar(QWidget):
    """The controls under the toolbar in replay mode."""

    #: The play position moved (by playing or seeking); the window may redraw at once.
    position_changed = Signal()

    def __init__(self, session: ReplaySession) -> None:
        super().__init__()
        self.session = session
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 0, 4, 0)
        self.play_button = QToolButton()
        self.play_button.setToolTip("Play or pause the recording")
        self.play_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.play_button.clicked.connect(self.toggle)
        layout.addWidget(self.play_button)
        self.position_label = QLabel()
        layout.addWidget(self.position_label)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.unit_ms = slider_unit_ms(session.duration_s)
        self.slider.setRange(0, max(1, self._to_slider(session.duration_s)))
        self.slider.setTracking(False)  # seek on release: a drag would rebuild on every pixel
        self.slider.setToolTip("Drag to any moment of the run; the views show it as it was then")
        self.slider.sliderMoved.connect(self._show_drag)
        self.slider.valueChanged.connect(self._seek_to_slider)
        layout.addWidget(self.slider, 1)
        self.duration_label = QLabel(format_time(session.duration_s))
        layout.addWidget(self.duration_label)
        layout.addWidget(QLabel(" Speed "))
        self.speed_combo = QComboBox()
        for factor in SPEEDS:
            self.speed_combo.addItem(speed_text(factor), factor)
        self.speed_combo.setCurrentIndex(SPEEDS.index(1.0))
        self.speed_combo.setToolTip("Replay speed: recorded seconds per second")
        self.speed_combo.currentIndexChanged.connect(self._on_speed)
        layout.addWidget(self.speed_combo)
        self.sync()

    def toggle(self) -> None:
        if self.session.playing:
            self.session.pause()
        else:
            self.session.play()
        self.sync()
        self.position_changed.emit()

    def seek(self, seconds: float) -> None:
        self.session.seek(seconds)
        self.sync()
        self.position_changed.emit()

    def sync(self) -> None:
        """Show the session's position, play state and speed."""
        session = self.session
        playing = session.playing
        pixmaps = QStyle.StandardPixmap
        icon = pixmaps.SP_MediaPause if playing else pixmaps.SP_MediaPlay
        self.play_button.setIcon(self.style().standardIcon(icon))
        self.play_button.setText("Pause" if playing else "Play")
        if not self.slider.isSliderDown():
            self.slider.blockSignals(True)
            self.slider.setValue(self._to_slider(session.position_s))
            self.slider.blockSignals(False)
            self.position_label.setText(format_time(session.position_s))

    def advance(self) -> None:
        """While playing: move the position by the clock (once per frame of the window)."""
        if not self.session.playing:
            return
        if self.session.tick():
            self.position_changed.emit()
        self.sync()

    def _to_slider(self, seconds: float) -> int:
        return min(SLIDER_MAX, round(seconds * 1000 / self.unit_ms))

    def _from_slider(self, value: int) -> float:
        return value * self.unit_ms / 1000

    def _show_drag(self, value: int) -> None:
        self.position_label.setText(format_time(self._from_slider(value)))

    def _seek_to_slider(self, value: int) -> None:
        self.seek(self._from_slider(value))

    def _on_speed(self, index: int) -> None:
        self.session.speed = float(self.speed_combo.itemData(index))
