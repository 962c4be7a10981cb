"""The time a DistributedDataParallel rank spends in its all-reduce, as DDP itself measures it.

DDP's reducer times its own iterations: on the first ten and then on every hundredth (torch's
``kDDPRuntimeLoggingSampleRate``) it records when the backward's first bucket started its
all-reduce and when the last one finished (CUDA events on a GPU, the host clock on a CPU), and
``DistributedDataParallel._get_ddp_logging_data()`` returns the newest such sample. That span
includes the wait for the other ranks: the rank that arrives last at the all-reduce has the
shortest one. Reading it changes nothing DDP does (its sample rate stays the script's), costs a
dictionary copy, and happens on the script's thread between two steps (at the outermost
forward's start, when DDP is not writing the sample): at each of a module's first
``EARLY_READS`` forwards, then at most once every ``POLL_S``.

Each new sample goes to the GUI as a ``collective`` message. A failure (a torch whose DDP has
no such record) switches this instrument off with one notice.
"""

from __future__ import annotations

import sys
import time
import weakref
from typing import Any, Protocol

from gpuwatch.runner.instrument_switch import Instrument, InstrumentSwitch, NoticeLink

#: How often the newest sample is read at most (seconds): DDP samples every 100th iteration.
POLL_S = 1.0
#: DDP samples each of its first ten iterations: the first this many forwards of a module read
#: the sample of the iteration before, whatever the time.
EARLY_READS = 12

DDP_TIMING = Instrument("ddp_timing", "the all-reduce time DDP measures is no longer read")


class SampleLink(NoticeLink, Protocol):
    """The runner's link: samples go with ``send_batch``, which never waits."""

    def send_batch(self, kind: str, **fields: Any) -> None: ...


class DdpTiming:
    """Reads DDP's own timing of the all-reduce from the outermost DDP module of each step."""

    def __init__(self, link: SampleLink, switch: InstrumentSwitch | None = None) -> None:
        self._link = link
        self._switch = switch if switch is not None else InstrumentSwitch(link)
        self._module: weakref.ref[Any] | None = None
        self._next_poll = 0.0
        self._forwards = 0
        self._last_iteration = -1

    @staticmethod
    def follows(module: Any) -> bool:
        """Whether ``module`` is a DDP module, whose outermost forwards ``saw_outermost``
        wants to be told of (the step hooks ask once per module)."""
        distributed = sys.modules.get("torch.nn.parallel.distributed")
        ddp = getattr(distributed, "DistributedDataParallel", None)
        try:
            return isinstance(ddp, type) and isinstance(module, ddp)
        except Exception:  # a module whose class check fails is no DDP module of torch's
            return False

    def saw_outermost(self, module: Any) -> None:
        """An outermost forward starts; never raises into the script."""
        if self._switch.is_off(DDP_TIMING):
            return
        try:
            self._saw(module)
        except Exception as exc:
            self._switch.switch_off(DDP_TIMING, "reading DDP's all-reduce time", exc)

    def _saw(self, module: Any) -> None:
        if not self.follows(module):  # also when the script has not imported DDP at all
            return
        now = time.monotonic()
        known = self._module() if self._module is not None else None
        if known is not module:
            self._module = weakref.ref(module)
            self._forwards = 0
        self._forwards += 1
        if self._forwards > EARLY_READS and now < self._next_poll:
            return
        self._next_poll = now + POLL_S
        self.read(module)

    def read(self, module: Any) -> None:
        """Send the module's newest sample if it is new."""
        data = module._get_ddp_logging_data()
        iteration = int(data.get("iteration", -1))
        comm_ns = int(data.get("backward_comm_time", 0) or 0)
        if iteration == self._last_iteration or iteration < 0 or comm_ns <= 0:
            return
        self._last_iteration = iteration
        self._link.send_batch(
            "collective",
            source="ddp",
            iteration=iteration,
            comm_ns=comm_ns,
            overlap_ns=int(data.get("backward_compute_comm_overlap_time", 0) or 0),
            backward_compute_ns=int(data.get("backward_compute_time", 0) or 0),
        )
