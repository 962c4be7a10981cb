"""Run a real process (a gpuwatch runner, a script) on simcuda.

``runner_env(config)`` returns the environment variables that make a child Python install the
simulation right after it imports torch (``boot/sitecustomize.py``). Tests put them into
``os.environ`` before ``Session.start`` (the launcher passes ``os.environ``, ``PYTHONPATH``
included, on to the runner)::

    config = SimConfig(report_path=str(tmp_path / "waits.jsonl"), sync_debug_mode=0)
    for name, value in runner_env(config).items():
        monkeypatch.setenv(name, value)
    session.start(LaunchSpec(workload="mlp", device="cuda"))
    ...
    waits = read_waits(config)  # every host wait the runner made, with its time

For ``subprocess`` use ``{**os.environ, **runner_env(config)}``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from simcuda.model import HostWait, SimConfig

BOOT_DIR = Path(__file__).resolve().parent / "boot"
ENV = "GPUWATCH_SIMCUDA"


def runner_env(config: SimConfig, environ: dict[str, str] | None = None) -> dict[str, str]:
    """``PYTHONPATH`` (boot folder first, then ``environ``'s) and the simulation's config."""
    environ = dict(os.environ if environ is None else environ)
    path = os.pathsep.join(p for p in (str(BOOT_DIR), environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, ENV: json.dumps(dataclasses.asdict(config))}


def read_waits(config: SimConfig) -> list[HostWait]:
    """The host waits the process reported so far (``config.report_path``)."""
    if config.report_path is None or not Path(config.report_path).exists():
        return []
    lines = Path(config.report_path).read_text(encoding="utf-8").splitlines()
    return [HostWait(**json.loads(line)) for line in lines if line.strip()]
