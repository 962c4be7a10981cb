"""A watched process's timing backend and its ``hello``: the same for a script and a rank.

A watched script (``script_session``) and a rank a script spawned (``spawned_ranks``) both
time their steps on the device they train on and introduce themselves to the GUI the same way;
only the name, the warm-up and a few fields (the script's path, the rank) differ.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from gpuwatch.protocol import PROTOCOL_VERSION
from gpuwatch.runner.link import Link
from gpuwatch.runner.timing import TimingBackend


def say_hello(
    link: Link, torch: Any, device: Any, *, workload: str, warmup_steps: int, **fields: Any
) -> TimingBackend:
    """The backend that times steps on ``device`` (a CUDA device named once the script
    chose it sends ``device``), then ``hello`` with ``fields`` added; returns the backend."""
    from gpuwatch.runner.session import device_info, make_script_backend, versions

    backend = make_script_backend(
        torch,
        device,
        notify=lambda text: link.log("info", text),
        on_device=lambda index: link.send(
            "device", device=device_info(torch, torch.device("cuda", index))
        ),
    )
    link.send(
        "hello",
        protocol=PROTOCOL_VERSION,
        pid=os.getpid(),
        workload=workload,
        device=device_info(torch, device),
        versions=versions(torch),
        os=platform.platform(),
        knobs=[],
        config={"id": 0, "values": {}, "warmup_steps": warmup_steps},
        workload_config={},
        timing=backend.kind,
        instrumentation="auto",
        **fields,
    )
    return backend
