"""The built-in workloads' DataLoader workers fork from a warm server where the OS allows it
(gpuwatch/runner/worker_start.py; docs/performance.md §5)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuwatch.runner.worker_start import start_method

TESTS = Path(__file__).parent

# A fresh interpreter: the fork server is per process, and its preload list is read once.
SCRIPT = textwrap.dedent(f"""
    import json, os, sys
    sys.path.insert(0, {str(TESTS)!r})
    import psutil
    from gpuwatch.runner.worker_start import warm_up
    from gpuwatch.runner.workloads.mlp import MlpWorkload

    if __name__ == "__main__":
        assert warm_up(["torch", "gpuwatch.runner.workloads.mlp"])
        server = psutil.Process().children()  # started now, before any loader
        workload = MlpWorkload(seed=0, torch_threads=1, dataset_images=256)  # the start only
        workload.prepare(lambda _text: None)
        loader = workload.build_loader(dict(workload.knob_values(), num_workers=1))
        from spawn_probe import PidDataset
        from torch.utils.data import DataLoader
        pids = DataLoader(PidDataset(), batch_size=1, num_workers=1,
                          multiprocessing_context=loader.multiprocessing_context)
        pid, parent = (int(column[0]) for column in next(iter(pids)))
        maps = [m.path for m in psutil.Process(parent).memory_maps()]
        print(json.dumps({{
            "context": loader.multiprocessing_context.get_start_method(),
            "server_started_first": parent in [p.pid for p in server],
            "worker_is_not_our_child": parent != os.getpid(),
            "server_has_torch": any("libtorch" in path for path in maps),
        }}))
""")


@pytest.mark.skipif(start_method() != "forkserver", reason="no forkserver here: workers spawn")
def test_workers_fork_from_a_server_that_imported_torch_before_any_loader() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts == {
        "context": "forkserver",
        "server_started_first": True,
        "worker_is_not_our_child": True,
        "server_has_torch": True,
    }


def test_the_start_method_keeps_spawn_semantics_everywhere() -> None:
    """forkserver where the OS has it, else spawn (Windows): never plain fork, which would
    copy the runner's threads and state into each worker."""
    import multiprocessing

    expected = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    assert start_method() == expected != "fork"
