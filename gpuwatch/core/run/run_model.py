"""What a view reads of a run: the runner's messages folded into stores, changes and answers.

A ``RunModel`` has no process, no thread and no socket of its own: ``Session`` (a live run)
and ``ReplaySession`` (a recording) both own one and feed it messages, so a replay shows what
the live window showed through the same code.

Rare changes (a configuration applied, a change refused, a kernel window, the run's state)
are also handed to listeners as typed events (``gpuwatch.core.model.messages.ModelEvent``).
A listener is called on the thread that made the change: the link thread for the runner's
messages, the session's clock or watch thread for liveness and the run's end, the caller's
thread for ``start`` and ``stop``. It must return at once; one that raises is logged once and
never stops the fold.
"""

from __future__ import annotations

import logging
import threading

from gpuwatch.core.model.messages import ModelEvent, ModelListener

log = logging.getLogger(__name__)


class RunModel:
    """The state of one run as its messages describe it, and the listeners of its changes."""

    def __init__(self) -> None:
        self._listeners: list[ModelListener] = []
        self._failed_listeners: set[int] = set()
        self._listeners_lock = threading.Lock()

    # ---- Listeners of rare changes ---------------------------------------------------

    def add_listener(self, listener: ModelListener) -> None:
        """Call ``listener(event)`` on every rare change (see the module docstring)."""
        with self._listeners_lock:
            self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener: ModelListener) -> None:
        """Detach ``listener``; compared by equality, so a bound method can be passed again."""
        with self._listeners_lock:
            self._listeners = [f for f in self._listeners if f != listener]

    def emit(self, event: ModelEvent) -> None:
        """Hand ``event`` to every listener; a failing listener is logged once and kept."""
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                key = id(listener)
                if key not in self._failed_listeners:
                    self._failed_listeners.add(key)
                    log.exception("a run model listener %r failed on %r", listener, event)
