"""Start-up hook of a process that should run on simcuda (tests only).

Python imports ``sitecustomize`` at start-up from ``sys.path``; ``runner_boot.runner_env``
puts this folder first on ``PYTHONPATH`` and the simulation's ``SimConfig`` (JSON) in
``GPUWATCH_SIMCUDA``. The variable is removed at once, so DataLoader workers and other children
start plain. ``install()`` runs right after ``import torch`` finishes (an import hook), on the
importing thread (the runner's main thread), so the runner still imports torch when it always
does. Each host wait is appended to ``SimConfig.report_path`` as one JSON line. The
``sitecustomize`` this one shadows (e.g. the distribution's) is then imported as usual.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import os
import sys
from pathlib import Path

ENV = "GPUWATCH_SIMCUDA"
HERE = str(Path(__file__).resolve().parent)
TESTS = str(Path(__file__).resolve().parents[2])


def _on_torch_loaded(config_json: str) -> None:
    sys.path.insert(0, TESTS)
    try:
        import simcuda
        from simcuda.model import SimConfig
    finally:
        sys.path.remove(TESTS)
    fields = json.loads(config_json)
    if "capability" in fields:
        fields["capability"] = tuple(fields["capability"])
    config = SimConfig(**fields)
    sim = simcuda.install(config)
    if config.report_path:
        report = open(config.report_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        sim.on_wait = lambda wait: report.write(json.dumps(vars(wait)) + "\n")


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Wraps torch's loader so the simulation is installed once torch is fully imported."""

    def __init__(self, config_json: str) -> None:
        self.config_json = config_json

    def find_spec(self, name: str, path: object, target: object = None) -> object:
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module  # type: ignore[attr-defined]

        def exec_module(module: object) -> None:
            original(module)
            _on_torch_loaded(self.config_json)

        loader.exec_module = exec_module  # type: ignore[attr-defined]
        return spec


def _chain_shadowed() -> None:
    """Import the ``sitecustomize`` this file hides further down ``sys.path``."""
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


_config = os.environ.pop(ENV, None)
if _config is not None:
    sys.meta_path.insert(0, _AfterTorch(_config))
_chain_shadowed()
