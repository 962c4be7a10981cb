"""Bad input everywhere: one clear line and a non-zero exit, never a traceback; and
no pickle, eval or exec on any input path."""

from __future__ import annotations

import ast
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import gpuwatch
from gpuwatch.cli import main

SOURCE = Path(gpuwatch.__file__).resolve().parent


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    """Exit code and stderr of ``gpuwatch ARGV``, run in this process (argparse exits)."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "a folder").mkdir()
    (tmp_path / "corrupt.gpuwatch").write_bytes(b"\x00garbage" * 100)
    (tmp_path / "empty.gpuwatch").write_bytes(b"")
    (tmp_path / "script.py").write_text("print('hi')\n")
    with sqlite3.connect(tmp_path / "other.gpuwatch") as db:  # SQLite, but not ours
        db.execute("CREATE TABLE notes (text TEXT)")
    (tmp_path / "existing.gpuwatch").write_bytes(b"precious")
    return tmp_path


CASES = [
    (["--device", "gpu"], "is not a device"),
    (["--workload", "nope"], "invalid choice"),
    (["--python", "{d}/missing/python"], "is not an executable file"),
    (["--python", "{d}/script.py"], "is not an executable file"),
    (["--demo-seconds", "-1"], "between 0 and 86400"),
    (["--demo-seconds", "soon"], "is not a number of seconds"),
    (["--theme", "pink"], "invalid choice"),
    (["--screenshot", "x.png"], "needs --demo-seconds"),
    (["--bogus"], "unrecognized arguments"),
    (["run"], "give a SCRIPT to run, or -m MODULE"),
    (["run", "{d}/missing script ü.py"], "no such script"),
    (["run", "{d}/a folder"], "is a directory"),
    (["run", "--seconds", "0", "{d}/script.py"], "between 0 and 86400"),
    (["run", "--device", "tpu", "{d}/script.py"], "is not a device"),
    (["run", "--record", "{d}/no folder/x.gpuwatch", "{d}/script.py"], "does not exist"),
    (["run", "--headless", "--record", "{d}/existing.gpuwatch", "{d}/script.py"], "already exists"),
    (["run", "--headless", "--screenshot", "x.png", "{d}/script.py"], "need the window"),
    (["replay", "{d}/missing.gpuwatch"], "no such file"),
    (["replay", "{d}/corrupt.gpuwatch"], "is not a gpuwatch recording"),
    (["replay", "{d}/empty.gpuwatch"], "is not a gpuwatch recording"),
    (["replay", "{d}/other.gpuwatch"], "is not a gpuwatch recording"),
    (["replay", "{d}/a folder"], "is a directory"),
    (["export", "{d}/corrupt.gpuwatch", "--csv", "{d}/out.csv"], "is not a gpuwatch recording"),
    (["export", "{d}/other.gpuwatch", "--csv", "{d}/out.csv"], "is not a gpuwatch recording"),
    (["export", "{d}/corrupt.gpuwatch"], "give --perfetto"),
    (["bench", "--set", "num_workers"], "is not a knob setting"),
    (["bench", "--seconds", "1e9"], "between 0 and 86400"),
    (["bench", "--format", "xml"], "invalid choice"),
    (["bench", "--output", "{d}/no folder/x.md"], "does not exist"),
    (["bench", "--tour", "--then", "amp=fp16"], "--then adds stages"),
]


@pytest.mark.parametrize(("argv", "says"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_every_bad_option_gets_one_clear_line(
    files: Path, capsys, argv: list[str], says: str
) -> None:
    code, err = _cli([a.replace("{d}", str(files)) for a in argv], capsys)
    assert code not in (0, None), err
    assert "Traceback" not in err
    assert says in err, err
    lines = [line for line in err.splitlines() if line.startswith("gpuwatch")]
    assert len(lines) == 1, err
    assert (files / "existing.gpuwatch").read_bytes() == b"precious", "never overwritten"


@pytest.mark.skipif(sys.platform == "win32", reason="/bin/true")
def test_an_interpreter_that_is_not_python_is_named_in_one_line(files: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwatch",
            "run",
            "--headless",
            "--python",
            "/bin/true",
            str(files / "script.py"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    assert "is /bin/true a Python interpreter with torch?" in done.stdout


def test_an_interpreter_without_torch_is_named_in_one_line(files: Path) -> None:
    import venv

    venv.create(files / "env", with_pip=False)
    python = files / "env" / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwatch",
            "run",
            "--headless",
            "--python",
            str(python),
            str(files / "script.py"),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    first = done.stdout.splitlines()[0]
    assert first.startswith("script.py could not be run: "), done.stdout
    assert f"{python} cannot import torch" in first and "--python PATH" in first, first
    # Said once: no traceback of gpuwatch's, no echo of the runner's, no second error for
    # the runner's exit after it had said why.
    assert "Traceback" not in done.stdout + done.stderr
    assert "cannot import torch" not in done.stderr, done.stderr
    assert "runner exited" not in done.stderr, done.stderr


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


#: Where ``lnk.recv()`` is ``core.run.link.Link.recv`` (JSON, checked by ``protocol``), not
#: ``Connection.recv`` (which unpickles): the runner's link and each rank's.
_LINK_READS = {
    ("gpuwatch/core/run/session.py", "lnk"),
    ("gpuwatch/core/run/rank_links.py", "lnk"),
}


def test_no_pickle_eval_exec_or_connection_recv_in_gpuwatch() -> None:
    """Scans every module (AST, so docstrings that *warn* about pickle do not count):
    no pickle/marshal/shelve import, no builtin eval/exec, and ``.recv()`` only on our JSON
    ``Link`` (whose ``recv`` reads ``recv_bytes``)."""
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(SOURCE.parent).as_posix()
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            found += [
                f"{where}: imports {n}"
                for n in names
                if n.split(".")[0] in ("pickle", "marshal", "shelve", "dill", "cloudpickle")
            ]
        for call in _calls(tree):
            func = call.func
            if isinstance(func, ast.Name) and func.id in ("eval", "exec"):
                found.append(f"{where}:{call.lineno}: {func.id}()")
            if isinstance(func, ast.Attribute) and func.attr == "recv" and not call.args:
                target = ast.unparse(func.value)
                if (where, target) not in _LINK_READS:
                    found.append(f"{where}:{call.lineno}: {target}.recv()")
    assert found == []
    import inspect

    from gpuwatch.core.run.link import Link

    assert "recv_bytes" in inspect.getsource(Link.recv)
