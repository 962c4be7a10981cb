"""Fault-injecting training scripts and the process checks the reliability tests share.

``FAULT_SCRIPT`` is a real training loop (DataLoader with 2 workers, an optimizer, and a
plain ``sleep`` child process that does not watch its parent) that injects one fault after
``FAULT_AFTER`` steps. ``slow_hang`` first spends ``SLOW_START_S`` (its third argument) before
the loop, like a script loading a dataset or compiling, then hangs; ``segfault`` crashes a
second after its last step (a crash some time after the last step: every step must be kept).
Every process it starts leaves its pid in the output folder, so a test can check afterwards,
with psutil, that none of them is alive.
"""

from __future__ import annotations

import contextlib
import textwrap
from pathlib import Path

import psutil
from waiting import wait_until

FAULT_AFTER = 6

FAULT_SCRIPT = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    OUT, FAULT = sys.argv[1], sys.argv[2]
    SLOW_START_S = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0

    def note(name):
        open(os.path.join(OUT, name), "w").close()

    class Items(Dataset):
        def __len__(self):
            return 10 ** 6
        def __getitem__(self, i):
            if FAULT == "worker_hang" and i >= 8 * 8:
                time.sleep(3600)  # a deadlocked worker: the main process waits for it forever
            return torch.full((8,), float(i % 5))

    def worker_init(_):
        if FAULT == "ignore_term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        note(f"pid-worker-{os.getpid()}")

    if __name__ == "__main__":
        note(f"pid-main-{os.getpid()}")
        helper = subprocess.Popen(["sleep", "600"])  # a child that never looks at its parent
        note(f"pid-helper-{helper.pid}")
        if FAULT == "ignore_term":  # deaf to the stop's SIGINT and to SIGTERM: only a kill ends it
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        loader = DataLoader(Items(), batch_size=8, num_workers=2, worker_init_fn=worker_init)
        time.sleep(SLOW_START_S)
        for step, x in enumerate(loader):
            if step == FAULT_AFTER:
                note("fault")
                if FAULT == "raise":
                    raise RuntimeError("injected fault")
                if FAULT == "exit3":
                    sys.exit(3)
                if FAULT == "segfault":
                    import ctypes
                    time.sleep(1.0)
                    ctypes.string_at(0)
                if FAULT in ("hang", "ignore_term", "slow_hang"):
                    while True:
                        time.sleep(1)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.02)
""").replace("FAULT_AFTER", str(FAULT_AFTER))


def write_fault_script(folder: Path) -> Path:
    """The fault script in a folder whose name has a space and non-ASCII letters."""
    where = folder / "my runs ünïcode"
    where.mkdir(parents=True, exist_ok=True)
    script = where / "train fault.py"
    script.write_text(FAULT_SCRIPT, encoding="utf-8")
    return script


def recorded_pids(out: Path) -> dict[str, list[int]]:
    """Pids the script noted, by role (main, worker, helper)."""
    pids: dict[str, list[int]] = {}
    for f in out.glob("pid-*"):
        _, role, pid = f.name.split("-")
        pids.setdefault(role, []).append(int(pid))
    return pids


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (zombies count as gone: they hold no CPU or memory)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def assert_all_gone(out: Path, timeout: float) -> None:
    """Every process the script started exits within ``timeout`` seconds."""
    pids = [pid for group in recorded_pids(out).values() for pid in group]
    assert pids, "the script noted no pid"
    wait_until(
        lambda: not alive(pids),
        timeout,
        f"no process of the runner's tree alive (left: {alive(pids)})",
    )


def kill_all(out: Path) -> None:
    """Clean up after a failed test, so one failure does not leave processes behind."""
    for group in recorded_pids(out).values():
        for pid in group:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
