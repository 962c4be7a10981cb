"""The window with a real runner on the CPU, driven as a user would: click Start, watch, Stop."""

from __future__ import annotations

import numpy as np
import psutil
import pytest
from PySide6.QtCore import Qt

from gpuwatch.core.run import launcher
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt.utilization_view import series_point_count

#: Torch import plus dataset build take ~5 s here; allow for a loaded CI machine.
RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def window(show_window):
    return show_window(Session())


def test_start_both_panels_fill_grab_is_not_blank_stop_ends_tree(window, qtbot):
    session = window.session
    assert window.start_action.text() == "Start"
    window.start_action.trigger()

    def both_panels_have_data() -> None:
        assert session.state is SessionState.RUNNING, session.error
        assert window.timeline.device_bars.count() >= 5
        assert window.timeline.phase_bars["data"].count() >= 5
        assert series_point_count(window.utilization.coarse_curve) > 0
        assert series_point_count(window.utilization.busy_curve) > 0

    qtbot.waitUntil(both_panels_have_data, timeout=RUN_TIMEOUT_MS)
    assert window.start_action.text() == "Stop"
    qtbot.waitUntil(lambda: window.headline.samples.value.text() not in ("", "—"), timeout=10_000)
    assert float(window.headline.samples.value.text().replace(",", "")) > 0

    image = window.grab().toImage()
    pixels = np.frombuffer(image.constBits(), np.uint8)[: image.sizeInBytes()]
    assert pixels.std() > 10, "the window grab is blank"

    tree = launcher.tree(session.pid)
    window.start_action.trigger()  # Stop
    qtbot.waitUntil(lambda: session.state is SessionState.FINISHED, timeout=30_000)
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive
    qtbot.waitUntil(lambda: window.start_action.text() == "Start", timeout=5_000)


def test_more_workers_from_the_knob_panel_cut_input_wait(window, qtbot):
    """Set num_workers 0 → 2 in the panel: a second scoreboard row, with less input wait."""
    session = window.session
    window.start_action.trigger()
    panel, board = window.knob_panel, window.scoreboard

    def baseline_steady() -> None:
        assert session.state is SessionState.RUNNING, session.error
        assert "num_workers" in panel.rows
        rows = board.model.rows
        assert rows and rows[0].input_wait_share is not None

    qtbot.waitUntil(baseline_steady, timeout=RUN_TIMEOUT_MS)
    spin = panel.rows["num_workers"].editor
    assert spin.isEnabled() and spin.value() == 0
    window.activateWindow()
    qtbot.waitActive(window)
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus)
    qtbot.keyClick(spin, Qt.Key.Key_Up)
    qtbot.keyClick(spin, Qt.Key.Key_Up)
    qtbot.keyClick(spin, Qt.Key.Key_Return)
    assert panel.pending, "Enter sent no request"

    def second_row_steady() -> None:
        assert session.state is SessionState.RUNNING, session.error
        rows = board.model.rows
        assert len(rows) == 2
        assert rows[1].changed == {"num_workers": 2}
        assert rows[1].input_wait_share is not None

    qtbot.waitUntil(second_row_steady, timeout=RUN_TIMEOUT_MS)
    first, second = board.model.rows
    assert second.input_wait_share < first.input_wait_share, (first, second)
    assert session.config_values()["num_workers"] == 2
    assert panel.rows["num_workers"].cost.text().startswith("loader rebuilt")
    assert len(window.timeline_markers.lines) == 2
