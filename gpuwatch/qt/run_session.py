"""What a window watches: a live run, or a recording played back through the same views."""

from __future__ import annotations

from gpuwatch.core.files.replay import ReplaySession
from gpuwatch.core.run.session import Session

#: A window's session: ``Session`` (a live run) or ``ReplaySession`` (a recording).
RunSession = Session | ReplaySession
