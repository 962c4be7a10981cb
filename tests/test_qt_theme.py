"""Themes: a forced dark theme re-colours the Qt palette and the plots, and light restores them;
the app icon is set and ships with the installed package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from PySide6.QtGui import QGuiApplication, QPalette

from gpuwatch.core.run.session import Session
from gpuwatch.qt.app import create_app
from gpuwatch.qt.app_icon import SIZES, icon_files
from gpuwatch.qt.theme import DARK, LIGHT, MODES, scale_style
from gpuwatch.qt.theme_tokens import Role

REPO = Path(__file__).resolve().parents[1]


def _plot_background(plot) -> str:
    return plot.backgroundBrush().color().name()


def test_forcing_dark_changes_palette_and_plots_and_light_restores(light, show_window):
    win = show_window(Session())
    window_color = QGuiApplication.palette().color(QPalette.ColorRole.Window).name()
    assert _plot_background(win.timeline) == LIGHT[Role.PLOT_BACKGROUND].lower()
    axis_pen = win.timeline.getPlotItem().getAxis("bottom").pen().color().name()

    win.theme_actions["dark"].trigger()

    assert light.mode == "dark" and win.theme_actions["dark"].isChecked()
    assert QGuiApplication.palette().color(QPalette.ColorRole.Window).name() != window_color
    assert (
        QGuiApplication.palette().color(QPalette.ColorRole.Window).name()
        == DARK[Role.WINDOW].lower()
    )
    for plot in (win.timeline, win.utilization.plot):
        assert _plot_background(plot) == DARK[Role.PLOT_BACKGROUND].lower()
        assert plot.getPlotItem().getAxis("bottom").pen().color().name() == (
            DARK[Role.PLOT_FOREGROUND].lower()
        )
    # A dark base colour gets its readable twin (the busy curve, the device bars).
    busy = win.utilization.busy_curve.opts["pen"].color()
    assert busy.lightness() > 128
    # Legend swatches show the colour the plot really draws.
    from gpuwatch.qt import palette

    assert busy.name() in palette.swatch(palette.DEVICE_ACTIVE, "busy").lower()
    # Labels' hard-coded grey text is lifted too (the headline captions).
    assert "#b4b4b4" in win.headline.samples.caption.styleSheet().lower()

    win.theme_actions["light"].trigger()
    assert QGuiApplication.palette().color(QPalette.ColorRole.Window).name() == window_color
    assert _plot_background(win.timeline) == LIGHT[Role.PLOT_BACKGROUND].lower()
    assert win.timeline.getPlotItem().getAxis("bottom").pen().color().name() == axis_pen
    assert win.headline.samples.caption.styleSheet() == "color: #666666; font-size: 11px;"


def test_dark_text_contrasts_with_its_background(light):
    light.set_mode("dark")
    pal = QGuiApplication.palette()
    for fg, bg in (
        (QPalette.ColorRole.WindowText, QPalette.ColorRole.Window),
        (QPalette.ColorRole.Text, QPalette.ColorRole.Base),
    ):
        assert pal.color(fg).lightness() - pal.color(bg).lightness() > 120


def test_theme_choice_is_remembered(light, show_window):
    win = show_window(Session())
    win.theme_menu.choose("dark")
    assert win.settings.theme == "dark"


def test_unknown_theme_is_one_clear_error(light):
    with pytest.raises(ValueError, match="light, dark"):
        light.set_mode("purple")
    assert light.mode == "light"


def test_system_mode_follows_the_scheme(light):
    light.set_mode("system")
    # Offscreen reports no scheme (or light): system means light here.
    assert light.colors in (LIGHT, DARK)
    assert MODES == ("system", "light", "dark")


def test_style_sheets_fill_their_roles_and_scale():
    out = scale_style(DARK.fill("color: $note_text; font-size: 11px;"), 2.0)
    assert out == "color: #B4B4B4; font-size: 22px;"
    assert scale_style("color: white;", 2.0, base_pt=9.0) == "color: white; font-size: 18pt;"
    assert scale_style("QLabel { color: white; }", 2.0, base_pt=9.0) == (
        "QLabel { color: white; font-size: 18pt; }"
    )
    assert scale_style("color: white;", 1.0, base_pt=9.0) == "color: white;"


def test_cli_theme_names_match_the_theme_module():
    from gpuwatch.cli import THEMES

    assert THEMES == MODES


def test_app_has_the_icon_at_every_size(qapp):
    app = create_app()
    icon = app.windowIcon()
    assert not icon.isNull()
    sizes = {s.width() for s in icon.availableSizes()}
    assert set(SIZES) <= sizes
    assert all(f.is_file() for f in icon_files())


def test_icon_ships_in_the_built_package(tmp_path):
    """Build a wheel from a copy of the source and load the icon from the unpacked wheel."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "gpuwatch", src / "gpuwatch", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            str(src),
            "-w",
            str(wheels),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = wheels.glob("*.whl")
    installed = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(installed)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import gpuwatch; "
        "from pathlib import Path; assert Path(gpuwatch.__file__).is_relative_to(sys.argv[1])"
        ", gpuwatch.__file__; from PySide6.QtGui import QGuiApplication; "
        "app = QGuiApplication([]); from gpuwatch.qt.app_icon import app_icon, icon_files; "
        "assert all(f.is_file() for f in icon_files()); icon = app_icon(); "
        "print(len(icon.availableSizes()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(installed)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={"QT_QPA_PLATFORM": "offscreen", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(SIZES))


def test_markers_made_after_a_switch_to_dark_are_dark(light, qtbot):
    import pyqtgraph as pg

    from gpuwatch.core.model.messages import ConfigChange
    from gpuwatch.qt import palette
    from gpuwatch.qt.change_markers import ChangeMarkers

    light.set_mode("dark")
    plot = pg.PlotWidget()
    qtbot.addWidget(plot)
    markers = ChangeMarkers(plot, labels=False)
    change = ConfigChange(0, {}, {}, 10**9, 0, 3, label="baseline")
    markers.update(object(), [change], [], 0, now_ns=5 * 10**9)
    expected = light.colors.color(palette.MARKER)
    assert expected != pg.mkColor(palette.MARKER)  # dark really remaps the marker colour
    assert markers.lines[0].pen.color().rgb() == expected.rgb()


def _pixel(plot, x: float, y: float):
    """The colour the plot shows at data point (x, y), from a grab of the widget."""
    from PySide6.QtCore import QPointF

    vb = plot.getPlotItem().getViewBox()
    at = plot.mapFromScene(vb.mapViewToScene(QPointF(x, y)))
    return plot.grab().toImage().pixelColor(at.x(), at.y()).name()


def test_the_desktop_turning_dark_re_themes_every_view_live(light, show_window, qtbot, monkeypatch):
    from PySide6.QtCore import Qt

    from gpuwatch.qt import palette
    from gpuwatch.qt import theme as theme_module
    from gpuwatch.qt.help_view import open_help

    monkeypatch.setattr(theme_module, "system_is_dark", lambda: False)
    light.set_mode("system")
    win = show_window(Session())
    help_dialog = open_help(win)
    qtbot.waitUntil(lambda: win.timeline._shade.count() > 0)  # the first redraw is done
    timeline = win.timeline
    empty_lane = (timeline.getPlotItem().getViewBox().viewRange()[0][0] + 1.0, 6.0)  # "h2d"
    assert _pixel(timeline, *empty_lane) == LIGHT[Role.PLOT_BACKGROUND].lower()

    monkeypatch.setattr(theme_module, "system_is_dark", lambda: True)
    QGuiApplication.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Dark)

    assert light.colors is DARK and win.isVisible()  # the same window, no restart
    assert _pixel(timeline, *empty_lane) == DARK[Role.PLOT_BACKGROUND].lower()
    assert _plot_background(win.utilization.plot) == DARK[Role.PLOT_BACKGROUND].lower()
    device = timeline.device_bars.brush.color()
    assert device.name() == DARK.color(palette.DEVICE_ACTIVE).name() != palette.DEVICE_ACTIVE
    assert timeline.phase_bars["data"].brush.color().name() == (
        palette.PHASE_COLORS["data"].lower()
    )  # the colour-blind-safe set reads on both
    for widget in (win.knob_panel, win.scoreboard.table, help_dialog.browser):  # (posted)
        qtbot.waitUntil(
            lambda w=widget: (
                w.palette().color(QPalette.ColorRole.Base).name() == DARK[Role.BASE].lower()
            )
        )
    assert "#b4b4b4" in win.headline.busy.help_button.styleSheet().lower()

    monkeypatch.setattr(theme_module, "system_is_dark", lambda: False)
    QGuiApplication.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert _pixel(timeline, *empty_lane) == LIGHT[Role.PLOT_BACKGROUND].lower()
    assert timeline.device_bars.brush.color().name() == palette.DEVICE_ACTIVE.lower()


def test_a_theme_picked_while_presenting_restyles_the_stage(light, show_window):
    win = show_window(Session())
    win.presentation.set_active(True, fullscreen=False)
    assert win.palette().color(QPalette.ColorRole.Window).name() == "#ffffff"
    win.theme_actions["dark"].trigger()
    assert win.palette().color(QPalette.ColorRole.Window).name() == "#000000"
    assert _plot_background(win.timeline) == "#000000"
    assert win.presentation.big_headline.styleSheet().startswith("color: #FFFFFF")
    win.presentation.set_active(False)
    assert _plot_background(win.timeline) == DARK[Role.PLOT_BACKGROUND].lower()


def test_a_comparison_follows_the_theme(light, show_window, qtbot, tmp_path):
    """The comparison shown in a replay window re-themes with the rest (a scoreboard's hint
    text, B's timeline)."""
    from test_qt_replay import make_recording

    from gpuwatch.core.files.recording_reader import open_recording
    from gpuwatch.core.files.replay import ReplaySession

    first = make_recording(tmp_path / "first.gpuwatch", n_batches=12)
    other = make_recording(tmp_path / "second.gpuwatch", n_batches=12)
    win = show_window(ReplaySession(open_recording(first)))
    mode = win.files.compare_with(other)
    hint = mode.view.scoreboards[0].hint
    assert "#b4b4b4" not in hint.styleSheet().lower()
    win.theme_actions["dark"].trigger()
    assert "#b4b4b4" in hint.styleSheet().lower()  # NOTE_TEXT's dark twin
    assert _plot_background(mode.timeline) == _plot_background(win.timeline) != "#ffffff"
    win.theme_actions["light"].trigger()
    assert "#b4b4b4" not in hint.styleSheet().lower()
