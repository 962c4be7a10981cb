"""DDP's own all-reduce timing (``runner/ddp_timing``): a DDP whose record cannot be read
switches the instrument off with one notice and never raises into the script; a record without
a sample sends nothing. Real DDP ranks, each of its first ten samples sent once and recorded,
are in ``test_torchrun_ranks.py`` (the module-mode run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from gpuwatch.runner.ddp_timing import DDP_TIMING, DdpTiming

REPO = Path(__file__).resolve().parents[1]


class _Notices:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, kind: str, **fields: Any) -> None:
        self.sent.append((kind, fields))

    send_batch = send


class _BrokenDdp(torch.nn.parallel.DistributedDataParallel):
    """A DDP (to ``isinstance``) whose record cannot be read, as on a torch without it."""

    def _get_ddp_logging_data(self) -> dict[str, Any]:
        raise AttributeError("no logging data in this torch")


def test_a_record_that_cannot_be_read_turns_the_instrument_off_once() -> None:
    link = _Notices()
    timing = DdpTiming(link)
    broken = object.__new__(_BrokenDdp)  # no process group needed to be one

    for _ in range(3):
        timing.saw_outermost(broken)  # never raises into the script

    assert len(link.sent) == 1, link.sent
    kind, fields = link.sent[0]
    assert kind == "log" and fields["off"] == DDP_TIMING.name, fields
    assert "all-reduce time DDP measures" in fields["text"]
    assert "AttributeError: no logging data in this torch" in fields["text"]


@pytest.mark.parametrize("iteration, comm_ns", [(-1, 5), (3, 0)])
def test_a_record_without_a_sample_sends_nothing(iteration: int, comm_ns: int) -> None:
    """Before DDP's first sample its record holds no time: nothing to send."""

    class Unsampled(torch.nn.parallel.DistributedDataParallel):
        def _get_ddp_logging_data(self) -> dict[str, Any]:
            return {"iteration": iteration, "backward_comm_time": comm_ns}

    link = _Notices()
    DdpTiming(link).saw_outermost(object.__new__(Unsampled))
    assert link.sent == []
