"""The live window on a user's unmodified script (``examples/input_bound.py``: a map-style
dataset, no workers), one real runner on the CPU, driven as a user would: its DataLoader's knobs
appear in the Knobs panel named after the line that creates the loader; ``num_workers`` 0 → 2
through the panel's own field and Apply gives config 1 and a scoreboard row for it; back to 0
the same way, and then the advisor's card offers ``num_workers=2`` for the script's loader and
its own Apply button applies it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.window_options import WindowOptions

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "input_bound.py"
#: Torch import and the first steps take ~5 s here; allow for a loaded CI machine.
RUN_TIMEOUT_MS = 120_000


def loader_line() -> int:
    lines = SCRIPT.read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if "loader = DataLoader(" in line)


@pytest.fixture
def window(qtbot: Any) -> Any:
    options = WindowOptions(script=str(SCRIPT), script_args=("--epochs", "1000"), device="cpu")
    win = MainWindow(Session(), options)
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.close()


def apply_in_panel(window: Any, qtbot: Any, workers: int) -> None:
    """Put ``workers`` in the panel's field (a draft) and press the row's Apply button."""
    row = window.knob_panel.rows["num_workers"]
    row.editor.setValue(workers)
    qtbot.waitUntil(row.apply_button.isEnabled, timeout=5_000)
    qtbot.mouseClick(row.apply_button, Qt.MouseButton.LeftButton)
    assert window.knob_panel.pending, "Apply sent no request"


def wait_for_row(window: Any, qtbot: Any, config_id: int, workers: int) -> None:
    """Config ``config_id`` (num_workers = ``workers``) applied, and its scoreboard row steady."""
    session, panel = window.session, window.knob_panel

    def applied_and_measured() -> None:
        assert session.state is SessionState.RUNNING, session.error
        change = session.config_changes()[-1]
        assert change.id == config_id and change.changed == {"num_workers": workers}
        assert not panel.pending and session.config_values()["num_workers"] == workers
        rows = {row.config_id: row for row in window.scoreboard.model.rows}
        assert config_id in rows and rows[config_id].steady

    qtbot.waitUntil(applied_and_measured, timeout=RUN_TIMEOUT_MS)
    assert panel.rows["num_workers"].editor.value() == workers
    assert panel.rows["num_workers"].cost.text().startswith("loader rebuilt")


def test_a_scripts_loader_workers_change_from_the_panel_and_the_advisor(window, qtbot):
    session, panel = window.session, window.knob_panel
    window.start_action.trigger()

    def knobs_shown_and_baseline_steady() -> None:
        assert session.state is SessionState.RUNNING, session.error
        assert "num_workers" in panel.rows
        rows = window.scoreboard.model.rows
        assert rows and rows[0].steady

    qtbot.waitUntil(knobs_shown_and_baseline_steady, timeout=RUN_TIMEOUT_MS)
    row = panel.rows["num_workers"]
    assert row.label.text() == f"DataLoader workers (input_bound.py:{loader_line()})"
    assert row.editor.isEnabled() and row.editor.value() == 0

    apply_in_panel(window, qtbot, 2)
    wait_for_row(window, qtbot, 1, 2)
    apply_in_panel(window, qtbot, 0)
    wait_for_row(window, qtbot, 2, 0)

    def advisor_offers_two_workers() -> Any:
        advisor = window.advisor
        for card in advisor.cards[: len(advisor.findings)]:  # the cards in use
            finding = card.finding
            if finding is not None and finding.suggestion == {"num_workers": 2}:
                assert card.apply_button.isEnabled()
                return card
        raise AssertionError(f"no finding offers num_workers=2 yet: {advisor.findings}")

    qtbot.waitUntil(lambda: advisor_offers_two_workers() is not None, timeout=RUN_TIMEOUT_MS)
    card = advisor_offers_two_workers()
    assert card.apply_button.text().endswith("num_workers=2")
    qtbot.mouseClick(card.apply_button, Qt.MouseButton.LeftButton)
    wait_for_row(window, qtbot, 3, 2)
    rows = window.scoreboard.model.rows
    assert [r.settings["num_workers"] for r in rows] == [0, 2, 0, 2]
