"""Which Pythons on this machine can run the training, and what to do about those that can't.

A frozen gpuwatch has no torch (it would be ~5 GB): training runs in a Python the user
already has. This module finds the usual suspects (the Python gpuwatch was installed into,
``PATH``, venvs, conda envs, the py launcher on Windows), surveys each in a subprocess with
a timeout (``interpreter_survey``: Python, torch, CUDA, the GPU architectures torch was
built for) and turns each report into a verdict with the exact command that fixes it.
The GPU's compute capability comes from NVML, so a CPU-only torch on a GPU machine is
caught too. Qt-free: the picker dialog, ``--self-test`` and tests share it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwatch.core.run import launcher
from gpuwatch.core.run.json_survey import run_json_survey

#: Seconds one survey may take: a first ``import torch`` from a cold disk is slow.
SURVEY_TIMEOUT_S = 30.0
#: The runner's floor (pyproject's requires-python and torch pin).
MIN_PYTHON = (3, 10)
MIN_TORCH = (2, 4)
INDEX_URL = "https://download.pytorch.org/whl/{}"
OK, WARN, BAD = "ok", "warn", "bad"
_LEVEL_RANK = {OK: 0, WARN: 1, BAD: 2}
_PYTHON_NAME = re.compile(r"^python(3(\.\d+)?)?(\.exe)?$", re.IGNORECASE)
#: The survey's source, run with ``-c`` (the frozen build ships it as a plain data file here).
SURVEY_FILE = Path(__file__).with_name("interpreter_survey.py")


@dataclass(frozen=True)
class WheelIndex:
    """One of PyTorch's CUDA wheel indexes: the CUDA it is built with, the GPU architectures
    its wheels carry kernels for, and the oldest NVIDIA driver that runs that CUDA."""

    name: str
    cuda: tuple[int, int]
    arch_list: tuple[str, ...]
    min_driver_linux: str
    min_driver_windows: str

    @property
    def url(self) -> str:
        return INDEX_URL.format(self.name)

    def min_driver(self, windows: bool) -> str:
        return self.min_driver_windows if windows else self.min_driver_linux


#: PyTorch's CUDA wheel indexes, oldest CUDA first. Arch lists: what ``torch.cuda.
#: get_arch_list()`` reports for each build (the ``TORCH_CUDA_ARCH_LIST`` it is built with;
#: PyTorch's release matrix, https://github.com/pytorch/pytorch/blob/main/RELEASE.md, and
#: https://pytorch.org/get-started/locally/): cu126 keeps Maxwell to Hopper (5.0-9.0), cu128
#: and cu130 start at Turing (7.5) and reach Blackwell (12.0, plus its PTX). Drivers: the
#: "CUDA Toolkit and Corresponding Driver Versions" table of the CUDA release notes
#: (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/), the GA row of each version.
WHEEL_INDEXES = (
    WheelIndex(
        "cu126",
        (12, 6),
        ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
        "560.28.03",
        "560.76",
    ),
    WheelIndex(
        "cu128",
        (12, 8),
        ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
        "570.26",
        "570.65",
    ),
    WheelIndex(
        "cu130",
        (13, 0),
        ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"),
        "580.65.06",
        "580.88",
    ),
)


@dataclass(frozen=True)
class Candidate:
    """A Python to offer: its path and where it was found (shown beside it)."""

    path: str
    origin: str


@dataclass(frozen=True)
class Verdict:
    """``ok`` (green), ``warn`` (trains, with a caveat) or ``bad`` (red: cannot train)."""

    level: str
    summary: str
    fix: str | None = None

    @property
    def usable(self) -> bool:
        return self.level != BAD


@dataclass(frozen=True)
class Surveyed:
    """A candidate, what its survey reported, and the verdict on that report."""

    candidate: Candidate
    report: dict[str, Any]
    verdict: Verdict


# ---- Discovery --------------------------------------------------------------------------


def _env_python(env_dir: Path, windows: bool) -> Path | None:
    """The interpreter of a venv or conda env folder, if it has one."""
    names = ("python.exe", "Scripts/python.exe") if windows else ("bin/python", "bin/python3")
    for name in names:
        exe = env_dir / name
        if exe.is_file():
            return exe
    return None


def _conda_env_list(home: Path) -> list[Path]:
    """Every env conda ever created, from its own list (``~/.conda/environments.txt``)."""
    try:
        lines = (home / ".conda" / "environments.txt").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [Path(line.strip()) for line in lines if line.strip()]


def _py_launcher() -> list[Path]:
    """Pythons the Windows py launcher knows (``py -0p``)."""
    py = shutil.which("py")
    if not py:
        return []
    try:
        out = subprocess.run(
            [py, "-0p"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = (
        re.search(r"([A-Za-z]:\\.*?python[w]?\.exe)\s*$", line, re.IGNORECASE)
        for line in out.splitlines()
    )
    return [Path(m.group(1)) for m in found if m]


def _env_dirs(
    home: Path, environ: dict[str, str], cwd: Path, windows: bool
) -> Iterable[tuple[Path, str]]:
    """(environment folder, origin) in the order they are offered."""
    for var, origin in (("VIRTUAL_ENV", "active venv"), ("CONDA_PREFIX", "active conda env")):
        if environ.get(var):
            yield Path(environ[var]), origin
    # Started from a menu, the working folder is the home: its .venv is not a project's.
    here = "venv" if os.path.realpath(cwd) == os.path.realpath(home) else "project venv"
    for name in (".venv", "venv", "env"):
        yield cwd / name, here
    for pattern, origin in (
        (".venv*", "venv"),
        ("venvs/*", "venv"),
        (".virtualenvs/*", "virtualenv"),
        (".pyenv/versions/*", "pyenv"),
    ):
        for path in sorted(home.glob(pattern)):
            yield path, origin
    for base in ("miniconda3", "anaconda3", "mambaforge", "miniforge3", "micromamba", ".conda"):
        yield home / base, f"conda ({base})"
        for path in sorted((home / base / "envs").glob("*")):
            yield path, f"conda env {path.name}"
    for path in _conda_env_list(home):
        yield path, f"conda env {path.name}"
    if windows:
        local = Path(environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
        for path in sorted((local / "Programs" / "Python").glob("Python3*")):
            yield path, "python.org install"
        for name in ("miniconda3", "anaconda3", "miniforge3"):
            yield Path(environ.get("ProgramData") or "C:/ProgramData") / name, f"conda ({name})"


def _path_pythons(environ: dict[str, str]) -> Iterable[Path]:
    """``python3``, ``python3.X`` and ``python`` in every ``PATH`` folder, in PATH order."""
    for folder in environ.get("PATH", "").split(os.pathsep):
        if not folder or Path(folder).parts[-2:] == (".pyenv", "shims"):
            continue  # pyenv's shims only forward to the versions listed from ~/.pyenv
        try:
            names = sorted(os.listdir(folder), key=lambda n: (len(n), n))
        except OSError:
            continue
        for name in names:
            if _PYTHON_NAME.match(name):
                yield Path(folder) / name


def _key(path: Path) -> tuple[str, str]:
    """Same key = same environment: the folder the path sits in (resolved) and its target.

    A venv's ``bin/python`` links to the base Python but is another environment (its
    ``pyvenv.cfg`` is found from the unresolved path), so the folder is part of the key;
    ``/bin/python3`` and ``/usr/bin/python3`` on a merged-/usr system are one.
    """
    return (
        os.path.normcase(os.path.realpath(path.parent)),
        os.path.normcase(os.path.realpath(path)),
    )


def discover(
    home: Path | None = None,
    environ: dict[str, str] | None = None,
    cwd: Path | None = None,
    windows: bool | None = None,
    extra: Sequence[Candidate] = (),
) -> list[Candidate]:
    """Candidate interpreters, without duplicates, best guesses first.

    ``extra`` (e.g. the remembered choice) comes first. ``home``/``environ``/``cwd`` default
    to the real ones; tests pass a fake tree.
    """
    home = Path.home() if home is None else home
    environ = dict(os.environ) if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    windows = sys.platform == "win32" if windows is None else windows
    found: list[tuple[Path, str]] = [(Path(c.path), c.origin) for c in extra]
    if not launcher.is_frozen():
        found.append((Path(sys.executable), "gpuwatch's own Python"))
    for env_dir, origin in _env_dirs(home, environ, cwd, windows):
        exe = _env_python(env_dir, windows)
        if exe is not None:
            found.append((exe, f"{origin}: {env_dir}"))
    if windows:
        found += [(p, "py launcher") for p in _py_launcher()]
    found += [(p, "on PATH") for p in _path_pythons(environ)]
    seen: set[tuple[str, str]] = set()
    result = []
    for path, origin in found:
        if not path.is_file() or not os.access(path, os.X_OK):
            continue
        key = _key(path)
        if key not in seen:
            seen.add(key)
            result.append(Candidate(str(path), origin))
    return result


# ---- Survey and verdict -----------------------------------------------------------------


def looks_like_python(path: str) -> bool:
    """Only files named like an interpreter are run: a browsed ``sh`` or ``import`` would
    execute the survey's text as something else entirely."""
    name = Path(path).name.lower()
    return name.startswith("python") or name in ("py", "py.exe")


def survey(python: str, timeout: float = SURVEY_TIMEOUT_S) -> dict[str, Any]:
    """Run the survey in ``python`` (in an empty folder, so nothing there shadows a module)."""
    if not looks_like_python(python):
        return {
            "error": f"{Path(python).name} is not a Python interpreter (its name should "
            f"start with 'python')"
        }
    with tempfile.TemporaryDirectory(prefix="gpuwatch-survey-") as tmp:
        source = SURVEY_FILE.read_text(encoding="utf-8")
        return run_json_survey(
            [python, "-c", source], launcher.clean_env(), timeout, python, cwd=tmp
        )


def gpu_capabilities() -> list[tuple[int, int]]:
    """Compute capability of every GPU NVML sees (empty without NVML or a GPU)."""
    try:
        from gpuwatch.core.run import nvml

        caps = []
        for dev in nvml.list_devices():
            value = nvml.query("nvmlDeviceGetCudaComputeCapability", dev.handle)
            if value is not nvml.NA:
                caps.append((int(value[0]), int(value[1])))
        return caps
    except Exception:  # NVML is optional: no GPU info means "judge by torch alone"
        return []


def driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA the NVIDIA driver supports, from NVML (None without NVML or a GPU)."""
    try:
        from gpuwatch.core.run import nvml

        return nvml.cuda_driver_version()
    except Exception:  # NVML is optional: unknown means "choose by the GPUs alone"
        return None


def command(python: str, *args: str, windows: bool | None = None) -> str:
    """A command line the user can paste into their shell (``cmd`` quoting on Windows)."""
    parts = [python, *args]
    if sys.platform == "win32" if windows is None else windows:
        return subprocess.list2cmdline(parts)
    return shlex.join(parts)


def _pip(python: str, *args: str, windows: bool | None = None) -> str:
    return command(python, "-m", "pip", "install", *args, windows=windows)


def cuda_install(python: str, index: WheelIndex, windows: bool | None = None) -> str:
    """The pip command that replaces ``python``'s torch with ``index``'s build (the same
    version number with another local tag counts as installed, hence the reinstall)."""
    return _pip(
        python,
        "--force-reinstall",
        "torch",
        "torchvision",
        "--index-url",
        index.url,
        windows=windows,
    )


def venv_cuda_install(python: str, index: WheelIndex) -> str:
    """For a Python pip refuses to touch (PEP 668): a venv in the home, with ``index``'s torch,
    where discovery finds it by itself."""
    return (
        f"{command(python, '-m', 'venv', windows=False)} ~/.venv && ~/.venv/bin/python -m pip "
        f"install torch torchvision --index-url {index.url}"
    )


def externally_managed(report: dict[str, Any]) -> bool:
    """pip refuses to install into this Python: a distribution's own (PEP 668 marker in its
    stdlib folder, e.g. Debian 12's /usr/lib/python3.11/EXTERNALLY-MANAGED). A venv's
    prefix is the venv, which has no marker."""
    prefix, version = report.get("prefix"), version_numbers(report.get("python"))
    if not prefix or len(version) < 2:
        return False
    stdlibs = (Path(prefix, "lib", f"python{version[0]}.{version[1]}"), Path(prefix, "Lib"))
    return any((stdlib / "EXTERNALLY-MANAGED").is_file() for stdlib in stdlibs)


def _venv_with_torch(python: str) -> str:
    """The fix for a Python pip may not touch: a venv where discovery looks by itself."""
    return (
        f"this Python belongs to the system and pip refuses to install into it: make a "
        f"venv with torch, `{command(python, '-m', 'venv')} ~/.venv && ~/.venv/bin/python "
        f"-m pip install torch torchvision`, then choose ~/.venv/bin/python"
    )


def version_numbers(text: Any) -> tuple[int, ...]:
    """Major and minor of a version text: ``"2.14.1+cu130"`` → ``(2, 14)``."""
    numbers = re.findall(r"\d+", str(text or "").split("+")[0])[:2]
    return tuple(int(n) for n in numbers)


def arch_supports(arch_list: Sequence[str], capability: tuple[int, int]) -> bool:
    """Can a torch built for ``arch_list`` run kernels on a GPU of ``capability``?

    Cubins (``sm_XY``) run on the same major version with an equal or higher minor; PTX
    (``compute_XY``) is compiled by the driver for any newer GPU.
    """
    major, minor = capability
    for arch in arch_list:
        m = re.match(r"(sm|compute)_(\d+)", arch)
        if not m:
            continue
        number = int(m.group(2))
        a_major, a_minor = divmod(number, 10)
        if m.group(1) == "sm" and a_major == major and a_minor <= minor:
            return True
        if m.group(1) == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return False


def _sm(capability: Sequence[int]) -> str:
    return f"sm_{capability[0]}{capability[1]}"


def covers(index: WheelIndex, capabilities: Sequence[tuple[int, int]]) -> bool:
    """Do ``index``'s wheels carry kernels for every one of these GPUs?"""
    return all(arch_supports(index.arch_list, c) for c in capabilities)


def cuda_index(
    capabilities: Sequence[tuple[int, int]], driver_cuda: tuple[int, int] | None = None
) -> WheelIndex | None:
    """The wheel index for these GPUs and this driver: the newest whose kernels cover every
    GPU and whose CUDA the driver supports. With the driver's CUDA unknown, the oldest that
    covers the GPUs (it runs on the most drivers). None: no index fits (the driver is too
    old for every index that covers the GPUs, or no index covers them)."""
    fitting = [i for i in WHEEL_INDEXES if covers(i, capabilities)]
    if driver_cuda is None:
        return fitting[0] if fitting else None
    usable = [i for i in fitting if i.cuda <= driver_cuda]
    return usable[-1] if usable else None


@dataclass(frozen=True)
class CudaFix:
    """How to get a torch that runs on these GPUs: the index to install from, the driver
    update needed first (None: the driver will do), and the command to run."""

    index: WheelIndex | None
    driver_update: str | None
    command: str | None

    def text(self) -> str:
        """The fix as a verdict states it."""
        steps = [self.driver_update, f"run `{self.command}`" if self.command else None]
        return ", then ".join(s for s in steps if s) or "no PyTorch CUDA build supports this GPU"


def cuda_fix(
    python: str,
    capabilities: Sequence[tuple[int, int]],
    driver_cuda: tuple[int, int] | None,
    report: dict[str, Any],
    windows: bool | None = None,
) -> CudaFix:
    """Install the ``cuda_index`` build into ``python`` (into a new venv when pip may not
    touch it). When the driver is too old for every index, the fix names the driver version
    to update to, and the command is the one to run afterwards."""
    windows = sys.platform == "win32" if windows is None else windows
    index = cuda_index(capabilities, driver_cuda)
    update = None
    if index is None:
        index = cuda_index(capabilities)  # the covering index with the oldest driver floor
        if index is None:
            return CudaFix(None, None, None)
        if driver_cuda is not None:
            update = (
                f"update the NVIDIA driver to {index.min_driver(windows)} or newer (it "
                f"supports CUDA {driver_cuda[0]}.{driver_cuda[1]}; PyTorch's {index.name} "
                f"build needs {index.cuda[0]}.{index.cuda[1]})"
            )
    if externally_managed(report):
        return CudaFix(index, update, venv_cuda_install(python, index))
    return CudaFix(index, update, cuda_install(python, index, windows))


def judge(
    report: dict[str, Any],
    python: str,
    gpus: Sequence[tuple[int, int]] = (),
    driver_cuda: tuple[int, int] | None = None,
) -> Verdict:
    """The verdict on one survey report; ``gpus`` are NVML's capabilities (may be empty) and
    ``driver_cuda`` the newest CUDA the driver supports (None: unknown)."""
    if "error" in report:
        return Verdict(BAD, str(report["error"]), "choose another interpreter")
    py = version_numbers(report.get("python"))
    if py < MIN_PYTHON:
        return Verdict(
            BAD,
            f"Python {report.get('python')} is too old for gpuwatch's runner "
            f"(it needs {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer)",
            "create a newer environment (e.g. `python3.12 -m venv ~/venvs/torch`), "
            "install torch into it, then choose it here",
        )
    torch = report.get("torch")
    error = str(report.get("torch_error") or "")
    if not torch:
        if not error or error.startswith(("ModuleNotFoundError", "ImportError: No module")):
            fix = (
                _venv_with_torch(python)
                if externally_managed(report)
                else f"run `{_pip(python, 'torch', 'torchvision')}`"
            )
            return Verdict(BAD, f"Python {report.get('python')}: torch not installed", fix)
        reinstall = _pip(python, "--force-reinstall", "torch", "torchvision")
        return Verdict(
            BAD,
            f"torch is installed but cannot be imported: {error}",
            f"reinstall it: `{reinstall}`",
        )
    head = f"Python {report.get('python')}, torch {torch}"
    if version_numbers(torch) < MIN_TORCH:
        return Verdict(
            BAD,
            f"{head}: torch is older than gpuwatch needs ({MIN_TORCH[0]}.{MIN_TORCH[1]}+)",
            f"run `{_pip(python, '-U', 'torch', 'torchvision')}`",
        )
    issues: list[Verdict] = []
    cuda = report.get("cuda")
    caps = list(gpus) or [tuple(c) for c in report.get("capabilities") or []]
    gpu_fix = cuda_fix(python, caps, driver_cuda, report).text()
    if not caps:
        built = f"CUDA {cuda} build" if cuda else "CPU build"
        issues.append(Verdict(OK, f"{head} ({built}); no NVIDIA GPU found: trains on the CPU"))
    elif not cuda:
        issues.append(
            Verdict(
                WARN,
                f"{head} is a CPU-only build: the GPU is not used, training runs on the CPU",
                f"for the GPU {gpu_fix}",
            )
        )
    elif not report.get("cuda_available"):
        why = report.get("cuda_error") or "torch.cuda.is_available() is False"
        if driver_cuda is not None and version_numbers(cuda) > driver_cuda:
            why = f"the driver supports CUDA {driver_cuda[0]}.{driver_cuda[1]} at most"
        issues.append(
            Verdict(
                WARN,
                f"{head} (CUDA {cuda}) cannot use the GPU ({why}): training runs on the CPU",
                f"update the NVIDIA driver to one that supports CUDA {cuda}, or "
                f"install a torch build for the driver's CUDA version: {gpu_fix}",
            )
        )
    else:
        arch = [str(a) for a in report.get("arch_list") or []]
        unsupported = [c for c in caps if arch and not arch_supports(arch, c)]
        if unsupported:
            built_for = ", ".join(a for a in arch if a.startswith("sm_"))
            issues.append(
                Verdict(
                    BAD,
                    f"{head} (CUDA {cuda}) has no kernels for this GPU "
                    f"({_sm(unsupported[0])}; it was built for {built_for})",
                    gpu_fix,
                )
            )
        else:
            issues.append(
                Verdict(
                    OK,
                    f"{head} (CUDA {cuda}); GPU " + ", ".join(_sm(c) for c in caps) + " supported",
                )
            )
    if not report.get("torchvision"):
        issues.append(
            Verdict(
                WARN,
                "torchvision missing: the vision workload cannot run "
                "(mlp, gpt and your own scripts can)",
                f"run `{_pip(python, 'torchvision')}`",
            )
        )
    level = max((v.level for v in issues), key=_LEVEL_RANK.__getitem__)
    fixes = [v.fix for v in issues if v.fix]
    return Verdict(level, "; ".join(v.summary for v in issues), "; ".join(fixes) or None)


def check(
    candidate: Candidate,
    gpus: Sequence[tuple[int, int]] = (),
    timeout: float = SURVEY_TIMEOUT_S,
    driver_cuda: tuple[int, int] | None = None,
) -> Surveyed:
    """Survey one candidate and judge it; ``gpus`` are the compute capabilities of the GPUs
    here (from NVML, which then also says the driver's CUDA unless ``driver_cuda`` is given)."""
    report = survey(candidate.path, timeout)
    if gpus and driver_cuda is None:
        driver_cuda = driver_cuda_version()
    return Surveyed(candidate, report, judge(report, candidate.path, gpus, driver_cuda))


def check_all(
    candidates: Sequence[Candidate],
    gpus: Sequence[tuple[int, int]] | None = None,
    timeout: float = SURVEY_TIMEOUT_S,
    workers: int = 4,
) -> list[Surveyed]:
    """Survey candidates concurrently (each ``import torch`` waits on disk, not CPU)."""
    gpus = gpu_capabilities() if gpus is None else gpus
    if not candidates:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(candidates)))) as pool:
        return list(pool.map(lambda c: check(c, gpus, timeout), candidates))


def best(surveyed: Sequence[Surveyed]) -> Surveyed | None:
    """The first green one, else the first usable one, else None."""
    for level in (OK, WARN):
        for item in surveyed:
            if item.verdict.level == level:
                return item
    return None


# A venv in the home is found without asking; a bare `python3 -m pip install torch` fails on
# Debian 12 / Ubuntu 23.04+ (PEP 668: "externally-managed-environment").
_MAKE_VENV = (
    "in a terminal (it opens in your home folder): `py -m venv .venv` then "
    "`.venv\\Scripts\\python -m pip install torch torchvision`"
    if sys.platform == "win32"
    else "`python3 -m venv ~/.venv && ~/.venv/bin/python -m pip install torch "
    "torchvision` (Debian/Ubuntu: `sudo apt install python3-venv` first)"
)
NO_TORCH_HELP = (
    "No Python with torch was found. Recordings can still be replayed (File → "
    "Open recording…). To train, make a Python 3.10+ venv with torch where "
    f"gpuwatch looks by itself: {_MAKE_VENV}; other builds: "
    "https://pytorch.org/get-started/locally/. Then Run → Choose Python…."
)
