"""The view keys' effects: pause the view (Space) and zoom the time axis (Ctrl+= / Ctrl+-).

Both act on what is shown, never on the run: a paused view still polls the session, and a
zoom only changes how many seconds the timeline and utilization plots cover.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

#: Visible window lengths Ctrl+= / Ctrl+- step through (seconds).
ZOOM_LEVELS_S = (5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
PAUSED_HINT = "view paused (the run goes on): Space resumes"

if TYPE_CHECKING:
    from gpuwatch.qt.window_shell import WindowShell


def set_view_paused(window: WindowShell, paused: bool) -> None:
    """Paused: stop following "now" and freeze the headline; resumed: follow again."""
    window.view_paused = paused
    if paused:
        window.follow_action.setChecked(False)
        window.statusBar().showMessage(PAUSED_HINT)
    else:
        window.statusBar().clearMessage()
        window.follow_action.setChecked(True)


def next_zoom_level(current: float, direction: int) -> float:
    """One level shorter (-1) or longer (+1) than ``current``, stopping at the ends."""
    if direction < 0:
        shorter = [s for s in ZOOM_LEVELS_S if s < current - 1e-9]
        return shorter[-1] if shorter else ZOOM_LEVELS_S[0]
    longer = [s for s in ZOOM_LEVELS_S if s > current + 1e-9]
    return longer[0] if longer else ZOOM_LEVELS_S[-1]


def zoom(window: WindowShell, direction: int) -> float:
    """Step the visible window length one level shorter (-1) or longer (+1); returns it.

    While following, the next redraw uses it; otherwise the view keeps its right edge.
    """
    new = window.window_s = next_zoom_level(window.window_s, direction)
    if not window.follow:
        vb = window.timeline.getPlotItem().getViewBox()
        hi = vb.viewRange()[0][1]
        vb.setXRange(hi - new, hi, padding=0)
    window.statusBar().showMessage(f"time axis: {new:g} s visible", 5_000)
    return new
