"""The link's key is nowhere a watched script (or anything reading the runner's
``/proc/PID/environ``) can find it, and the script's stdin is still the null device."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from gpuwatch.core.run.session import LaunchSpec, Session, SessionState

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")

REPORT = textwrap.dedent("""
    import json, os, sys
    null = os.stat(os.devnull)
    stdin = os.fstat(0)
    with open("/proc/self/environ", "rb") as f:
        environ = f.read().decode("utf-8", "replace")
    with open(sys.argv[1], "w") as f:
        json.dump({"proc_environ": environ, "os_environ": dict(os.environ),
                   "stdin_is_null": (stdin.st_dev, stdin.st_ino) == (null.st_dev, null.st_ino),
                   "stdin_text": sys.stdin.read()}, f)
""")


def test_the_key_is_not_in_the_runners_environment_and_stdin_is_null(tmp_path) -> None:
    script = tmp_path / "report.py"
    script.write_text(REPORT, encoding="utf-8")
    out = tmp_path / "seen.json"
    session = Session(sample_coarse=False)
    try:
        session.start(
            LaunchSpec(script=str(script), script_args=(str(out),), device="cpu", cwd=str(tmp_path))
        )
        key = session._listener.authkey.hex()  # the key this run's runner authenticated with
        assert session.wait_ended(120)
        assert session.state is SessionState.FINISHED, session.error
    finally:
        session.close()
    seen = json.loads(out.read_text(encoding="utf-8"))
    assert key not in seen["proc_environ"], "the runner's initial environment holds no key"
    assert "GPUWATCH_AUTHKEY" not in seen["proc_environ"]
    assert key not in json.dumps(seen["os_environ"])
    assert seen["stdin_is_null"] and seen["stdin_text"] == "", "stdin is the null device"
    assert os.environ.get("GPUWATCH_AUTHKEY") is None
