"""Qt signals for a run model's rare changes, so views react instead of polling.

Steps and samples stay on the window's one redraw timer; what happens a few times per run (a
configuration applied, a change refused, a kernel window, a capture that failed, the run's
state) arrives here as a signal carrying the typed event's payload.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from gpuwatch.core.model.messages import (
    CaptureFailed,
    ChangeRefused,
    ConfigApplied,
    KernelWindowReady,
    ModelEvent,
    StateChanged,
)
from gpuwatch.core.run.run_model import RunModel


class SessionSignals(QObject):
    """Re-emits a ``RunModel``'s events as Qt signals in this object's thread (the GUI's).

    The model calls its listeners on whichever thread folded the change (usually the
    session's link thread). A signal emitted from a thread other than this object's is
    delivered through a queued connection by Qt, so connected slots of GUI objects always
    run on the GUI thread, in the order the events happened.
    """

    #: A configuration was applied: ``gpuwatch.core.model.messages.ConfigChange``.
    sig_config_applied = Signal(object)
    #: The runner refused a change: ``gpuwatch.core.model.messages.Refusal``.
    sig_refusal = Signal(object)
    #: A kernel capture gave a window: ``gpuwatch.core.figures.kernel_window.KernelWindow``.
    sig_kernel_window = Signal(object)
    #: A kernel capture ended without a window: the reason (``str``).
    sig_capture_failed = Signal(object)
    #: The run's state or liveness changed: the ``SessionState`` after the change.
    sig_state_changed = Signal(object)

    def __init__(self, model: RunModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model = model
        # One bound method, kept: removing it needs the very object that was added.
        listener = self._listener = self._on_event
        model.add_listener(listener)
        self.destroyed.connect(lambda *_: model.remove_listener(listener))

    def detach(self) -> None:
        """Stop listening to the model (e.g. before the window drops this session)."""
        self.model.remove_listener(self._listener)

    def _on_event(self, event: ModelEvent) -> None:
        if isinstance(event, ConfigApplied):
            self.sig_config_applied.emit(event.change)
        elif isinstance(event, ChangeRefused):
            self.sig_refusal.emit(event.refusal)
        elif isinstance(event, KernelWindowReady):
            self.sig_kernel_window.emit(event.window)
        elif isinstance(event, CaptureFailed):
            self.sig_capture_failed.emit(event.error)
        elif isinstance(event, StateChanged):
            self.sig_state_changed.emit(event.state)
