"""A Ctrl-C that lands inside the launch, at the two places where no thread owns the run's end
yet: the run still ends at once, its tree is gone, and nothing waits for a stop's thread."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gpuwatch.core.run import session as session_module
from gpuwatch.core.run.session import LaunchSpec, Session

#: The run must end well inside the stop's own wait for its tree (``STOP_TREE_WAIT_S``).
ENDED_WITHIN_S = session_module.STOP_TREE_WAIT_S / 3


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"  # a zombie is gone
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to see the runner's end")
@pytest.mark.parametrize(
    "started", [False, True], ids=["watch-listed-not-started", "watch-started"]
)
def test_ctrl_c_while_the_watch_thread_is_spawned_ends_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, started: bool
) -> None:
    spawn = Session._spawn_thread

    def interrupted(self: Session, name: str, target):  # type: ignore[no-untyped-def]
        if name != "gpuwatch-watch":
            return spawn(self, name, target)
        if started:
            spawn(self, name, target)  # it runs; the interrupt lands right after
        else:
            self._threads.append(threading.Thread(target=target, name=name, daemon=True))
        raise KeyboardInterrupt

    monkeypatch.setattr(Session, "_spawn_thread", interrupted)
    script = tmp_path / "train.py"
    script.write_text("import time\nwhile True:\n    time.sleep(1)\n", encoding="utf-8")
    session = Session(sample_coarse=False)
    try:
        with pytest.raises(KeyboardInterrupt):
            session.start(LaunchSpec(script=str(script), device="cpu", cwd=str(tmp_path)))
        proc = session._proc
        assert proc is not None, "the runner was launched before the interrupt"
        session.stop()  # what the CLI does next
        assert session.wait_ended(ENDED_WITHIN_S), "the run ended"
        assert not _alive(proc.pid), "the runner is gone"
    finally:
        session.close()
