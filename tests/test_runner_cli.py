"""``python -m gpuwatch.runner`` as a subprocess: --survey, argument errors, link set-up errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwatch.protocol import AUTHKEY_ENV, PROTOCOL_VERSION

REPO = Path(__file__).resolve().parents[1]


def runner(
    *args: str, env: dict[str, str] | None = None, pythonpath: str = str(REPO), timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != AUTHKEY_ENV}
    environ.update(env or {})
    environ["PYTHONPATH"] = pythonpath
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch.runner", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_survey_prints_one_json_object() -> None:
    import torch

    result = runner("--survey")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)  # the whole stdout is one JSON object
    assert info["torch"] == torch.__version__ and info["torch_error"] is None
    assert info["torchvision"] and info["protocol"] == PROTOCOL_VERSION
    assert info["python"] and info["executable"] and info["platform"]
    assert info["cuda_available"] == torch.cuda.is_available()
    assert info["cuda"] == torch.version.cuda
    assert isinstance(info["triton"], bool)
    if not torch.cuda.is_available():
        assert info["devices"] == []


def test_survey_without_torch_still_exits_0(tmp_path: Path) -> None:
    (tmp_path / "torch.py").write_text("raise ImportError('no torch in this interpreter')\n")
    result = runner("--survey", pythonpath=os.pathsep.join([str(tmp_path), str(REPO)]))
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["torch"] is None and info["devices"] == []
    assert info["torch_error"] == "ImportError: no torch in this interpreter"
    assert info["python"] and info["cuda_available"] is None


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--connect", "x", "--device", "gpu"),
        ("--connect", "x", "--max-steps", "0"),
        ("--connect", "x", "--workload", "nope"),
        ("--connect", "x", "--survey"),
        ("--probe",),  # the old name of --survey is gone
    ],
)
def test_bad_arguments_exit_2(args: tuple[str, ...]) -> None:
    result = runner(*args)
    assert result.returncode == 2
    assert "usage:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (None, "GPUWATCH_AUTHKEY is not set"),
        ("not-hex", "GPUWATCH_AUTHKEY is not a hex string"),
    ],
)
def test_missing_or_invalid_authkey_exits_3(key: str | None, expected: str) -> None:
    result = runner("--connect", "/nonexistent/sock", env={} if key is None else {AUTHKEY_ENV: key})
    assert result.returncode == 3
    assert expected in one_line(result.stderr)


def test_nothing_listening_exits_3(tmp_path: Path) -> None:
    result = runner("--connect", str(tmp_path / "nobody.sock"), env={AUTHKEY_ENV: "ab" * 32})
    assert result.returncode == 3
    assert one_line(result.stderr).startswith("gpuwatch runner: cannot connect to gpuwatch at ")
