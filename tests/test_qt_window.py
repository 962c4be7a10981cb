"""The window draws what the stores hold: synthetic steps and samples, no runner, no GPU.

Each test writes straight into an unstarted Session's stores (as the link thread would) and
lets the window's own redraw timer pick the data up, then checks what the views received.
"""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QColor, QImage

from gpuwatch.core.model.messages import DeviceInfo, Hello
from gpuwatch.core.model.store import MetricStatus
from gpuwatch.core.run.session import Session, SessionState
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.palette import PHASE_COLORS
from gpuwatch.qt.utilization_view import series_point_count
from gpuwatch.qt.window_options import WindowOptions

MS = 1_000_000
S = 1_000_000_000
#: Host phase durations of one synthetic step (data, h2d, forward, backward, optimizer,
#: sync), then 1 ms of loop overhead: a 100 ms step whose compute span (h2d..optimizer) is
#: 65 ms, so compute busy is 65%.
PHASE_MS = (30, 5, 20, 30, 10, 4)
STEP_MS = 100
SAMPLES = 32
WAIT_MS = 5000


def synthetic_marks(start_ns: int, n: int) -> np.ndarray:
    """Host marks of ``n`` consecutive 100 ms steps starting at ``start_ns``."""
    starts = start_ns + np.arange(n, dtype=np.int64) * STEP_MS * MS
    offsets = np.concatenate(([0], np.cumsum(PHASE_MS))) * MS
    return starts[:, None] + offsets[None, :]


def feed_cpu_run(session: Session, n_steps: int = 100, cpu_pct: float = 150.0) -> None:
    """A CPU-device run: steps from t0+0.5 s, proc.cpu at 150% in 1 s periods, no NVML."""
    t0 = session.t0_ns
    session.hello = Hello(workload="vision", device=DeviceInfo(kind="cpu", name="synthetic CPU"))
    session.steps.set_device_is_host(True)
    marks = synthetic_marks(t0 + S // 2, n_steps)
    session.steps.append(list(range(n_steps)), [0] * n_steps, [SAMPLES] * n_steps, marks.tolist())
    n_samples = (n_steps * STEP_MS) // 1000 + 1
    k = np.arange(n_samples + 1, dtype=np.int64)
    session.coarse.set_status(MetricStatus("proc.cpu", "runner CPU", "%", True, period_s=1.0))
    session.coarse.set_status(
        MetricStatus(
            "nvml.gpu_util",
            "NVML GPU utilization",
            "%",
            False,
            reason="NVML Shared Library Not Found",
        )
    )
    session.coarse.append_many(
        "proc.cpu", (t0 + k * S).tolist(), (t0 + (k + 1) * S).tolist(), [cpu_pct] * len(k)
    )


@pytest.fixture
def window(show_window):
    """A shown window over an unstarted session (nothing is spawned)."""
    return show_window(Session(sample_coarse=False))


def bar_xrange(bars) -> tuple[float, float]:
    return float(np.min(bars.x0)), float(np.max(bars.x1))


def test_cpu_run_reaches_timeline_utilization_and_headline(window, qtbot):
    feed_cpu_run(window.session)
    timeline, util, head = window.timeline, window.utilization, window.headline

    def drawn() -> None:
        assert timeline.phase_bars["forward"].count() == 100
        assert timeline.device_bars.count() == 100
        assert series_point_count(util.coarse_curve) > 0
        assert series_point_count(util.busy_curve) > 0
        assert head.samples.value.text() == "320"

    qtbot.waitUntil(drawn, timeout=WAIT_MS)
    assert not timeline.dense  # 100 spans in ~1100 px: drawn one by one
    for name in ("data", "h2d", "forward", "backward", "optimizer", "sync"):
        assert timeline.phase_bars[name].count() == 100, name
    assert timeline.phase_bars["other"].count() == 99  # between consecutive steps only
    # Spans sit where they were fed: 0.5 s .. 10.5 s after the session's origin.
    lo, hi = bar_xrange(timeline.phase_bars["data"])
    assert lo == pytest.approx(0.5, abs=1e-6)
    assert hi == pytest.approx(10.43, abs=1e-2)  # last data phase ends 30 ms into step 99
    lo, hi = bar_xrange(timeline.device_bars)
    assert lo == pytest.approx(0.53, abs=1e-6)  # compute starts after data
    assert hi == pytest.approx(10.495, abs=1e-2)
    # Gaps of 35 ms between compute spans are tinted in the device lane.
    assert timeline.gap_bars.count() == 99
    # Follow shows the first 30 s while the run is younger than that.
    x_lo, x_hi = timeline.getPlotItem().getViewBox().viewRange()[0]
    assert (x_lo, x_hi) == pytest.approx((0.0, 30.0), abs=0.5)

    # Utilization: runner CPU as steps over its 1 s periods; busy over the same periods.
    x, y = util.coarse_curve.getData()
    assert x.min() == pytest.approx(0.0) and x.max() == pytest.approx(12.0)
    assert np.all(y == 150.0)
    bx, by = util.busy_curve.getData()
    assert set(np.round(bx, 6)) <= set(np.round(x, 6))  # same windows as the coarse samples
    assert np.allclose(by, 65.0, atol=1.0)  # 65 ms of compute per 100 ms step
    assert "runner CPU %" in util.legend_texts()[0]
    assert "compute busy" in util.legend_texts()[1]

    # Headline: 32 samples per 100 ms step → 320/s; figures computed from the same data.
    assert head.step.value.text().startswith("100.0 ms")
    assert head.busy.value.text() == "65%"
    assert head.coarse.value.text() == "150%"
    assert head.difference.value.text() == "runner CPU says 150% of one core, compute busy 65%"
    assert head.phases.value.text().startswith("data 30%")
    assert head.busy.toolTip() and head.coarse.toolTip() and head.difference.toolTip()
    assert "host timestamps (CPU)" in window.status_line.timing_label.text()
    assert "synthetic CPU" in window.status_line.device_label.text()


def test_dense_steps_are_aggregated_per_pixel_column(window, qtbot):
    """20,000 steps of 1 ms: one bar per pixel column, height = share of the column."""
    session = window.session
    session.steps.set_device_is_host(True)
    n = 20_000
    starts = session.t0_ns + S + np.arange(n, dtype=np.int64) * MS
    # data 0.25 ms, then compute 0.75 ms (h2d..optimizer), empty sync.
    offsets = (np.array([0, 250, 400, 600, 900, 1000, 1000]) * 1000).astype(np.int64)
    session.steps.append(
        list(range(n)), [0] * n, [8] * n, (starts[:, None] + offsets[None, :]).tolist()
    )
    timeline = window.timeline

    qtbot.waitUntil(lambda: timeline.dense and timeline.dense_lanes.isVisible(), timeout=WAIT_MS)
    width = timeline.getPlotItem().getViewBox().width()
    assert timeline.dense_lanes.pixels.shape[1] <= width + 2  # one pixel column each
    device = timeline.dense_share(timeline.n_lanes - 1, timeline.device_bars)
    inner = device[device > 0][2:-2]  # columns with steps, the partial edge columns aside
    assert len(inner) > 0.5 * width
    tolerance = 1.5 / (timeline.dense_lanes.pixels.shape[0] / timeline.n_lanes)
    assert np.median(inner) == pytest.approx(0.75, abs=tolerance)  # 75 % of each is compute
    data = timeline.dense_share(0, timeline.phase_bars["data"])
    assert np.median(data[data > 0][2:-2]) == pytest.approx(0.25, abs=tolerance)
    assert "dense" in window.timeline_caption.text()


def test_nvml_unavailable_shows_reason_not_zero(window, qtbot):
    feed_cpu_run(window.session, n_steps=20)
    note = window.utilization.note_label
    # The window's first frame (before this run was fed) may show another note already.
    qtbot.waitUntil(
        lambda: note.isVisible() and note.text() == "NVML: n/a — NVML Shared Library Not Found",
        timeout=WAIT_MS,
    )
    assert window.headline.coarse.caption.text() == "runner CPU, % of one core"


def test_cuda_run_shows_nvml_step_series_with_its_period(window, qtbot):
    session = window.session
    t0 = session.t0_ns
    session.hello = Hello(workload="vision", device=DeviceInfo(kind="cuda", name="synthetic GPU"))
    n = 60
    marks = synthetic_marks(t0 + S // 2, n)
    session.steps.append(list(range(n)), [0] * n, [SAMPLES] * n, marks.tolist())
    # Device marks lag the host by 2 ms; the last 10 steps' marks have not arrived yet.
    session.steps.set_device_marks(list(range(n - 10)), (marks[: n - 10] + 2 * MS).tolist())
    period = S // 6
    k = np.arange(40, dtype=np.int64)
    session.coarse.set_status(
        MetricStatus("nvml.gpu_util", "NVML GPU utilization", "%", True, period_s=1 / 6)
    )
    session.coarse.append_many(
        "nvml.gpu_util",
        (t0 + k * period).tolist(),
        (t0 + (k + 1) * period).tolist(),
        [80.0] * len(k),
    )
    util = window.utilization

    qtbot.waitUntil(lambda: series_point_count(util.busy_curve) > 0, timeout=WAIT_MS)
    assert util.legend_texts()[0] == "NVML GPU util (whole device, period 167 ms)"
    assert "stream active, upper bound" in util.legend_texts()[1]
    assert not util.note_label.isVisible()
    x, _ = util.coarse_curve.getData()
    bx, _ = util.busy_curve.getData()
    assert len(x) == 2 * 40
    # Busy % only where our device marks cover the whole NVML period: never a false 0.
    assert bx.min() >= 0.5 and bx.max() <= 0.5 + (n - 10) * 0.1
    assert window.timeline.device_bars.count() == n - 10
    qtbot.waitUntil(lambda: window.headline.coarse.caption.text() == "NVML util %", timeout=WAIT_MS)
    assert window.headline.busy.caption.text() == "stream active %, last 5 s"
    assert "CUDA events" in window.status_line.timing_label.text()


def _image_array(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    buf = np.frombuffer(image.constBits(), np.uint8, image.sizeInBytes())
    rows = buf.reshape(image.height(), image.bytesPerLine())
    return rows[:, : image.width() * 4].reshape(image.height(), image.width(), 4)[..., :3]


def test_grab_shows_the_plots(window, qtbot):
    feed_cpu_run(window.session)
    qtbot.waitUntil(lambda: window.timeline.device_bars.count() > 0, timeout=WAIT_MS)
    qtbot.wait(100)  # let the redraw paint
    pixmap = window.grab()
    assert not pixmap.isNull()
    pixels = _image_array(pixmap.toImage())
    ratio = pixmap.devicePixelRatio()
    origin = window.timeline.mapTo(window, QPoint(0, 0))
    x0, y0 = int(origin.x() * ratio), int(origin.y() * ratio)
    w, h = int(window.timeline.width() * ratio), int(window.timeline.height() * ratio)
    region = pixels[y0 : y0 + h, x0 : x0 + w].astype(np.float64)
    assert region.size and region.var() > 0
    # Phase colours are drawn exactly (no antialiasing): the forward lane is really there.
    fwd = QColor(PHASE_COLORS["forward"])
    bgr = np.array([fwd.blue(), fwd.green(), fwd.red()])  # Format_RGB32 is BGRA in memory
    assert np.all(region == bgr, axis=-1).sum() > 100


def test_failed_session_shows_its_error(qtbot, tmp_path):
    """A run that cannot start turns FAILED; the window says why, in a banner, not a dialog."""
    session = Session(sample_coarse=False)
    missing = tmp_path / "no-such-python"
    win = MainWindow(session, WindowOptions(workload="vision", device="cpu", python=str(missing)))
    qtbot.addWidget(win)
    win.show()
    win.start_action.trigger()
    qtbot.waitUntil(
        lambda: session.state is SessionState.FAILED and win.banner.isVisible(), timeout=WAIT_MS
    )
    assert session.error
    assert session.error in win.banner.text()
    assert win.start_action.text() == "Start"  # can try again
    qtbot.waitUntil(lambda: session.error in win.log_pane.toPlainText(), timeout=WAIT_MS)
    win.close()


def test_panning_turns_follow_off(window, qtbot):
    feed_cpu_run(window.session, n_steps=20)
    vb = window.timeline.getPlotItem().getViewBox()
    qtbot.waitUntil(lambda: window.timeline.device_bars.count() > 0, timeout=WAIT_MS)
    assert window.follow
    vb.sigRangeChangedManually.emit([True, False])  # what a mouse drag emits
    assert not window.follow
    vb.setXRange(1.0, 2.0, padding=0)
    qtbot.wait(100)
    assert "1.0–2.0 s" in window.status_line.window_label.text()
    window.follow_action.setChecked(True)
    assert vb.viewRange()[0] == pytest.approx([0.0, 30.0], abs=0.5)
