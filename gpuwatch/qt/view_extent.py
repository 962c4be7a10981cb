"""A plot item's geometry fixed to a region around its view, so new data inside it repaints
only the part it changed.

An item sized to its data announces a new geometry whenever its data grows, and Qt then
repaints the old and new rectangles together: for data spanning the view, the whole plot.
A followed view stands still between its strides, so most frames change only its right end;
an item whose geometry is the view and a view's width and height either side keeps that
geometry while its data changes, and can repaint just the changed part.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QRectF

#: The extent is laid out anew once the view has zoomed in this far inside it.
MAX_VIEWS_WIDE = 5


class ViewExtent:
    """The extent of ``item`` (a ``pg.GraphicsItem`` in a view box): the view and a view's
    width and height on each side, in the item's coordinates; kept while the view moves
    inside it, laid out anew (a geometry change, a whole repaint as any move of the view
    makes) once the view leaves it or zooms far inside it."""

    def __init__(self, item: pg.GraphicsItem) -> None:
        self._item = item
        self._rect: QRectF | None = None

    def rect(self) -> QRectF | None:
        """The extent, or None while the item has no view to measure."""
        if self._rect is None:
            view = self._view()
            if view is None:
                return None
            self._rect = view.adjusted(-view.width(), -view.height(), view.width(), view.height())
        return QRectF(self._rect)

    def view_changed(self) -> None:
        """Call from the item's ``viewTransformChanged``: the view moved or zoomed."""
        rect, view = self._rect, self._view()
        if (
            rect is not None
            and view is not None
            and rect.contains(view)
            and rect.width() <= MAX_VIEWS_WIDE * view.width()
            and rect.height() <= MAX_VIEWS_WIDE * view.height()
        ):
            return
        self._item.prepareGeometryChange()
        self._rect = None

    def _view(self) -> QRectF | None:
        view = self._item.viewRect()
        if view is None or not view.isValid():
            return None
        return QRectF(view)
