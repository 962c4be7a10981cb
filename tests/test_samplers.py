"""Process-tree sampler on a real process tree, the jittered schedule, and the epoch clock."""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from gpuwatch.core.model.store import SeriesStore
from gpuwatch.core.run.clock import (
    candidate_clocks,
    clock_offset_ns,
    epoch_ns_to_perf_ns,
    epoch_offset_ns,
    epoch_us_to_perf_ns,
    guess_clock,
)
from gpuwatch.core.run.samplers import (
    PROC_CPU,
    PROC_RSS,
    SYS_CPU,
    JitterSchedule,
    ProcessTreeSampler,
    Sampler,
)

CHILD_MB = 120
#: What the busy child shows at least: a whole core on an idle machine, its share of the cores
#: on a loaded one (a quarter of a core beside seven other busy processes on two cores).
CHILD_CPU = 15

#: The runner stand-in: on "spawn" it starts a busy child holding CHILD_MB of touched memory,
#: on "kill" it ends that child, on EOF it exits. It idles meanwhile (~0 % of a core), so CPU
#: above ``CHILD_CPU`` % and RSS above CHILD_MB can only come from the child.
PARENT = textwrap.dedent(f"""
    import subprocess, sys
    CHILD = "buf = b'x' * ({CHILD_MB} * 2**20)\\nwhile True: pass"
    child = None
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "spawn":
            child = subprocess.Popen([sys.executable, "-c", CHILD])
            print(child.pid, flush=True)
        elif line.strip() == "kill" and child is not None:
            child.kill(); child.wait(); child = None
            print("killed", flush=True)
    if child is not None:
        child.kill(); child.wait()
""")


def wait_until(
    condition: Callable[[], bool], timeout: float = 60.0, what: str = "condition"
) -> None:
    """Poll ``condition`` until it holds; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def runner() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def _send(proc: subprocess.Popen[str], line: str) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def test_process_tree_sampler_follows_children_and_stops_itself(
    runner: subprocess.Popen[str],
) -> None:
    store = SeriesStore()
    sampler = ProcessTreeSampler(store, runner.pid, interval_s=0.2, rng=random.Random(1))
    sampler.start()
    try:
        wait_until(lambda: len(store.snapshot(PROC_CPU)) >= 2, what="first samples")
        statuses = store.statuses()
        assert statuses[PROC_CPU].available and statuses[PROC_CPU].unit == "% of one core"
        assert statuses[PROC_CPU].label == "runner CPU (process tree)"
        assert statuses[PROC_RSS].unit == "bytes" and statuses[SYS_CPU].unit == "%"
        idle_rss = store.snapshot(PROC_RSS).value[-1]
        assert idle_rss < CHILD_MB * 2**20

        child_pid = int(_send(runner, "spawn"))  # a worker appears after sampling began
        assert child_pid != runner.pid
        wait_until(
            lambda: (
                (store.snapshot(PROC_CPU).value > CHILD_CPU).any()
                and (store.snapshot(PROC_RSS).value > CHILD_MB * 2**20).any()
            ),
            what="the busy child's CPU and memory in the tree's figures",
        )

        n_before = len(store.snapshot(PROC_CPU))
        assert _send(runner, "kill") == "killed"  # the worker disappears
        wait_until(
            lambda: (
                len(store.snapshot(PROC_CPU)) >= n_before + 3
                and store.snapshot(PROC_CPU).value[-1] < CHILD_CPU
                and store.snapshot(PROC_RSS).value[-1] < CHILD_MB * 2**20
            ),
            what="figures to drop after the child was killed",
        )
        assert sampler.running

        assert runner.stdin is not None
        runner.stdin.close()  # the runner exits; left unreaped, it is a zombie meanwhile
        wait_until(lambda: not sampler.running, what="the sampler to stop by itself")
    finally:
        sampler.stop()

    cpu = store.snapshot(PROC_CPU)
    assert (cpu.value >= 0).all()
    np.testing.assert_array_equal(cpu.t0[1:], cpu.t1[:-1])  # samples tile the time axis
    assert (cpu.t1 > cpu.t0).all()
    sys_cpu = store.snapshot(SYS_CPU).value
    assert len(sys_cpu) > 0 and ((sys_cpu >= 0) & (sys_cpu <= 100)).all()


def test_process_tree_sampler_on_missing_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    store = SeriesStore()
    sampler = ProcessTreeSampler(store, proc.pid, interval_s=0.05)
    sampler.start()
    assert sampler.join(timeout=5)
    statuses = store.statuses()
    for name in (PROC_CPU, PROC_RSS, SYS_CPU):
        assert statuses[name].available is False
        assert str(proc.pid) in (statuses[name].reason or "")
    assert store.names() == []


# ---- schedule ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["uniform", "exponential"])
def test_jitter_has_the_right_mean_and_is_not_constant(kind: str) -> None:
    schedule = JitterSchedule(0.25, kind, rng=random.Random(42))  # type: ignore[arg-type]
    draws = [schedule.interval() for _ in range(20_000)]
    assert statistics.fmean(draws) == pytest.approx(0.25, rel=0.03)
    assert statistics.pstdev(draws) > 0.05
    assert min(draws) >= 0.025 - 1e-12  # never a busy loop
    if kind == "uniform":
        assert min(draws) >= 0.125 and max(draws) <= 0.375


def test_schedule_is_on_absolute_time() -> None:
    schedule = JitterSchedule(0.25, spread=0.0)
    # a poll that ran 50 ms late does not push later deadlines back
    assert schedule.next_deadline(10.0, now=10.05) == pytest.approx(10.25)
    assert schedule.late == 0
    # after a long stall it resyncs to now instead of bursting through missed ticks
    assert schedule.next_deadline(10.0, now=20.0) == pytest.approx(20.25)
    assert schedule.late == 1


def test_schedule_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="positive"):
        JitterSchedule(0)
    with pytest.raises(ValueError, match="jitter kind"):
        JitterSchedule(1, "gaussian")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="spread"):
        JitterSchedule(1, spread=1.0)


class _Recorder(Sampler):
    def __init__(self, schedule: JitterSchedule, n: int) -> None:
        super().__init__(schedule)
        self.times: list[float] = []
        self.n = n

    def probe(self) -> bool:
        return True

    def poll(self) -> bool:
        self.times.append(time.perf_counter())
        return len(self.times) < self.n


def test_sampler_thread_polls_on_a_jittered_schedule() -> None:
    sampler = _Recorder(JitterSchedule(0.02, rng=random.Random(3)), n=40)
    sampler.start()
    assert sampler.join(timeout=10), "the sampler did not end after poll() returned False"
    gaps = np.diff(sampler.times)
    assert len(gaps) == 39
    assert 0.012 < gaps.mean() < 0.035
    assert gaps.std() > 0.002  # jittered, not a fixed period
    sampler.stop()  # after it ended by itself: still fine


# ---- clock ------------------------------------------------------------------------------


def test_epoch_offset_matches_the_clocks() -> None:
    offset, width = epoch_offset_ns()
    assert 0 <= width < 50_000_000
    direct = time.time_ns() - time.perf_counter_ns()
    assert abs(offset - direct) < 5_000_000


def test_epoch_conversions() -> None:
    offset = 1_700_000_000_000_000_000 - 123_456_000  # whole µs: NVML has no finer stamps
    perf = 987_654_321_000
    epoch_ns = perf + offset
    assert epoch_ns_to_perf_ns(epoch_ns, offset) == perf
    assert epoch_us_to_perf_ns(epoch_ns // 1000, offset) == perf
    arr = np.array([epoch_ns // 1000, epoch_ns // 1000 + 5], np.uint64)  # NVML: unsigned µs
    assert epoch_us_to_perf_ns(arr, offset).tolist() == [perf, perf + 5_000]
    assert epoch_ns_to_perf_ns(np.array([epoch_ns]), offset).tolist() == [perf]


def test_clock_offset_of_a_shifted_clock() -> None:
    offset, width = clock_offset_ns(lambda: time.perf_counter_ns() + 12_345_678_900)
    assert abs(offset - 12_345_678_900) <= width + 1_000


def test_guess_clock_picks_the_nearest_reading() -> None:
    clocks = {"epoch": lambda: 1_800_000_000 * 10**9, "boot": lambda: 5_000 * 10**9}
    assert guess_clock(4_999 * 10**9, clocks) == ("boot", 10**9)
    assert guess_clock(1_799_999_990 * 10**9, clocks) == ("epoch", 10 * 10**9)
    assert guess_clock(time.time_ns() - 10**9)[0] == "epoch"
    assert {"epoch", "perf_counter", "monotonic"} <= set(candidate_clocks())
