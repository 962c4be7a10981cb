"""Run a survey command in another Python and read the one JSON object it prints.

Shared by ``gpuwatch doctor`` and the interpreter picker.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any


def run_json_survey(
    cmd: list[str], env: dict[str, str], timeout: float, python: str, cwd: str | None = None
) -> dict[str, Any]:
    """Run a survey command that prints one JSON object; its report or ``{"error": ...}``.

    Shared by doctor and the interpreter picker: a hung interpreter is killed after
    ``timeout`` and every failure is one sentence naming ``python``.
    """
    try:
        done = subprocess.run(
            cmd,
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
            encoding="utf-8",
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{python} did not answer within {timeout:g} s"}
    except OSError as exc:
        return {"error": f"cannot run {python}: {exc.strerror or exc}"}
    lines = [ln for ln in done.stdout.splitlines() if ln.strip().startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": f"{python} is not usable for training: {_gist(done.stderr)}"}
    try:
        report = json.loads(lines[-1])
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict):
        return {"error": f"{python} printed an unreadable survey report"}
    return report


def _gist(stderr: str) -> str:
    """The line of a failed survey's stderr that says why: a traceback's last line, else the
    first (a launcher or shim explains itself first and adds hints below)."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    if not lines:
        return "no output"
    return lines[-1] if any(ln.startswith("Traceback") for ln in lines) else lines[0]
