"""The window (PySide6 + pyqtgraph): the only package that imports Qt; never torch.

pyqtgraph is imported here, before any view module does, so that its import skips
``cuda.bindings.runtime``: ``pyqtgraph.widgets.RawImageWidget`` (imported by pyqtgraph's own
``__init__``) tries it for a CUDA-OpenGL path of a widget we never use, and with torch's CUDA
build installed beside us that import costs 0.15–0.6 s of the window's start-up budget
(docs/performance.md §5). The module is hidden only while pyqtgraph imports (an entry of None
in ``sys.modules`` makes that one ``import`` fail as if cuda-python were absent) and the entry is
removed right after, so anything else in the process can still import it.
"""

from __future__ import annotations

import sys

_SKIPPED = "cuda.bindings.runtime"


def _import_pyqtgraph_without_cuda() -> None:
    if "pyqtgraph" in sys.modules or _SKIPPED in sys.modules:
        return  # too late to skip it, or already paid for: nothing to save
    sys.modules[_SKIPPED] = None  # type: ignore[assignment]
    try:
        import pyqtgraph  # noqa: F401
    finally:
        if _SKIPPED in sys.modules and sys.modules[_SKIPPED] is None:
            del sys.modules[_SKIPPED]


_import_pyqtgraph_without_cuda()
