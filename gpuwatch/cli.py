"""The ``gpuwatch`` command.

Imports stay inside the commands: ``gpuwatch --version`` must not load torch or Qt, and
only the commands that open a window import ``gpuwatch.qt``. Errors print one line and
return a non-zero code; ``GPUWATCH_DEBUG=1`` shows tracebacks for bug reports.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwatch import __version__
from gpuwatch.protocol import MAX_CAPTURE_STEPS, TORCHRUN_MODULES, WORKLOADS

if TYPE_CHECKING:
    from gpuwatch.qt.window_options import WindowOptions

EXIT_USAGE = 2
#: Report formats of ``gpuwatch bench`` (kept here so parsing imports nothing heavy).
REPORT_FORMATS = ("md", "csv", "json")
#: Window themes (gpuwatch.qt.theme.MODES; repeated so the CLI imports no Qt until a window opens).
THEMES = ("system", "light", "dark")
#: Where ``gpuwatch run --set`` leaves its values for the runner (``runner.script_knobs``).
SCRIPT_SET_ENV = "GPUWATCH_SCRIPT_SET"


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 1."""


def build_parser() -> argparse.ArgumentParser:
    """The ``gpuwatch`` command line: the window's options and the doctor, replay, run, bench and
    export commands."""
    parser = argparse.ArgumentParser(
        prog="gpuwatch",
        description="Watch why a PyTorch training loop is slow while it runs. Without a "
        "command, opens the window and starts the built-in demo workload.",
    )
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default=None,
        help="built-in workload to run (default: the last one chosen in the window, else vision)",
    )
    parser.add_argument(
        "--device",
        default=None,
        type=_device,
        help="auto (best available), cpu, cuda or cuda:N (default: the last one "
        "chosen in the window, else auto)",
    )
    parser.add_argument(
        "--python",
        metavar="PATH",
        type=_python_path,
        help="Python interpreter with torch that runs the training "
        "(default: the one running gpuwatch)",
    )
    parser.add_argument(
        "--no-start",
        dest="autostart",
        action="store_false",
        help="open the window without starting the workload",
    )
    parser.add_argument(
        "--tour",
        action="store_true",
        help="start the tour (baseline, workers, ..., compile) as soon as the "
        "run is up; the scoreboard shows what each stage bought",
    )
    parser.add_argument(
        "--demo-seconds",
        type=_positive_seconds,
        metavar="N",
        help="run for N seconds, then (with --screenshot) save a PNG of the "
        "window and exit; works with QT_QPA_PLATFORM=offscreen",
    )
    parser.add_argument(
        "--screenshot",
        type=Path,
        metavar="PNG",
        help="where --demo-seconds saves the window picture",
    )
    parser.add_argument(
        "--self-test",
        action="store_true",
        help="check this installation end to end without a display: build "
        "the window offscreen, train the mlp on the CPU in the training "
        "Python (--python, else the chosen one) until steps arrive; "
        "exit 0/1 with one line and a JSON result file",
    )
    parser.add_argument(
        "--result",
        type=Path,
        metavar="FILE",
        help="where --self-test writes its JSON result (default: "
        "self-test.json beside the app log)",
    )
    _add_look_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    doctor = sub.add_parser(
        "doctor", help="report what this machine offers: torch, CUDA, NVML, display, Python"
    )
    doctor.add_argument(
        "--python",
        dest="doctor_python",
        metavar="PATH",
        type=_python_path,
        help="training interpreter to check (default: this one)",
    )
    doctor.set_defaults(doctor_parser=doctor)
    doctor.add_argument(
        "--gpu",
        action="store_true",
        help="check that gpuwatch measures this GPU right (about 30 s): "
        "sleep kernels of known length through the real runner, busy "
        "share against the truth, zero synchronizations, NVML, kernel "
        "capture; without an NVIDIA GPU it says so and exits 0",
    )
    doctor.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="where --gpu writes its JSON report (default: gpu-check.json beside the app log)",
    )
    _add_bench_parser(sub)
    _add_export_parser(sub)
    _add_run_parser(sub)
    _add_replay_parser(sub)
    return parser


def _add_look_options(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """``--presentation``, ``--theme`` and ``--window-size``: how a window looks (also in its
    screenshots)."""
    parser.add_argument(
        "--presentation",
        dest=f"{prefix}presentation",
        action="store_true",
        help="open in presentation mode (full screen, large fonts, high "
        "contrast; with --screenshot: a 1280×720 picture of it)",
    )
    parser.add_argument(
        "--theme",
        dest=f"{prefix}theme",
        choices=THEMES,
        metavar="THEME",
        help="light, dark or system (default: the theme chosen in View → Theme, else the system's)",
    )
    parser.add_argument(
        "--window-size",
        dest=f"{prefix}window_size",
        type=_window_size,
        metavar="WxH",
        help="open the window at this size, e.g. 1280x720 or "
        "3840x2160 (with --presentation: presented in a "
        "window of that size instead of full screen)",
    )


def _add_demo_options(parser: argparse.ArgumentParser, prefix: str) -> None:
    """``--demo-seconds`` and ``--screenshot`` for a subcommand that opens a window."""
    parser.add_argument(
        "--demo-seconds",
        dest=f"{prefix}demo_seconds",
        type=_positive_seconds,
        metavar="N",
        help="close the window after N seconds (with --screenshot: save a PNG of it first)",
    )
    parser.add_argument(
        "--screenshot",
        dest=f"{prefix}screenshot",
        type=Path,
        metavar="PNG",
        help="where --demo-seconds saves the window picture",
    )


def _add_replay_parser(sub: argparse._SubParsersAction) -> None:
    replay = sub.add_parser(
        "replay",
        help="show a recorded run (.gpuwatch) in the window: no torch, no GPU needed",
        description="Open a recording in the window, shown to its end, with play/pause, a "
        "position slider and a speed factor. --compare shows a second recording "
        "beside it (scoreboards and step-time breakdowns).",
    )
    replay.add_argument("file", type=Path, metavar="FILE", help="the recording to show")
    replay.add_argument(
        "--compare", type=Path, metavar="FILE2", help="a second recording to compare with FILE"
    )
    _add_demo_options(replay, "replay_")
    _add_look_options(replay, "replay_")


def _add_run_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser(
        "run",
        help="watch your own training script (no code change needed)",
        description="Run SCRIPT as `python SCRIPT ARGS` would (as __main__, with its argv, "
        "from this directory) and watch its training steps: in the window, or "
        "with --headless print a summary at the end. Everything after SCRIPT "
        "(or after --) is the script's own arguments. -m MODULE ARGS runs a module "
        "as `python -m MODULE ARGS` would.",
    )
    run.add_argument(
        "--python",
        dest="run_python",
        metavar="PATH",
        type=_python_path,
        help="Python interpreter with torch that runs the script "
        "(default: the one running gpuwatch)",
    )
    run.add_argument(
        "--device",
        dest="run_device",
        type=_device,
        metavar="DEVICE",
        help="auto (default: CUDA if torch sees a GPU), cpu (hides CUDA from the "
        "script), cuda or cuda:N (the script's default CUDA device)",
    )
    run.add_argument(
        "--seconds",
        dest="run_seconds",
        type=_positive_seconds,
        metavar="N",
        help="stop the script cleanly N seconds after it started (a clean end: "
        "exit code 0); what was measured stays shown / recorded",
    )
    run.add_argument(
        "--headless",
        action="store_true",
        help="no window: progress and the script's output on stderr, a summary "
        "on stdout; exit code = the script's",
    )
    run.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="record the run to FILE (.gpuwatch), from the start",
    )
    run.add_argument(
        "--set",
        dest="run_set",
        action="append",
        type=_assignment,
        metavar="K=V",
        help="start a knob of the script at this value (repeatable): a DataLoader's "
        "num_workers, pin_memory, persistent_workers, prefetch_factor (the first one the "
        "script iterates) or one of its gw.knob knobs",
    )
    run.add_argument(
        "--nproc-per-node",
        dest="nproc_per_node",
        type=_positive_int,
        metavar="N",
        help="start N ranks of SCRIPT on this machine through torchrun (python -m "
        "torch.distributed.run --standalone --nproc-per-node N SCRIPT ARGS) and watch every "
        "rank; for other torchrun options run -m torch.distributed.run yourself",
    )
    run.add_argument(
        "--listen",
        type=_host_port,
        metavar="[HOST:]PORT",
        help="also watch ranks of other machines: listen on TCP (HOST 127.0.0.1 unless given) "
        "and print a token for gpuwatch run --connect on the other nodes",
    )
    run.add_argument(
        "--connect",
        metavar="HOST:PORT",
        help="on another node of a job a window watches (its --listen): run torchrun here "
        "(-m torch.distributed.run … or --nproc-per-node N SCRIPT) and send its ranks there",
    )
    run.add_argument("--token", metavar="T", help="with --connect: the token the window printed")
    _add_demo_options(run, "run_")
    _add_look_options(run, "run_")
    run.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE ARGS",
        help="run a module as python -m does; everything after its name is its arguments",
    )
    run.add_argument("script", nargs="?", metavar="SCRIPT", help="the training script to run")
    run.add_argument(
        "script_args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's arguments"
    )
    run.set_defaults(run_parser=run)


def _add_bench_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser(
        "bench",
        help="run a workload through knob settings without a window and print the scoreboard",
        description="Run a built-in workload headless through knob stages (the tour, or "
        "--set ... --then ...) and print one row per stage: samples/s, step "
        "time, busy and input-wait shares, speedup. Progress goes to stderr, the "
        "table to stdout.",
    )
    bench.add_argument(
        "--workload",
        dest="bench_workload",
        choices=WORKLOADS,
        help="built-in workload (default: vision)",
    )
    bench.add_argument(
        "--device",
        dest="bench_device",
        type=_device,
        metavar="DEVICE",
        help="auto, cpu, cuda or cuda:N (default: auto)",
    )
    bench.add_argument(
        "--python",
        dest="bench_python",
        metavar="PATH",
        type=_python_path,
        help="Python interpreter with torch that runs the training",
    )
    bench.add_argument(
        "--seconds",
        type=_positive_seconds,
        default=20.0,
        metavar="S",
        help="steady seconds measured per stage (default: 20; a stage whose "
        "rate keeps moving runs up to 3x this)",
    )
    bench.add_argument(
        "--format",
        choices=REPORT_FORMATS,
        default="md",
        help="md (default), csv or json (docs/knobs.md §5)",
    )
    bench.add_argument(
        "--output", type=Path, metavar="FILE", help="write the report to FILE instead of stdout"
    )
    bench.add_argument(
        "--record",
        dest="bench_record",
        type=Path,
        metavar="FILE",
        help="also record the whole run to FILE (.gpuwatch; must not exist)",
    )
    bench.add_argument(
        "--capture",
        type=_capture_steps,
        metavar="N",
        help="add a kernel window of N steps (torch.profiler) to each stage "
        "once it is steady; its steps are left out of the figures",
    )
    stages = bench.add_mutually_exclusive_group()
    stages.add_argument(
        "--tour",
        action="store_true",
        help="the built-in tour: baseline, workers, pinned memory, batched "
        "logging, AMP, channels_last, compile (what works here)",
    )
    stages.add_argument(
        "--set",
        dest="set_values",
        nargs="+",
        action="extend",
        type=_assignment,
        metavar="K=V",
        help="knob values of the first stage, over the workload's defaults",
    )
    bench.add_argument(
        "--then",
        nargs="+",
        action="append",
        type=_assignment,
        metavar="K=V",
        help="one more stage adding these values (repeatable)",
    )
    bench.set_defaults(bench_parser=bench)


def _assignment(text: str) -> str:
    from gpuwatch.core.model.knob_values import KnobValueError, split_assignment

    try:
        split_assignment(text)
    except KnobValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def script_presets(assignments: list[str]) -> str:
    """``gpuwatch run --set`` values as the runner reads them: a JSON object of texts (typed
    by the runner against the knob, once the script declares it)."""
    from gpuwatch.core.model.knob_values import split_assignment

    return json.dumps(dict(split_assignment(text) for text in assignments))


def _device(text: str) -> str:
    value = text.strip().lower()
    if value in ("auto", "cpu", "cuda") or (value.startswith("cuda:") and value[5:].isdigit()):
        return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a device: use auto, cpu, cuda or cuda:N")


def _capture_steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of steps") from None
    if not 1 <= value <= MAX_CAPTURE_STEPS:
        raise argparse.ArgumentTypeError(
            f"a kernel window covers 1 to {MAX_CAPTURE_STEPS} steps, not {value}"
        )
    return value


def _host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1: this machine only; port 0: any
    free one, printed with the token)."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]") if sep else ""
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (a port from 0 to 65535)")
    return host or "127.0.0.1", int(port)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 4096:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and 4096")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError("seconds must be between 0 and 86400")
    return value


def _window_size(text: str) -> tuple[int, int]:
    """``1280x720`` → (1280, 720)."""
    width, sep, height = text.lower().replace("×", "x").partition("x")
    if not (sep and width.strip().isdigit() and height.strip().isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 1280x720")
    size = int(width), int(height)
    if not all(200 <= n <= 16384 for n in size):
        raise argparse.ArgumentTypeError("width and height must be between 200 and 16384")
    return size


def _python_path(text: str) -> str:
    path = Path(text).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not an executable file")
    return str(path)


def main(argv: list[str] | None = None) -> int:
    """Run the ``gpuwatch`` command (the window, or a headless command) and return its exit code."""
    # First of all: in the frozen app, a multiprocessing child must not start another app.
    import multiprocessing

    from gpuwatch.core.run.launcher import prepare_frozen_children

    multiprocessing.freeze_support()
    prepare_frozen_children()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.self_test:
            if args.command:
                parser.error("--self-test runs on its own, without a command")
            return _self_test(args)
        if args.command == "doctor":
            if args.report is not None and not args.gpu:
                args.doctor_parser.error("--report goes with --gpu")
            if args.gpu:
                return _gpu_check(args)
            from gpuwatch.commands.doctor import run_doctor

            return run_doctor(args.doctor_python or args.python)
        if args.command == "bench":
            bench = args.bench_parser
            if args.tour and args.then:
                bench.error("--then adds stages to --set; the tour plans its own stages")
            if args.output is not None and not args.output.parent.is_dir():
                bench.error(f"--output: folder {str(args.output.parent)!r} does not exist")
            return _bench(args)
        if args.command == "run":
            return _run(args)
        if args.command == "export":
            return _export(args)
        if args.command == "replay":
            return _replay(args)
        if args.screenshot is not None and args.demo_seconds is None:
            parser.error("--screenshot needs --demo-seconds (when to take it)")
        return _open_window(
            args,
            autostart=args.autostart,
            tour=args.tour,
            demo_seconds=args.demo_seconds,
            screenshot=args.screenshot,
        )
    except CliError as exc:
        print(f"gpuwatch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gpuwatch: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("GPUWATCH_DEBUG"):
            raise
        print(
            f"gpuwatch: internal error: {type(exc).__name__}: {exc} "
            f"(set GPUWATCH_DEBUG=1 for details)",
            file=sys.stderr,
        )
        return 1


def _add_export_parser(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser(
        "export",
        help="write a recording as a Perfetto trace (JSON) and/or CSV",
        description="Export a recording (.gpuwatch): --perfetto writes Chrome trace-event "
        "JSON for ui.perfetto.dev or chrome://tracing, --csv one row per step "
        "(columns in docs/recording-format.md). Both may be given.",
    )
    export.add_argument("export_file", type=Path, metavar="FILE", help="the recording")
    export.add_argument("--perfetto", type=Path, metavar="OUT.json", help="trace JSON to write")
    export.add_argument(
        "--csv", dest="export_csv", type=Path, metavar="OUT.csv", help="per-step CSV to write"
    )
    export.set_defaults(export_parser=export)


def _export(args: argparse.Namespace) -> int:
    """No Qt, no torch: a bad recording or output is one line and exit 1."""
    from gpuwatch.commands.export_command import ExportError, RecordingError, export_recording

    if args.perfetto is None and args.export_csv is None:
        args.export_parser.error("give --perfetto OUT.json and/or --csv OUT.csv")
    try:
        for line in export_recording(
            args.export_file, perfetto=args.perfetto, csv=args.export_csv, err=sys.stderr
        ):
            print(f"gpuwatch: {line}", file=sys.stderr)
    except (ExportError, RecordingError) as exc:
        raise CliError(str(exc)) from None
    return 0


def _bench(args: argparse.Namespace) -> int:
    """Headless: never imports Qt, so it runs without a display."""
    from gpuwatch.commands.bench import EXIT_USAGE as BENCH_USAGE
    from gpuwatch.commands.bench import BenchOptions, run_bench
    from gpuwatch.commands.bench_report import render

    groups = [args.set_values or [], *(args.then or [])] if args.set_values or args.then else []
    options = BenchOptions(
        workload=args.bench_workload or args.workload or "vision",
        device=args.bench_device or args.device or "auto",
        python=args.bench_python or args.python,
        seconds=args.seconds,
        tour=args.tour,
        groups=groups,
        record=args.bench_record,
        capture=args.capture,
    )
    outcome = run_bench(options)
    report = outcome.report
    # A usage error prints one line; a failed or interrupted run still shows what it measured.
    if (
        report is not None
        and outcome.exit_code != BENCH_USAGE
        and (report.segments or outcome.exit_code == 0)
    ):
        text = render(report, args.format)
        if args.output is not None:
            try:
                args.output.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise CliError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
            print(f"gpuwatch: wrote {args.output}", file=sys.stderr)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    if outcome.error:
        print(f"gpuwatch: {outcome.error}", file=sys.stderr)
    return outcome.exit_code


def _run_target_problem(args: argparse.Namespace) -> str | None:
    """Why ``gpuwatch run``'s SCRIPT or ``-m MODULE`` cannot be run, or None. A module is
    looked up by the runner (only the training Python can import the user's code)."""
    from gpuwatch.core.run.session import module_problem, script_problem

    if args.module is None:
        if args.script is None:
            return "give a SCRIPT to run, or -m MODULE"
        return script_problem(args.script)
    if args.script is not None:
        return "give a SCRIPT or -m MODULE, not both"
    return module_problem(args.module[0] if args.module else "")


def torchrun_args(
    nproc: int, module: str | None, script: str | None, args: Sequence[str]
) -> tuple[str, ...]:
    """``torchrun --standalone --nproc-per-node N`` arguments that run SCRIPT ARGS (or
    ``-m MODULE ARGS``) on this machine."""
    target = ["-m", module] if module else [script or ""]
    return ("--standalone", "--nproc-per-node", str(nproc), *target, *args)


def _remote_problem(args: argparse.Namespace, torchrun: bool) -> str | None:
    """Why ``--listen``/``--connect``/``--token`` cannot be used as given, or None."""
    if args.connect is None:
        if args.token is not None:
            return "--token goes with --connect HOST:PORT"
        return None
    if args.listen is not None:
        return "--connect runs ranks for a window elsewhere; --listen is that window's"
    if not args.token:
        return "--connect needs --token: the token the window printed with its address"
    if not torchrun:
        return "--connect runs torchrun here: give -m torch.distributed.run … or --nproc-per-node N"
    for flag, given in (
        ("--record", args.record),
        ("--seconds", args.run_seconds),
        ("--set", args.run_set),
        ("--screenshot", args.run_screenshot),
    ):
        if given:
            return f"{flag} belongs to the window that watches the run, not to --connect"
    return None


def _run(args: argparse.Namespace) -> int:
    """``gpuwatch run SCRIPT`` or ``-m MODULE``: bad input is refused (exit 2) before anything
    starts."""
    problem = _run_target_problem(args)
    torchrun_module = bool(args.module) and args.module[0] in TORCHRUN_MODULES
    if problem is None and args.nproc_per_node is not None and torchrun_module:
        problem = "--nproc-per-node starts torchrun itself: give torchrun's options after -m"
    if problem is None:
        problem = _remote_problem(args, torchrun_module or args.nproc_per_node is not None)
    if problem is None and args.record is not None and not args.record.parent.is_dir():
        problem = f"--record: folder {str(args.record.parent)!r} does not exist"
    if problem is None and args.headless and (args.run_screenshot or args.run_demo_seconds):
        problem = "--screenshot and --demo-seconds need the window: drop --headless"
    if problem is None and args.run_screenshot is not None and args.run_demo_seconds is None:
        problem = "--screenshot needs --demo-seconds (when to take it)"
    if problem is not None:
        print(f"gpuwatch run: {problem}", file=sys.stderr)
        return EXIT_USAGE
    module, module_args = (args.module[0], args.module[1:]) if args.module else (None, [])
    script = None if module else str(Path(args.script).expanduser())
    script_args = tuple(module_args if module else args.script_args)
    if args.nproc_per_node is not None:  # the same run through torchrun, every rank watched
        script_args = torchrun_args(args.nproc_per_node, module, script, script_args)
        module, script = TORCHRUN_MODULES[0], None
    if args.connect:
        from gpuwatch.commands.remote_ranks import RemoteRanks, main_remote

        if module != TORCHRUN_MODULES[0]:
            script_args = (*(["-m", module] if module else []), *script_args)
        return main_remote(
            RemoteRanks(
                address=args.connect,
                token=args.token,
                torchrun_args=tuple(script_args),
                python=args.run_python or args.python,
                device=args.run_device or args.device or "auto",
                cwd=os.getcwd(),
            )
        )
    if args.run_set:  # the runner takes them from its environment (runner.script_knobs)
        os.environ[SCRIPT_SET_ENV] = script_presets(args.run_set)
    device = args.run_device or args.device or "auto"
    python = args.run_python or args.python
    if args.headless:
        from gpuwatch.commands.headless import HeadlessOptions, run_headless

        return run_headless(
            HeadlessOptions(
                script=script,
                module=module,
                script_args=script_args,
                device=device,
                python=python,
                seconds=args.run_seconds,
                record=str(args.record) if args.record else None,
                listen=args.listen,
            )
        )
    return _open_window(
        args,
        "run_",
        device=device,
        python=python,
        autostart=True,
        tour=False,
        demo_seconds=args.run_demo_seconds,
        screenshot=args.run_screenshot,
        script=script,
        module=module,
        script_args=script_args,
        cwd=os.getcwd(),
        seconds=args.run_seconds,
        record=args.record,
        listen=args.listen,
    )


def _replay(args: argparse.Namespace) -> int:
    """``gpuwatch replay FILE``: a bad file is one line and exit 1, before any window."""
    from gpuwatch.core.files.recording import RecordingError
    from gpuwatch.core.files.recording_reader import open_recording

    demo_seconds = args.replay_demo_seconds or args.demo_seconds
    screenshot = args.replay_screenshot or args.screenshot
    if screenshot is not None and demo_seconds is None:
        print(
            "gpuwatch replay: --screenshot needs --demo-seconds (when to take it)", file=sys.stderr
        )
        return EXIT_USAGE
    try:
        recordings = [open_recording(path) for path in (args.file, args.compare) if path]
    except RecordingError as exc:
        raise CliError(str(exc)) from None
    return _open_window(
        args,
        "replay_",
        autostart=False,
        tour=False,
        demo_seconds=demo_seconds,
        screenshot=screenshot,
        recording=recordings[0],
        compare=recordings[1] if len(recordings) > 1 else None,
    )


def _gpu_check(args: argparse.Namespace) -> int:
    """``doctor --gpu``: the ground-truth check, its progress on stderr, the table on stdout."""
    from gpuwatch.commands.gpu_check import default_report_path, print_report, run_gpu_check
    from gpuwatch.core.run import launcher

    try:
        python = args.doctor_python or args.python or launcher.default_python()
    except launcher.NoInterpreterError as exc:
        print(f"gpuwatch doctor --gpu: {exc}")
        return 1
    path = args.report or default_report_path()
    if not path.parent.is_dir() and args.report is not None:
        args.doctor_parser.error(f"--report: folder {str(path.parent)!r} does not exist")

    def progress(text: str) -> None:
        sys.stderr.write(f"gpu check: {text}\n")
        sys.stderr.flush()

    report = run_gpu_check(python, path, progress=progress)
    print_report(report, path)
    return 0 if report.ok else 1


def _self_test(args: argparse.Namespace) -> int:
    """``--self-test``: the window offscreen, a short CPU run, one line and a result file."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from gpuwatch.commands.self_test import (
        SelfTestResult,
        default_result_path,
        run_self_test,
        write_result,
    )
    from gpuwatch.core.run.launcher import is_frozen

    path = args.result or default_result_path()
    try:
        from gpuwatch.qt.app import _install_quiet_handler, create_app
        from gpuwatch.qt.main_window import MainWindow
        from gpuwatch.qt.settings import Settings
        from gpuwatch.qt.window_options import WindowOptions
    except ImportError as exc:  # a build that lacks a Qt module: say so in the file too
        failed = SelfTestResult(message=f"failed: the window cannot start: {exc}")
        write_result(failed, path)
        print(f"gpuwatch self-test: {failed.message} (result: {path})")
        return 1

    def open_window(session):
        app = create_app()
        _install_quiet_handler()  # no offscreen size-hint noise around the one line
        window = MainWindow(
            session,
            WindowOptions(workload="mlp", device="cpu", python=args.python, demo_seconds=1),
        )
        window.resize(1280, 800)
        window.show()
        return app.processEvents, window.close

    remembered = Settings().python if is_frozen() else None
    result = run_self_test(args.python, remembered, path, open_window)
    print(f"gpuwatch self-test: {result.message} (result: {path})")
    return 0 if result.ok else 1


def _open_window(args: argparse.Namespace, own: str = "", **fields: Any) -> int:
    """Open the window with what every command shares (a subcommand's own ``--presentation``,
    ``--theme`` and ``--window-size``, under the prefix ``own``, win over the top-level ones)
    and the command's ``fields``."""
    options_type, run_window = _window_kit()

    def chosen(name: str) -> Any:
        return (getattr(args, own + name, None) if own else None) or getattr(args, name)

    shared: dict[str, Any] = {
        "workload": args.workload,
        "device": args.device,
        "python": args.python,
        "presentation": chosen("presentation"),
        "theme": chosen("theme"),
        "window_size": chosen("window_size"),
    }
    return run_window(options_type(**(shared | fields)))


def _window_kit() -> tuple[type[WindowOptions], Callable[[WindowOptions], int]]:
    """The window's options type and entry point, imported only now; one line (exit 1) when
    there is no display, Qt's platform plugin lacks system libraries (before Qt aborts on
    them), or the window cannot be imported."""
    from gpuwatch.core.run.display import missing_display_reason
    from gpuwatch.qt_preflight import missing_libraries_reason

    reason = missing_display_reason() or missing_libraries_reason()
    if reason:
        raise CliError(reason)
    try:
        from gpuwatch.qt.app import run_window
        from gpuwatch.qt.window_options import WindowOptions
    except ImportError as exc:
        raise CliError(f"the window cannot start: {exc} (is PySide6 installed?)") from exc
    return WindowOptions, run_window


if __name__ == "__main__":
    raise SystemExit(main())
