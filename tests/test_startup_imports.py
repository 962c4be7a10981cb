"""What the window's start-up imports (budget: window shown <= 2 s).

Each check runs in a fresh interpreter: ``sys.modules`` of the test process is shared with every
other test and tells nothing about a cold start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

GUI_IMPORTS = """
import json, sys
import gpuwatch.cli, gpuwatch.qt.app, gpuwatch.qt.main_window
from pyqtgraph.widgets import RawImageWidget
loaded = {name for name, module in sys.modules.items() if module is not None}
report = {"pynvml": "pynvml" in loaded, "cuda_runtime": "cuda.bindings.runtime" in loaded,
          "torch": "torch" in loaded, "pyqtgraph": "pyqtgraph" in loaded,
          "raw_image_cuda": RawImageWidget.cudart is not None,
          "blocker_left": "cuda.bindings.runtime" in sys.modules}
try:  # only skipped while pyqtgraph imported: whoever needs it later still gets it
    import cuda.bindings.runtime
    report["later_import"] = "ok"
except ImportError as exc:
    report["later_import"] = type(exc).__name__ + ": " + str(exc)
print("RESULT " + json.dumps(report))
"""


def run_fresh(code: str) -> dict[str, object]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, done.stdout + done.stderr
    result: dict[str, object] = json.loads(line[len("RESULT ") :])
    return result


def test_window_modules_import_neither_pynvml_nor_cuda_bindings_nor_torch() -> None:
    report = run_fresh(GUI_IMPORTS)
    assert report["pyqtgraph"] is True
    assert report["pynvml"] is False  # imported once a CUDA runner says hello, not at start
    assert report["torch"] is False
    assert report["cuda_runtime"] is False and report["raw_image_cuda"] is False
    assert report["blocker_left"] is False
    if (
        importlib.util.find_spec("cuda") is not None
        and importlib.util.find_spec("cuda.bindings") is not None
    ):
        assert report["later_import"] == "ok"


@pytest.mark.parametrize("use", ["nvml.unavailable_reason()", "nvml.pynvml.NVMLError"])
def test_pynvml_is_imported_on_first_use(use: str) -> None:
    report = run_fresh(f"""
import json, sys
from gpuwatch.core.run import nvml, samplers
before = "pynvml" in sys.modules
{use}
print("RESULT " + json.dumps({{"before": before, "after": "pynvml" in sys.modules}}))
""")
    assert report == {"before": False, "after": True}
