"""What ``gpuwatch.probe`` talks to while the runner watches a script (``probe.Agent``).

Steps and phases go to the step recorder, from the main thread only (like the hooks: a step is
the main thread's business); ``gw.knob()`` may be called from any thread.
"""

from __future__ import annotations

import threading
from typing import Any

from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.step_recorder import StepRecorder


class ProbeAgent:
    def __init__(self, recorder: StepRecorder, knobs: ProbeKnobs) -> None:
        self.recorder = recorder
        self.knobs = knobs
        self._main = threading.get_ident()

    def step_enter(self, samples: int | None) -> None:
        if threading.get_ident() == self._main:
            self.recorder.step_enter(samples)

    def step_exit(self, ok: bool) -> None:
        if threading.get_ident() == self._main:
            self.recorder.step_exit(ok)

    def phase_enter(self, index: int) -> None:
        if threading.get_ident() == self._main:
            self.recorder.phase_enter(index)

    def phase_exit(self, index: int) -> None:
        if threading.get_ident() == self._main:
            self.recorder.phase_exit(index)

    def knob(self, entry: dict[str, Any]) -> Any:
        return self.knobs.declare(entry)
