"""Presentation mode: 2x fonts and lines, secondary panels hidden, one big sentence; leaving
restores everything; grabs of normal/presentation x light/dark differ; the CLI screenshots it."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics, QGuiApplication, QImage, QPalette
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QDockWidget

from gpuwatch.core.figures.frame import HeadlineFigures
from gpuwatch.core.run.session import Session
from gpuwatch.qt.presentation import SCALE, presentation_sentence


def _snapshot(win) -> dict:
    """What presentation mode changes, in comparable form."""
    plot = win.timeline.getPlotItem()
    return {
        "font_pt": win.font().pointSizeF(),
        "tick_pt": plot.getAxis("bottom").style["tickFont"].pointSizeF()
        if plot.getAxis("bottom").style.get("tickFont")
        else None,
        "busy_pen": win.utilization.busy_curve.opts["pen"].widthF(),
        "headline_style": win.headline.busy.value.styleSheet(),
        "tour_style": win.tour.caption.styleSheet(),
        "scoreboard_pt": win.scoreboard.table.font().pointSizeF(),
        "docks": {d.objectName(): d.isVisible() for d in win.findChildren(QDockWidget)},
        "status": win.statusBar().isVisible(),
        "menu": win.menuBar().isVisible(),
        "headline_bar": win.headline.isVisible(),
        "time_axis": plot.getAxis("bottom").isVisible(),
        "splitter": win.timeline.parentWidget().sizes(),
        "size": (win.width(), win.height()),
        "big": win.presentation.big_headline.isVisible(),
        "palette": win.palette().color(QPalette.ColorRole.Window).name(),
        "app_palette": QGuiApplication.palette().color(QPalette.ColorRole.Window).name(),
    }


def _px(style: str) -> int:
    return int(style.split("font-size:")[1].split("px", maxsplit=1)[0])


@pytest.mark.parametrize("size", [(1280, 720), (3840, 2160)])
def test_presentation_enlarges_hides_and_restores_exactly(light, show_window, qtbot, size):
    win = show_window(Session())
    win.resize(*size)
    qtbot.waitUntil(lambda: (win.width(), win.height()) == size)
    before = _snapshot(win)
    assert before["docks"]["log"] and before["docks"]["knobs"] and before["status"]

    win.presentation.set_active(True, fullscreen=False)
    during = _snapshot(win)
    assert win.presentation.active and win.presentation.action.isChecked()
    assert during["font_pt"] >= SCALE * before["font_pt"]
    assert before["tick_pt"] and during["tick_pt"] >= SCALE * before["tick_pt"]
    assert during["busy_pen"] >= SCALE * before["busy_pen"]
    assert _px(during["headline_style"]) >= 2 * _px(before["headline_style"])
    assert _px(during["tour_style"]) >= 2 * _px(before["tour_style"])
    assert during["scoreboard_pt"] >= SCALE * before["scoreboard_pt"]
    assert not during["docks"]["log"] and not during["docks"]["knobs"]
    assert during["docks"]["scoreboard"]  # readable from afar, not hidden
    assert not during["status"]
    assert not during["menu"] and not during["headline_bar"]  # the big sentence replaces it
    assert during["big"]
    assert during["palette"] == "#ffffff"  # high contrast, this window only
    assert during["app_palette"] == before["app_palette"]
    # The window still fits the screen it was given (a 1280x720 projector included).
    assert win.minimumSizeHint().width() <= size[0]
    assert (win.width(), win.height()) == size

    win.presentation.set_active(False)
    assert _snapshot(win) == before


def test_big_sentence_repeats_the_headline_figures(light, show_window):
    win = show_window(Session())
    win.timer.stop()  # the window's own refresh would replace the injected figures
    win.presentation.set_active(True, fullscreen=False)
    figures = HeadlineFigures(
        window_s=5.0, busy_pct=41.2, coarse_pct=97.0, coarse_short="runner CPU", device_kind="cpu"
    )
    win.headline.show_figures(figures)
    text = win.presentation.big_headline.text()
    assert text.startswith("last 5 s: compute busy 41% · runner CPU says 97%<br>")
    assert "— samples/s · step time p50 —" in text
    assert win.headline.busy.value.text() == "41%" and win.headline.coarse.value.text() == "97%"
    gpu = HeadlineFigures(window_s=5.0, busy_pct=41.0, coarse_pct=None, device_kind="cuda")
    assert presentation_sentence(gpu) == "last 5 s: stream active 41% · NVML says —"


def test_f11_toggles_presentation(light, show_window, qtbot):
    win = show_window(Session())
    assert win.presentation.action.shortcut().toString() == "F11"
    assert win.presentation.action in win.run_bar.actions()
    win.presentation.action.trigger()
    assert win.presentation.active
    win.presentation.action.trigger()
    assert not win.presentation.active


def _grab(win) -> QImage:
    win.repaint()
    return win.grab().toImage()


def _distinct_colors(image: QImage) -> int:
    step = 7
    return len(
        {
            image.pixel(x, y)
            for x in range(0, image.width(), step)
            for y in range(0, image.height(), step)
        }
    )


def test_grabs_of_normal_and_presentation_in_light_and_dark_differ(light, show_window):
    win = show_window(Session())
    win.resize(1280, 720)
    images = {}
    for mode in ("light", "dark"):
        light.set_mode(mode)
        images[("normal", mode)] = _grab(win)
        win.presentation.set_active(True, fullscreen=False)
        images[("present", mode)] = _grab(win)
        win.presentation.set_active(False)
    for key, image in images.items():
        assert not image.isNull(), key
        assert _distinct_colors(image) > 8, key  # not blank
    keys = list(images)
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            assert images[a] != images[b], (a, b)


def test_present_theme_dark_screenshot_from_the_cli(light, tmp_path):
    from gpuwatch.cli import main

    shot = tmp_path / "present-dark.png"
    code = main(
        [
            "--no-start",
            "--device",
            "cpu",
            "--presentation",
            "--theme",
            "dark",
            "--demo-seconds",
            "0.5",
            "--screenshot",
            str(shot),
        ]
    )
    assert code == 0
    image = QImage(str(shot))
    assert (image.width(), image.height()) == (1280, 720)
    assert image.pixelColor(image.width() // 2, image.height() // 2).lightness() < 100
    assert light.mode == "dark"  # --theme applied (the fixture puts light back)


def test_presentation_shortens_the_utilization_legend_and_hides_its_notes(light, show_window):
    from gpuwatch.core.figures.frame import CoarseChoice
    from gpuwatch.core.model.store import SeriesView

    win = show_window(Session())
    win.timer.stop()  # drive the view by hand
    view = win.utilization
    choice = CoarseChoice(
        metric="proc.cpu",
        coarse_label="runner CPU % (process tree, 1 s)",
        busy_label="compute busy % (host spans)",
        short="runner CPU",
        notes=("NVML: n/a — the runner trains on the CPU",),
    )
    empty = SeriesView(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0))
    view.show_data(choice, empty, np.empty(0), 0)
    assert "(process tree" in view.legend_label.text() and not view.note_label.isHidden()
    win.presentation.set_active(True, fullscreen=False)
    view.show_data(choice, empty, np.empty(0), 0)
    assert "(" not in view.legend_label.text().replace("&nbsp;", "")
    assert view.note_label.isHidden()
    win.presentation.set_active(False)
    view.show_data(choice, empty, np.empty(0), 0)
    assert "(process tree" in view.legend_label.text() and not view.note_label.isHidden()


def _dock_layout(win) -> dict:
    return {
        d.objectName(): (d.isVisible(), win.dockWidgetArea(d))
        for d in win.findChildren(QDockWidget)
    }


@pytest.mark.parametrize("maximized", [False, True], ids=["normal", "maximized"])
def test_f11_is_real_full_screen_and_esc_or_f11_return_to_the_previous_state(
    light, show_window, qtbot, maximized
):
    win = show_window(Session())
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    if maximized:
        win.showMaximized()
        qtbot.waitUntil(lambda: bool(win.windowState() & Qt.WindowState.WindowMaximized))
    state, size, docks = win.windowState(), win.size(), _dock_layout(win)
    for leave_key in (Qt.Key.Key_Escape, Qt.Key.Key_F11):
        QTest.keyClick(win, Qt.Key.Key_F11)
        qtbot.waitUntil(win.isFullScreen)
        assert win.presentation.active  # (offscreen, the 800 px screen is under its minimum)
        assert _dock_layout(win)["scoreboard"] == (True, Qt.DockWidgetArea.RightDockWidgetArea)
        QTest.keyClick(win, leave_key)
        assert not win.presentation.active
        qtbot.waitUntil(lambda: win.windowState() == state)
        assert _dock_layout(win) == docks
        if not maximized:
            assert win.size() == size
    QTest.keyClick(win, Qt.Key.Key_Escape)  # at the desk Esc is not a way in
    assert not win.presentation.active and not win.isFullScreen()


def _lane_labels(win) -> list[str]:
    return [label for _, label in win.timeline.getPlotItem().getAxis("left")._tickLevels[0]]


@pytest.mark.parametrize("size", [(1280, 720), (3840, 2160)])
def test_stage_layout_keeps_lanes_scoreboard_and_caption_readable(light, show_window, qtbot, size):
    from gpuwatch.core.run.tour import Stage, TourProgress
    from gpuwatch.qt.presentation import STAGE_COLUMNS, presentation_scale
    from gpuwatch.qt.scoreboard_view import RANK_COLUMNS
    from gpuwatch.qt.timeline_view import MERGED_LANES

    win = show_window(Session())
    win.resize(*size)
    qtbot.waitUntil(lambda: (win.width(), win.height()) == size)
    font_pt = win.font().pointSizeF()
    desk_lanes = _lane_labels(win)
    assert len(desk_lanes) == 8  # seven phases and the device lane
    caption = win.tour.caption
    home = caption.parentWidget()
    stage = Stage("workers", {}, "2 worker processes decode while the model trains")
    progress = TourProgress(1, 6, stage, "transition", 0.0, None, "waiting for steady steps")
    win.tour._show_progress(progress)
    assert "waiting for steady steps" in caption.text()

    win.presentation.set_active(True, fullscreen=False)
    qtbot.waitUntil(lambda: win.scoreboard.parentWidget().width() > 250)
    # Fonts grow with the screen: 2x on a 720 px projector, in proportion on 4K.
    assert presentation_scale(size[1]) == pytest.approx(SCALE * size[1] / 720)
    assert win.font().pointSizeF() == pytest.approx(font_pt * presentation_scale(size[1]))
    # Three host lanes and the device lane, each row tall enough for a two-line name.
    assert _lane_labels(win) == [name for name, _ in MERGED_LANES] + [desk_lanes[-1]]
    axis = win.timeline.getPlotItem().getAxis("left")
    line = QFontMetrics(axis.style["tickFont"]).lineSpacing()
    row = win.timeline.getPlotItem().getViewBox().height() / 4
    assert row >= 2 * line, (row, line)
    # The scoreboard beside the plots, its stage columns whole (no cut-off column).
    dock = win.scoreboard.parentWidget()
    assert win.dockWidgetArea(dock) == Qt.DockWidgetArea.RightDockWidgetArea
    table = win.scoreboard.table
    shown = [
        table.model().headerData(i, Qt.Orientation.Horizontal)
        for i in range(table.model().columnCount())
        if not table.isColumnHidden(i)
    ]
    assert tuple(shown) == STAGE_COLUMNS
    assert dock.geometry().left() >= win.centralWidget().geometry().right()
    # The tour caption (compact: no progress line) above the big sentence, full width on top.
    stage_dock = win.presentation.stage_dock
    assert stage_dock.isVisible() and stage_dock.isAncestorOf(caption)
    assert stage_dock.width() >= win.width() - 20
    assert stage_dock.geometry().bottom() < win.centralWidget().geometry().top()
    assert win.tour.compact
    win.tour._show_progress(progress)
    assert "waiting for steady steps" not in caption.text() and "workers" in caption.text()
    body = stage_dock.widget()
    assert body.height() >= body.layout().totalHeightForWidth(body.width())  # nothing cut
    assert (win.width(), win.height()) == size

    win.presentation.set_active(False)
    assert caption.parentWidget() is home and not win.tour.compact
    assert _lane_labels(win) == desk_lanes
    # every desk column is back; the rank columns stay hidden for a run of one process
    hidden = {
        table.model().headerData(i, Qt.Orientation.Horizontal)
        for i in range(table.model().columnCount())
        if table.isColumnHidden(i)
    }
    assert hidden == set(RANK_COLUMNS), hidden
    assert not stage_dock.isVisible()


def test_window_size_pictures_presentation_at_4k_from_the_cli(light, tmp_path):
    from gpuwatch.cli import main

    shot = tmp_path / "present-4k.png"
    code = main(
        [
            "--no-start",
            "--device",
            "cpu",
            "--presentation",
            "--window-size",
            "3840x2160",
            "--demo-seconds",
            "0.5",
            "--screenshot",
            str(shot),
        ]
    )
    assert code == 0
    image = QImage(str(shot))
    assert (image.width(), image.height()) == (3840, 2160)


@pytest.mark.parametrize("text", ["big", "1280x", "10x10", "1280x720x3"])
def test_a_bad_window_size_is_one_clear_error(text, capsys):
    from gpuwatch.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--window-size", text])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--window-size" in err and "Traceback" not in err


def test_a_marker_born_while_presenting_gets_the_stage_look(light, show_window, qtbot):
    import pyqtgraph as pg

    from gpuwatch.qt import palette
    from gpuwatch.qt.theme import LIGHT_CONTRAST

    win = show_window(Session())
    win.presentation.set_active(True, fullscreen=False)
    line = pg.InfiniteLine(pos=1.0, pen=pg.mkPen(palette.MARKER, width=1))
    win.timeline.addItem(line)  # as ChangeMarkers does when a knob changes mid-talk
    scale = win.presentation.scale
    qtbot.waitUntil(lambda: line.pen.widthF() == pytest.approx(scale))
    assert line.pen.color() == LIGHT_CONTRAST.color(palette.MARKER)
    win.presentation.set_active(False)
    assert line.pen.widthF() == 1.0  # the desk look again (the window restyles every item)


def test_merged_lanes_stack_their_phases_in_dense_columns(qtbot):
    """On stage a lane holds several phases: per pixel column they stack, so the lane's height
    is their joint share (here 0.3 + 0.3 + 0.1 of each 1 ms step for compute)."""

    from gpuwatch.core.model.store import StepsView
    from gpuwatch.qt.dense_lanes import rgba
    from gpuwatch.qt.timeline_view import BAR_HEIGHT, TimelineView

    view = TimelineView()
    qtbot.addWidget(view)
    view.resize(800, 400)
    view.show()
    qtbot.waitExposed(view)
    n, step_ns = 4000, 1_000_000
    starts = np.arange(n, dtype=np.int64) * step_ns
    offsets = np.array([0.0, 0.1, 0.2, 0.5, 0.8, 0.9, 1.0]) * step_ns  # data h2d fwd bwd opt sync
    host = starts[:, None] + offsets.astype(np.int64)[None, :]
    steps = StepsView(
        np.arange(n), np.zeros(n, np.int32), np.ones(n, np.int32), host, host, np.ones(n, bool)
    )
    active = (host[:, 1], host[:, -1])
    view.set_merged(True)
    view.show_steps(steps, active, 0, 0, n * step_ns)
    assert view.dense and view.n_lanes == 4
    # Per column of the "compute" lane (the second from the top), bottom to top: forward
    # 0.3, backward 0.3, optimizer 0.1 of the bar; the rest is the lane's pale backing.
    pixels = view.dense_lanes.pixels
    rows = pixels.shape[0] // 4
    bar_px = round(BAR_HEIGHT * rows)
    margin = (rows - bar_px) // 2
    column = pixels[rows + margin : rows + margin + bar_px, pixels.shape[1] // 2][::-1]
    colors = {
        name: rgba(view.phase_bars[name].brush.color())
        for name in ("forward", "backward", "optimizer")
    }
    runs = [(name, int((column == c).sum())) for name, c in colors.items()]
    assert [n for n, _ in runs] == ["forward", "backward", "optimizer"]
    for (_, got), want in zip(runs, (0.3, 0.3, 0.1), strict=True):
        assert got == pytest.approx(want * bar_px, abs=1.5)
    first = {name: int(np.argmax(column == c)) for name, c in colors.items()}
    assert first["forward"] == 0 < first["backward"] < first["optimizer"]  # stacked upwards
    top = first["optimizer"] + runs[2][1]
    assert top == pytest.approx(0.7 * bar_px, abs=2)  # within the lane
    assert (column[top + 1 :] == rgba(view.phase_backing["forward"].brush.color())).all()
    assert view.dense_share(0, view.phase_bars["data"]).max() == pytest.approx(0.1, abs=0.1)


def test_a_plot_item_born_while_presenting_gets_the_stage_look_on_the_redraw_tick(
    light, show_window, qtbot
):
    """No timer polls the window for new items: the redraw tick styles them while presenting."""
    import pyqtgraph as pg

    from gpuwatch.qt import palette
    from gpuwatch.qt.theme import STYLED

    win = show_window(Session())
    win.presentation.set_active(True, fullscreen=False)
    item = pg.PlotCurveItem([0, 1], [0, 1], pen=pg.mkPen(palette.DEVICE_ACTIVE, width=1))
    win.timeline.addItem(item)
    assert STYLED.look(item) is None, "a new item has no look until the window styles it"
    qtbot.waitUntil(lambda: STYLED.look(item) is not None, timeout=5000)
    assert STYLED.look(item) == (win.presentation._colors().name, win.presentation.scale)
    assert item.opts["pen"].widthF() >= SCALE, "the stage's wider lines"
    stage = win.presentation._colors()
    assert item.opts["pen"].color().name() == stage.color(palette.DEVICE_ACTIVE).name()
    win.presentation.set_active(False)
