"""A stop ends the whole tree, and says honestly what it did.

A script's child process that does not watch its parent (a subprocess, a lingering DataLoader
worker) outlives the runner. The stop used to wait out its whole polite window for it and then
report that gpuwatch had "terminated" a script that had ended cleanly at its step boundary. Now
the runner's leftovers get ``LEFTOVER_GRACE_S`` once the runner has exited, are then ended
(terminate, then kill), and the outcome says so without calling the run hung or forced.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from faults import alive, kill_all, recorded_pids
from waiting import wait_until

from gpuwatch.core.run import launcher
from gpuwatch.core.run import session as session_module
from gpuwatch.core.run.outcome import EXIT_OK, describe, facts_from
from gpuwatch.core.run.session import LaunchSpec, Session, SessionState, stop_grace_s

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

START_S = 120  # the runner imports torch first; the machine may be busy
#: What a loaded machine may add to the runner's own exit (its bye, torch's teardown).
RUNNER_EXIT_S = 3.0

SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    OUT = sys.argv[1]

    def note(name):
        open(os.path.join(OUT, name), "w").close()

    note(f"pid-main-{os.getpid()}")
    plain = subprocess.Popen(["sleep", "600"])  # never looks at its parent
    note(f"pid-helper-{plain.pid}")
    deaf = subprocess.Popen([  # nor does this one, and it ignores SIGTERM: only a kill ends it
        sys.executable, "-c",
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(sys.argv[1], 'w').close(); time.sleep(600)",
        os.path.join(OUT, "deaf-ready"),
    ])
    note(f"pid-deaf-{deaf.pid}")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.ones(64, 4)), batch_size=4)
    while True:
        for (x,) in loader:
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.02)
""")


def test_a_stop_ends_the_children_a_script_left_without_waiting_out_the_polite_window(
    session: Session, tmp_path: Path, monkeypatch
) -> None:
    """The script stops at its step boundary; its two children (one deaf to SIGTERM) are
    ended a grace after the runner exits, not after the polite window; the run ends only
    once they are gone, as a clean stop that mentions them."""
    monkeypatch.setattr(session_module, "TERMINATE_S", 1.0)  # the deaf child's terminate → kill
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "children.py"
    script.write_text(SCRIPT)
    session.start(LaunchSpec(script=str(script), script_args=(str(out),), device="cpu"))
    try:
        wait_until(
            lambda: session.steps.count >= 3 or session.wait_ended(0), START_S, "three steps"
        )
        wait_until((out / "deaf-ready").exists, 30, "the SIGTERM-deaf child")
        pids = [pid for group in recorded_pids(out).values() for pid in group]
        assert set(recorded_pids(out)) == {"main", "helper", "deaf"}

        started = time.monotonic()
        session.stop()
        assert session.wait_ended(60)
        took = time.monotonic() - started

        assert not alive(pids), "the run ends only once its whole tree is gone"
        assert session.state is SessionState.FINISHED, session.error
        assert session.stop_escalation is None, "the runner itself stopped politely"
        assert session.leftovers_ended == 2
        assert (session.bye or {}).get("reason") == "stopped"
        assert not (session.bye or {}).get("interrupted"), "it stopped at a step boundary"
        outcome = describe(facts_from(session))
        assert outcome.exit_code == EXIT_OK, outcome.sentence
        assert outcome.sentence.startswith("children.py was stopped on request, after ")
        assert outcome.sentence.endswith("; it had left 2 processes running, which gpuwatch ended")
        log = [line.text for line in session.drain_log()]
        assert any("2 processes it started did not exit with it" in text for text in log), log
        assert not any("did not stop in time" in text for text in log), log

        # The stop's grace (the boundary), the leftovers' grace, terminate → kill for the deaf
        # child; well inside the polite window the stop used to wait out for them.
        bound = (
            stop_grace_s(None)
            + launcher.LEFTOVER_GRACE_S
            + 2 * session_module.TERMINATE_S
            + RUNNER_EXIT_S
        )
        assert bound < stop_grace_s(None) + session_module.POLITE_STOP_S
        assert took < bound, f"the stop took {took:.1f} s (bound {bound:.1f} s)"
    finally:
        kill_all(out)


def test_end_tree_ends_what_a_root_left_behind_and_counts_no_zombie(tmp_path: Path) -> None:
    """Without a runner: a root that exits leaving a live child and a dead one (a zombie
    where init does not reap orphans). Only the live one is a leftover, ended after the
    grace; the root's own end is polite."""
    ready = tmp_path / "ready"
    code = textwrap.dedent(f"""
        import os, subprocess, sys
        live = subprocess.Popen(["sleep", "600"])
        dead = os.fork()
        if dead == 0:
            os._exit(0)
        while True:  # wait until the forked child has exited, without reaping it
            try:
                with open(f"/proc/{{dead}}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except OSError:
                break
        open({str(ready)!r}, "w").write(str(live.pid))
        sys.stdin.read()  # exits when the test closes its stdin
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, start_new_session=True
    )
    try:
        wait_until(ready.exists, 60, "the root's children")
        wait_until(ready.read_text, 10, "the live child's pid")
        live = int(ready.read_text())
        assert proc.stdin is not None
        proc.stdin.close()
        end = launcher.end_tree(proc, terminate_after=30.0, kill_after=3.0, leftover_grace=0.2)
        assert end == launcher.TreeEnd("polite", leftovers=1)
        assert not alive([live])
    finally:
        launcher.end_tree(proc, terminate_after=0.0, kill_after=3.0)
