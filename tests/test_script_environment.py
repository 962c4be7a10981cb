"""Watched = unwatched, for what a script sees of its process: the same environment and
``sys.path`` under ``gpuwatch run`` as under a plain ``python SCRIPT``.

The end-to-end tests run one script twice, plainly and through ``python -m gpuwatch run
--headless`` (a real runner on the CPU), with the same environment and working directory, and
compare what it saw: its own ``os.environ`` and ``sys.path``, the environment of a subprocess it
starts, and the environment of its spawn-started DataLoader workers (which import
``gpuwatch.probe``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.core.run import launcher
from gpuwatch.protocol import AUTHKEY_ENV
from gpuwatch.runner.script_environment import enter_script, script_path_entry, settle_source_root

RUN_TIMEOUT_S = 240
#: Variables gpuwatch used to set for the runner, which every child then inherited.
ONCE_ADDED = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "CUDA_DEVICE_ORDER")

#: Writes what it sees to ``sys.argv[1]``: its environment and sys.path, a subprocess's
#: environment, and (from a spawn-started DataLoader worker that imports gpuwatch.probe)
#: the worker's environment; then trains a few steps so gpuwatch has something to watch. The
#: update is SGD by hand: making a ``torch.optim`` optimizer imports ``torch._dynamo``
#: (seconds in each run, at start and at exit), and nothing here is about the optimizer.
SEES = """
import json, os, subprocess, sys
import torch
from torch.utils.data import DataLoader, Dataset

import gpuwatch.probe as gw


class Seen(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        import gpuwatch.probe  # in a fresh interpreter: found through the parent's sys.path
        assert gpuwatch.probe.active() is False
        return torch.full((4,), float(index)), json.dumps(dict(os.environ))


if __name__ == "__main__":
    child = subprocess.run([sys.executable, "-c", "import json, os; "
                            "print(json.dumps(dict(os.environ)))"],
                           capture_output=True, text=True, check=True)
    loader = DataLoader(Seen(), batch_size=2, num_workers=1, multiprocessing_context="spawn")
    model = torch.nn.Linear(4, 1)
    workers = []
    for x, envs in loader:
        model(x).pow(2).mean().backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None
        workers += [json.loads(e) for e in envs]
    with open(sys.argv[1], "w") as f:
        json.dump({"path": sys.path, "env": dict(os.environ), "child": json.loads(child.stdout),
                   "workers": workers, "probe": gw.__name__}, f)
"""

#: Only the path and environment, for the cheaper variants.
PATH_ONLY = """
import json, os, sys
with open(sys.argv[1], "w") as f:
    json.dump({"path": sys.path, "env": dict(os.environ)}, f)
"""


def _base_env(tmp_path: Path) -> dict[str, str]:
    """The test's environment, as a user's: with a PYTHONPATH of their own and none of the
    variables gpuwatch once added."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (*ONCE_ADDED, AUTHKEY_ENV) and not k.startswith("PYTEST_")
    }
    user_lib = tmp_path / "user-lib"
    user_lib.mkdir(exist_ok=True)
    env["PYTHONPATH"] = str(user_lib)
    return env


def _plain(script: Path, out: Path, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(script), str(out)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def _watched(script: Path, out: Path, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "run", "--headless", str(script), "--", str(out)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text())


def _env_difference(plain: dict[str, str], watched: dict[str, str]) -> dict[str, tuple]:
    names = set(plain) | set(watched)
    return {
        n: (plain.get(n), watched.get(n)) for n in sorted(names) if plain.get(n) != watched.get(n)
    }


def _same_but_one_trailing_entry(plain: list[str], watched: list[str]) -> None:
    """``watched`` is ``plain``, or ``plain`` plus gpuwatch's source folder at the end."""
    if watched == plain:
        return
    assert watched[:-1] == plain, (plain, watched)
    assert (Path(watched[-1]) / "gpuwatch" / "probe.py").is_file(), watched[-1]


def _linked_script(tmp_path: Path, source: str) -> tuple[Path, Path]:
    """``real/train.py`` with ``source``, and the path to start it by: ``linked/train.py``, a
    symbolic link to it (on Windows, where links need privileges and python keeps them in
    ``sys.path[0]``, the file itself)."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "train.py").write_text(textwrap.dedent(source), encoding="utf-8")
    if sys.platform == "win32":
        return real, real / "train.py"
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "train.py").symlink_to(real / "train.py")
    return real, linked / "train.py"


def test_script_subprocess_and_spawned_workers_see_the_plain_environment(tmp_path) -> None:
    """The script is started through a symbolic link (POSIX): ``sys.path[0]`` is its real
    directory, links resolved, as ``python SCRIPT`` makes it."""
    real, script = _linked_script(tmp_path, SEES)
    work = tmp_path / "work"
    work.mkdir()
    env = _base_env(tmp_path)

    plain = _plain(script, tmp_path / "plain.json", env, work)
    watched = _watched(script, tmp_path / "watched.json", env, work)

    assert _env_difference(plain["env"], watched["env"]) == {}
    assert _env_difference(plain["child"], watched["child"]) == {}
    assert len(watched["workers"]) == len(plain["workers"]) == 8
    for plain_worker, watched_worker in zip(plain["workers"], watched["workers"], strict=True):
        assert _env_difference(plain_worker, watched_worker) == {}
    for seen in (watched["env"], watched["child"], *watched["workers"]):
        assert AUTHKEY_ENV not in seen
        assert seen["PYTHONPATH"] == env["PYTHONPATH"]
        assert all(name not in seen for name in ONCE_ADDED if name != "PYTHONPATH")
    _same_but_one_trailing_entry(plain["path"], watched["path"])
    # the script's real directory, then the user's PYTHONPATH: both before the stdlib
    assert watched["path"][:2] == [str(real.resolve()), env["PYTHONPATH"]]
    assert watched["probe"] == "gpuwatch.probe"


def test_sys_path_zero_is_what_python_script_makes_it_under_safe_path(tmp_path) -> None:
    """``python SCRIPT`` puts nothing first under PYTHONSAFEPATH; the runner, started as
    ``python -c``, must do the same. (A symbolically linked script, whose real directory comes
    first, is the run of the environment test above.)"""
    real = tmp_path / "real"
    real.mkdir()
    script = real / "show.py"
    script.write_text(PATH_ONLY, encoding="utf-8")
    env = _base_env(tmp_path)
    env["PYTHONSAFEPATH"] = "1"

    plain = _plain(script, tmp_path / "plain.json", env, tmp_path)
    watched = _watched(script, tmp_path / "watched.json", env, tmp_path)

    _same_but_one_trailing_entry(plain["path"], watched["path"])
    assert _env_difference(plain["env"], watched["env"]) == {}
    assert str(real) not in watched["path"] and str(tmp_path) not in watched["path"]


def test_runner_env_adds_nothing(monkeypatch) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    for name in ONCE_ADDED:
        monkeypatch.delenv(name, raising=False)
    env = launcher.runner_env()  # the key goes to the runner's stdin
    assert _env_difference(dict(os.environ), env) == {}


def test_a_users_device_order_and_encoding_pass_through(monkeypatch) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    monkeypatch.setenv("PYTHONIOENCODING", "latin-1")
    env = launcher.runner_env()
    assert env["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"
    assert env["PYTHONIOENCODING"] == "latin-1"


def test_settle_moves_the_boot_entry_to_the_end() -> None:
    path = ["/src", "", "/usr/lib/python3.11", "/venv/site-packages"]
    settle_source_root("/src", path)
    assert path == ["", "/usr/lib/python3.11", "/venv/site-packages", "/src"]


def test_settle_adds_nothing_where_the_interpreter_lists_the_folder() -> None:
    """Installed from a wheel, gpuwatch's folder is site-packages: already on the path."""
    path = ["/venv/site-packages", "", "/usr/lib/python3.11", "/venv/site-packages/"]
    settle_source_root("/venv/site-packages", path)
    assert path == ["", "/usr/lib/python3.11", "/venv/site-packages/"]


def test_settle_does_not_count_the_working_directory_entry(tmp_path, monkeypatch) -> None:
    """``""`` is the working directory now, but the script may change it (and sys.path[0] is
    replaced by the script's folder): it does not make gpuwatch importable."""
    monkeypatch.chdir(tmp_path)
    path = [str(tmp_path), "", "/usr/lib/python3.11"]
    settle_source_root(str(tmp_path), path)
    assert path == ["", "/usr/lib/python3.11", str(tmp_path)]


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links need privileges")
def test_script_path_entry_resolves_links_like_python(tmp_path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "s.py").write_text("", encoding="utf-8")
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    assert script_path_entry(str(tmp_path / "alias" / "s.py")) == str(tmp_path / "real")


def test_enter_script_replaces_only_the_first_entry(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(sys, "path", ["", "/lib", "/site"])
    enter_script(str(tmp_path / "train.py"))
    assert sys.path == [str(tmp_path.resolve()), "/lib", "/site"]


#: Appended to a copy of ``gpuwatch/runner/cli.py``: the real ``main`` runs (and fails to
#: connect, exit 3), then the process prints where cli came from and what sys.path became.
REPORTING_MAIN = """

_real_main = main


def main(argv=None, *, source_root=None):
    import json
    import sys

    code = _real_main(argv, source_root=source_root)
    print(json.dumps({"cli": __file__, "path": sys.path, "code": code}))
    return 0
"""


def reporting_root(private: Path) -> Path:
    """A copy of the runner's source (as for another interpreter) whose main reports."""
    root = Path(launcher.runner_pythonpath("/nonexistent/python", private))
    cli = root / "gpuwatch" / "runner" / "cli.py"
    cli.write_text(cli.read_text(encoding="utf-8") + REPORTING_MAIN, encoding="utf-8")
    return root


@pytest.mark.parametrize("mode", ["script", "workload"])
def test_boot_code_runs_the_runner_from_its_root_without_pythonpath(tmp_path, mode) -> None:
    """``boot_code`` in a real interpreter: the runner's code comes from ``root``; for a script
    ``root`` ends up last on ``sys.path`` (before the link is even tried), for a built-in
    workload it stays first, so its workers import the same gpuwatch."""
    root = reporting_root(tmp_path / "private")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", AUTHKEY_ENV)}
    address = str(tmp_path / "no-such.sock")
    if mode == "script":
        command = launcher.script_command(
            sys.executable, address, "train.py", [], device="cpu", root=str(root)
        )
    else:
        command = launcher.runner_command(sys.executable, address, "mlp", "cpu", root=str(root))
    done = subprocess.run(
        command,
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        stdin=subprocess.DEVNULL,  # no key on stdin
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["code"] == 3, done.stderr  # no GUI to connect to
    assert Path(seen["cli"]) == root / "gpuwatch" / "runner" / "cli.py"
    assert seen["path"].count(str(root)) == 1
    if mode == "script":
        assert seen["path"][0] == "" and seen["path"][-1] == str(root)
    else:
        assert seen["path"][0] == str(root)


def test_a_scripts_print_reaches_the_window_while_it_runs(tmp_path, monkeypatch) -> None:
    """Without PYTHONUNBUFFERED in the environment, the runner's own line buffering still shows
    a script's ``print`` (no flush) while the script runs, in UTF-8."""
    from waiting import wait_until

    from gpuwatch.core.run.session import LaunchSpec, Session

    for name in ONCE_ADDED:
        monkeypatch.delenv(name, raising=False)
    go_on = tmp_path / "go-on"
    script = tmp_path / "talk.py"
    script.write_text(
        textwrap.dedent(f"""
            import os, time
            print("naïve ✓ line")
            deadline = time.monotonic() + 120
            while not os.path.exists({str(go_on)!r}) and time.monotonic() < deadline:
                time.sleep(0.05)
        """),
        encoding="utf-8",
    )
    session = Session(sample_coarse=False)
    seen: list[str] = []

    def printed() -> bool:
        seen.extend(line.text for line in session.drain_log() if line.source == "runner")
        return "naïve ✓ line" in seen

    try:
        session.start(LaunchSpec(script=str(script), cwd=str(tmp_path), device="cpu"))
        wait_until(printed, 90, "the script's line while it runs")
        assert not session.wait_ended(0), "the script was still running"
    finally:
        go_on.touch()
        assert session.wait_ended(60)
        session.close()
