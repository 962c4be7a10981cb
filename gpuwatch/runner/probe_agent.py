"""What ``gpuwatch.probe`` talks to while the runner watches a script (``probe.Agent``).

Steps and phases go to the step recorder, from the main thread only (like the hooks: a step is
the main thread's business); ``gw.knob()`` may be called from any thread. A failure of the
recorder is caught here, at the script's ``with gw.step():``/``gw.phase()``, and switches step
detection off with one notice (``instrument_switch``); a stop's ``KeyboardInterrupt`` passes.
A knob's own ``ValueError`` (declared twice with other settings) is the script's and is raised.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gpuwatch.runner.probe_knobs import ProbeKnobs
from gpuwatch.runner.step_columns import SpentTime
from gpuwatch.runner.step_recorder import StepRecorder

PROBE_STEP = "gpuwatch.probe.step()"
PROBE_PHASE = "gpuwatch.probe.phase()"


class ProbeAgent:
    """The runner's ``gpuwatch.probe.Agent``: steps and phases go to the recorder, knobs to
    ``ProbeKnobs``."""

    def __init__(
        self, recorder: StepRecorder, knobs: ProbeKnobs, spent: SpentTime | None = None
    ) -> None:
        self.recorder = recorder
        self.knobs = knobs
        #: Where the time spent recording steps and phases is added (as the hooks do).
        self.spent = spent if spent is not None else SpentTime()
        self._main = threading.get_ident()

    def step_enter(self, samples: int | None) -> None:
        self._report(PROBE_STEP, self.recorder.step_enter, samples)

    def step_exit(self, ok: bool) -> None:
        self._report(PROBE_STEP, self.recorder.step_exit, ok)

    def phase_enter(self, index: int) -> None:
        self._report(PROBE_PHASE, self.recorder.phase_enter, index)

    def phase_exit(self, index: int) -> None:
        self._report(PROBE_PHASE, self.recorder.phase_exit, index)

    def knob(self, entry: dict[str, Any]) -> Any:
        return self.knobs.declare(entry)

    def _report(self, where: str, call: Callable[[Any], None], arg: Any) -> None:
        recorder = self.recorder
        if not recorder.detecting or threading.get_ident() != self._main:
            return
        start = time.perf_counter_ns()
        try:
            call(arg)
        except Exception as exc:
            recorder.switch_off_detection(where, exc)
        self.spent.ns += time.perf_counter_ns() - start
