"""DDP's own all-reduce timing, read from a real DistributedDataParallel (``runner/ddp_timing``).

One gloo rank on the CPU in a child process (a process group is global state the test process
must not keep): the reader sends one ``collective`` per new DDP sample, the first ten
iterations each, never the same iteration twice; a DDP whose record cannot be read switches
the instrument off with one notice and never raises into the script.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from gpuwatch.runner.ddp_timing import DDP_TIMING, DdpTiming

REPO = Path(__file__).resolve().parents[1]

#: 15 steps of a one-rank DDP, the reader told of the model before each forward (as the step
#: hooks tell it of the outermost module); prints what it sent, one JSON line.
ONE_RANK = """
    import json, sys
    import torch, torch.distributed as dist
    from gpuwatch.runner.ddp_timing import DdpTiming

    class Sent:
        def __init__(self):
            self.messages = []
        def send(self, kind, **fields):
            self.messages.append([kind, fields])
        send_batch = send

    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(model.parameters(), 0.1)
    sent = Sent()
    timing = DdpTiming(sent)
    for _ in range(15):
        timing.saw_outermost(model)
        timing.saw_outermost(torch.nn.Linear(1, 1))  # not DDP: ignored
        model(torch.randn(8, 64)).sum().backward()
        opt.step()
    dist.destroy_process_group()
    print(json.dumps(sent.messages))
"""


def test_each_new_ddp_sample_is_sent_once_with_its_iteration(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(ONE_RANK), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,  # a cold first import of torch
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    messages = json.loads(done.stdout.strip().splitlines()[-1])
    assert {kind for kind, _ in messages} == {"collective"}, messages
    iterations = [fields["iteration"] for _, fields in messages]
    # forwards 2..12 read the sample of the iteration before: DDP's first ten, each once
    assert iterations == sorted(set(iterations)), iterations
    assert set(range(1, 11)) <= set(iterations), iterations
    for _, fields in messages:
        assert fields["source"] == "ddp"
        assert fields["comm_ns"] > 0 and fields["backward_compute_ns"] > 0, fields


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
