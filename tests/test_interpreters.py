"""Finding and judging training interpreters (gpuwatch.core.run.interpreters).

Fake interpreters are shell scripts named ``python`` that print a survey report (or fail,
or hang); GPU capabilities are simulated numbers, since this machine has no GPU.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from gpuwatch.core.run import interpreters
from gpuwatch.core.run.interpreters import BAD, OK, WARN, Candidate, arch_supports, judge

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fake interpreters are sh")

TORCH_OK = {
    "python": "3.11.7",
    "torch": "2.14.1+cu130",
    "torchvision": "0.29.1",
    "cuda": "13.0",
    "cuda_available": True,
    "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
    "capabilities": [[8, 6]],
}


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_python(folder: Path, report: dict | None = None, script: str | None = None) -> Path:
    body = script if script is not None else f"cat <<'EOF'\n{json.dumps(report)}\nEOF\n"
    return executable(folder / "python", "#!/bin/sh\n" + body)


# ---- Discovery ----------------------------------------------------------------------------


def test_discovery_finds_venvs_conda_envs_project_and_path_once_each(tmp_path):
    home, cwd, bin_dir = tmp_path / "home", tmp_path / "project", tmp_path / "usr-bin"
    expected = [
        executable(home / "active" / "bin" / "python"),
        executable(cwd / ".venv" / "bin" / "python"),
        executable(home / ".venv-torch" / "bin" / "python"),
        executable(home / "venvs" / "a" / "bin" / "python"),
        executable(home / ".virtualenvs" / "b" / "bin" / "python3"),
        executable(home / "miniconda3" / "bin" / "python"),
        executable(home / "miniconda3" / "envs" / "c" / "bin" / "python"),
        executable(tmp_path / "elsewhere" / "d" / "bin" / "python"),
        executable(bin_dir / "python3"),
    ]
    (home / ".conda").mkdir()
    (home / ".conda" / "environments.txt").write_text(
        f"{tmp_path / 'elsewhere' / 'd'}\n{home / 'miniconda3' / 'envs' / 'c'}\n"
    )
    (bin_dir / "python3.12").symlink_to(bin_dir / "python3")  # the same interpreter
    executable(bin_dir / "python3-config")  # not an interpreter
    (bin_dir / "python").write_text("not executable")
    environ = {
        "PATH": os.pathsep.join([str(bin_dir), str(tmp_path / "missing")]),
        "VIRTUAL_ENV": str(home / "active"),
        "CONDA_PREFIX": str(home / "active"),
    }

    found = interpreters.discover(home=home, environ=environ, cwd=cwd, windows=False)

    paths = [Path(c.path) for c in found if c.origin != "gpuwatch's own Python"]
    assert paths == expected
    origins = {Path(c.path): c.origin for c in found}
    assert origins[expected[0]].startswith("active venv")
    assert origins[expected[6]].startswith("conda env c")
    assert origins[expected[-1]] == "on PATH"


def test_a_venv_in_the_home_is_not_called_a_project_venv_when_started_from_the_home(tmp_path):
    """A menu entry starts the app in the home folder (seen under Xvfb: the status bar said
    "project venv: ~/.venv")."""
    venv = executable(tmp_path / ".venv" / "bin" / "python")
    found = interpreters.discover(home=tmp_path, environ={"PATH": ""}, cwd=tmp_path)
    assert [c.origin for c in found if Path(c.path) == venv] == [f"venv: {tmp_path / '.venv'}"]
    project = interpreters.discover(home=tmp_path / "elsewhere", environ={"PATH": ""}, cwd=tmp_path)
    assert [c.origin for c in project if Path(c.path) == venv] == [
        f"project venv: {tmp_path / '.venv'}"
    ]


def test_discovery_windows_layout_and_remembered_choice_first(tmp_path):
    home = tmp_path / "home"
    venv = executable(home / "venvs" / "w" / "Scripts" / "python.exe")
    conda = executable(home / "miniconda3" / "envs" / "x" / "python.exe")
    chosen = executable(tmp_path / "chosen" / "python")
    found = interpreters.discover(
        home=home,
        environ={"PATH": "", "LOCALAPPDATA": str(home)},
        cwd=tmp_path,
        windows=True,
        extra=[Candidate(str(chosen), "chosen")],
    )
    paths = [Path(c.path) for c in found]
    assert paths[0] == chosen
    assert venv in paths and conda in paths


def test_frozen_discovery_never_offers_the_app_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    found = interpreters.discover(home=tmp_path, environ={"PATH": ""}, cwd=tmp_path)
    assert all(os.path.realpath(c.path) != os.path.realpath(sys.executable) for c in found)


# ---- Surveys of fake interpreters --------------------------------------------------------


def check(path: Path, gpus=(), timeout: float = 10.0):
    return interpreters.check(Candidate(str(path), "test"), gpus, timeout)


def test_green_for_a_torch_that_supports_the_gpu(tmp_path):
    result = check(fake_python(tmp_path, TORCH_OK), gpus=[(8, 6)])
    assert result.verdict.level == OK
    assert "sm_86 supported" in result.verdict.summary
    assert result.verdict.fix is None


def test_red_with_pip_command_when_torch_is_missing(tmp_path):
    report = {
        "python": "3.12.1",
        "torch": None,
        "torch_error": "ModuleNotFoundError: No module named 'torch'",
    }
    python = fake_python(tmp_path / "my env", report)
    verdict = check(python).verdict
    assert verdict.level == BAD
    assert "torch not installed" in verdict.summary
    assert verdict.fix == f"run `'{python}' -m pip install torch torchvision`"


def test_a_system_python_pip_refuses_gets_a_venv_recipe_not_pip(tmp_path):
    """Debian 12's /usr/bin/python3: `python3 -m pip install torch` fails with
    "externally-managed-environment" (PEP 668), so the fix makes ~/.venv instead."""
    stdlib = tmp_path / "usr" / "lib" / "python3.11"
    stdlib.mkdir(parents=True)
    (stdlib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    report = {
        "python": "3.11.2",
        "prefix": str(tmp_path / "usr"),
        "torch": None,
        "torch_error": "ModuleNotFoundError: No module named 'torch'",
    }
    verdict = judge(report, "/usr/bin/python3")
    assert verdict.level == BAD and "torch not installed" in verdict.summary
    assert "pip refuses" in verdict.fix
    assert (
        "`/usr/bin/python3 -m venv ~/.venv && ~/.venv/bin/python -m pip install torch torchvision`"
    ) in verdict.fix
    # The same Python in a venv (prefix = the venv, no marker): plain pip is right.
    venv = dict(report, prefix=str(tmp_path / "venv"))
    assert judge(venv, "/v/bin/python").fix == (
        "run `/v/bin/python -m pip install torch torchvision`"
    )


def test_no_torch_help_points_at_a_venv_discovery_finds(tmp_path):
    assert ".venv" in interpreters.NO_TORCH_HELP
    assert interpreters.NO_TORCH_HELP.endswith("Run → Choose Python….")  # the banner's link
    assert "python3 -m pip install torch" not in interpreters.NO_TORCH_HELP
    venv = executable(tmp_path / ".venv" / "bin" / "python")
    found = interpreters.discover(home=tmp_path, environ={"PATH": ""}, cwd=tmp_path / "x")
    assert venv in [Path(c.path) for c in found]


def test_red_for_a_program_that_is_not_python(tmp_path):
    fake = fake_python(tmp_path, script="echo 'sh: 1: -c: not a python' >&2\nexit 2\n")
    verdict = check(fake).verdict
    assert verdict.level == BAD
    assert "is not usable for training: sh: 1: -c: not a python" in verdict.summary
    other = executable(tmp_path / "ls")
    assert "is not a Python interpreter" in check(other).verdict.summary


def test_red_when_the_interpreter_hangs(tmp_path):
    verdict = check(fake_python(tmp_path, script="exec sleep 30\n"), timeout=0.5).verdict
    assert verdict.level == BAD
    assert verdict.summary.endswith("did not answer within 0.5 s")


#: How long a survey in a test may take: a cold first import of torch on a loaded machine.
COLD_SURVEY_S = 300.0


def test_real_python_without_torch_and_with_torch():
    """The survey source itself, in real interpreters (the venv has torch). A cold machine's
    first ``import torch`` can take longer than the window's 30 s: the test waits for the
    answer (it checks what the survey says, not how fast)."""
    with_torch = interpreters.check(
        Candidate(sys.executable, "venv"), gpus=[], timeout=COLD_SURVEY_S
    )
    assert with_torch.verdict.level == OK, with_torch.verdict
    assert with_torch.report["torch"]
    assert "trains on the CPU" in with_torch.verdict.summary
    system = Path("/usr/bin/python3")
    if system.exists():
        report = interpreters.survey(str(system), COLD_SURVEY_S)
        assert report["python"]  # whatever it has, it answers with a report


# ---- Verdicts (simulated GPUs) ------------------------------------------------------------


def test_gpu_newer_than_the_build_is_red_with_the_cu128_index():
    report = dict(
        TORCH_OK, arch_list=["sm_50", "sm_60", "sm_70", "sm_80", "sm_90"], capabilities=[[12, 0]]
    )
    verdict = judge(report, "/env/bin/python", gpus=[(12, 0)])
    assert verdict.level == BAD
    assert "no kernels for this GPU (sm_120" in verdict.summary
    assert "--index-url https://download.pytorch.org/whl/cu128" in verdict.fix


def test_cpu_only_torch_on_a_gpu_machine_is_a_warning():
    report = dict(TORCH_OK, cuda=None, cuda_available=False, arch_list=[], capabilities=[])
    verdict = judge(report, "/env/bin/python", gpus=[(6, 1)])
    assert verdict.level == WARN and verdict.usable
    assert "CPU-only build" in verdict.summary
    assert "whl/cu126" in verdict.fix


def test_cuda_build_that_cannot_reach_the_driver_is_a_warning():
    report = dict(
        TORCH_OK, cuda_available=False, capabilities=[], cuda_error="RuntimeError: driver too old"
    )
    verdict = judge(report, "/env/bin/python", gpus=[(8, 9)])
    assert verdict.level == WARN
    assert "driver too old" in verdict.summary and "NVIDIA driver" in verdict.fix


def test_old_python_old_torch_broken_torch_and_missing_torchvision():
    assert judge({"python": "3.8.18"}, "p").level == BAD
    old = judge(dict(TORCH_OK, torch="2.1.0"), "p")
    assert old.level == BAD and "-U torch" in old.fix
    broken = judge(
        {"python": "3.11.2", "torch": None, "torch_error": "OSError: [WinError 126] fbgemm.dll"},
        "p",
    )
    assert broken.level == BAD and "--force-reinstall" in broken.fix
    no_vision = judge(dict(TORCH_OK, torchvision=None), "p", gpus=[(8, 6)])
    assert no_vision.level == WARN and no_vision.fix == "run `p -m pip install torchvision`"


def test_the_index_fits_the_gpus_and_the_driver_s_cuda():
    """The newest index whose kernels cover every GPU and whose CUDA the driver supports;
    with the driver unknown, the oldest that covers them (it runs on the most drivers)."""
    name = lambda caps, driver: getattr(interpreters.cuda_index(caps, driver), "name", None)  # noqa: E731
    assert name([(8, 6)], (13, 0)) == "cu130"
    assert name([(8, 6)], (12, 8)) == "cu128"
    assert name([(8, 6)], (12, 6)) == "cu126"
    assert name([(8, 6)], (12, 4)) is None  # the driver is too old for every index
    assert name([(8, 6)], None) == "cu126"
    assert name([(12, 0)], (12, 6)) is None  # cu126 has no Blackwell kernels
    assert name([(12, 0)], None) == "cu128"
    assert name([(6, 1), (8, 6)], (13, 0)) == "cu126"  # every GPU must be covered
    assert name([(3, 5)], (13, 0)) is None


def test_check_reads_the_driver_s_cuda_when_nvml_saw_gpus(tmp_path, monkeypatch):
    monkeypatch.setattr(interpreters, "driver_cuda_version", lambda: (12, 8))
    report = dict(TORCH_OK, torch="2.14.1+cpu", cuda=None, cuda_available=False, arch_list=[])
    verdict = check(fake_python(tmp_path, report), gpus=[(8, 6)]).verdict
    assert verdict.level == WARN and verdict.fix.endswith("whl/cu128`")


def test_arch_support_rules():
    assert arch_supports(["sm_80"], (8, 6))  # same major, lower minor: cubin runs
    assert not arch_supports(["sm_86"], (8, 0))  # a newer minor's cubin does not
    assert not arch_supports(["sm_90"], (12, 0))  # another major: no
    assert arch_supports(["sm_90", "compute_90"], (12, 0))  # PTX is JIT-compiled
    assert arch_supports(["sm_120"], (12, 0))


def test_best_prefers_green_then_usable():
    def surveyed(level):
        return interpreters.Surveyed(Candidate(level, level), {}, interpreters.Verdict(level, ""))

    assert interpreters.best([surveyed(BAD), surveyed(WARN), surveyed(OK)]).candidate.path == OK
    assert interpreters.best([surveyed(BAD), surveyed(WARN)]).candidate.path == WARN
    assert interpreters.best([surveyed(BAD)]) is None
