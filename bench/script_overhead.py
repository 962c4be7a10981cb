"""What the zero-code hooks cost a user's script (``python bench/overhead.py --script``).

Two figures. **End to end**: interleaved pairs of the same script, same seed: ``python
bench/hook_script.py`` and ``gpuwatch run --headless bench/hook_script.py`` (which of the two
runs first alternates from pair to pair, so a change in the machine's load hits both sides
alike). Each run's figure is the script's *own* mean time per batch (it times its loop itself:
gpuwatch is not judged by its own figures); a pair gives the ratio watched/plain and the added
µs per batch (a batch is a step to gpuwatch, or a micro-batch of one when the script accumulates
gradients). Two scripts with ~5 ms steps: an ``IterableDataset`` with gradient accumulation every 4
batches, and a plain shuffled map-style ``DataLoader``. Each pair also checks that the watched
run computed the same weights. On a shared 2-core machine one pair's ratio scatters by a few
percent (each process lays its memory out its own way, and the machine drifts), so the median
of the pairs comes with a bootstrap 90 % interval: about ±1.5 % over 20 pairs, enough to say
whether a 2 % budget is met or only that it is near. This end-to-end figure is the one that
counts everything a watched run pays, the runner process itself included. **The hook path
alone** is priced to a few µs, with the runner's real instruments (``ScriptInstruments``, a
real link to a sink process) installed and removed in one process; it cannot see what being
run by the runner costs on both of its sides:

* *tiny step*: a step of the same shape (the same module calls, loader, backward and optimizer
  steps, little arithmetic) in alternating blocks, in wall and CPU time: the hooks' own work,
  with their code and data warm in the caches;
* *in situ*: the script's own step, on or off in short blocks that alternate (a dozen steps:
  the machine drifts little from one block to the next), the added time the difference of the
  two sides' median steps: the hooks as a real run meets them, after the step's work has left
  them cold caches (docs/performance.md has the figures). The first steps after a switch are
  left out of it: installing or removing patches classes, and the interpreter re-specializes
  what reads them, which a run that keeps its instruments pays once (printed apart). Each
  process reads differently (its memory laid out its own way), so this runs in several fresh
  processes and the figure is their median.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import machine

HOOK_SCRIPT = Path(__file__).with_name("hook_script.py")
#: The prefix of the one line ``hook_script.py`` prints with its figures.
REPORT_PREFIX = "HOOK_SCRIPT "
DATASETS = ("iterable", "map")


@dataclass(frozen=True)
class ScriptRun:
    """One run of ``hook_script.py``, as the script itself measured it."""

    mean_ns: float
    median_ns: float
    weights: float


@dataclass(frozen=True)
class ScriptPairs:
    """The interleaved pairs of one script: per pair, plain and watched."""

    dataset: str
    plain: list[ScriptRun]
    watched: list[ScriptRun]

    @property
    def ratios(self) -> list[float]:
        return [w.mean_ns / p.mean_ns for p, w in zip(self.plain, self.watched, strict=True)]

    @property
    def median_ratios(self) -> list[float]:
        """The same ratio from each run's median batch, which the machine's load spikes (a
        run descheduled for a while) move less than the mean."""
        return [w.median_ns / p.median_ns for p, w in zip(self.plain, self.watched, strict=True)]

    @property
    def added_us(self) -> list[float]:
        return [
            (w.mean_ns - p.mean_ns) / 1e3 for p, w in zip(self.plain, self.watched, strict=True)
        ]

    @property
    def same_weights(self) -> bool:
        return all(p.weights == w.weights for p, w in zip(self.plain, self.watched, strict=True))


def parse_report(output: str) -> ScriptRun:
    """The figures of the ``HOOK_SCRIPT`` line in a run's output (stdout and stderr joined)."""
    for line in output.splitlines():
        if line.startswith(REPORT_PREFIX):
            data = json.loads(line[len(REPORT_PREFIX) :])
            return ScriptRun(
                float(data["mean_ns"]), float(data["median_ns"]), float(data["weights"])
            )
    raise ValueError(f"no {REPORT_PREFIX.strip()} line in the run's output:\n{output[-2000:]}")


def commands(dataset: str, batches: int) -> dict[str, list[str]]:
    """The plain and the watched command line of one run."""
    script = [str(HOOK_SCRIPT), "--dataset", dataset, "--batches", str(batches)]
    return {
        "plain": [sys.executable, *script],
        "watched": [
            sys.executable,
            "-m",
            "gpuwatch",
            "run",
            "--headless",
            "--device",
            "cpu",
            *script,
        ],
    }


def run_once(command: list[str]) -> ScriptRun:
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=os.environ.copy(), check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{command} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return parse_report(done.stdout + "\n" + done.stderr)


def measure_pairs(dataset: str, *, pairs: int, batches: int) -> ScriptPairs:
    """``pairs`` interleaved plain/watched runs of the script (the first run of each is a
    warm-up of the file cache and is not kept)."""
    lines = commands(dataset, batches)
    run_once(lines["plain"])
    plain: list[ScriptRun] = []
    watched: list[ScriptRun] = []
    for index in range(pairs):
        order = ("plain", "watched") if index % 2 == 0 else ("watched", "plain")
        for side in order:
            (plain if side == "plain" else watched).append(run_once(lines[side]))
    return ScriptPairs(dataset, plain, watched)


def summary(result: ScriptPairs) -> dict[str, object]:
    """The JSON figures of one script (``--json``)."""
    ratios, added = result.ratios, result.added_us

    def quartiles(values: list[float]) -> list[float]:
        if len(values) < 2:
            return [values[0], values[0]] if values else []
        q1, _, q3 = statistics.quantiles(values, n=4)
        return [q1, q3]

    return {
        "dataset": result.dataset,
        "pairs": len(ratios),
        "plain_ms_per_step": statistics.median(r.mean_ns for r in result.plain) / 1e6,
        "watched_ms_per_step": statistics.median(r.mean_ns for r in result.watched) / 1e6,
        "ratio_median": statistics.median(ratios),
        "ratio_iqr": quartiles(ratios),
        "ratio_median_ci90": list(machine.median_interval(ratios)),
        "median_batch_ratio_median": statistics.median(result.median_ratios),
        "median_batch_ratio_median_ci90": list(machine.median_interval(result.median_ratios)),
        "added_us_per_step_median": statistics.median(added),
        "added_us_per_step_iqr": quartiles(added),
        "same_weights": result.same_weights,
        "runs": {
            "plain": [asdict(r) for r in result.plain],
            "watched": [asdict(r) for r in result.watched],
        },
    }


def print_table(result: ScriptPairs) -> None:
    """The human-readable figures of one script."""
    plain_ms = [r.mean_ns / 1e6 for r in result.plain]
    watched_ms = [r.mean_ns / 1e6 for r in result.watched]
    print(f"\n## user script through gpuwatch run: {result.dataset} ({len(plain_ms)} pairs)")
    print(f"ms/step plain        {machine.spread(plain_ms, '{:.3f}')}")
    print(f"ms/step watched      {machine.spread(watched_ms, '{:.3f}')}")
    for label, ratios, what in (
        ("ratio watched/plain", result.ratios, "mean batch"),
        ("ratio of medians", result.median_ratios, "median batch"),
    ):
        low, high = machine.median_interval(ratios)
        print(f"{label:20s} {machine.spread(ratios, '{:.3f}')}   ({what})")
        print(f"{'':20s} the median's 90 % interval {low:.3f}..{high:.3f} (bootstrap over pairs)")
    print(
        f"added us/step        {machine.spread(result.added_us, '{:.0f}')}"
        "   (budget <= 100 us, <= 2 % of a 5 ms step)"
    )
    print(f"same weights         {'yes' if result.same_weights else 'NO'}")


# ---- the hook path alone, in one process ----------------------------------------------------


@dataclass(frozen=True)
class HookPathCost:
    """ns per step of a tiny step of the same shape, the runner's instruments installed (on)
    and removed (off), in alternating blocks of one process: wall time, and the process's
    CPU time (all its threads: the link's sender too), which other processes on a busy
    machine disturb less."""

    dataset: str
    on_ns: list[float]
    off_ns: list[float]
    on_cpu_ns: list[float]
    off_cpu_ns: list[float]

    @property
    def added_ns(self) -> list[float]:
        return [on - off for on, off in zip(self.on_ns, self.off_ns, strict=True)]

    @property
    def added_cpu_ns(self) -> list[float]:
        return [on - off for on, off in zip(self.on_cpu_ns, self.off_cpu_ns, strict=True)]


def alone_summary(cost: HookPathCost) -> dict[str, object]:
    """The JSON figures of the hook path alone (``--json``)."""
    return {
        "dataset": cost.dataset,
        "blocks": len(cost.added_ns),
        "step_us_off": statistics.median(cost.off_ns) / 1e3,
        "added_us_per_step_median": statistics.median(cost.added_ns) / 1e3,
        "added_cpu_us_per_step_median": statistics.median(cost.added_cpu_ns) / 1e3,
    }


def print_alone(cost: HookPathCost) -> None:
    """The human-readable figures of the hook path alone."""
    print(
        f"\n## the hook path alone: {cost.dataset}, tiny step of the same shape, "
        f"instruments on/off in one process ({len(cost.added_ns)} pairs of blocks)"
    )
    print(f"us/step off          {machine.spread([ns / 1e3 for ns in cost.off_ns], '{:.1f}')}")
    print(f"us/step on           {machine.spread([ns / 1e3 for ns in cost.on_ns], '{:.1f}')}")
    print(
        f"added us/step        {machine.spread([ns / 1e3 for ns in cost.added_ns], '{:.1f}')}"
        "   (budget <= 100 us)"
    )
    print(
        f"added CPU us/step    {machine.spread([ns / 1e3 for ns in cost.added_cpu_ns], '{:.1f}')}"
    )


def tiny_training(dataset: str) -> Any:
    """``hook_script.Training`` with 8 hidden units and 2 samples a batch: the same module
    calls, loader, backward and optimizer steps, each costing little."""
    import hook_script

    return hook_script.Training(
        dataset, batches=1_000_000, batch_size=2, accumulate=4, seed=0, hidden=8
    )


def installed(link: Any) -> Any:
    """The runner's ``ScriptInstruments`` for a CPU script on ``link``, installed."""
    import torch

    from gpuwatch.runner.script_instruments import ScriptInstruments
    from gpuwatch.runner.timing import HostBackend

    watch = ScriptInstruments.build(link, torch, torch.device("cpu"), HostBackend(), max_steps=None)
    watch.install()
    return watch


def switch(watch: Any, *, on: bool) -> None:
    """The step hooks and loader hooks of ``watch`` installed or removed (the step hooks'
    DataLoader wrapper calls into the loader hooks: those go in first, out last)."""
    if on:
        watch.loader_knobs.install()
        watch.hooks.install()
    else:
        watch.hooks.remove()
        watch.loader_knobs.remove()


def hook_path_cost(dataset: str, link: Any, *, reps: int, steps: int) -> HookPathCost:
    """Blocks of ``steps`` tiny steps with the step hooks and loader hooks on, then off
    (removed), in rotating order; the controls, flush timer and link stay up throughout."""
    training = tiny_training(dataset)
    watch = installed(link)
    wall: dict[str, list[float]] = {"on": [], "off": []}
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    try:
        training.batches(200)  # warm: first step, allocator, the loader's announcement
        for rep in range(reps):
            for side in ("on", "off") if rep % 2 == 0 else ("off", "on"):
                if side == "off":
                    switch(watch, on=False)
                cpu_start = time.process_time_ns()
                times = training.batches(steps)
                cpu[side].append((time.process_time_ns() - cpu_start) / len(times))
                wall[side].append(sum(times) / len(times))
                if side == "off":
                    switch(watch, on=True)
    finally:
        watch.remove()
    return HookPathCost(dataset, wall["on"], wall["off"], cpu["on"], cpu["off"])


#: Steps of the script's loop a side holds before the other side's turn: a multiple of its
#: accumulation cycle (4 batches), so each side sees every step of the cycle alike.
IN_SITU_BLOCK = 12
#: The steps of a block left out of the steady figure: after a switch, the classes the
#: instruments patch (or unpatch) have new attribute versions, and the interpreter
#: re-specializes the code that reads them, the script's and torch's on both sides.
IN_SITU_SETTLE = 3


@dataclass(frozen=True)
class InSituCost:
    """The script's own steps, timed with the instruments installed (on) or removed (off) in
    alternating blocks: the steady steps of each block, and each block's first step (right
    after the switch) apart."""

    dataset: str
    on_ns: list[int]
    off_ns: list[int]
    first_on_ns: list[int]
    first_off_ns: list[int]

    @property
    def added_ns(self) -> float:
        return statistics.median(self.on_ns) - statistics.median(self.off_ns)

    @property
    def first_step_added_ns(self) -> float:
        """What the first step after installing costs more than the first after removing."""
        return statistics.median(self.first_on_ns) - statistics.median(self.first_off_ns)

    def added_ns_by_tenth(self) -> list[float]:
        """The steady difference in each tenth of the run: its spread."""
        n = min(len(self.on_ns), len(self.off_ns)) // 10
        return [
            statistics.median(self.on_ns[i * n : (i + 1) * n])
            - statistics.median(self.off_ns[i * n : (i + 1) * n])
            for i in range(10)
        ]


def hook_path_in_situ(dataset: str, link: Any, *, steps: int) -> InSituCost:
    """At least ``steps`` steady steps of the script's own loop on each side, in blocks of
    ``IN_SITU_BLOCK`` that alternate: the machine's drift falls on both sides alike, and a
    switch installs or removes the instruments between two blocks, outside any timed step.
    A run keeps its instruments for good: its steady steps are what it pays."""
    import hook_script

    warm, kept = 200, IN_SITU_BLOCK - IN_SITU_SETTLE
    blocks = 2 * -(-steps // kept)
    training = hook_script.Training(
        dataset, batches=warm + blocks * IN_SITU_BLOCK, batch_size=None, accumulate=4, seed=0
    )
    watch = installed(link)
    steady: dict[bool, list[int]] = {True: [], False: []}
    first: dict[bool, list[int]] = {True: [], False: []}
    on = True
    try:
        training.batches(warm)
        for _ in range(blocks):
            on = not on
            switch(watch, on=on)
            times = training.batches(IN_SITU_BLOCK)
            first[on].append(times[0])
            steady[on].extend(times[IN_SITU_SETTLE:])
    finally:
        watch.remove()
    return InSituCost(dataset, steady[True], steady[False], first[True], first[False])


def in_situ_summary(cost: InSituCost) -> dict[str, object]:
    """The JSON figures of the in-situ hook path (``--json``)."""
    return {
        "dataset": cost.dataset,
        "steps_per_side": len(cost.on_ns),
        "step_us_off": statistics.median(cost.off_ns) / 1e3,
        "added_us_per_step": cost.added_ns / 1e3,
        "added_us_by_tenth": [ns / 1e3 for ns in cost.added_ns_by_tenth()],
        "first_step_added_us": cost.first_step_added_ns / 1e3,
    }


#: The argument that makes this file measure the in-situ hook path once and print its JSON.
IN_SITU_CHILD = "--in-situ-child"


def in_situ_in_processes(dataset: str, *, steps: int, processes: int) -> list[dict[str, Any]]:
    """``hook_path_in_situ`` in ``processes`` fresh processes, one after the other, each one's
    ``in_situ_summary``. One process is one sample of how the interpreter and torch lay out
    their memory: the same code reads further apart from one process to the next than a cut
    of a few calls saves (docs/performance.md), so the figure is the median over processes."""
    runs = []
    for _ in range(processes):
        done = subprocess.run(
            [sys.executable, str(Path(__file__)), IN_SITU_CHILD, dataset, str(steps)],
            capture_output=True,
            text=True,
            timeout=1800,
            env=os.environ.copy(),
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the in-situ run exited {done.returncode}:\n{done.stderr[-3000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return runs


def in_situ_processes_summary(dataset: str, runs: list[dict[str, Any]]) -> dict[str, object]:
    """The JSON figures of the in-situ hook path over processes (``--json``)."""
    added = [float(run["added_us_per_step"]) for run in runs]
    return {
        "dataset": dataset,
        "processes": runs,
        "added_us_per_step": statistics.median(added),
        "added_us_per_step_range": [min(added), max(added)],
        "step_us_off": statistics.median(float(run["step_us_off"]) for run in runs),
        "first_step_added_us": statistics.median(float(run["first_step_added_us"]) for run in runs),
    }


def print_in_situ(summary: dict[str, Any]) -> None:
    """The human-readable figures of the in-situ hook path over processes."""
    runs = summary["processes"]
    added = [float(run["added_us_per_step"]) for run in runs]
    print(
        f"\n## the hook path in situ: {summary['dataset']}, the script's own step, on or off "
        f"in alternating blocks of {IN_SITU_BLOCK} ({runs[0]['steps_per_side']} steady steps "
        f"a side), in {len(runs)} processes"
    )
    print(f"us/step off          {summary['step_us_off']:.1f} (median)")
    print(
        f"added us/step        {summary['added_us_per_step']:.1f}   (median over processes of "
        f"median on - median off, a block's first {IN_SITU_SETTLE} steps left out; "
        "budget <= 100 us)"
    )
    print(f"... each process     {', '.join(f'{us:.1f}' for us in added)}")
    print(
        f"first step after installing: {summary['first_step_added_us']:.0f} us more than the "
        "first after removing (once a run)"
    )


def _in_situ_child(dataset: str, steps: int) -> None:
    """One process's in-situ figures, as one JSON line on stdout."""
    import torch
    from overhead import Sink

    torch.set_num_threads(1)
    sink = Sink()
    try:
        cost = hook_path_in_situ(dataset, sink.link, steps=steps)
    finally:
        sink.close()
    print(json.dumps(in_situ_summary(cost)), flush=True)


@dataclass(frozen=True)
class ModuleCountCost:
    """µs a forward of a model of ``module_calls`` small modules (no grad, warm) costs with the
    instruments installed (on) and removed (off), in alternating rounds: whether the hook
    path grows with the model (the global hooks step aside for the outermost forward, so it
    should not)."""

    module_calls: int
    on_us: list[float]
    off_us: list[float]

    @property
    def added_us(self) -> float:
        return statistics.median(self.on_us) - statistics.median(self.off_us)


def module_count_cost(
    link: Any, *, blocks: int, rounds: int = 8, calls: int = 300
) -> ModuleCountCost:
    """A forward of ``blocks`` ``Sequential(Linear(8, 8), ReLU())`` (3 module calls each, and
    the outer one), ``calls`` forwards a round, the sides alternating round by round."""
    import torch
    from torch import nn

    model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(blocks)])
    x = torch.randn(2, 8)
    watch = installed(link)
    times: dict[bool, list[float]] = {True: [], False: []}

    def forwards(n: int) -> float:
        start = time.perf_counter_ns()
        with torch.no_grad():
            for _ in range(n):
                model(x)
        return (time.perf_counter_ns() - start) / n / 1e3

    state = True
    try:
        for round_ in range(rounds):
            for on in (True, False) if round_ % 2 == 0 else (False, True):
                if on != state:
                    switch(watch, on=on)
                    state = on
                forwards(calls // 6)  # warm after the switch
                times[on].append(forwards(calls))
    finally:
        if not state:
            switch(watch, on=True)  # what remove() undoes
        watch.remove()
    return ModuleCountCost(sum(1 for _ in model.modules()), times[True], times[False])


def print_module_counts(costs: list[ModuleCountCost]) -> None:
    print("\n## a forward of many modules: the hook path must not grow with the model")
    for cost in costs:
        print(
            f"{cost.module_calls:>4} module calls   added {cost.added_us:6.1f} us a forward "
            f"({cost.added_us / cost.module_calls:.2f} us a module call; off "
            f"{statistics.median(cost.off_us):.1f} us)"
        )


def hook_path_profile(dataset: str, link: Any, *, steps: int, top: int = 14) -> str:
    """cProfile of ``steps`` tiny steps with the instruments on: the top entries by own time."""
    import cProfile
    import io
    import pstats

    training = tiny_training(dataset)
    watch = installed(link)
    try:
        training.batches(200)
        profile = cProfile.Profile()
        profile.enable()
        training.batches(steps)
        profile.disable()
    finally:
        watch.remove()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != IN_SITU_CHILD or sys.argv[2] not in DATASETS:
        sys.exit(
            f"usage: {sys.argv[0]} {IN_SITU_CHILD} {{{','.join(DATASETS)}}} STEPS "
            "(bench/overhead.py --script runs it)"
        )
    _in_situ_child(sys.argv[2], int(sys.argv[3]))
