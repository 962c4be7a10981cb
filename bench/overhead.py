"""What gpuwatch's instrumentation costs the training loop (``python bench/overhead.py``).

For each workload, one process alternates blocks of the same training step:

* **off**: the bare step (next batch, copy, forward+loss, backward, optimizer, the
  ``log_every`` loss read) with no timing marks and nothing sent;
* **on**: the runner's real ``TrainingLoop``: host marks, the timing backend, columnar step
  batches and a real ``Link`` to a sink process that drains it (as the GUI would);
* **profiler**: the bare step inside ``torch.profiler.profile(activities=[CPU])``, the reference
  point (what a "just profile it" monitor would cost).

Blocks alternate in order (on/off/profiler, then rotated) for several repetitions; each
repetition gives a ratio, so machine-wide noise hits both sides alike. The figure is the
median slowdown and its range. A second measurement with a no-op step prices the
instrumentation itself in ns per step (the part a ratio over a noisy step cannot resolve).

Then: device synchronizations added by the instrumentation, counted (must be 0), and the probe
API's no-GUI cost per call (``bench/probe_noop.py``).

``--script`` prices the zero-code hooks instead: a user's script run through ``gpuwatch run``
against plain ``python``, in interleaved pairs (``bench/script_overhead.py``), beside the
built-in loop's instrumentation alone; ``--json`` prints those figures as one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import machine
import probe_noop
import script_overhead
import torch

from gpuwatch.protocol import AUTHKEY_ENV
from gpuwatch.runner.availability import knob_schema
from gpuwatch.runner.batch_source import BatchSource
from gpuwatch.runner.link import Link
from gpuwatch.runner.loop import TrainingLoop
from gpuwatch.runner.timing import HostBackend
from gpuwatch.runner.training_state import TrainingState
from gpuwatch.runner.workloads import Workload, load_workload

CPU = torch.device("cpu")

#: A listener in its own process that accepts the runner's link and discards what arrives:
#: the GUI's side of the socket, without the GUI's work competing for this process's GIL.
SINK_CODE = textwrap.dedent("""
    import os, sys
    from multiprocessing.connection import Listener
    key = bytes.fromhex(os.environ["GPUWATCH_AUTHKEY"])
    with Listener(sys.argv[1], family="AF_UNIX", authkey=key) as listener:
        print("ready", flush=True)
        conn = listener.accept()
        n = 0
        try:
            while True:
                n += len(conn.recv_bytes())
        except (EOFError, OSError):
            pass
    print(n, flush=True)
""")


class Sink:
    """A sink process and the real ``Link`` connected to it."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="gpuwatch-bench-")
        address = str(Path(self._dir.name) / "sink")
        key = os.urandom(32)
        env = {**os.environ, AUTHKEY_ENV: key.hex()}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SINK_CODE, address], env=env, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the sink process did not start")
        self.link = Link.connect(address, key)

    def close(self) -> int:
        """Close the link; returns how many bytes the sink received."""
        self.link.finished()
        self.link.close()
        out, _ = self.proc.communicate(timeout=10)
        self._dir.cleanup()
        return int(out.strip() or 0)


def prepared(name: str, batch_size: int | None) -> tuple[Workload, TrainingState, Any]:
    """A workload ready to train on the CPU with one intra-op thread (as the runner on 2 cores)."""
    torch.manual_seed(0)
    workload = load_workload(name)(seed=0, torch_threads=1)
    if batch_size is not None:
        workload.config["batch_size"] = batch_size
    workload.prepare(lambda _text: None)
    model = workload.build_model(CPU)
    state = TrainingState(
        workload,
        model=model,
        optimizer=workload.build_optimizer(model),
        device=CPU,
        values=workload.knob_values(),
    )
    return workload, state, knob_schema(torch, workload, CPU)


def bare_steps(batches: BatchSource, state: TrainingState, n: int) -> None:
    """``n`` steps exactly as ``TrainingLoop._step`` computes them, minus the instrumentation."""
    log_every = int(state.values["log_every"])
    loss_sum: torch.Tensor | None = None
    count = 0
    for _ in range(n):
        batch = state.to_device(batches.next_batch())
        loss = state.loss(batch)
        state.backward(loss)
        state.optimizer_step()
        if log_every <= 1:
            loss.item()
            continue
        detached = loss.detach()
        loss_sum = detached if loss_sum is None else loss_sum + detached
        count += 1
        if count >= log_every:
            (loss_sum / count).item()
            loss_sum, count = None, 0
    batches.close()  # as TrainingLoop.run does after each block


def timed(body: Callable[[], None]) -> float:
    start = time.perf_counter_ns()
    body()
    return (time.perf_counter_ns() - start) / 1e9


def measure(name: str, *, batch_size: int | None, block_s: float, reps: int) -> dict[str, Any]:
    """Alternating on/off/profiler blocks of the same workload; rates in steps/s per block."""
    workload, state, schema = prepared(name, batch_size)
    sink = Sink()
    loop = TrainingLoop(workload, state=state, schema=schema, backend=HostBackend(), link=sink.link)
    batches = loop.batches  # the same loader for every variant

    def on(n: int) -> None:
        loop.max_steps = loop.steps_done + n
        loop.run()

    def off(n: int) -> None:
        bare_steps(batches, state, n)

    def profiled(n: int) -> float:
        activities = [torch.profiler.ProfilerActivity.CPU]
        with torch.profiler.profile(activities=activities):
            return timed(lambda: bare_steps(batches, state, n))

    # Warm up (allocator, first-touch, loader) and size the blocks from the bare rate.
    off(5)
    warm = timed(lambda: off(20))
    n = max(5, round(block_s * 20 / warm))
    rates: dict[str, list[float]] = {"on": [], "off": [], "profiler": []}
    variants: dict[str, Callable[[], float]] = {
        "on": lambda: timed(lambda: on(n)),
        "off": lambda: timed(lambda: off(n)),
        "profiler": lambda: profiled(n),
    }
    order = ["on", "off", "profiler"]
    for rep in range(reps):
        for variant in order[rep % 3 :] + order[: rep % 3]:
            rates[variant].append(n / variants[variant]())
    received = sink.close()
    return {
        "name": name,
        "batch_size": state.values["batch_size"],
        "steps_per_block": n,
        "rates": rates,
        "sent_bytes": received,
        "steps_on": loop.steps_done,
    }


class _NullWorkload:
    """A step that does nothing, so what remains is the instrumentation's own cost."""

    name = "null"

    def build_loader(self, knobs: dict[str, Any]) -> Iterator[int]:
        return itertools.repeat(0)

    def samples(self, batch: Any) -> int:
        return 1


class _NullState:
    """``TrainingState``'s step interface, doing nothing (the loss read never falls due)."""

    device = CPU

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = {**values, "log_every": 1000}
        self._loss = torch.zeros(())

    def to_device(self, batch: Any) -> Any:
        return batch

    def loss(self, batch: Any) -> torch.Tensor:
        return self._loss

    def backward(self, loss: torch.Tensor) -> None:
        pass

    def optimizer_step(self) -> None:
        pass

    def take_compiled(self) -> None:
        return None


def instrumentation_ns(
    schema: Any, values: dict[str, Any], *, reps: int, n: int = 20_000
) -> tuple[list[float], list[float]]:
    """ns per step of the real loop around a no-op step, and of a bare no-op step loop.

    The loop sends its batches over a real link to a sink process, so encoding and sending on
    the link's thread are included (they take the GIL from the training thread).
    """
    null_state = _NullState(values)
    sink = Sink()
    loop = TrainingLoop(
        _NullWorkload(),
        state=null_state,
        schema=schema,  # type: ignore[arg-type]
        backend=HostBackend(),
        link=sink.link,
    )
    batches = loop.batches

    def on() -> None:
        loop.max_steps = loop.steps_done + n
        loop.run()

    def off() -> None:
        bare_steps(batches, null_state, n)  # type: ignore[arg-type]

    on_ns: list[float] = []
    off_ns: list[float] = []
    for _ in range(reps):
        on_ns.append(timed(on) * 1e9 / n)
        off_ns.append(timed(off) * 1e9 / n)
    sink.close()
    return on_ns, off_ns


# ---- device synchronizations ---------------------------------------------------------------

#: Entry points that make the host wait for a device (or copy a device value to the host).
SYNC_ENTRY_POINTS: tuple[tuple[Any, str], ...] = (
    (torch.cuda, "synchronize"),
    (torch.cuda.Event, "synchronize"),
    (torch.cuda.Event, "wait"),
    (torch.cuda.Stream, "synchronize"),
    (torch.Tensor, "item"),
    (torch.Tensor, "cpu"),
    (torch.Tensor, "tolist"),
)


def entry_label(owner: Any, attr: str) -> str:
    return f"{getattr(owner, '__name__', owner)}.{attr}"


class SyncCounter:
    """Counts calls to ``SYNC_ENTRY_POINTS`` made from ``threads`` while installed.

    Calls on other threads are ignored (the sink's and the test runner's own), but the link's
    sender thread is included: anything it did to a tensor would be the instrumentation's.
    """

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self._saved: list[tuple[Any, str, Any]] = []
        self._lock = threading.Lock()

    def __enter__(self) -> SyncCounter:
        for owner, attr in SYNC_ENTRY_POINTS:
            original = getattr(owner, attr)
            self._saved.append((owner, attr, original))
            setattr(owner, attr, self._counting(entry_label(owner, attr), original))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, attr, original in reversed(self._saved):
            setattr(owner, attr, original)
        self._saved.clear()

    def _counting(self, label: str, original: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls[label] = self.calls.get(label, 0) + 1
            return original(*args, **kwargs)

        return counted

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def count_syncs(steps: int = 200) -> tuple[SyncCounter, SyncCounter]:
    """Sync-like calls of the real loop and of the bare step, both with ``log_every`` past
    the run (so the workload's own loss read never falls due): any call is instrumentation."""
    workload, state, schema = prepared("mlp", 8)
    state.values["log_every"] = 1000
    sink = Sink()
    loop = TrainingLoop(
        workload, state=state, schema=schema, backend=HostBackend(), link=sink.link, max_steps=steps
    )
    with SyncCounter() as on:
        loop.run()
    sink.close()
    with SyncCounter() as off:
        bare_steps(loop.batches, state, steps)
    return on, off


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=31, help="repetitions of each block")
    parser.add_argument(
        "--block-s",
        type=float,
        default=0.3,
        help="seconds per block: short blocks, many of them, so the load of "
        "other processes changes little within one on/off pair",
    )
    parser.add_argument("--workloads", default="mlp,vision")
    parser.add_argument(
        "--script",
        action="store_true",
        help="the zero-code hooks on a user script: gpuwatch run vs plain python, in pairs",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=20,
        help="--script: interleaved pairs (a pair's ratio scatters by a few percent here: "
        "fewer than about 20 leave a 2 %% budget undecided)",
    )
    parser.add_argument("--batches", type=int, default=600, help="--script: batches per run")
    parser.add_argument(
        "--in-situ", type=int, default=1500, help="--script: in-situ steps on each side"
    )
    parser.add_argument(
        "--in-situ-processes",
        type=int,
        default=4,
        help="--script: fresh processes the in-situ figure is the median of",
    )
    parser.add_argument(
        "--datasets", default=",".join(script_overhead.DATASETS), help="--script: which scripts"
    )
    parser.add_argument("--json", action="store_true", help="--script: one JSON object")
    parser.add_argument(
        "--profile", action="store_true", help="--script: cProfile's top entries of the hook path"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.script:
        return script_main(args)
    print(
        machine.header(
            "gpuwatch instrumentation overhead (bench/overhead.py)",
            [
                f"{args.reps} repetitions of alternating ~{args.block_s:g} s blocks; "
                "1 intra-op thread; CPU device (HostBackend)"
            ],
        )
    )
    budgets = {"mlp": 2.0, "vision": 0.5}
    step_ms: dict[str, float] = {}
    for name in args.workloads.split(","):
        batch = 1 if name == "mlp" else None  # mlp at its highest step rate on this CPU
        result = measure(name, batch_size=batch, block_s=args.block_s, reps=args.reps)
        rates = result["rates"]
        slow = [100 * (1 - on / off) for on, off in zip(rates["on"], rates["off"], strict=True)]
        prof = [100 * (1 - p / off) for p, off in zip(rates["profiler"], rates["off"], strict=True)]
        step_ms[name] = 1e3 / machine.percentile(rates["off"], 50)
        print(
            f"\n## {name} (batch_size {result['batch_size']}, {result['steps_per_block']} "
            f"steps per block, {result['sent_bytes']:,} bytes over the link)"
        )
        print(f"steps/s off          {machine.spread(rates['off'], '{:.1f}')}")
        print(f"steps/s on           {machine.spread(rates['on'], '{:.1f}')}")
        print(f"steps/s profiler     {machine.spread(rates['profiler'], '{:.1f}')}")
        print(
            f"slowdown on vs off   {machine.spread(slow)} %   "
            f"(budget <= {budgets.get(name, 2.0):g} %)"
        )
        print(f"slowdown profiler    {machine.spread(prof)} %   (reference)")

    _, state, schema = prepared("mlp", 1)
    on_ns, off_ns = instrumentation_ns(schema, state.values, reps=min(args.reps, 9))
    per_step = [a - b for a, b in zip(on_ns, off_ns, strict=True)]
    cost_ns = machine.percentile(per_step, 50)
    print("\n## instrumentation alone (no-op step, real loop + link vs bare loop)")
    print(f"ns/step on           {machine.spread(on_ns, '{:.0f}')}")
    print(f"ns/step off          {machine.spread(off_ns, '{:.0f}')}")
    print(f"added ns/step        {machine.spread(per_step, '{:.0f}')}")
    for name, ms in step_ms.items():
        print(f"  = {100 * cost_ns / (ms * 1e6):.3f} % of a {ms:.2f} ms {name} step")

    on, off = count_syncs()
    print("\n## device synchronizations (calls counted by patching the entry points)")
    print("entry points:", ", ".join(entry_label(o, a) for o, a in SYNC_ENTRY_POINTS))
    print(f"real loop, 200 steps:  {on.total} {dict(on.calls) or ''}")
    print(f"bare step, 200 steps:  {off.total} {dict(off.calls) or ''}")
    print(f"added by gpuwatch:     {on.total - off.total}   (budget 0)")

    print("\n## probe API without a GUI (bench/probe_noop.py)")
    floor = probe_noop.per_call(probe_noop.loop)
    for label, body in (
        ("with gw.step()", probe_noop.step),
        ("with gw.phase('forward')", probe_noop.phase),
        ("gw.knob(choices=...)", probe_noop.knob),
    ):
        print(f"{label:28s} {probe_noop.per_call(body) - floor:7.0f} ns/call")
    print(f"\n# load average at the end: {machine.load_average()}")
    return 0


def script_main(args: argparse.Namespace) -> int:
    """``--script``: the user script's pairs, the hook path alone (a tiny step of the same
    shape, instruments on/off in one process; the script's own step, on or off in alternating
    blocks, in several fresh processes), and the built-in loop's instrumentation alone."""
    if not args.json:
        print(
            machine.header(
                "gpuwatch zero-code hook cost (bench/overhead.py --script)",
                [
                    f"{args.pairs} interleaved pairs of python vs gpuwatch run --headless, "
                    f"{args.batches} batches a run; the script's own clock"
                ],
            )
        )
    load_before = machine.load_average()
    datasets = args.datasets.split(",")
    results = [
        script_overhead.measure_pairs(name, pairs=args.pairs, batches=args.batches)
        for name in datasets
    ]
    alone = []
    for name in datasets:
        sink = Sink()
        alone.append(script_overhead.hook_path_cost(name, sink.link, reps=10, steps=1000))
        sink.close()
    in_situ = [
        script_overhead.in_situ_processes_summary(
            name,
            script_overhead.in_situ_in_processes(
                name, steps=args.in_situ, processes=args.in_situ_processes
            ),
        )
        for name in datasets
    ]
    sink = Sink()
    module_counts = [
        script_overhead.module_count_cost(sink.link, blocks=blocks) for blocks in (10, 100)
    ]
    sink.close()
    profile = ""
    if args.profile:
        sink = Sink()
        profile = script_overhead.hook_path_profile(datasets[-1], sink.link, steps=3000)
        sink.close()
    _, state, schema = prepared("mlp", 1)
    on_ns, off_ns = instrumentation_ns(schema, state.values, reps=5)
    loop_ns = [a - b for a, b in zip(on_ns, off_ns, strict=True)]
    load_after = machine.load_average()
    if args.json:
        report = {
            "scripts": [script_overhead.summary(result) for result in results],
            "hook_path_alone": [script_overhead.alone_summary(cost) for cost in alone],
            "hook_path_in_situ": in_situ,
            "module_count": [
                {"module_calls": cost.module_calls, "added_us_per_forward": cost.added_us}
                for cost in module_counts
            ],
            "builtin_loop_added_ns_per_step": machine.percentile(loop_ns, 50),
            "load_average_before": load_before,
            "load_average_after": load_after,
        }
        print(json.dumps(report, indent=2))
        return 0
    for result in results:
        script_overhead.print_table(result)
    for cost in alone:
        script_overhead.print_alone(cost)
    for situ in in_situ:
        script_overhead.print_in_situ(situ)
    script_overhead.print_module_counts(module_counts)
    if profile:
        print(f"\n## profile of the hook path ({datasets[-1]}, tiny step, 3000 steps)\n{profile}")
    print("\n## built-in loop, instrumentation alone (no-op step, real loop + link vs bare)")
    print(f"added ns/step        {machine.spread(loop_ns, '{:.0f}')}")
    print(f"\n# load average before {load_before}, at the end {load_after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
