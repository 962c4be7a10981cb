"""``gpuwatch --self-test``: exit codes, the one line and the JSON result file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwatch.commands import self_test
from gpuwatch.core.run import interpreters


def run_cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        QT_QPA_PLATFORM="offscreen",
        GPUWATCH_SETTINGS_DIR=str(tmp_path / "settings"),
        GPUWATCH_LOG_DIR=str(tmp_path / "logs"),
    )
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", "--self-test", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_self_test_passes_with_a_torch_interpreter(tmp_path):
    result = tmp_path / "result.json"
    done = run_cli("--python", sys.executable, "--result", str(result), tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuwatch self-test: passed: ")
    report = json.loads(result.read_text())
    assert report["ok"] is True
    assert report["steps"] >= self_test.MIN_STEPS
    assert report["python"] == sys.executable and report["python_from"] == "--python"
    assert report["runner"]["versions"]["torch"]
    assert report["seconds_to_first_step"] <= report["seconds"]


@pytest.mark.skipif(sys.platform == "win32", reason="the fake interpreter is sh")
def test_self_test_fails_with_the_fix_when_the_interpreter_has_no_torch(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    result = tmp_path / "result.json"
    done = run_cli("--python", str(fake), "--result", str(result), tmp_path=tmp_path)
    assert done.returncode == 1
    assert done.stdout.startswith("gpuwatch self-test: failed: ")
    assert "No module named 'torch'" in done.stdout
    report = json.loads(result.read_text())
    assert report["ok"] is False and report["steps"] == 0
    assert report["verdict"]["level"] == "bad"


def test_frozen_without_any_torch_python_says_how_to_get_torch(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(interpreters, "discover", lambda: [])
    opened = []
    result = self_test.run_self_test(None, None, tmp_path / "r.json", opened.append)
    assert not result.ok and not opened  # nothing to launch, so no window either
    assert "No Python with torch was found" in result.message
    assert json.loads((tmp_path / "r.json").read_text())["frozen"] is True


def test_explicit_python_wins_over_the_remembered_one(tmp_path):
    result = self_test.SelfTestResult()
    assert self_test.choose_python("/a/python", "/b/python", result) == "/a/python"
    assert self_test.choose_python(None, "/b/python", result) == "/b/python"
    assert result.python_from.startswith("chosen in the window")


def test_unwritable_result_file_is_a_note_not_a_crash(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = self_test.SelfTestResult(message="passed")
    self_test.write_result(result, blocker / "r.json")
    assert "result file not written" in result.message
