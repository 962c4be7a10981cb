"""Settings round-trip in an isolated folder; reset forgets; knobs are offered, not applied."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

from PySide6.QtWidgets import QMainWindow

from gpuwatch.core.run.app_log import log_dir
from gpuwatch.core.run.session import Session
from gpuwatch.qt.settings import Settings, apply_last_knobs, changed_knobs, settings_dir


def test_settings_and_logs_live_under_the_test_tmp_folder():
    tmp = Path(tempfile.gettempdir()).resolve()
    for folder in (settings_dir(), log_dir(), Settings().path.parent):
        assert folder.resolve().is_relative_to(tmp), folder
    assert os.environ["GPUWATCH_SETTINGS_DIR"] == str(settings_dir())


def test_values_round_trip_and_reset_forgets_them(tmp_path):
    settings = Settings(tmp_path)
    assert settings.theme == "system" and settings.workload is None and settings.knobs == {}
    settings.theme = "dark"
    settings.workload = "gpt"
    settings.device = "cpu"
    settings.python = str(Path(os.sys.executable))
    settings.knobs = {"num_workers": 2, "amp": "bf16"}
    again = Settings(tmp_path)
    assert (again.theme, again.workload, again.device) == ("dark", "gpt", "cpu")
    assert again.python == os.sys.executable
    assert again.knobs == {"num_workers": 2, "amp": "bf16"}
    again.reset()
    fresh = Settings(tmp_path)
    assert fresh.keys() == [] and fresh.theme == "system" and fresh.knobs == {}
    again.theme = "light"  # after a reset nothing is saved again in that session
    assert Settings(tmp_path).keys() == []


def test_bad_or_stale_values_read_as_unset(tmp_path):
    (tmp_path / "gpuwatch.ini").write_text(
        "[view]\ntheme=purple\n[run]\nknobs=not json\npython=/no/such/python\n"
    )
    settings = Settings(tmp_path)
    assert settings.theme == "system" and settings.knobs == {} and settings.python is None


def test_window_geometry_and_docks_round_trip(qtbot, tmp_path):
    first = QMainWindow()
    qtbot.addWidget(first)
    first.resize(700, 480)
    Settings(tmp_path).save_window(first)
    second = QMainWindow()
    qtbot.addWidget(second)
    assert Settings(tmp_path).restore_window(second)
    assert (second.width(), second.height()) == (700, 480)


def test_closing_the_window_remembers_docks_workload_and_device(show_window):
    from PySide6.QtWidgets import QDockWidget

    window = show_window(Session(sample_coarse=False))
    window.findChild(QDockWidget, "knobs").hide()
    window.workload_combo.setCurrentText("mlp")
    window.close()
    settings = Settings()
    assert settings.workload == "mlp" and settings.device == "cpu" and settings.has_window()
    restored = show_window(Session(sample_coarse=False))  # restores in its constructor
    assert not restored.findChild(QDockWidget, "knobs").isVisible()
    assert restored.findChild(QDockWidget, "log").isVisible()


def test_reset_action_clears_the_file_and_closing_does_not_save_again(show_window):
    window = show_window(Session(sample_coarse=False))
    Settings().theme = "dark"
    window.reset_settings_action.trigger()
    window.close()
    assert Settings().keys() == []


class _KnobSession:
    def __init__(self):
        self.knobs = [{"name": "num_workers", "default": 0}, {"name": "amp", "default": "off"}]
        self.sent = []

    def config_values(self):
        return {"num_workers": 4, "amp": "off"}

    def set_knobs(self, values, *, label=None):
        self.sent.append((values, label))
        return 1


def test_last_knobs_are_offered_to_a_running_session(qtbot, tmp_path):
    session = _KnobSession()
    assert changed_knobs(session) == {"num_workers": 4}
    window = QMainWindow()
    qtbot.addWidget(window)
    window.session = session
    settings = Settings(tmp_path)
    assert "no knobs" in apply_last_knobs(window, settings)
    settings.knobs = {"num_workers": 4, "gone_knob": 1}
    apply_last_knobs(window, settings)
    assert session.sent == [({"num_workers": 4}, "last session")]
    window.session = SimpleNamespace(knobs=[])
    assert "start a run first" in apply_last_knobs(window, settings)


def _window(qtbot, **options):
    from gpuwatch.qt.main_window import MainWindow
    from gpuwatch.qt.window_options import WindowOptions

    window = MainWindow(Session(sample_coarse=False), WindowOptions(**options))
    qtbot.addWidget(window)
    return window


def test_the_last_workload_and_device_are_preselected_unless_given(qtbot):
    settings = Settings()
    settings.workload, settings.device = "gpt", "cpu"
    window = _window(qtbot)
    assert window.workload_combo.currentText() == "gpt"
    assert window.device_combo.currentData() == "cpu"
    assert _window(qtbot, workload="mlp").workload_combo.currentText() == "mlp"  # given wins


def test_demo_runs_and_presentation_do_not_leave_their_layout_behind(qtbot):
    demo = _window(qtbot, demo_seconds=5)
    demo.remember_layout(Settings())
    assert not Settings().has_window()  # a scripted screenshot run saves nothing
    window = _window(qtbot)
    window.show()
    qtbot.waitExposed(window)
    window.presentation.set_active(True, fullscreen=False)
    window.remember_layout(Settings())
    assert not window.presentation.active  # the desk layout was saved, not the stage one
    assert Settings().has_window()
