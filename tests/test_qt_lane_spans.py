"""A sparse timeline's spans are one item (``LaneSpans``) that paints what one
``BarGraphItem`` per category painted, pixel for pixel, in either theme.

Steps here are SIMULATED (jittered synthetic marks, as in ``tests/test_frame.py``).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from jittered_steps import MS, ORIGIN, marks
from PySide6.QtCore import QRectF
from test_qt_frame_cost import timeline

from gpuwatch.core.figures.frame import steps_frame
from gpuwatch.core.model.store import StepStore
from gpuwatch.qt.lane_spans import LaneSpans

#: 120 steps of 40 ms in a 6 s view 700 px wide: sparse (fewer steps than half the pixels).
N_STEPS, STEP_NS, VIEW_NS = 120, 40 * MS, 6_000 * MS


def _show_sparse_frame(view) -> None:
    store = StepStore()
    store.set_device_is_host(True)
    host = marks(N_STEPS, STEP_NS)
    store.append(list(range(N_STEPS)), [0] * N_STEPS, [8] * N_STEPS, host.tolist())
    lo, hi = ORIGIN + 500 * MS, ORIGIN + 500 * MS + VIEW_NS  # steps cut by both edges
    frame = steps_frame(
        store.snapshot(),
        (),
        t0_ns=ORIGIN,
        lo_ns=lo,
        hi_ns=hi,
        width_px=view.width_px(),
        device_kind="cpu",
        tint=True,
    )
    assert frame.sparse is not None
    view.getPlotItem().getViewBox().setXRange(0.5, 0.5 + VIEW_NS / 1e9, padding=0)
    view.show_frame(frame)


def _pixels(view) -> np.ndarray:
    image = view.grab().toImage()
    ptr = image.constBits()
    return np.frombuffer(ptr, np.uint8, image.sizeInBytes()).copy()


def _bars_like(view) -> list[pg.BarGraphItem]:
    """What the timeline drew before: a ``BarGraphItem`` per shown layer, in layer order."""
    bars = []
    for layer in view.spans.layers:
        if not layer.count() or not layer.isVisible():
            continue
        item = pg.BarGraphItem(
            x0=layer.x0, x1=layer.x1, y0=layer.y0, height=layer.height, pen=None, brush=layer.base
        )
        item.setZValue(view.spans.zValue())
        view.addItem(item)
        bars.append(item)
    return bars


def test_the_lanes_item_paints_what_a_bar_item_per_category_painted(qtbot) -> None:
    from gpuwatch.qt.theme import style_plot_widget
    from gpuwatch.qt.theme_tokens import DARK, LIGHT

    view = timeline(qtbot)
    _show_sparse_frame(view)
    shown = [layer.name for layer in view.spans.layers if layer.count() and layer.isVisible()]
    assert {"data", "forward", "other", "device"} <= set(shown)
    assert any(name.startswith("idle: ") for name in shown)  # the tint, over the lane
    assert not view.gap_bars.isVisible()  # replaced by the cause tint
    for theme in (LIGHT, DARK):
        style_plot_widget(view, theme)
        view.spans.setVisible(True)
        drawn = _pixels(view)
        view.spans.setVisible(False)
        bars = _bars_like(view)
        style_plot_widget(view, theme)  # the bars in the theme's colours, as before
        expected = _pixels(view)
        for item in bars:
            view.removeItem(item)
        view.spans.setVisible(True)
        assert len(np.unique(drawn.view(np.uint32))) > 8  # lanes, tint, shade, axis: drawn
        assert np.array_equal(drawn, expected), theme.name


def test_a_sparse_frame_is_one_item_announcing_its_geometry_once(qtbot, monkeypatch) -> None:
    """A frame re-sets ~15 categories; the view gets one item and one geometry change, not
    one per category (each is a paint call, a transform and bounds work of its own)."""
    view = timeline(qtbot)
    announced = []
    spans = getattr(view, "spans", None)
    if spans is not None:
        announce = spans.prepareGeometryChange

        def counted() -> None:
            announced.append(1)
            announce()

        monkeypatch.setattr(spans, "prepareGeometryChange", counted)
    _show_sparse_frame(view)
    box = view.getPlotItem().getViewBox()
    with_spans = [
        item
        for item in box.addedItems
        if item.isVisible() and not item.boundingRect().isEmpty() and item is not view._shade
    ]
    assert len(with_spans) == 1
    # The timeline's item takes its view's extent as its geometry: new spans announce none,
    # or one when the view has moved out of it.
    assert len(announced) <= 1
    assert with_spans[0].shape().elementCount() == 5  # hover tests the box, not every span


def test_an_item_sized_to_its_spans_announces_its_geometry_once_a_frame(qtbot) -> None:
    """Without a view's extent (the rank rows), a frame re-setting every layer announces
    one geometry change, not one per layer."""
    view = timeline(qtbot)
    spans = LaneSpans()
    layers = [spans.add_layer("#336699", f"layer {i}") for i in range(6)]
    view.addItem(spans)
    announced = []
    announce = spans.prepareGeometryChange

    def counted() -> None:
        announced.append(1)
        announce()

    spans.prepareGeometryChange = counted  # type: ignore[method-assign]
    spans.boundingRect()  # the bounds are current: the next change is announced
    for i, layer in enumerate(layers):
        layer.set_spans(np.array([0.5, 1.5]), np.array([1.0, 2.0 + i]), float(i), 0.7)
    assert len(announced) == 1
    assert spans.boundingRect() == QRectF(0.5, 0.0, 6.5, 5.7)
