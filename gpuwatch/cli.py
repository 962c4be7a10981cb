"""The ``gpuwatch`` command.

Imports stay inside the commands: ``gpuwatch --version`` must not load torch or Qt, and
only the commands that open a window import ``gpuwatch.qt``. Errors print one line and
return a non-zero code; ``GPUWATCH_DEBUG=1`` shows tracebacks for bug reports.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpuwatch import __version__
from gpuwatch.protocol import WORKLOADS

EXIT_USAGE = 2


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 1."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuwatch",
        description="Watch why a PyTorch training loop is slow while it runs. Without a "
                    "command, opens the window and starts the built-in demo workload.")
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    parser.add_argument("--workload", choices=WORKLOADS, default="vision",
                        help="built-in workload to run (default: vision)")
    parser.add_argument("--device", default="auto", type=_device,
                        help="auto (best available), cpu, cuda or cuda:N (default: auto)")
    parser.add_argument("--python", metavar="PATH", type=_python_path,
                        help="Python interpreter with torch that runs the training "
                             "(default: the one running gpuwatch)")
    parser.add_argument("--no-start", dest="autostart", action="store_false",
                        help="open the window without starting the workload")
    parser.add_argument("--demo-seconds", type=_positive_seconds, metavar="N",
                        help="run for N seconds, then (with --screenshot) save a PNG of the "
                             "window and exit; works with QT_QPA_PLATFORM=offscreen")
    parser.add_argument("--screenshot", type=Path, metavar="PNG",
                        help="where --demo-seconds saves the window picture")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    doctor = sub.add_parser("doctor", help="report what this machine offers: torch, CUDA, "
                                           "NVML, display, Python")
    doctor.add_argument("--python", dest="doctor_python", metavar="PATH", type=_python_path,
                        help="training interpreter to check (default: this one)")
    return parser


def _device(text: str) -> str:
    value = text.strip().lower()
    if value in ("auto", "cpu", "cuda") or (
            value.startswith("cuda:") and value[5:].isdigit()):
        return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a device: use auto, cpu, cuda or cuda:N")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError("seconds must be between 0 and 86400")
    return value


def _python_path(text: str) -> str:
    path = Path(text).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not an executable file")
    return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "doctor":
            from gpuwatch.core.doctor import run_doctor

            return run_doctor(args.doctor_python or args.python)
        if args.screenshot is not None and args.demo_seconds is None:
            parser.error("--screenshot needs --demo-seconds (when to take it)")
        return _open_window(args)
    except CliError as exc:
        print(f"gpuwatch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gpuwatch: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("GPUWATCH_DEBUG"):
            raise
        print(f"gpuwatch: internal error: {type(exc).__name__}: {exc} "
              f"(set GPUWATCH_DEBUG=1 for details)", file=sys.stderr)
        return 1


def _open_window(args: argparse.Namespace) -> int:
    from gpuwatch.core.display import missing_display_reason

    reason = missing_display_reason()
    if reason:
        raise CliError(reason)
    try:
        from gpuwatch.qt.app import run_window
    except ImportError as exc:
        raise CliError(f"the window cannot start: {exc} (is PySide6 installed?)") from exc
    return run_window(args)


if __name__ == "__main__":
    raise SystemExit(main())
