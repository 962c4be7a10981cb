"""The status bar's footprint fields: the window's own CPU and the runner's instrumentation
share, in fields of fixed size (a new number repaints one label, never re-lays-out the bar)."""

from __future__ import annotations

from PySide6.QtWidgets import QMainWindow

from gpuwatch.qt.status_line import CPU_PERIOD_S, CpuShare, StatusLine


def test_the_own_cpu_share_needs_two_readings_a_period_apart():
    cpu = CpuShare()
    assert cpu.sample(100.0) is None
    assert cpu.sample(100.0 + CPU_PERIOD_S / 2) is None
    share = cpu.sample(100.0 + 2 * CPU_PERIOD_S)
    assert share is not None and share >= 0.0


def test_footprint_fields_show_cpu_and_instrumentation_in_fixed_sizes(qtbot):
    window = QMainWindow()
    qtbot.addWidget(window)
    line = StatusLine(window.statusBar())
    window.show()
    share: list[float | None] = [None]
    line.show_cpu(10.0, lambda: share[0])
    line.show_cpu(10.0 + 2 * CPU_PERIOD_S, lambda: share[0])
    assert line.cpu_label.text().startswith("gpuwatch: ") and "% CPU" in line.cpu_label.text()
    assert line.instrument_label.isHidden()  # not known: a built-in workload, a recording
    share[0] = 0.003
    line.show_cpu(10.0 + 2.5 * CPU_PERIOD_S, lambda: share[0])
    assert line.instrument_label.isHidden()  # re-read only once a period
    line.show_cpu(10.0 + 4 * CPU_PERIOD_S, lambda: share[0])
    assert line.instrument_label.text().strip() == "· instrumentation 0.3 % of step time"
    assert not line.instrument_label.isHidden()
    for label in (line.cpu_label, line.instrument_label, line.window_label, line.state_label):
        assert label.minimumSize() == label.maximumSize()  # fixed: no layout for a new number
    line.show_window(0.0, 30.0, following=True)
    assert line.window_label.text().strip() == "showing the last 30 s"
    line.show_window(1.0, 2.0)
    assert "1.0–2.0 s" in line.window_label.text()
