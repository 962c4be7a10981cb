"""Instruments of a watched script that switch themselves off instead of raising into it.

gpuwatch's hooks run inside the user's own calls (``next(loader)``, ``model(x)``,
``loss.backward()``, ``optimizer.step()``, ``gw.step()``): an exception of ours raised there
would surface from the user's line and end the script. So every hook catches its own failure
(``Exception`` only: a stop's and Ctrl-C's ``KeyboardInterrupt`` and ``SystemExit`` pass), the
instrument that failed switches itself off, and what still works goes on measuring (device
marks off: host marks go on). Each instrument says once why it is off: a ``log`` warning with
``off`` naming it (``gpuwatch.protocol``), which the window shows in its banner and log and the
headless run on stderr and in its summary.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Protocol

#: At most this much of an exception's message goes into the notice.
MESSAGE_CHARS = 200


class NoticeLink(Protocol):
    """What the switch needs of the runner's link: sending its one notice per instrument."""

    def send(self, kind: str, **fields: Any) -> None: ...


@dataclass(frozen=True)
class Instrument:
    """One part of gpuwatch's measurement that can fail on its own."""

    name: str  # the ``off`` field of the notice
    lost: str  # what is no longer measured once it is off


DEVICE_MARKS = Instrument("device_marks", "device marks are off (steps keep their host marks)")
STEP_DETECTION = Instrument(
    "step_detection",
    "step detection is off (the steps recorded so far are kept; the script runs on unwatched)",
)
KERNEL_CAPTURE = Instrument("kernel_capture", "kernel capture is off")
CONTROLS = Instrument("controls", "a control message from the window was not applied")


def describe_failure(exc: BaseException) -> str:
    """``Type: message`` on one line, shortened."""
    text = " ".join(str(exc).split())
    if len(text) > MESSAGE_CHARS:
        text = text[: MESSAGE_CHARS - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class InstrumentSwitch:
    """Which instruments are off, and the one notice each one sends when it goes off."""

    def __init__(self, link: NoticeLink) -> None:
        self._link = link
        self._lock = threading.Lock()
        #: name → the notice's text, for each instrument switched off.
        self.off: dict[str, str] = {}

    def is_off(self, instrument: Instrument) -> bool:
        return instrument.name in self.off

    def switch_off(self, instrument: Instrument, where: str, exc: BaseException) -> bool:
        """``instrument`` failed in ``where``: remember it and send its notice; False (and no
        second notice) when it was off already. Never raises."""
        text = f"{instrument.lost}: gpuwatch's {where} failed ({describe_failure(exc)})"
        with self._lock:
            if instrument.name in self.off:
                return False
            self.off[instrument.name] = text
        # a broken link: nothing else to tell, and nothing to raise into
        with contextlib.suppress(Exception):
            self._link.send("log", level="warning", text=text, off=instrument.name)
        return True
