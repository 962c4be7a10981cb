"""``python -m gpuwatch.runner --script PATH -- ARGS``: run the user's own script, watched.

The script runs as ``__main__`` through ``runpy.run_path`` exactly as ``python PATH ARGS`` would
run it: ``sys.argv = [PATH, *ARGS]``, ``sys.path[0]`` = its directory, the working directory the
launcher gave this process, its ``if __name__ == "__main__":`` guard and spawn-started DataLoader
workers (they re-import it as ``__mp_main__``) behaving as usual. Steps come from
``autohooks`` (zero code) or ``gpuwatch.probe`` (see ``step_recorder`` for the rules).

``--module NAME -- ARGS`` runs a module as ``python -m NAME ARGS`` would, through
``runpy.run_module(NAME, run_name="__main__", alter_sys=True)``: ``sys.argv[0]`` is its file,
``sys.path[0]`` the working directory, a package runs its ``__main__``; everything else as for a
script. A module that is not there → ``error`` ModuleNotFound, exit 1, as ``python -m`` exits.

Outcomes (each ends with ``bye``; the exit code is what ``python PATH`` would give):
a missing/unreadable script → ``error`` ScriptNotFound, exit 2; a syntax error → ``error`` with
the compiler's message and line, exit 1 (both before torch is imported and before ``hello``);
the script raises → ``error`` with its traceback (gpuwatch and runpy frames removed), exit 1;
``sys.exit(n)`` or the end of the script → ``bye`` ``script_exit`` with ``code`` n, exit n;
``stop``/``--max-steps``/the GUI gone → ``KeyboardInterrupt`` in the script at its next step
boundary, ``bye`` ``stopped``/``max_steps`` (none when the GUI is gone), exit 0.
"""

from __future__ import annotations

import gc
import os
import runpy
import sys
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuwatch.protocol import ROLE_RANK, TORCH_MISSING
from gpuwatch.runner.link import Link
from gpuwatch.runner.ranks import RankIdentity
from gpuwatch.runner.script_environment import (
    ModuleNotFound,
    enter_module,
    enter_script,
    module_file,
)
from gpuwatch.runner.script_hello import say_hello
from gpuwatch.runner.spawned_ranks import RankStart, SpawnedRanks
from gpuwatch.runner.worker_start import MainGuardWatch, missing_guard_message

EXIT_OK = 0
EXIT_SCRIPT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: ``hello.config.warmup_steps`` of a script: its first steps start workers and warm caches.
INITIAL_WARMUP_STEPS = 3
#: Frames of these files are left out of a script's traceback (they are not the user's).
_GPUWATCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: How runpy's frames are named: frozen (Python >= 3.11) or its source file.
_RUNPY_FILES = frozenset({"<frozen runpy>", getattr(runpy, "__file__", None) or ""})


@dataclass(frozen=True)
class Target:
    """What runs as ``__main__``: a script (``path`` as given), or a module (``python -m``)."""

    path: str
    full_path: str
    module: str | None = None

    @property
    def name(self) -> str:
        """How the run is named (hello's workload): the module, or the script's file name."""
        return self.module or os.path.basename(self.full_path)

    @property
    def command(self) -> str:
        """What ``python`` was given, for the log line."""
        return f"-m {self.module}" if self.module else self.path

    def enter(self, args: Sequence[str]) -> None:
        """``sys.argv`` and ``sys.path[0]`` as python sets them before the first line (for a
        module ``runpy`` puts its file in ``argv[0]``; python shows ``-m`` until then)."""
        sys.argv = ["-m" if self.module else self.path, *args]
        if self.module:
            enter_module()
        else:
            enter_script(self.full_path)

    def run(self) -> None:
        """Execute it as ``__main__``; ``run_module`` gives ``__main__`` the module's
        ``__spec__``, so spawned workers re-import it by name, as ``python -m``'s do."""
        if self.module:
            runpy.run_module(self.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(self.path, run_name="__main__")


@dataclass
class Outcome:
    """How the script ended, as ``bye`` reports it."""

    reason: str  # script_exit | stopped | max_steps | link_closed | error
    code: int | None
    exit_code: int
    error: BaseException | None = None


@dataclass(frozen=True)
class RunPlace:
    """Where and how long the user's code runs: the runner's ``--device``, ``--max-steps``
    and ``--private-dir`` (the run's folder that gpuwatch removes however the run ends, so a
    runner killed mid-run leaves nothing of its own in the temp folder)."""

    device_spec: str
    max_steps: int | None = None
    private_dir: str | None = None
    #: Which rank of a torchrun job this is (``--as-rank``), None for a single process.
    rank: RankIdentity | None = None
    #: How the ranks the script spawns itself reach the GUI (``spawned_ranks``).
    spawn: RankStart | None = None


def run_script(link: Link, *, path: str, args: Sequence[str], place: RunPlace) -> int:
    """Check, announce, run and report the script; returns the runner's exit code."""
    full_path = os.path.abspath(path)
    try:
        with open(full_path, "rb") as script:
            source = script.read()
    except OSError as exc:
        text = f"cannot read script {path!r}: {exc.strerror or exc}"
        return _failed_early(link, "ScriptNotFound", text, "", EXIT_USAGE)
    try:
        compile(source, full_path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return _failed_early(
            link,
            "SyntaxError",
            str(exc),
            "".join(traceback.format_exception_only(exc)),
            EXIT_SCRIPT_ERROR,
            file=exc.filename,
            line=exc.lineno,
        )
    except ValueError as exc:  # e.g. null bytes
        return _failed_early(
            link, type(exc).__name__, f"cannot compile {path!r}: {exc}", "", EXIT_SCRIPT_ERROR
        )
    return _start(link, Target(path, full_path), args, place)


def run_module(link: Link, *, name: str, args: Sequence[str], place: RunPlace) -> int:
    """As ``run_script`` for ``python -m name``: the module is looked up (nothing of it run)
    on the ``sys.path`` it will see, so a missing one is one sentence before torch loads."""
    enter_module()
    try:
        full_path = module_file(name)
    except ModuleNotFound as exc:
        return _failed_early(link, "ModuleNotFound", str(exc), "", EXIT_SCRIPT_ERROR)
    return _start(link, Target(full_path, full_path, module=name), args, place)


def _start(link: Link, target: Target, args: Sequence[str], place: RunPlace) -> int:
    """Import torch, pick the device and watch the target's run; the runner's exit code."""
    device_spec = place.device_spec
    if device_spec == "cpu":  # hide CUDA, so "cuda if available" scripts train on the CPU
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        import torch
    except Exception as exc:
        return _failed_early(
            link,
            TORCH_MISSING,
            f"{sys.executable} cannot import torch ({type(exc).__name__}: {exc}): install "
            "torch in it, or choose a Python that has it (--python PATH; in the window, "
            "Run → Choose Python…)",
            # A missing torch is the whole story; a broken one keeps torch's traceback.
            "" if isinstance(exc, ModuleNotFoundError) else traceback.format_exc(),
            EXIT_SCRIPT_ERROR,
        )
    from gpuwatch.runner.session import DeviceError, script_device

    try:
        device = script_device(torch, device_spec)
    except DeviceError as exc:
        return _failed_early(link, "DeviceError", str(exc), "", EXIT_USAGE)
    try:
        return _watch(link, torch, device, target=target, args=args, place=place)
    except Exception as exc:  # the runner's own failure (the script's are caught inside)
        return _failed_early(
            link,
            type(exc).__name__,
            f"gpuwatch could not watch {target.name}: {type(exc).__name__}: {exc}",
            traceback.format_exc(),
            EXIT_SCRIPT_ERROR,
        )


def _watch(
    link: Link,
    torch: Any,
    device: Any,
    *,
    target: Target,
    args: Sequence[str],
    place: RunPlace,
) -> int:
    from gpuwatch import probe
    from gpuwatch.runner.script_instruments import ScriptInstruments

    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)  # --device cuda:N: the script's default CUDA device
    backend = say_hello(
        link,
        torch,
        device,
        workload=target.name,
        warmup_steps=INITIAL_WARMUP_STEPS,
        script={
            "path": target.full_path,
            "args": list(args),
            "cwd": os.getcwd(),
            **({"module": target.module} if target.module else {}),
        },
        **({"role": ROLE_RANK, "rank": place.rank.fields()} if place.rank else {}),
    )
    watch = ScriptInstruments.build(link, torch, device, backend, max_steps=place.max_steps)
    knobs, control, recorder = watch.knobs, watch.control, watch.recorder
    if hasattr(os, "register_at_fork"):  # Windows has none (and no fork)
        os.register_at_fork(after_in_child=lambda: probe.attach_runner(None))
    link.log("info", f"running {target.command} {' '.join(args)}".rstrip() + f" in {os.getcwd()}")

    target.enter(args)  # sys.argv, sys.path[0] as python sets them (script_environment)
    watch.install()
    # Spawned workers of an unguarded script: one message, not N.
    guard = MainGuardWatch(place.private_dir)
    guard.install()
    ranks = SpawnedRanks(torch, place.spawn) if place.spawn and not place.rank else None
    if ranks is not None:
        ranks.install()
    try:
        outcome = _run(target)
    finally:
        if ranks is not None:
            ranks.remove()
        watch.remove()
        guard_missing = guard.missing()
        guard.remove()
    if knobs.preset:
        link.log(
            "warning",
            f"--set {', '.join(f'{k}={v}' for k, v in knobs.preset.items())}: "
            "no knob of that name appeared (a DataLoader's knobs appear when the script first "
            "iterates it)",
        )
    if control.stop_reason is not None and outcome.reason in ("script_exit", "stopped"):
        outcome = Outcome(control.stop_reason, outcome.code, EXIT_OK)
    try:
        recorder.finish(keep_open=not control.interrupted)
    except Exception as exc:  # never hide the script's own outcome
        link.log("error", f"could not send the last steps: {type(exc).__name__}: {exc}")
    backend.close()
    skips = backend.skips
    if skips.total:
        link.log("warning", f"{skips.total} step(s) without device marks: {skips.describe()}")
    cuda_used = _cuda_used(torch)
    if device.type != "cuda" and cuda_used:
        link.log(
            "warning",
            "the script used CUDA, but gpuwatch timed it on the host "
            "(it watched the CPU device): choose a CUDA device to see device marks",
        )
    if guard_missing and outcome.reason in ("error", "script_exit"):
        outcome = Outcome("error", EXIT_SCRIPT_ERROR, EXIT_SCRIPT_ERROR)
        text = missing_guard_message(target.full_path)
        link.send("error", type="MissingMainGuard", message=text, traceback="")
    if outcome.error is not None:
        exc = outcome.error
        link.send(
            "error", type=type(exc).__name__, message=str(exc), traceback=script_traceback(exc)
        )  # said by gpuwatch, once: not on stderr too, which it shows as the script's output
        del exc
    outcome.error = None
    if not _script_threads_left():  # else a thread of the script may still iterate a loader
        watch.loader_knobs.end_workers()  # as python's exit ends them, without its wait
    gc.collect()  # frames of the traceback may hold DataLoader iterators: end their workers
    if outcome.reason != "link_closed":
        link.send(
            "bye",
            reason=outcome.reason,
            code=outcome.code,
            steps=recorder.steps,
            cuda_used=cuda_used,
            instrumentation=recorder.instrumentation,
            interrupted=control.interrupted,
            **recorder.bye_fields(),
            **({"device_marks_skipped": skips.total} if device.type == "cuda" else {}),
        )
    link.finished()
    link.close()
    return outcome.exit_code


def _script_threads_left() -> bool:
    """True while a thread the script started and did not make a daemon still runs (python
    would wait for it before exiting; the runner's own threads are daemons)."""
    main = threading.main_thread()
    return any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())


def _run(target: Target) -> Outcome:
    """Run the script as ``__main__``; how it ended (an exception is kept for the report)."""
    try:
        target.run()
    except SystemExit as exc:
        code = exit_code(exc)
        return Outcome("script_exit", code, code)
    except KeyboardInterrupt:  # a stop (the control decides which) or Ctrl-C by hand
        return Outcome("stopped", None, EXIT_INTERRUPTED)
    except BaseException as exc:
        return Outcome("error", EXIT_SCRIPT_ERROR, EXIT_SCRIPT_ERROR, exc)
    return Outcome("script_exit", 0, EXIT_OK)


def exit_code(exc: SystemExit) -> int:
    """What ``python SCRIPT`` exits with for ``sys.exit(value)``: an int as is, None → 0,
    anything else is printed on stderr and gives 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int) and not isinstance(exc.code, bool):
        return exc.code
    sys.stderr.write(f"{exc.code}\n")
    sys.stderr.flush()
    return 1


def script_traceback(exc: BaseException) -> str:
    """The traceback as ``python SCRIPT`` prints it, without gpuwatch's and runpy's frames:
    every other frame (the script's, torch's, the standard library's) is kept, in chained
    exceptions and exception groups too. Should trimming itself fail, the whole traceback is
    given rather than none (the script's error must never turn into one of gpuwatch's)."""
    try:
        formatted = traceback.TracebackException.from_exception(exc)
        seen: set[int] = set()
        pending = [formatted]
        while pending:
            part = pending.pop()
            if id(part) in seen:
                continue
            seen.add(id(part))
            part.stack = traceback.StackSummary.from_list(
                [frame for frame in part.stack if not _not_users(frame.filename)]
            )
            pending.extend(p for p in (part.__cause__, part.__context__) if p is not None)
            pending.extend(getattr(part, "exceptions", None) or ())
        return "".join(formatted.format())
    except Exception:
        return "".join(traceback.format_exception(exc))


def _not_users(filename: str) -> bool:
    """A frame of gpuwatch's own package or of runpy (not a user's file that is merely called
    ``runpy.py``)."""
    return filename.startswith(_GPUWATCH_DIR) or filename in _RUNPY_FILES


def _cuda_used(torch: Any) -> bool:
    """Whether the script put anything on a CUDA device (gpuwatch's own events allocate
    nothing, so the allocator's peak tells)."""
    try:
        if not torch.cuda.is_initialized():
            return False
        return any(
            torch.cuda.max_memory_allocated(index) > 0 for index in range(torch.cuda.device_count())
        )
    except Exception:  # a broken driver: say "not used" rather than fail the report
        return False


def _failed_early(link: Link, kind: str, message: str, trace: str, code: int, **extra: Any) -> int:
    """An outcome before ``hello`` (nothing ran): ``error`` + ``bye``. Nothing on stderr:
    gpuwatch shows the error it received (the runner's stderr is the script's output there,
    so a line here would be said twice)."""
    link.send("error", type=kind, message=message, traceback=trace, **extra)
    link.send("bye", reason="error", code=code, steps=0, cuda_used=False, instrumentation="auto")
    link.finished()
    link.close()
    return code
