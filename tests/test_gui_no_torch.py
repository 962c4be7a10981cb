"""The GUI process never imports torch, even with a real run drawn in its window.

``test_boundaries`` checks the imports; this runs the whole thing in a fresh process: the
window opens, a real runner (``mlp`` on the CPU, which imports torch in *its* process) trains a
few steps, the window draws them, and only then is ``sys.modules`` of the GUI process looked at.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GUI = """
import sys, time
from gpuwatch.core.run.session import LaunchSpec, Session
from gpuwatch.qt.app import create_app
from gpuwatch.qt.main_window import MainWindow
from gpuwatch.qt.window_options import WindowOptions

app = create_app()
session = Session()
window = MainWindow(session, WindowOptions(workload="mlp", device="cpu"))
window.show()
torch_at_show = "torch" in sys.modules
session.start(LaunchSpec(workload="mlp", device="cpu", max_steps=20))
deadline = time.monotonic() + 150
while window.timeline.phase_bars["forward"].count() == 0 and time.monotonic() < deadline:
    app.processEvents()
    time.sleep(0.01)
drawn = window.timeline.phase_bars["forward"].count()
window.close()
print("RESULT", drawn, torch_at_show, "torch" in sys.modules, session.error)
"""


def test_window_draws_a_real_run_without_importing_torch(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "GPUWATCH_SETTINGS_DIR": str(tmp_path / "settings"),
        "GPUWATCH_LOG_DIR": str(tmp_path / "logs"),
    }
    done = subprocess.run(
        [sys.executable, "-c", GUI],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert result, done.stdout + done.stderr
    _, drawn, torch_at_show, torch_at_end, error = result[0].split(" ", 4)
    assert error == "None"
    assert int(drawn) > 0, "the window drew the runner's steps"
    assert torch_at_show == "False"
    assert torch_at_end == "False"
